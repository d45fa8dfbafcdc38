"""Age and drain figures of every share-partition with state, loaded here or not (shell side).

Concept: ``/metrics`` reports each share-partition's lag, oldest unacknowledged age and drain ETA
(broker/share/drain.py). A share-partition loaded on this broker answers from its in-flight
window. One that is not loaded (nobody fetched it since the broker started, or it was unloaded
when idle) still has state at the share coordinator, and an autoscaler needs its backlog most
exactly then; its figures come from that persisted state, ReadShareGroupStateSummary-style:
start offset, delivery-complete count and state batches, read synchronously from the local share
coordinator shards (their replayed state, which may be a few records ahead of the last fsync).

Cost bounds (scrape time only; nothing here runs on a request path):
- the persisted view is rebuilt at most once per ``PERSISTED_CACHE_MS`` (several scrapers, or a
  scrape plus a CLI describe, share one walk); lag and age are recomputed from it at every scrape
  against the current log end offset and clock;
- an age costs one log batch-header read for the oldest unacknowledged offset, remembered per
  share-partition until that offset changes (so a steady backlog reads nothing);
- at most ``MAX_SHARE_PARTITION_SERIES`` share-partitions are reported (loaded ones first, then
  persisted ones in group/topic/partition order); the rest are counted in
  ``shoal_share_partition_series_dropped``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.share.drain import batch_append_ms, first_unacked_offset
from persister.api import UNINITIALIZED_START_OFFSET, SharePartitionKey

if TYPE_CHECKING:
    from broker.app import Broker

log = logging.getLogger("shoal.metrics")

#: How long the persisted view of unloaded share-partitions is reused (one scrape interval).
PERSISTED_CACHE_MS = 5_000
#: The most share-partitions the share metrics report per scrape.
MAX_SHARE_PARTITION_SERIES = 10_000


@dataclass(frozen=True, slots=True)
class PersistedPartition:
    """What the share coordinator holds for a share-partition not loaded on this broker."""

    key: SharePartitionKey
    topic: str
    partition: int
    start_offset: int
    delivery_complete_count: int
    first_unacked: int


class ShareFigures:
    """Persisted share-partition figures and log append times, cached (see module doc)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._persisted: list[PersistedPartition] = []
        self._persisted_at: int | None = None
        # (group, topic, partition) -> (offset, append ms of its batch) of the last age read.
        self._appended: dict[tuple[str, str, int], tuple[int, int | None]] = {}

    def appended_ms(self, group: str, topic: str, partition: int, offset: int) -> int | None:
        """Append timestamp of the log batch holding ``offset``, or None when the offset is at
        or past the log end (no such record), cannot be read or carries no timestamp (-1)."""
        lg = self._broker.logs.get(topic, partition)
        if lg is None or offset >= lg.log_end_offset:
            return None
        where = (group, topic, partition)
        hit = self._appended.get(where)
        if hit is not None and hit[0] == offset:
            return hit[1]
        try:
            headers = lg.batch_headers(max(offset, lg.log_start_offset), None, max_batches=1)
        except Exception:  # out of range after retention, log closed, I/O error: no age
            log.debug("reading the batch at %s-%d offset %d for its timestamp failed", topic,
                      partition, offset, exc_info=True)
            headers = []
        ts = batch_append_ms(headers[0].attributes, headers[0].base_timestamp,
                             headers[0].max_timestamp) if headers else None
        if ts is not None and ts < 0:
            ts = None  # a batch without timestamps (pre-0.10 producers): no age to tell
        if len(self._appended) >= 2 * MAX_SHARE_PARTITION_SERIES:
            self._appended.clear()
        self._appended[where] = (offset, ts)
        return ts

    def persisted(self, loaded: Mapping[SharePartitionKey, object]) -> list[PersistedPartition]:
        """Share-partitions with an initialized start offset at the local share coordinator that
        are not in ``loaded``, sorted by group, topic and partition (cached, module doc)."""
        now = self._broker.clock.monotonic_ms()
        if self._persisted_at is None or now - self._persisted_at >= PERSISTED_CACHE_MS:
            self._persisted = self._read_persisted(loaded)
            self._persisted_at = now
        return [p for p in self._persisted if p.key not in loaded]

    def invalidate(self) -> None:
        """Forget the cached persisted view (tests; admin changes show at the next scrape)."""
        self._persisted_at = None

    def _read_persisted(self, loaded: Mapping[SharePartitionKey, object]
                        ) -> list[PersistedPartition]:
        """One walk over the shards' replayed state (it may be ahead of the last fsync by a
        few records: fine for metrics, and it costs one dict walk, no undo-log scan per key).
        Keys loaded here are skipped: their live window answers."""
        b = self._broker
        if not b.started:
            return []
        runtime = b.share_coordinator.runtime
        out: list[PersistedPartition] = []
        for p in runtime.partitions():
            shard = runtime.shard(p)
            if shard is None:
                continue  # not loaded (or failed to load): nothing to report from it
            for key, entry in list(shard.states.items()):
                if key in loaded:
                    continue
                s = entry.state
                if s.start_offset == UNINITIALIZED_START_OFFSET:
                    continue  # never consumed: no lag and no age yet
                topic = b.topics.by_id(key.topic_id)
                if topic is None:
                    continue
                out.append(PersistedPartition(
                    key, topic.name, key.partition, s.start_offset, s.delivery_complete_count,
                    first_unacked_offset(s.start_offset, s.state_batches)))
            if len(out) >= 2 * MAX_SHARE_PARTITION_SERIES:
                break  # enough to fill the series bound whatever gets loaded meanwhile
        out.sort(key=lambda r: (r.key.group_id, r.topic, r.partition))
        return out
