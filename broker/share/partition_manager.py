"""Owns the SharePartitions of this broker and drives them: loading, timers, writes, wake-ups.

One ``SharePartition`` per (group, topic id, partition), created on the first ShareFetch that
touches it: its state is read from the persister, and a start offset of -1 (never consumed) is
resolved from the group's ``share.auto.offset.reset``. A share-partition whose state the group
coordinator has not initialised is never created here: the fetch gets UNKNOWN_SERVER_ERROR for it
(Kafka's answer) and nothing is written. A load runs as its own task: a fetch waits for it
within its MaxWaitMs, else gets nothing from that partition yet, and so does a fetch while
the state's coordinator is moving or away (retried every ``LOAD_RETRY_S``), since both Kafka
clients raise an unexpected partition error to the application.

The sans-IO partition decides; this class reads the log for it, persists its state writes,
answers acknowledgements only after their write completed (respond after commit), arms one ``loop.call_at`` per partition for lock expiry and
the end of redelivery backoffs (``SharePartition.next_deadline``), and wakes parked ShareFetches
(watch key ``("share", group, topic, partition)``) when records become available again, including
when a record's redelivery backoff ends (broker/share/backoff.py). It wakes one, oldest first;
a woken fetch that acquired something hands the wake-up on while more is left
(``pass_wakeup``), so a freed batch costs one acquisition round, not one per parked member.

Unloading (Shoal extension, ``group.share.partition.unload.idle.ms``): ``unload_idle(now_ms)``,
run periodically by the broker, drops share-partitions of groups without members that nobody
used for that long and that are settled (``SharePartition.is_settled``: no acquired records, no
write in flight or owed, start offset known to the persister), so memory follows the groups in
use. The next ShareFetch loads them again; their progress is what the persister holds, which a
settled partition has fully written. Kafka drops a group's share-partitions when its last share
session ends.

Everything runs on the event loop, so each partition's operations are serial (STYLE.md 1.5).
How much log a fetch reads and which bytes its response holds is :mod:`broker.share.log_read`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker.cluster_security import feature_level
from broker.log.topics import Topic
from broker.metrics import perf_counter
from broker.share.acknowledgement import AckBatch, ack_error_for_write_failure
from broker.share.acquisition import AcquiredRecords, AcquireMode
from broker.share.dead_letter_writer import DeadLetterWriter
from broker.share.log_read import (
    KEYS_DECOMPRESSED_MAX,
    covering_batches,
    keyed_response,
    keys_of,
    read_limit,
    spanning_batches,
)
from broker.share.partition import SharePartition
from broker.share.partition_timers import PartitionTimers, share_watch_key
from broker.share.txn_filter import (
    CONTROL,
    TRANSACTIONAL,
    TxnBatch,
    aborted_by_producer,
)
from broker.share.record_state import AckType
from broker.share.views import SharePartitionConfig
from persister.api import (
    UNINITIALIZED_START_OFFSET,
    Persister,
    ReadParams,
    ReadResult,
    SharePartitionKey,
    WriteParams,
    WriteResult,
)
from protocol.record_batch import iter_batches
from protocol.record_keys import BatchKeys
from storage.log import OffsetOutOfRangeError

# Groups whose SharePartitionConfig group_config keeps (cleared when full).
_MAX_CONFIGS = 10_000

if TYPE_CHECKING:
    from broker.app import Broker

log = logging.getLogger("shoal.share")

# Share-state answers that say nothing about the state (the coordinator is moving or away).
UNSURE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                     ErrorCode.coordinator_load_in_progress, ErrorCode.request_timed_out,
                     ErrorCode.network_exception})

LEADER_EPOCH = 0
# How long a load the state's coordinator could not answer stands before a fetch tries again.
LOAD_RETRY_S = 0.5
_TXN_OR_CONTROL = TRANSACTIONAL | CONTROL
_RELEASE = int(AckType.RELEASE)


class SharePartitionManager:
    def __init__(self, broker: Broker, persister: Persister) -> None:
        self._broker = broker
        self._persister = persister
        self._parts: dict[SharePartitionKey, SharePartition] = {}
        self._names: dict[SharePartitionKey, tuple[str, int]] = {}
        self._loading: dict[SharePartitionKey, asyncio.Task[SharePartition | ErrorCode]] = {}
        # Lock-expiry/backoff timers and deferred start-offset writes (partition_timers.py).
        self._timers = PartitionTimers(lambda: self._broker.clock.now_ms(), self._on_timer,
                                      self._write_start)
        self._tasks: set[asyncio.Task[None]] = set()
        # Last (lock timeouts, delivery-limit archives) logged per share-partition.
        self._logged: dict[SharePartitionKey, tuple[int, int]] = {}
        # Last use (fetch, acknowledgement, release) per loaded share-partition, for unloading.
        self._used_ms: dict[SharePartitionKey, int] = {}
        # Loaded with start offset -1 resolved here and not written since: the persister does
        # not know the start offset, so unloading would resolve it anew (and could skip records).
        self._unwritten_start: set[SharePartitionKey] = set()
        # Background (timer/release) writes in flight per share-partition: a failure must find
        # the partition to hand the ranges back (on_write_failed), so it stays loaded.
        self._writing: dict[SharePartitionKey, int] = {}
        # group id -> (the group's ShareGroupConfig, the SharePartitionConfig made from it).
        self._configs: dict[str, tuple[Any, SharePartitionConfig]] = {}
        # KIP-1191: writes the dead-letter records of ARCHIVING records (dead_letter_writer.py).
        self._dlq = DeadLetterWriter(broker, self)

    # -- config ------------------------------------------------------------------------------

    def group_config(self, group_id: str) -> SharePartitionConfig:
        gc = getattr(self._broker, "group_configs", None)
        if gc is None:
            return SharePartitionConfig()
        c = gc.get(group_id)
        known = self._configs.get(group_id)
        if known is not None and known[0] is c:
            return known[1]  # GroupConfigs.get answers the same object until a change
        made = self._partition_config(c)
        if len(self._configs) >= _MAX_CONFIGS:
            self._configs.clear()
        self._configs[group_id] = (c, made)
        return made

    def _partition_config(self, c: Any) -> SharePartitionConfig:
        # Dead-letter topics belong to share.version 2 (Kafka's ShareVersion.SV_2): below it a
        # record given up on is archived at once, whatever the group's DLQ config says. In a
        # cluster the level is the one finalized in etcd (the same on every broker).
        dlq_level = feature_level(self._broker, "share.version",
                                  int(self._broker.config.get("share.version"))) >= 2
        return SharePartitionConfig(
            record_lock_duration_ms=c.record_lock_duration_ms,
            delivery_count_limit=c.delivery_count_limit,
            max_record_locks=c.partition_max_record_locks,
            renew_enabled=c.renew_acknowledge_enable,
            count_only_inflight_toward_lock_limit=c.record_locks_count_inflight_only,
            delivery_backoff_ms=c.delivery_backoff_ms,
            delivery_backoff_max_ms=c.delivery_backoff_max_ms,
            delivery_backoff_multiplier=c.delivery_backoff_multiplier,
            key_ordering=c.ordering == "key",
            dead_letter=bool(c.dlq_topic) and dlq_level,
            read_committed=c.isolation_level == "read_committed",
        )

    def lock_duration_ms(self, group_id: str) -> int:
        return self.group_config(group_id).record_lock_duration_ms

    def _auto_offset_reset(self, group_id: str) -> tuple[str, int]:
        """The group's share.auto.offset.reset and, for by_duration, its duration in ms."""
        gc = getattr(self._broker, "group_configs", None)
        if gc is None:
            return "latest", 0
        c = gc.get(group_id)
        return c.auto_offset_reset, c.auto_offset_reset_duration_ms or 0

    # -- loading -----------------------------------------------------------------------------

    def get_loaded(self, key: SharePartitionKey) -> SharePartition | None:
        return self._parts.get(key)

    async def get(self, group_id: str, topic: Topic, partition: int,
                  wait_s: float | None = None) -> SharePartition | ErrorCode | None:
        """The share-partition, loading it from the persister on first use.

        The load runs as its own task, shared by every caller that asks meanwhile, so a caller
        that goes away (its connection closed) does not abandon it. With ``wait_s``, the caller
        waits at most that long and gets None while the load goes on; a load that ends wakes
        the fetches parked on the share-partition's watch key, which then find it loaded."""
        key = SharePartitionKey(group_id, topic.topic_id, partition)
        sp = self._parts.get(key)
        if sp is not None:
            self._used_ms[key] = self._broker.clock.now_ms()
            return sp
        task = self._loading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._load_logged(key, topic.name, partition))
            self._loading[key] = task
            task.add_done_callback(functools.partial(self._loaded, key, topic.name, partition))
        if wait_s is None:
            return await asyncio.shield(task)
        done, _ = await asyncio.wait({task}, timeout=max(0.0, wait_s))
        return task.result() if done else None

    async def _load_logged(self, key: SharePartitionKey, topic: str,
                           partition: int) -> SharePartition | ErrorCode:
        """``_load``, with a persister bug answered UNKNOWN_SERVER_ERROR (so it cannot wedge
        every later fetch)."""
        try:
            return await self._load(key, topic, partition)
        except Exception:
            log.exception("loading share-partition %s/%s-%d failed", key.group_id, topic,
                          partition)
            return ErrorCode.unknown_server_error

    def _loaded(self, key: SharePartitionKey, topic: str, partition: int,
                task: asyncio.Task[SharePartition | ErrorCode]) -> None:
        """A load ended. One the state's coordinator could not answer (moving, loading, away)
        stays the answer for ``LOAD_RETRY_S``, so the fetches parked on the share-partition
        retry it at that pace, not at once each; any other outcome wakes them to find it."""
        result = None if task.cancelled() else task.result()
        if isinstance(result, ErrorCode) and result in UNSURE:
            asyncio.get_running_loop().call_later(LOAD_RETRY_S, self._forget_load, key, task)
            return
        self._forget_load(key, task)
        self._broker.logs.watch.notify(share_watch_key(key.group_id, topic, partition))

    def _forget_load(self, key: SharePartitionKey,
                     task: asyncio.Task[SharePartition | ErrorCode]) -> None:
        if self._loading.get(key) is task:
            del self._loading[key]

    async def _load(self, key: SharePartitionKey, topic: str, partition: int) -> SharePartition | ErrorCode:
        read = await self._persister.read(ReadParams(key, LEADER_EPOCH))
        if read.error == ErrorCode.invalid_request:
            # No state: the group coordinator has not initialised this share-partition (no
            # member of the group subscribes to the topic yet, or initialisation is still under
            # way). Only the group coordinator initialises state (two-phase, durable before the
            # partition is assigned); a leader that did it on its own would race it and could
            # have its progress reset. Kafka fails such a fetch the same way: its
            # SharePartition maps the persister's INVALID_REQUEST to UNKNOWN_SERVER_ERROR.
            log.debug("ShareFetch for share-partition %s %s-%d, whose state the group "
                      "coordinator has not initialised; answering UNKNOWN_SERVER_ERROR",
                      key.group_id, topic, partition)
            return ErrorCode.unknown_server_error
        if read.error != ErrorCode.none:
            log.warning("reading share state of group %s %s-%d failed: %s", key.group_id, topic,
                        partition, read.error.name)
            return read.error
        unresolved = read.start_offset == UNINITIALIZED_START_OFFSET
        if unresolved:
            read = ReadResult(read.error, read.state_epoch, self._resolve_start(key.group_id, topic, partition),
                              read.state_batches)
        sp = SharePartition.load(key, LEADER_EPOCH, read, lambda: self.group_config(key.group_id),
                                 now_ms=self._broker.clock.now_ms())
        if isinstance(sp, ErrorCode):
            log.error("share state of group %s %s-%d is inconsistent; the partition cannot be "
                      "consumed until it is reset (shoal share-groups --reset-offsets)",
                      key.group_id, topic, partition)
            return sp
        if self._broker.topics.by_id(key.topic_id) is None:
            return ErrorCode.unknown_topic_id  # deleted while its state was being read
        self._parts[key] = sp
        self._names[key] = (topic, partition)
        self._used_ms[key] = self._broker.clock.now_ms()
        if unresolved:
            self._unwritten_start.add(key)
        if sp.has_dead_letters:
            self._dlq.kick(sp)  # ARCHIVING at the last stop: dead-letter them (again)
        log.info("share-partition initialised: group %s %s-%d at start offset %d",
                 key.group_id, topic, partition, sp.start_offset,
                 extra={"event": "share_partition_initialised", "group": key.group_id,
                        "topic": topic, "partition": partition})
        return sp

    def _resolve_start(self, group_id: str, topic: str, partition: int) -> int:
        lg = self._broker.logs.get(topic, partition)
        if lg is None:
            return 0
        reset, ms = self._auto_offset_reset(group_id)
        if reset == "earliest":
            return lg.log_start_offset
        if reset.startswith("by_duration:"):
            found = lg.offset_for_timestamp(self._broker.clock.now_ms() - ms)
            return found[0] if found is not None else self._high_watermark(topic, partition, lg)
        return self._high_watermark(topic, partition, lg)

    def _high_watermark(self, topic: str, partition: int, lg: Any) -> int:
        rep = getattr(self._broker, "replication", None)
        return lg.log_end_offset if rep is None else rep.high_watermark(topic, partition, lg)

    # -- acquire -----------------------------------------------------------------------------

    def acquire(self, sp: SharePartition, member_id: str, max_records: int, batch_size: int,
                mode: AcquireMode, max_bytes: int) -> tuple[bytes, list[AcquiredRecords]]:
        """Read the log at the partition's next fetch offset and acquire records for a member."""
        topic, partition = self._names[sp.key]
        lg = self._broker.logs.get(topic, partition)
        now = self._broker.clock.now_ms()
        if lg is None or max_records <= 0 or not sp.can_acquire(now):
            return b"", []
        offset = sp.next_fetch_offset(now)
        if offset < lg.log_start_offset:
            sp.on_log_start_offset_moved(lg.log_start_offset)
            offset = sp.next_fetch_offset(now)
        # share.isolation.level=read_committed: nothing from the last stable offset on (an open
        # transaction holds the share-partition at its first offset; broker/share/txn_filter.py).
        # The aborted transactions are known before the read (the transaction index), so the
        # read's record budget counts only records that can be delivered.
        txn_log = getattr(self._broker, "txn_log", None) if sp.read_committed else None
        # A replicated partition is read up to its high watermark (what every in-sync replica
        # has), so nothing a failover could lose is ever delivered.
        rep = getattr(self._broker, "replication", None)
        end = lg.log_end_offset if rep is None else rep.high_watermark(topic, partition, lg)
        aborted: Sequence[Any] = ()
        if txn_log is not None:
            try:
                end = min(end, txn_log.last_stable_offset(topic, partition))
                if offset < end:
                    aborted = txn_log.aborted_transactions(topic, partition, offset, end)
            except OSError:
                return b"", []  # the log directory is offline: acquire nothing (as below)
        if offset >= end:
            return b"", []
        read_key = (offset, end, max_records, max_bytes)
        if sp.keyed_idle(read_key):
            return b"", []  # share.ordering=key: every record there still waits for its key
        try:
            limit = read_limit(lg, offset, max_records, max(max_bytes, 1),
                               aborted_by_producer(aborted) if aborted else None)
            data = (sp.read_reuse.read(lg, offset, limit, end) if sp.ordering_on  # key_order.py
                    else lg.read(offset, limit, end).data)
        except OffsetOutOfRangeError:
            sp.on_log_start_offset_moved(lg.log_start_offset)
            return b"", []
        except OSError:
            # The log directory is offline (storage/log_dir.py) and the broker is stopping:
            # acquire nothing rather than fail the whole ShareFetch.
            return b"", []
        if not data:
            return b"", []
        headers = list(iter_batches(data))
        log_batches = [(h.base_offset, h.last_offset) for _pos, h in headers]
        # Transaction markers are never delivered, and with read_committed neither are aborted
        # records: only batches with the transactional or control bit are looked at further.
        txn_batches = [TxnBatch(h.base_offset, h.last_offset, h.producer_id, h.attributes)
                       for _pos, h in headers if h.attributes & _TXN_OR_CONTROL]
        # share.ordering=key needs the record keys (broker/share/key_order.py): decoded lazily,
        # so without ordering this costs nothing but the object (the config is read once, in
        # sp.acquire). Keys of records delivered before a restart are read back first.
        keys = BatchKeys(data, headers, KEYS_DECOMPRESSED_MAX, sp.key_memo, sp.batch_layouts,
                         sp.batch_key_sets)
        if sp.has_unkeyed and sp.key_ordering:
            sp.register_keys(keys_of(lg, sp.unkeyed_ranges()))
        acquired = sp.acquire(member_id, log_batches, max_records, batch_size, mode,
                              now, fetch_offset=offset, txn_batches=txn_batches, stable_end=end,
                              aborted=aborted, keys=keys, read_key=read_key)
        if txn_batches:
            write = sp.take_archive_write()
            if write is not None:
                self._write_later(write)
        self._arm(sp)
        if not acquired:
            return b"", []
        if sp.ordering_on:
            return keyed_response(data, headers, acquired, sp.batch_layouts), acquired
        if txn_batches:
            return covering_batches(data, headers, acquired), acquired
        return spanning_batches(data, headers, acquired), acquired

    # -- acknowledge and release -------------------------------------------------------------

    async def acknowledge(self, key: SharePartitionKey, member_id: str,
                          batches: Sequence[AckBatch]) -> tuple[ErrorCode, str | None]:
        sp = self._parts.get(key)
        if sp is None:
            return ErrorCode.invalid_record_state, "no records of this partition are acquired here"
        self._used_ms[key] = self._broker.clock.now_ms()
        outcome = sp.acknowledge(member_id, batches, self._broker.clock.now_ms())
        if outcome.error != ErrorCode.none or outcome.token is None:
            self._after(sp)
            if outcome.error != ErrorCode.none:  # batches: (first, last, types) as asked
                log.debug("acknowledgement %s by member %s refused for group %s %s-%d: %s",
                          batches, member_id, key.group_id, *self._names[key], outcome.error.name)
            return outcome.error, outcome.error_message
        assert outcome.write is not None
        result = await self._persist(outcome.write)
        ok = result.error == ErrorCode.none
        follow = sp.complete_write(outcome.token, ok, self._broker.clock.now_ms(),
                                   defer_start=True)
        if follow is not None:
            self._write_later(follow)
        elif ok and sp.start_write_due:
            self._timers.defer_start_write(sp.key)
        self._after(sp)
        if follow is not None or any(_RELEASE in types for _f, _l, types in batches):
            self._log_releases(sp)  # a RELEASE or an expired lock may have hit the limit
        if not ok:
            log.warning("persisting an acknowledgement for group %s failed (%s); the records "
                        "stay acquired and the client is told to retry", key.group_id,
                        result.error.name)
            return ack_error_for_write_failure(result.error), result.error_message
        return ErrorCode.none, None

    def release_member(self, group_id: str, member_id: str,
                       partitions: Sequence[tuple[object, int]]) -> None:
        """Release a member's acquired records in these partitions (session closed)."""
        now = self._broker.clock.now_ms()
        for topic_id, p in partitions:
            sp = self._parts.get(SharePartitionKey(group_id, topic_id, p))  # type: ignore[arg-type]
            if sp is None:
                continue
            write = sp.release_member(member_id, now)
            if write is not None:
                self._write_later(write)
                self._log_releases(sp)
            self._after(sp)

    # -- timers, writes, wake-ups ------------------------------------------------------------

    def _after(self, sp: SharePartition) -> None:
        self._arm(sp)
        if sp.has_dead_letters:
            self._dlq.kick(sp)
        if sp.take_wakeup():
            topic, p = self._names[sp.key]
            # One parked ShareFetch, not all: it passes the wake-up on (``pass_wakeup``).
            self._broker.logs.watch.notify(share_watch_key(sp.key.group_id, topic, p), 1)

    def pass_wakeup(self, sp: SharePartition) -> None:
        """After a ShareFetch acquired from ``sp`` (or skipped it, its budget used up, after a
        wake-up): wake the next parked one if records are left to acquire. A fetch that
        acquires nothing passes nothing on, so wake-ups never circle among parked fetches."""
        topic, p = self._names[sp.key]
        key = share_watch_key(sp.key.group_id, topic, p)
        watch = self._broker.logs.watch
        if not watch.waiting(key):
            return
        now = self._broker.clock.now_ms()
        lg = self._broker.logs.get(topic, p)
        if lg is None or not sp.can_acquire(now):
            return
        if sp.next_fetch_offset(now) < self._high_watermark(topic, p, lg):
            watch.notify(key, 1)

    def _arm(self, sp: SharePartition) -> None:
        self._timers.arm(sp.key, sp.next_deadline())

    def _on_timer(self, key: SharePartitionKey) -> None:
        sp = self._parts.get(key)
        if sp is None:
            return
        write = sp.on_timer(self._broker.clock.now_ms())
        if write is not None:
            self._write_later(write)
            self._log_releases(sp)
        self._after(sp)

    def _write_start(self, key: SharePartitionKey) -> None:
        """The deferred write of a start offset an acknowledgement moved (partition_timers.py)."""
        sp = self._parts.get(key)
        if sp is None:
            return
        write = sp.start_write()
        if write is not None:
            self._write_later(write)

    def _log_releases(self, sp: SharePartition) -> None:
        """Log lock timeouts and delivery-limit archives since the last call (operator events).

        Called only where they can happen (timer, release, RELEASE acks), as reading the
        counters walks the in-flight window.
        """
        m = sp.metrics()
        seen_timeouts, seen_archives = self._logged.get(sp.key, (0, 0))
        if m.lock_timeouts == seen_timeouts and m.delivery_limit_archives == seen_archives:
            return
        self._logged[sp.key] = (m.lock_timeouts, m.delivery_limit_archives)
        topic, p = self._names[sp.key]
        group = sp.key.group_id
        if m.lock_timeouts > seen_timeouts:
            log.info("%d acquisition lock(s) of group %s %s-%d expired before acknowledgement; "
                     "the records are released for redelivery", m.lock_timeouts - seen_timeouts,
                     group, topic, p,
                     extra={"event": "acquisition_lock_timeout", "group": group,
                            "topic": topic, "partition": p})
        if m.delivery_limit_archives > seen_archives:
            limit = self.group_config(group).delivery_count_limit
            dlq = self.group_config(group).dead_letter
            log.warning("%d record(s) of group %s %s-%d reached the delivery count limit (%d) "
                        "and were %s; they will not be delivered again",
                        m.delivery_limit_archives - seen_archives, group, topic, p, limit,
                        "sent to the group's dead-letter topic" if dlq else "archived",
                        extra={"event": "records_archived_at_delivery_limit", "group": group,
                               "topic": topic, "partition": p})

    def _write_later(self, write: WriteParams) -> None:
        task = asyncio.get_running_loop().create_task(self._write(write))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _persist(self, write: WriteParams) -> WriteResult:
        """``persister.write``, timed for shoal_share_state_write_duration_seconds."""
        metrics = self._broker.metrics
        started = perf_counter()
        result = await self._persister.write(write)
        metrics.share_state_write_seconds.observe(perf_counter() - started)
        if result.error == ErrorCode.none and write.start_offset >= 0:
            self._unwritten_start.discard(write.key)
        if result.error != ErrorCode.none:
            metrics.share_state_write_errors.inc(result.error.name.upper())
        return result

    async def _write(self, write: WriteParams) -> None:
        self._writing[write.key] = self._writing.get(write.key, 0) + 1
        try:
            result = await self._persist(write)
        finally:
            left = self._writing.pop(write.key) - 1
            if left:
                self._writing[write.key] = left
        if result.error != ErrorCode.none:
            sp = self._parts.get(write.key)
            if sp is not None:
                sp.on_write_failed(write)  # the next write re-sends these ranges
            log.warning("persisting share state of group %s partition %d failed: %s; the "
                        "in-memory state stands and the next write carries it",
                        write.key.group_id, write.key.partition, result.error.name)

    def source_name(self, key: SharePartitionKey) -> tuple[str, int] | None:
        """(topic name, partition) of a loaded share-partition."""
        return self._names.get(key)

    def after_dead_letters(self, sp: SharePartition, write: WriteParams | None) -> None:
        """Persist the ARCHIVED write of finished dead letters and wake parked fetches."""
        if write is not None:
            self._write_later(write)
        if self._parts.get(sp.key) is sp:
            self._after(sp)

    async def stop(self) -> None:
        await self._dlq.stop()
        for key in self._timers.stop():
            self._write_start(key)  # the SPSO an acknowledgement moved, as it stands
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)

    def partitions(self) -> dict[SharePartitionKey, SharePartition]:
        return dict(self._parts)

    def unload_idle(self, now_ms: int, idle_ms: int, has_members: Callable[[str], bool]) -> int:
        """Unload share-partitions of groups without members that were not used for ``idle_ms``
        and are settled (module doc); returns how many were unloaded."""
        idle = [key for key, sp in self._parts.items()
                if now_ms - self._used_ms.get(key, now_ms) >= idle_ms
                and key not in self._unwritten_start and sp.is_settled()]
        busy: dict[str, bool] = {}
        gone = [key for key in idle if key not in self._writing
                and not busy.setdefault(key.group_id, has_members(key.group_id))]
        if gone:
            self.forget(gone)
            log.info("unloaded %d idle share-partition(s) of share groups without members "
                     "(group.share.partition.unload.idle.ms); the next fetch loads them again",
                     len(gone))
        return len(gone)

    def timer_count(self) -> int:
        """Lock-expiry timers armed (one per share-partition with a deadline)."""
        return self._timers.deadline_count()

    async def revalidate(self, keys: Iterable[SharePartitionKey]) -> None:
        """Cluster mode, when a member opens a share session: drop loaded share-partitions
        whose durable state moved on elsewhere (an offsets reset or deletion through the
        group coordinator on another broker bumps the state epoch), so they load again. Those
        with records acquired are in use by a member and cannot have been reset."""
        for key in list(keys):
            part = self._parts.get(key)
            if part is None or part.oldest_unacked_acquired_at_ms() is not None:
                continue
            summary = await self._persister.read_summary(ReadParams(key, part.leader_epoch))
            if summary.error in UNSURE or self._parts.get(key) is not part:
                continue  # the coordinator cannot tell now: keep what is loaded
            if summary.error != ErrorCode.none or summary.state_epoch != part.state_epoch:
                log.info("share-partition %s-%d of group %s: its state was reset or deleted "
                         "elsewhere (%s, state epoch %d, had %d); loading it again",
                         *self._names.get(key, ("?", key.partition)), key.group_id,
                         summary.error.name, summary.state_epoch, part.state_epoch)
                self.forget([key])

    def forget_topic(self, topic_id: object) -> None:
        """Drop every loaded share-partition of a deleted topic, with its lock timer."""
        self.forget([k for k in self._parts if k.topic_id == topic_id])

    def forget(self, keys: Iterable[SharePartitionKey]) -> None:
        """Drop loaded share-partitions whose durable state an admin RPC reset or deleted
        (broker/share/admin.py) or whose topic was deleted; the next ShareFetch loads them again
        from the persister."""
        for key in list(keys):
            self._parts.pop(key, None)
            self._names.pop(key, None)
            self._logged.pop(key, None)
            self._used_ms.pop(key, None)
            self._unwritten_start.discard(key)
            self._timers.cancel(key)
