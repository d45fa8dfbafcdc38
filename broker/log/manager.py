"""Owns every partition log: opening (with recovery), appends, flushing and retention.

Disk layout under the data directory: ``<topic>-<partition>/`` per partition, as Kafka does.
Appends are synchronous writes to the page cache (microseconds); the blocking parts — fsync and
segment deletion — run in a worker thread so other connections keep being served. Invariants:

- a partition log exists for every partition of every registered topic while the broker runs;
- an append notifies the partition's watchers (long-poll Fetch/ShareFetch) after it is in the log;
- when the flush policy calls for it, the producer's response waits for the fsync;
- every log shares one ``LogDir`` (``self.log_dir``): after a write or sync error it is offline,
  nothing more is flushed or retention-checked, and the broker shuts down
  (``storage/log_dir.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Callable, Container, Iterable
from pathlib import Path
from typing import Any

from broker.clock import Clock
from broker.config import BrokerConfig, cleanup_policies, topic_config_value
from broker.log.topics import Topic
from broker.log.watch import Watch
from storage.log_dir import LogDir
from storage.segment_log import LogConfig, PartitionLog

log = logging.getLogger("shoal.log")

TopicPartition = tuple[str, int]


# A deleted topic's partition directory is renamed to ``<dir>.<topic id hex>-delete`` first.
DELETED_SUFFIX = "-delete"


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / f"{topic}-{partition}"


class LogManager:
    def __init__(self, data_dir: Path, config: BrokerConfig, clock: Clock) -> None:
        self._dir = data_dir
        self._config = config
        self._clock = clock
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._flush_locks: dict[TopicPartition, asyncio.Lock] = {}
        self.watch = Watch()
        # Deleted topics' directories being removed in worker threads (``drop_topic``).
        self.removals: set[asyncio.Future[None]] = set()
        self._on_append: list[Callable[[str, int], None]] = []
        self.log_dir = LogDir(data_dir)
        # Where retention may delete up to in a partition (its high watermark when replicated,
        # set by the replica manager); None: the log end offset.
        self.high_watermark_of: Callable[[str, int, PartitionLog], int] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def log_config(self, topic: Topic) -> LogConfig:
        def v(name: str) -> Any:
            return topic_config_value(name, topic.configs, self._config)

        flush_ms = v("flush.ms")
        policies = cleanup_policies(v("cleanup.policy"))
        segment_ms = int(v("segment.ms"))
        if "compact" in policies:
            # Kafka's LogConfig.maxSegmentMs: the active segment is never cleaned, so it rolls
            # within max.compaction.lag.ms for that bound to hold.
            segment_ms = min(segment_ms, int(v("max.compaction.lag.ms")))
        return LogConfig(
            segment_bytes=int(v("segment.bytes")),
            segment_ms=segment_ms,
            retention_ms=int(v("retention.ms")),
            retention_bytes=int(v("retention.bytes")),
            index_interval_bytes=int(v("index.interval.bytes")),
            flush_interval_messages=int(v("flush.messages")),
            flush_interval_ms=None if flush_ms is None or int(flush_ms) < 0 else int(flush_ms),
            delete_policy="delete" in policies,
            # Internal topics are pruned by their coordinators, never by the cleaner.
            compact_policy="compact" in policies and not topic.internal,
            min_cleanable_ratio=float(v("min.cleanable.dirty.ratio")),
            min_compaction_lag_ms=int(v("min.compaction.lag.ms")),
            max_compaction_lag_ms=int(v("max.compaction.lag.ms")),
            delete_retention_ms=int(v("delete.retention.ms")),
        )

    def open_topic(self, topic: Topic, first_partition: int = 0, fresh: bool = False,
                   only: Container[int] | None = None) -> None:
        """Open (recovering if needed) or create the logs of a topic's partitions (from
        ``first_partition``; only those in ``only`` when given: a cluster member opens the
        partitions placed on it).

        ``fresh``: the partitions are new, so a directory already there is a leftover of a
        creation that never completed and is removed first. All or nothing: if a partition cannot
        be opened, the ones this call opened are closed (and, when ``fresh``, deleted).

        Raises:
            OSError: a partition's log could not be opened (the path is in the error).
        """
        cfg = self.log_config(topic)
        now = self._clock.now_ms()
        opened: list[TopicPartition] = []
        try:
            for p in range(first_partition, topic.partitions):
                key = (topic.name, p)
                if key in self._logs or (only is not None and p not in only):
                    continue
                path = partition_dir(self._dir, topic.name, p)
                if fresh and path.exists():
                    log.warning("removing %s, left by a topic creation that did not complete",
                                path)
                    shutil.rmtree(path)
                self._logs[key] = PartitionLog.open(path, cfg, now, self.log_dir)
                opened.append(key)
        except BaseException:
            for key in opened:
                lg = self._logs.pop(key)
                try:
                    if fresh:
                        lg.delete()
                    else:
                        lg.close()
                except OSError:
                    log.exception("rolling back %s-%d failed", *key)
            raise

    def drop_partitions(self, topic: Topic, first_partition: int) -> None:
        """Close and delete partitions ``first_partition``.. of a topic (a failed growth)."""
        for p in range(first_partition, topic.partitions):
            lg = self._logs.pop((topic.name, p), None)
            self._flush_locks.pop((topic.name, p), None)
            if lg is not None:
                lg.delete()

    def reconfigure(self, topic: Topic) -> None:
        """Apply changed topic/broker configs to a topic's open logs."""
        cfg = self.log_config(topic)
        for p in range(topic.partitions):
            lg = self._logs.get((topic.name, p))
            if lg is not None:
                lg.config = cfg

    def drop_topic(self, topic: Topic) -> None:
        """Close and delete a topic's logs (DeleteTopics, after the registry no longer lists it).

        Each partition directory is renamed aside at once (``<topic>-<p>.<topic id hex>-delete``,
        as Kafka does: one rename, no fsync, so a topic created again under the name starts
        clean), then closed and removed in a worker thread (``removals``): removing and fsyncing
        thousands of directories would hold the event loop. A directory that cannot be renamed
        is removed here as before; one that cannot be removed is logged (it holds nothing anyone
        can read). Moved directories a stop left behind go at the next start
        (``remove_leftovers``)."""
        self._drop(topic, range(topic.partitions))

    def drop_replica(self, topic: Topic, partition: int) -> None:
        """Close and delete this broker's replica of one partition (moved to other brokers by a
        reassignment: Kafka's StopReplica with deletion), as ``drop_topic`` deletes, also when
        only its directory is left from before a restart."""
        self._drop(topic, (partition,))

    def _drop(self, topic: Topic, partitions: Iterable[int]) -> None:
        later: list[tuple[PartitionLog | None, Path]] = []
        for p in partitions:
            lg = self._logs.pop((topic.name, p), None)
            self._flush_locks.pop((topic.name, p), None)
            path = partition_dir(self._dir, topic.name, p)
            moved = path.with_name(f"{path.name}.{topic.topic_id.hex}{DELETED_SUFFIX}")
            try:
                os.rename(path, moved)
                later.append((lg, moved))
            except FileNotFoundError:
                if lg is not None:
                    later.append((lg, moved))  # nothing on disk: only its files to close
            except OSError as exc:
                log.warning("could not move %s aside for deletion (%s); removing it in place",
                            path, exc)
                self._remove(topic.name, [(lg, path)], in_place=True)
            self.watch.notify((topic.name, p))
        if not later:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (tools and tests): remove now
            self._remove(topic.name, later)
            return
        removal = loop.run_in_executor(None, self._remove, topic.name, later)
        self.removals.add(removal)
        removal.add_done_callback(self.removals.discard)

    @staticmethod
    def _remove(name: str, doomed: list[tuple[PartitionLog | None, Path]],
                in_place: bool = False) -> None:
        """Close and remove the (moved) partition directories of deleted topic ``name``."""
        for lg, path in doomed:
            try:
                if lg is not None:
                    lg.delete(None if in_place else path)
                else:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError as exc:
                log.error("topic %s is deleted but its partition directory %s could not be "
                          "removed (%s); remove it by hand", name, path, exc)

    def remove_leftovers(self) -> None:
        """Remove partition directories moved aside by deletions a stop interrupted (blocking;
        at start)."""
        try:
            entries = [e for e in os.scandir(self._dir)
                       if e.name.endswith(DELETED_SUFFIX) and e.is_dir(follow_symlinks=False)]
        except OSError as exc:
            log.warning("could not look for leftovers of deleted topics in %s: %s", self._dir, exc)
            return
        for e in entries:
            log.info("removing %s, left by a topic deletion a stop interrupted", e.path)
            shutil.rmtree(e.path, ignore_errors=True)

    def close(self) -> None:
        for key, lg in list(self._logs.items()):
            try:
                lg.close()
            except OSError:
                log.exception("closing the log of %s-%d failed; it will be recovered on the "
                              "next start", *key)
        self._logs.clear()

    # -- access ------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def items(self) -> list[tuple[TopicPartition, PartitionLog]]:
        return list(self._logs.items())

    def on_append(self, cb: Callable[[str, int], None]) -> None:
        self._on_append.append(cb)

    def appended(self, topic: str, partition: int) -> None:
        """Tell watchers that a partition has new data."""
        self.watch.notify((topic, partition))
        for cb in self._on_append:
            cb(topic, partition)

    # -- durability --------------------------------------------------------------------------

    async def flush_if_needed(self, topic: str, partition: int) -> None:
        """fsync a partition now if its flush policy says so (awaited by producers)."""
        lg = self._logs.get((topic, partition))
        if lg is None or not lg.needs_flush(self._clock.now_ms()):
            return
        await self.flush(topic, partition)

    async def flush(self, topic: str, partition: int) -> None:
        lg = self._logs.get((topic, partition))
        if lg is None:
            return
        lock = self._flush_locks.setdefault((topic, partition), asyncio.Lock())
        async with lock:
            await asyncio.to_thread(lg.flush)

    async def flush_due(self) -> None:
        """Flush every partition whose time/message policy is due (the flush scheduler)."""
        now = self._clock.now_ms()
        for (topic, p), lg in list(self._logs.items()):
            if self.log_dir.offline:
                return  # never retried; the broker is shutting down (storage/log_dir.py)
            # Also after a segment roll, as Kafka does, so the recovery point keeps moving and
            # a crash never means scanning more than the active segment.
            if lg.needs_background_flush(now):
                try:
                    await self.flush(topic, p)
                except OSError as exc:
                    # Already reported by the log directory, which is offline now.
                    log.error("fsync of %s-%d failed: %s", topic, p, exc)

    async def enforce_retention(self) -> int:
        now = self._clock.now_ms()
        deleted = 0
        for (topic, p), lg in list(self._logs.items()):
            if self.log_dir.offline:
                break
            hw = None if self.high_watermark_of is None else self.high_watermark_of(topic, p, lg)
            try:
                n = await asyncio.to_thread(lg.enforce_retention, now, hw)
            except OSError:
                log.exception("retention for %s-%d failed; will retry", topic, p)
                continue
            if n:
                log.info("retention deleted %d segment(s) of %s-%d; log start offset is now %d",
                         n, topic, p, lg.log_start_offset)
                deleted += n
        return deleted
