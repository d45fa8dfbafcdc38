"""SharePartition: the sans-IO state machine of one share-partition (group, topic, partition).

The leader of a topic-partition keeps, per share group, the in-flight window between the
share-partition start offset (SPSO) and end offset (SPEO): every offset there is AVAILABLE,
ACQUIRED by one member under a time-limited lock, ACKNOWLEDGED or ARCHIVED, with a delivery count
(KIP-932; reference section 3). This class owns that window and nothing else: the shell reads the
log, talks to the persister and arms timers; every method here takes what happened (log batch
boundaries, acknowledgements, ``now_ms``) and returns what to do (acquired ranges, state writes).

Driving it (one serial executor per partition, STYLE.md 1.5):

1. ``next_fetch_offset(now_ms)`` -> the shell reads whole log batches from there ->
   ``acquire(...)``.
2. ``acknowledge(...)`` validates and applies an ack *tentatively* and returns a write plus a
   token; the shell persists the write and then calls ``complete_write(token, ok, now_ms)``,
   which commits or rolls back, and only then answers the client (respond after commit).
3. ``next_deadline()`` / ``on_timer(now_ms)`` expire acquisition locks and end redelivery
   backoffs; ``release_member`` handles a closed share session. Both return a write whose
   in-memory effect already stands.
4. ``take_wakeup()`` says whether parked ShareFetches should retry.

Invariants (property-tested in tests/unit/test_share_partition_stateful.py):
- a record is ACQUIRED by at most one member, and only ACQUIRED records have an owner and a lock;
- delivery counts never decrease, and grow only by AVAILABLE -> ACQUIRED;
- the SPSO only moves past terminal (ACKNOWLEDGED/ARCHIVED) records, or to a moved log start;
- every state change is checked against ``record_state.LEGAL_TRANSITIONS``;
- an acknowledgement is all-or-nothing per partition: an error leaves no trace, and a pending
  (not yet durable) transition never shows as committed; a second ack touching a pending record
  gets INVALID_RECORD_STATE, as in Kafka.
- only AVAILABLE/ACKNOWLEDGED/ARCHIVED are written; acquisition is never persisted, so after a
  crash an acquired record comes back AVAILABLE with its last persisted delivery count;
- with a group redelivery backoff (opt-in, :mod:`broker.share.backoff`), a record released after
  delivery n at time t is not acquired before t + delay(n), nothing else waits for it, and the
  SPSO stops at it; its backoff deadline is never persisted (restart rule in that module).
- with a dead-letter topic (opt-in, KIP-1191, :mod:`broker.share.dead_letter`; property-tested in
  tests/unit/test_share_dead_letter.py): a REJECTed or delivery-limit record goes ACQUIRED ->
  ARCHIVING (persisted) and becomes ARCHIVED only through ``complete_dead_letters``, which the
  shell calls once the dead-letter record is durable (or was given up on: DLQ topic missing or
  not allowed); ARCHIVING records loaded from the share state are handed out again. Every
  ARCHIVING record is handed out by ``take_dead_letters`` exactly once per load (again only
  after ``retry_dead_letters``), and the SPSO stops at it until it is ARCHIVED.
- transaction markers are never acquired; with ``share.isolation.level=read_committed`` no
  acquisition includes an offset at or past the last stable offset or a record of an aborted
  transaction (:mod:`broker.share.txn_filter`; property-tested in
  tests/unit/test_share_read_committed.py);
- with ``share.ordering=key`` (opt-in, :mod:`broker.share.key_order`; property-tested in
  tests/unit/test_share_key_ordering_stateful.py): at most one record per key is in flight, and
  a record is acquired only when every lower record of its key is done, so a key's records are
  first delivered in offset order and a released record comes back before later ones of its key.

Config is read through a callable on every operation so live group-config changes apply at once
(reference section 2: lock duration, delivery count limit and record-lock limit are per call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from broker.share.acknowledgement import (
    AckBatch,
    AckOutcome,
    AckSegment,
    ack_error_for_write_failure,
    plan_acknowledgement,
)
from broker.share.acquisition import (
    AcquiredRecords,
    AcquireMode,
    acquire_budget,
    apply_plan,
    archive_missing,
    archive_skipped_available,
    archive_skipped_reached,
    candidates,
    log_spans,
    records_holding_locks,
    select,
)
from broker.share.backoff import BackoffIndex, first_fetchable_at, redelivery_delay_ms
from broker.share.dead_letter import (
    REASON_DELIVERY_LIMIT,
    REASON_REJECTED,
    DeadLetterBook,
    DeadLetterRun,
)
from broker.share.drain import DecayingRate
from broker.share.inflight import (
    InFlightBatch,
    InFlightCache,
    LockIndex,
    PendingAck,
    RecordInfo,
    advance_start,
    archive_available_below,
    first_fetchable,
    merge_ranges,
    oldest_acquired_at,
    scan_prefix,
    state_batches,
    trim_below,
)
from broker.share.key_order import KeyIndex, KeyMap, acquire_keyed
from broker.share.record_state import ACK_TARGET_STATE, AckType, RecordState
from broker.share.txn_filter import AbortedRange, TxnBatch, skip_ranges
from broker.share.views import ConfigSource, OffsetView, ShareMetrics, SharePartitionConfig
from persister.api import (
    PERSISTED_STATES,
    UNINITIALIZED_START_OFFSET,
    ReadResult,
    SharePartitionKey,
    WriteParams,
)

# Decoded record keys kept per share-partition before entries below the SPSO are dropped.
_MIN_MEMO = 16_384
_ARCHIVING = RecordState.ARCHIVING
_ARCHIVED = RecordState.ARCHIVED
# Dead-letter records handed to the shell per take_dead_letters call (one DLQ append).
DEAD_LETTERS_PER_TAKE = 500

__all__ = [
    "AckOutcome",
    "AcquireMode",
    "AcquiredRecords",
    "ConfigSource",
    "OffsetView",
    "ShareMetrics",
    "SharePartition",
    "SharePartitionConfig",
    "ack_error_for_write_failure",
]


class SharePartition:
    """In-flight records of one share-partition. Construct with :meth:`load`."""

    def __init__(
        self,
        key: SharePartitionKey,
        leader_epoch: int,
        state_epoch: int,
        start_offset: int,
        config: ConfigSource,
    ) -> None:
        if start_offset < 0:
            raise ValueError("start offset must be resolved (share.auto.offset.reset) first")
        self.key = key
        self.leader_epoch = leader_epoch
        self.state_epoch = state_epoch
        self._config = config
        self._start = start_offset
        self._cache = InFlightCache()
        self._locks = LockIndex()
        # Ends of redelivery backoffs (broker/share/backoff.py); empty unless the group has
        # share.delivery.backoff.ms > 0, and then the only thing the fast paths look at.
        self._backoff = BackoffIndex()
        # The latest now_ms seen, for the calls that do not pass one (next_fetch_offset).
        self._now_ms = 0
        # Kafka's findNextFetchOffset: something below SPEO may be fetchable (released, expired,
        # record_limit remainder, gap window). Without it the next fetch is simply SPEO + 1.
        self._find_next = False
        self._wakeup = False
        self._next_token = 1
        # token -> (offset ranges of the pending ack, start offset its write carries, ranges of
        # earlier failed writes it carries again)
        self._pending: dict[int, tuple[list[tuple[int, int]], int, list[tuple[int, int]]]] = {}
        # Ranges whose fire-and-forget write failed: the next write describes them again.
        self._dirty: list[tuple[int, int]] = []
        # Highest start offset in any write issued (timer/release) or committed (acks), to tell
        # when the SPSO moved further than the persister knows (then a follow-up write).
        self._written_start = start_offset
        self._lock_timeouts = 0
        self._limit_archives = 0
        self._acks: dict[AckType, int] = {t: 0 for t in AckType}
        # Age and drain metrics (broker/share/drain.py): records archived (REJECT, GAP, delivery
        # limit) and the rate at which records complete, updated once per committed change.
        self._archived = 0
        self._drain = DecayingRate()
        # share.ordering=key (broker/share/key_order.py): key hash -> offset holding the key, and
        # ranges of loaded AVAILABLE records delivered before whose keys are not known yet.
        self._keys = KeyIndex(self._cache)
        # offset -> key hash of records whose batches were decoded (the shell fills it through
        # protocol.record_keys.BatchKeys), so blocked records walked again are not re-decoded.
        self.key_memo: dict[int, int | None] = {}
        # base offset -> record layout of uncompressed log batches decoded for their keys, so
        # the shell can send only the acquired part of a batch (protocol.record_keys.trim_batch).
        self.batch_layouts: dict[int, tuple[list[int], list[int]]] = {}
        self._memo_cap = _MIN_MEMO
        # Bumped by every change that may free a key or make a record acquirable; a keyed walk
        # that found nothing remembers (version, read, room, config) and is not repeated as is.
        self._key_version = 0
        self._fruitless: tuple[object, ...] | None = None
        # (version, the shell's read key, config) of the last keyed acquisition that found
        # nothing: the same read would find nothing again (``keyed_idle``).
        self._idle: tuple[object, ...] | None = None
        # The last keyed walk went to the end of its read (not stopped by a budget).
        self._walk_complete = False
        # Highest offset acquired without key ordering (share.ordering switched live): records
        # up to it may be in flight without holding their keys in KeyIndex.
        self._untracked_last = -1
        # share.ordering=key as of the last acquisition (read per acquisition).
        self._ordering_on = False
        self._unkeyed: list[tuple[int, int]] = []
        # KIP-1191 dead letters (broker/share/dead_letter.py): ARCHIVING records to hand to
        # the shell, and how many it holds.
        self._dlq = DeadLetterBook()
        self._dead_lettered = 0
        self._dlq_skipped = 0
        # Transaction markers or aborted records were archived by an acquisition since the last
        # take_archive_write (broker/share/txn_filter.py): the SPSO may have moved unwritten.
        self._skipped = False

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        key: SharePartitionKey,
        leader_epoch: int,
        read: ReadResult,
        config: ConfigSource,
        now_ms: int | None = None,
    ) -> SharePartition | ErrorCode:
        """Build from a ReadShareGroupState result.

        Returns the read's error if it failed, or UNKNOWN_SERVER_ERROR when the persisted batches
        are inconsistent (below the start offset, empty, overlapping, or an unknown state), which
        fails initialisation as in Kafka. Holes between persisted batches become gap windows:
        those offsets were never delivered and are fetched before new data.

        With ``now_ms`` and a group redelivery backoff, persisted AVAILABLE records that were
        delivered before wait their full backoff from ``now_ms`` (the restart rule of
        :mod:`broker.share.backoff`: the share-state records do not carry backoff deadlines).

        Raises:
            ValueError: ``read.start_offset`` is still -1; the caller resolves
                ``share.auto.offset.reset`` before loading.
        """
        if read.error != ErrorCode.none:
            return read.error
        if read.start_offset == UNINITIALIZED_START_OFFSET:
            raise ValueError("resolve share.auto.offset.reset before loading")
        part = cls(key, leader_epoch, read.state_epoch, read.start_offset, config)
        prev_last: int | None = None
        for b in sorted(read.state_batches, key=lambda b: b.first_offset):
            if (
                b.last_offset < b.first_offset
                or b.first_offset < read.start_offset
                or b.delivery_state not in PERSISTED_STATES
                or b.delivery_count < 0
                or (prev_last is not None and b.first_offset <= prev_last)
            ):
                return ErrorCode.unknown_server_error
            prev_last = b.last_offset
            info = RecordInfo(RecordState(b.delivery_state), b.delivery_count)
            part._cache.add(InFlightBatch(b.first_offset, b.last_offset, info))
            if info.state is _ARCHIVING:
                # A dead-letter record that was not known durable before the restart: send
                # it again (at least once; KIP-1191 allows the duplicate).
                part._dlq.add(b.first_offset, b.last_offset, None)
        part._find_next = len(part._cache) > 0
        part._unkeyed = merge_ranges([
            (b.first_offset, b.last_offset) for b in part._cache
            if b.whole.state is RecordState.AVAILABLE and b.whole.delivery_count >= 1
        ])
        part._start = advance_start(part._cache, part._start)
        trim_below(part._cache, part._start)
        if now_ms is not None:
            part._now_ms = now_ms
            part._hold_loaded(now_ms)
        return part

    def _hold_loaded(self, now_ms: int) -> None:
        """Restart rule (broker/share/backoff.py): hold back every loaded AVAILABLE record with
        delivery count >= 1 for its full backoff from ``now_ms``."""
        cfg = self._config()
        if cfg.delivery_backoff_ms <= 0:
            return
        runs: list[tuple[int, int, int]] = []
        for batch in self._cache:
            info = batch.whole  # freshly loaded batches are never exploded
            if info.state is RecordState.AVAILABLE and info.delivery_count >= 1:
                delay = redelivery_delay_ms(cfg, info.delivery_count)
                if delay > 0:
                    info.available_at_ms = now_ms + delay
                    runs.append((now_ms + delay, batch.first_offset, batch.last_offset))
        self._backoff.push_runs(runs)

    # ------------------------------------------------------------------ offsets

    @property
    def start_offset(self) -> int:
        """SPSO: every offset below it is done."""
        return self._start

    @property
    def end_offset(self) -> int:
        """SPEO as Kafka reports it: the last cached offset, or the SPSO when none is cached."""
        last = self._cache.last_offset
        return last if last is not None and last >= self._start else self._start

    def _new_data_offset(self) -> int:
        last = self._cache.last_offset
        return self._start if last is None or last < self._start else last + 1

    def next_fetch_offset(self, now_ms: int | None = None) -> int:
        """Where the shell should start reading the log for the next acquisition.

        ``now_ms`` only matters while records are in redelivery backoff (they are skipped until
        it ends); without it the latest time this partition was told is used.
        """
        new_data = self._new_data_offset()
        if self._backoff:
            now = self._tick(now_ms)
            if self._backoff.pop_due(now):
                self._key_version += 1
                self._find_next = True  # backoffs ended: those records are fetchable again
            if self._backoff:
                if not self._find_next:
                    return new_data
                found = first_fetchable_at(self._cache, self._start, now)
                if found is None:
                    self._find_next = False
                    return new_data
                return found
        if not self._find_next:
            return new_data
        found = first_fetchable(self._cache, self._start)
        if found is None:
            self._find_next = False
            return new_data
        return found

    def can_acquire(self, now_ms: int | None = None) -> bool:
        """Whether a fetch could acquire anything under the record-lock limit."""
        cfg = self._config()
        last = self._cache.last_offset
        if last is not None and last >= self._start and self.next_fetch_offset(now_ms) <= last:
            return True  # re-delivery inside the window is always allowed
        held = records_holding_locks(
            self._cache, self._start, cfg.count_only_inflight_toward_lock_limit
        )
        return held < cfg.max_record_locks

    # ------------------------------------------------------------------ acquire

    def acquire(
        self,
        member_id: str,
        log_batches: Sequence[tuple[int, int]],
        max_records: int,
        batch_size: int,
        acquire_mode: AcquireMode,
        now_ms: int,
        *,
        fetch_offset: int | None = None,
        txn_batches: Sequence[TxnBatch] = (),
        stable_end: int | None = None,
        aborted: Sequence[AbortedRange] = (),
        keys: KeyMap | None = None,
        read_key: object = None,
    ) -> list[AcquiredRecords]:
        """Acquire records for ``member_id`` from log batches read at the next fetch offset.

        ``log_batches`` are the (base_offset, last_offset) of whole log batches as read;
        ``fetch_offset`` is the offset the read started at: offsets from there up to the first
        returned batch no longer exist (compaction) and are archived so the window can move.
        ``txn_batches`` are the read batches with the transactional or control attribute:
        control batches (transaction markers) are archived, never acquired, in either isolation
        level. With ``share.isolation.level=read_committed`` (the config, read per call, so a
        live switch applies to the next acquisition, re-deliveries included) nothing at or past
        ``stable_end`` (the partition's last stable offset; None = no limit) is acquired, and
        transactional batches of the ``aborted`` transactions are archived too
        (broker/share/txn_filter.py). Returns the ranges to put in the response; the shell
        subtracts their total size from the request's MaxRecords budget. ``batch_size`` <= 0
        means no BatchSize splitting. With ``share.ordering=key`` the shell passes ``keys``
        (offset -> key hash or None) of the records read, and acquisition goes record by
        record (broker/share/key_order.py).

        Raises:
            ValueError: ``log_batches`` are not ascending, disjoint ranges (a shell bug).
        """
        if max_records <= 0 or not log_batches:
            return []
        cfg = self._config()
        held_at: int | None = None  # now_ms while records may be in backoff, else None
        if self._backoff:
            self._tick(now_ms)
            if self._backoff.pop_due(now_ms):
                self._key_version += 1
                self._find_next = True
            if self._backoff:
                held_at = now_ms
        # Compaction (Kafka maybeArchiveStaleBatches): nothing exists from the fetch offset up
        # to the first batch returned, so those records are done (in memory only).
        if (
            fetch_offset is not None
            and log_batches[0][0] > fetch_offset
            and archive_missing(
                self._cache, max(fetch_offset, self._start), log_batches[0][0] - 1
            )
        ):
            self._after_change(found_available=False)
        if cfg.read_committed and stable_end is not None and log_batches[-1][0] >= stable_end:
            log_batches = [b for b in log_batches if b[0] < stable_end]
            if not log_batches:
                return []  # an open transaction holds the share-partition at the LSO
        start = fetch_offset if fetch_offset is not None else log_batches[0][0]
        skip: list[tuple[int, int]] = []
        if txn_batches:
            skip = skip_ranges(log_batches, txn_batches, aborted if cfg.read_committed else None)
            if skip:
                skip = _clip(skip, self._start, stable_end if cfg.read_committed else None)
            if skip and archive_skipped_available(self._cache, skip):
                self._after_change(found_available=False)
                self._skipped = True
        self._ordering_on = cfg.key_ordering
        if cfg.key_ordering:
            if keys is None:
                raise ValueError("share.ordering=key needs the record keys of the log batches")
            ranges = self._acquire_keyed(
                member_id, log_batches, max_records, acquire_mode, cfg, now_ms, held_at, keys,
                skip, stable_end if cfg.read_committed else None,
            )
            # Nothing is left to find in this read until something frees a key (or more log
            # arrives): the walk found nothing, or went to its end taking every free record.
            self._idle = (
                (self._key_version, read_key, cfg)
                if (not ranges or self._walk_complete) and read_key is not None
                and not self._backoff else None
            )
        else:
            ranges = self._acquire_ranges(
                member_id, log_batches, start, max_records, batch_size, acquire_mode, cfg,
                now_ms, held_at, skip, stable_end if cfg.read_committed else None,
            )
        if skip:
            reach = ranges[-1].last_offset if ranges else start - 1
            if archive_skipped_reached(self._cache, skip, reach):
                self._after_change(found_available=False)
                self._skipped = True
        return ranges

    def _acquire_ranges(
        self,
        member_id: str,
        log_batches: Sequence[tuple[int, int]],
        start: int,
        max_records: int,
        batch_size: int,
        acquire_mode: AcquireMode,
        cfg: SharePartitionConfig,
        now_ms: int,
        held_at: int | None,
        skip: Sequence[tuple[int, int]],
        stable_end: int | None,
    ) -> list[AcquiredRecords]:
        """Kafka's acquisition: whole runs of offsets under the request budget (acquisition.py),
        leaving out ``skip`` and everything from ``stable_end`` on."""
        budget, clamp = acquire_budget(
            self._cache,
            self._start,
            max_records,
            cfg.max_record_locks,
            cfg.count_only_inflight_toward_lock_limit,
            start,
        )
        if budget <= 0:
            return []
        if stable_end is not None:
            clamp = stable_end - 1 if clamp is None else min(clamp, stable_end - 1)
        spans = log_spans(log_batches, self._start, clamp, skip)
        plan = select(
            candidates(self._cache, spans, held_at), budget, acquire_mode,
            cfg.delivery_count_limit,
        )
        deadline = now_ms + cfg.record_lock_duration_ms
        ranges, left_available = apply_plan(
            self._cache, self._locks, plan, member_id, now_ms, deadline, batch_size
        )
        if left_available:
            self._find_next = self._wakeup = True
        self._locks.maybe_compact(self._cache)
        if ranges:
            self._untracked_last = max(self._untracked_last, ranges[-1].last_offset)
        return ranges

    def _acquire_keyed(
        self,
        member_id: str,
        log_batches: Sequence[tuple[int, int]],
        max_records: int,
        acquire_mode: AcquireMode,
        cfg: SharePartitionConfig,
        now_ms: int,
        held_at: int | None,
        keys: KeyMap,
        skip: Sequence[tuple[int, int]],
        stable_end: int | None,
    ) -> list[AcquiredRecords]:
        """share.ordering=key: :func:`broker.share.key_order.acquire_keyed`, skipped when a
        walk over the same records found nothing and nothing freed a key since."""
        held = records_holding_locks(
            self._cache, self._start, cfg.count_only_inflight_toward_lock_limit
        )
        room_new = cfg.max_record_locks - held
        sig = (self._key_version, log_batches[0][0], log_batches[-1][1], room_new, held_at, cfg,
               stable_end)
        if self._fruitless == sig:
            return []
        out, stopped, added = acquire_keyed(
            self._cache, self._locks, self._keys, self._start, self._untracked_last, room_new,
            member_id, log_batches, max_records, acquire_mode, cfg, now_ms, held_at, keys,
            skip, stable_end,
        )
        # Records walked over stay AVAILABLE: the next fetch looks back for them.
        self._find_next = True
        if stopped:
            self._wakeup = True
        self._locks.maybe_compact(self._cache)
        # A walk that found nothing, or went to the end of its read taking every free record,
        # leaves nothing for another walk over the same read until a key is freed (version) or
        # the log, lock room or config change: remembered as the next walk will see it. (Without
        # this, the parked fetches woken by an acknowledgement walked the window once more after
        # the acknowledging consumer's own fetch took the freed keys.)
        self._walk_complete = not stopped
        if out and stopped:
            self._fruitless = None
        else:
            self._fruitless = sig[:3] + (room_new - added,) + sig[4:]
        return out

    @property
    def read_committed(self) -> bool:
        """Whether the group has share.isolation.level=read_committed now (the shell then reads
        only up to the last stable offset and passes the aborted transactions)."""
        return self._config().read_committed

    def take_archive_write(self) -> WriteParams | None:
        """After an acquisition archived transaction markers or aborted records: a write telling
        the persister the start offset they let the SPSO move to, or None if it knows it (so an
        idle share-partition can settle, and a restart does not read them again)."""
        if not self._skipped:
            return None
        self._skipped = False
        return self._committed_write([])

    # ------------------------------------------------------------------ key ordering

    def keyed_idle(self, read_key: object) -> bool:
        """Whether a keyed acquisition from the read described by ``read_key`` (the shell's
        fetch offset, log end, budget) would find nothing: one did, and nothing that frees a key
        or makes a record acquirable happened since. The shell then skips reading the log."""
        idle = self._idle
        return (idle is not None and idle[0] == self._key_version and idle[1] == read_key
                and idle[2] == self._config())

    @property
    def key_ordering(self) -> bool:
        """Whether the group has share.ordering=key now (the shell then passes record keys)."""
        return self._config().key_ordering

    @property
    def ordering_on(self) -> bool:
        """share.ordering=key was in force at the last acquisition."""
        return self._ordering_on

    @property
    def has_unkeyed(self) -> bool:
        """Whether :meth:`unkeyed_ranges` is not empty (cheap)."""
        return bool(self._unkeyed)

    def unkeyed_ranges(self) -> list[tuple[int, int]]:
        """Offset ranges whose record keys the shell should read from the log and hand to
        :meth:`register_keys` before the next keyed acquisition (restart rule of
        broker/share/key_order.py); empty once done."""
        return list(self._unkeyed)

    def register_keys(self, keys: KeyMap) -> None:
        """Loaded records delivered before hold their keys (the lowest such offset per key)."""
        for lo, hi in self._unkeyed:
            for offset in range(lo, hi + 1):
                k = keys.get(offset)
                if k is None or self._keys.holder(self._cache, k) is not None:
                    continue
                batch = self._cache.containing(offset)
                if batch is None:
                    continue
                info = batch.info(offset)
                if not info.state.is_terminal and info.delivery_count >= 1:
                    self._keys.hold(self._cache, k, offset)
        self._unkeyed = []

    # ------------------------------------------------------------------ acknowledge

    def acknowledge(
        self, member_id: str, batches: Sequence[AckBatch], now_ms: int
    ) -> AckOutcome:
        """Validate and tentatively apply one partition's acknowledgement batches.

        Each batch is (first_offset, last_offset, ack_types) with one type for the whole range or
        one per offset; see :mod:`broker.share.acknowledgement` for which error is returned when.
        On any error nothing changes. RENEW restarts the lock at once and is never written.
        """
        cfg = self._config()
        plan = plan_acknowledgement(
            self._cache, self._start, member_id, batches, now_ms, cfg.renew_enabled
        )
        if isinstance(plan, AckOutcome):
            return plan
        return self._apply_ack(plan, now_ms, cfg)

    def _apply_ack(
        self, plan: list[AckSegment], now_ms: int, cfg: SharePartitionConfig
    ) -> AckOutcome:
        token = self._next_token
        renewed_deadline = now_ms + cfg.record_lock_duration_ms
        changed: list[tuple[int, int]] = []
        renewed: list[tuple[int, int]] = []
        for lo, hi, types in plan:
            if len(types) == 1:
                self._acks[types[0]] += hi - lo + 1
                units = self._cache.units(lo, hi)
            else:
                for t in types:
                    self._acks[t] += 1
                # Per-offset types: work offset by offset (explodes partly covered batches;
                # large ones are split first, so at most len(types) offsets are exploded).
                self._cache.carve(lo, hi)
                for batch in self._cache.overlapping(lo, hi):
                    batch.explode()
                units = self._cache.runs(lo, hi)
            for u_lo, u_hi, info in units:
                ack_type = types[0] if len(types) == 1 else types[u_lo - lo]
                target = ACK_TARGET_STATE[ack_type]
                if target is None:
                    # KIP-1222 RENEW: restart the lock for the full duration; never persisted.
                    info.deadline_ms = renewed_deadline
                    renewed.append((u_lo, u_hi))
                    continue
                at_limit = (
                    target is RecordState.AVAILABLE
                    and info.delivery_count >= cfg.delivery_count_limit
                )
                if at_limit:
                    target = _ARCHIVING if cfg.dead_letter else _ARCHIVED
                elif cfg.dead_letter and ack_type is AckType.REJECT:
                    target = _ARCHIVING  # KIP-1191: archived once its DLQ record is durable
                info.pending = PendingAck(token, target, at_limit)
                changed.append((u_lo, u_hi))
        for r_lo, r_hi in merge_ranges(renewed):
            self._locks.push(renewed_deadline, r_lo, r_hi)
        if renewed:
            self._locks.maybe_compact(self._cache)
        if not changed:
            return AckOutcome(ErrorCode.none)
        self._next_token += 1
        merged = merge_ranges(changed)
        dirty, self._dirty = self._dirty, []
        write = self._build_write(merge_ranges(merged + dirty), token)
        self._pending[token] = (merged, write.start_offset, dirty)
        return AckOutcome(ErrorCode.none, write=write, token=token)

    def complete_write(self, token: int, ok: bool, now_ms: int) -> WriteParams | None:
        """Finish an acknowledgement's state write: commit it (``ok``) or roll it back.

        Commit applies the pending transitions, then the SPSO moves over the terminal prefix
        and the cache is trimmed. Rollback leaves the records ACQUIRED by their member, except
        those whose lock expired meanwhile, which are released as on a timeout. Returns a
        follow-up write to persist (fire and forget, like a timer write), or None.

        Raises:
            KeyError: ``token`` is unknown or already completed (a shell bug).
        """
        ranges, write_start, dirty = self._pending.pop(token)
        if ok:
            self._written_start = max(self._written_start, write_start)
            found_available = self._commit(token, ranges, now_ms)
            self._after_change(found_available)
            return self._committed_write([])
        self._dirty = merge_ranges(self._dirty + dirty)
        self._roll_back(token, ranges, now_ms)
        # A lock that expired while the write was in flight is released now, as the timer
        # would have done (reference section 3: roll back to AVAILABLE/ARCHIVED).
        return self._release_expired(ranges, now_ms)

    def _pending_units(
        self, token: int, ranges: list[tuple[int, int]]
    ) -> list[tuple[int, int, RecordInfo]]:
        """(first, last, info) of every record waiting on write ``token``."""
        out: list[tuple[int, int, RecordInfo]] = []
        for lo, hi in ranges:
            for batch in self._cache.overlapping(lo, hi):
                if not batch.exploded:
                    # A whole batch only ever gets a pending ack that covers all of it.
                    units = [(batch.first_offset, batch.last_offset, batch.whole)]
                else:
                    units = list(batch.runs(lo, hi))
                out.extend(
                    u for u in units if u[2].pending is not None and u[2].pending.token == token
                )
        return out

    def _commit(self, token: int, ranges: list[tuple[int, int]], now_ms: int) -> bool:
        """Apply the transitions of write ``token``; True if any record became AVAILABLE.

        A RELEASE takes effect now: with a group backoff the record waits from ``now_ms``.
        """
        found_available = False
        released: list[tuple[int, int, RecordInfo]] = []
        completed = 0
        keyed = self._ordering_on and len(self._keys) > 0
        for lo, hi, info in self._pending_units(token, ranges):
            pending = info.pending
            assert pending is not None
            info.settle(pending.target)
            if pending.target is RecordState.AVAILABLE:
                found_available = True
                released.append((lo, hi, info))
                continue
            if keyed:  # done (or ARCHIVING): the key is free, say so now (key_order.py)
                self._keys.release(self.key_memo, lo, hi)
            if pending.target is _ARCHIVING:
                self._dlq.add(lo, hi, REASON_DELIVERY_LIMIT if pending.at_limit
                              else REASON_REJECTED)
            else:
                completed += hi - lo + 1
                if pending.target is RecordState.ARCHIVED:
                    self._archived += hi - lo + 1
            if pending.at_limit:
                self._limit_archives += hi - lo + 1
        self._drain.record(completed, now_ms)
        if released:
            cfg = self._config()
            if cfg.delivery_backoff_ms > 0:
                self._hold(released, cfg, now_ms)
        return found_available

    def _hold(
        self, units: list[tuple[int, int, RecordInfo]], cfg: SharePartitionConfig, now_ms: int
    ) -> None:
        """Start the redelivery backoff of records just made AVAILABLE (in offset order)."""
        self._tick(now_ms)
        runs: list[tuple[int, int, int]] = []
        for lo, hi, info in units:
            delay = redelivery_delay_ms(cfg, info.delivery_count)
            if delay > 0:
                info.available_at_ms = now_ms + delay
                runs.append((now_ms + delay, lo, hi))
        self._backoff.push_runs(runs)

    def _tick(self, now_ms: int | None) -> int:
        """Note the time (never backwards) and return the time to use for ``now_ms``."""
        if now_ms is None:
            return self._now_ms
        if now_ms > self._now_ms:
            self._now_ms = now_ms
        return now_ms

    def _roll_back(self, token: int, ranges: list[tuple[int, int]], now_ms: int) -> None:
        """Forget the transitions of write ``token``: the records are ACQUIRED as before."""
        restored: list[tuple[int, int, int]] = []  # (deadline, first, last) of kept locks
        for lo, hi, info in self._pending_units(token, ranges):
            info.pending = None
            deadline = info.deadline_ms
            assert deadline is not None
            if deadline <= now_ms:
                continue  # expired meanwhile: released by the caller
            if restored and restored[-1][0] == deadline and restored[-1][2] + 1 == lo:
                restored[-1] = (deadline, restored[-1][1], hi)
            else:
                restored.append((deadline, lo, hi))
        for deadline, lo, hi in restored:
            # The timer skipped these while the write was in flight; they are locked again.
            self._locks.push(deadline, lo, hi)

    # ------------------------------------------------------------------ release and locks

    def release_member(self, member_id: str, now_ms: int) -> WriteParams | None:
        """Release everything ``member_id`` holds here (share session closed or dropped).

        ACQUIRED records of the member go back to AVAILABLE, or ARCHIVED at the delivery limit
        or below the SPSO; delivery counts are kept. Records with an ack in flight are left to
        that ack. The in-memory change stands; the returned write should be persisted.
        """
        first, last = self._cache.first(), self._cache.last()
        if first is None or last is None:
            return None
        released = self._release_where(
            [(first.first_offset, last.last_offset)],
            lambda info: info.holds_lock() and info.member_id == member_id,
            self._config(),
            now_ms,
            timeout=False,
        )
        if not released:
            return None
        self._after_change(found_available=True)
        return self._committed_write(released)

    def next_deadline(self) -> int | None:
        """Earliest live acquisition-lock deadline or end of a redelivery backoff, for the
        shell's ``loop.call_at`` (then ``on_timer``)."""
        lock = self._next_lock_deadline()
        if not self._backoff:
            return lock
        end = self._backoff.next_end(self._cache)
        if end is None or (lock is not None and lock <= end):
            return lock
        return end

    def next_backoff_end(self) -> int | None:
        """When the first record now in redelivery backoff becomes acquirable, or None."""
        return self._backoff.next_end(self._cache) if self._backoff else None

    def _next_lock_deadline(self) -> int | None:
        while (top := self._locks.peek()) is not None:
            deadline, lo, hi = top
            live = next(
                (
                    u_lo
                    for u_lo, _u_hi, info in self._cache.runs(lo, hi)
                    if info.holds_lock() and info.deadline_ms == deadline
                ),
                None,
            )
            if live is None:
                self._locks.pop()
                continue
            if live > lo:
                # Nothing before ``live`` holds this lock any more (a new lock on those offsets
                # pushes its own entry), so the next check can start there.
                self._locks.narrow_top(live)
            return deadline
        return None

    def on_timer(self, now_ms: int) -> WriteParams | None:
        """Expire every lock due at ``now_ms``: ACQUIRED -> AVAILABLE, or ARCHIVED at the limit;
        end the redelivery backoffs due then (parked fetches are woken: ``take_wakeup``).

        The in-memory transition stands even if the returned write then fails (reference 3).
        """
        if self._backoff:
            self._tick(now_ms)
            if self._backoff.pop_due(now_ms):
                self._key_version += 1
                self._find_next = self._wakeup = True
        due: list[tuple[int, int]] = []
        while (top := self._locks.peek()) is not None and top[0] <= now_ms:
            _deadline, lo, hi = self._locks.pop()
            due.append((lo, hi))
        if not due:
            return None
        return self._release_expired(merge_ranges(due), now_ms)

    def _release_expired(self, ranges: list[tuple[int, int]], now_ms: int) -> WriteParams | None:
        """Release the locks in ``ranges`` whose deadline has passed, as a lock timeout does;
        returns the write to persist, or None if nothing was released."""
        released = self._release_where(
            ranges,
            lambda info: info.holds_lock()
            and info.deadline_ms is not None
            and info.deadline_ms <= now_ms,
            self._config(),
            now_ms,
            timeout=True,
        )
        if not released:
            return None
        self._after_change(found_available=True)
        return self._committed_write(released)

    def _release_where(
        self,
        ranges: list[tuple[int, int]],
        predicate: Callable[[RecordInfo], bool],
        cfg: SharePartitionConfig,
        now_ms: int,
        *,
        timeout: bool,
    ) -> list[tuple[int, int]]:
        """Move matching ACQUIRED records in ``ranges`` to AVAILABLE/ARCHIVED; return ranges.

        With a group backoff the records made AVAILABLE wait from ``now_ms``.
        """
        released: list[tuple[int, int]] = []
        backoff = cfg.delivery_backoff_ms > 0
        limit_archives = self._limit_archives
        held: list[tuple[int, int, RecordInfo]] = []
        for lo, hi in ranges:
            self._cache.carve(lo, hi, self._start)
            for batch in self._cache.overlapping(lo, hi):
                if not batch.exploded:
                    if not predicate(batch.whole):
                        continue
                    straddles = batch.first_offset < self._start <= batch.last_offset
                    inside = lo <= batch.first_offset and batch.last_offset <= hi
                    if inside and not straddles:
                        info = batch.whole
                        self._release_unit(batch.first_offset, batch.last_offset, info, cfg)
                        released.append((batch.first_offset, batch.last_offset))
                        if backoff and info.state is RecordState.AVAILABLE:
                            held.append((batch.first_offset, batch.last_offset, info))
                        if timeout:
                            self._lock_timeouts += batch.size
                        continue
                    batch.explode()
                for u_lo, u_hi, info in batch.runs(lo, hi):
                    if predicate(info):
                        self._release_unit(u_lo, u_hi, info, cfg)
                        released.append((u_lo, u_hi))
                        if backoff and info.state is RecordState.AVAILABLE:
                            held.append((u_lo, u_hi, info))
                        if timeout:
                            self._lock_timeouts += 1
        if held:
            self._hold(held, cfg, now_ms)
        archived = self._limit_archives - limit_archives
        if archived and not cfg.dead_letter:  # with a DLQ they are ARCHIVING: counted when done
            self._archived += archived
            self._drain.record(archived, now_ms)
        return merge_ranges(released)

    def _release_unit(self, lo: int, hi: int, info: RecordInfo, cfg: SharePartitionConfig) -> None:
        if info.delivery_count >= cfg.delivery_count_limit:
            self._limit_archives += hi - lo + 1
            if cfg.dead_letter:
                info.settle(_ARCHIVING)
                self._dlq.add(lo, hi, REASON_DELIVERY_LIMIT)
                return
            info.settle(RecordState.ARCHIVED)
        elif hi < self._start:
            info.settle(RecordState.ARCHIVED)
        else:
            info.settle(RecordState.AVAILABLE)

    # ------------------------------------------------------------------ dead letters (KIP-1191)

    @property
    def has_dead_letters(self) -> bool:
        """Whether ARCHIVING records wait to be handed out (``take_dead_letters``)."""
        return bool(self._dlq)

    def take_dead_letters(self, max_records: int = DEAD_LETTERS_PER_TAKE) -> list[DeadLetterRun]:
        """Hand out up to ``max_records`` ARCHIVING records to dead-letter.

        Each is handed out once; the shell answers with :meth:`complete_dead_letters` (the
        dead-letter records are durable, or were given up on) or :meth:`retry_dead_letters`
        (the append failed: they are handed out again by a later call), for the runs or for
        pieces of them.
        """
        def archiving(lo: int, hi: int) -> Iterable[tuple[int, int, int]]:
            return ((a, b, info.delivery_count) for a, b, info in self._cache.runs(lo, hi)
                    if info.state is _ARCHIVING)

        return self._dlq.take(archiving, self._config().delivery_count_limit, max_records)

    def retry_dead_letters(self, runs: Sequence[DeadLetterRun]) -> None:
        """The dead-letter records of ``runs`` could not be appended: hand them out again."""
        self._dlq.retry(runs)

    def complete_dead_letters(
        self, runs: Sequence[DeadLetterRun], now_ms: int, *, written: bool = True
    ) -> WriteParams | None:
        """ARCHIVING -> ARCHIVED for ``runs``: their dead-letter records are durable
        (``written``), or were given up on (no usable DLQ topic: archived as without one).

        The in-memory change stands; the returned write (to persist, fire and forget like a
        timer write) tells the share coordinator. If it is lost, the records are still
        ARCHIVING there and a restart dead-letters them again (at least once).
        """
        self._dlq.done(runs)
        changed: list[tuple[int, int]] = []
        done = 0
        for run in runs:
            for lo, hi, info in self._cache.units(run.first_offset, run.last_offset):
                if info.state is not _ARCHIVING:
                    continue
                info.settle(_ARCHIVED)
                changed.append((lo, hi))
                done += hi - lo + 1
        if not done:
            return None
        self._archived += done
        if written:
            self._dead_lettered += done
        else:
            self._dlq_skipped += done
        self._drain.record(done, now_ms)
        self._after_change(found_available=False)
        return self._committed_write(merge_ranges(changed))

    # ------------------------------------------------------------------ log start offset

    def on_log_start_offset_moved(self, log_start_offset: int) -> None:
        """The log start moved (retention, DeleteRecords): jump the SPSO to it.

        AVAILABLE records below it are archived in memory only; ACQUIRED ones stay until their
        lock expires or their member is released (then ARCHIVED), and acks for them are skipped.
        The next write carries the new start offset (reference section 3, SPSO movement).
        """
        if log_start_offset <= self._start:
            return
        self._start = log_start_offset
        self._find_next = True
        self._after_change(found_available=False)

    # ------------------------------------------------------------------ SPSO and writes

    def _after_change(self, found_available: bool) -> None:
        """Common tail of every committed change: archive, move SPSO, trim, wake fetches."""
        archive_available_below(self._cache, self._start)
        self._start = advance_start(self._cache, self._start)
        trim_below(self._cache, self._start)
        if len(self.key_memo) > self._memo_cap:
            start = self._start
            self.key_memo = {o: k for o, k in self.key_memo.items() if o >= start}
            self._memo_cap = max(_MIN_MEMO, 2 * len(self.key_memo))
        self._key_version += 1
        if found_available or self._ordering_on:
            # With key ordering a record done frees its key: later records of it may be waiting.
            self._find_next = True
        self._wakeup = True

    def _committed_write(self, changed: list[tuple[int, int]]) -> WriteParams | None:
        """A write for already-applied changes, or None if it would tell the persister nothing
        new (no persistable batch at/after the SPSO and no start offset beyond the last sent)."""
        if not changed and not self._dirty and self._start <= self._written_start:
            return None  # nothing the persister does not know already (skip the scan)
        dirty, self._dirty = self._dirty, []
        write = self._build_write(merge_ranges(changed + dirty), None)
        if not write.state_batches and write.start_offset <= self._written_start:
            return None
        self._written_start = max(self._written_start, write.start_offset)
        return write

    def on_write_failed(self, write: WriteParams) -> None:
        """A write from ``on_timer``/``release_member``/``complete_write`` failed.

        The in-memory state stands (reference section 3); the ranges it described, and its
        start offset, are carried again by the next write this partition produces. Ack writes
        are not reported here: their failure goes to ``complete_write(token, False, ...)``.
        """
        ranges = [(b.first_offset, b.last_offset) for b in write.state_batches]
        self._dirty = merge_ranges(self._dirty + ranges)
        self._written_start = min(self._written_start, write.start_offset - 1)

    def _build_write(self, changed: list[tuple[int, int]], token: int | None) -> WriteParams:
        """A WriteShareGroupState for ``changed`` (as it will be if ``token`` commits)."""
        start, complete = scan_prefix(self._cache, self._start, token)
        return WriteParams(
            key=self.key,
            state_epoch=self.state_epoch,
            leader_epoch=self.leader_epoch,
            start_offset=start,
            delivery_complete_count=complete,
            state_batches=tuple(state_batches(self._cache, changed, start, token)),
        )

    # ------------------------------------------------------------------ observation

    def take_wakeup(self) -> bool:
        """True once after anything that could let a parked fetch make progress."""
        woke, self._wakeup = self._wakeup, False
        return woke

    def is_settled(self) -> bool:
        """Nothing here that is not durable, and nobody holds records: no acquisition lock,
        no acknowledgement write in flight, no failed write to resend, and the persister knows
        the start offset. Such a partition can be unloaded and rebuilt from the persister."""
        return (not self._pending and not self._dirty and self._start <= self._written_start
                and not self._dlq.busy and self.next_deadline() is None)

    @property
    def pending_tokens(self) -> frozenset[int]:
        return frozenset(self._pending)

    @property
    def delivery_complete_count(self) -> int:
        """Terminal records at or after the SPSO (KIP-1226 lag = LEO - SPSO - this)."""
        return scan_prefix(self._cache, self._start, None)[1]

    def oldest_unacked_acquired_at_ms(self) -> int | None:
        """Acquisition time of the oldest record still ACQUIRED (acks in flight included)."""
        return oldest_acquired_at(self._cache)

    def oldest_unacked_offset(self) -> int:
        """The first offset at/after the SPSO not yet acknowledged or archived (acquired,
        available again, in backoff, or never delivered), or the next new offset when every
        cached one is done. Its log batch's timestamp is the age of the oldest unacknowledged
        record (broker/share/drain.py); cheap, as the SPSO already sits on such a record."""
        return advance_start(self._cache, self._start)

    def drain_rate(self, now_ms: int) -> float:
        """Records completed (acknowledged or archived) per second, weighted over the last
        minute (broker/share/drain.py)."""
        return self._drain.rate(now_ms)

    def last_progress_ms(self) -> int | None:
        """When a record last completed here (acknowledged or archived), None if none has since
        the share-partition was loaded (broker/share/drain.py ``since_progress_s``)."""
        return self._drain.last_event_ms

    def metrics(self) -> ShareMetrics:
        in_flight = acquired = archiving = 0
        last = self._cache.last_offset
        for lo, hi, info in self._cache.runs(self._start, -1 if last is None else last):
            in_flight += hi - lo + 1
            if info.state is RecordState.ACQUIRED:
                acquired += hi - lo + 1
            elif info.state is _ARCHIVING:
                archiving += hi - lo + 1
        return ShareMetrics(
            start_offset=self._start,
            end_offset=self.end_offset,
            in_flight_records=in_flight,
            in_flight_batches=len(self._cache),
            acquired_records=acquired,
            delivery_complete_count=self.delivery_complete_count,
            oldest_unacked_acquired_at_ms=self.oldest_unacked_acquired_at_ms(),
            lock_timeouts=self._lock_timeouts,
            delivery_limit_archives=self._limit_archives,
            acks=dict(self._acks),
            archived_records=self._archived,
            dead_lettered_records=self._dead_lettered,
            dead_letter_skipped_records=self._dlq_skipped,
            archiving_records=archiving,
        )

    def offset_view(self, offset: int) -> OffsetView | None:
        batch = self._cache.containing(offset)
        if batch is None:
            return None
        info = batch.info(offset)
        return OffsetView(
            info.state,
            info.delivery_count,
            info.member_id,
            info.pending.target if info.pending is not None else None,
            info.deadline_ms,
            info.available_at_ms
            if info.state is RecordState.AVAILABLE and info.available_at_ms > 0
            else None,
        )

    def snapshot(self) -> dict[int, OffsetView]:
        """Every cached offset (including straddling ones below the SPSO) -> its view."""
        out: dict[int, OffsetView] = {}
        for batch in self._cache:
            for offset in range(batch.first_offset, batch.last_offset + 1):
                view = self.offset_view(offset)
                assert view is not None
                out[offset] = view
        return out

    def cached_batches(self) -> list[tuple[int, int, bool]]:
        """(first, last, exploded) of every cached batch, in order."""
        return [(b.first_offset, b.last_offset, b.exploded) for b in self._cache]


def _clip(
    ranges: list[tuple[int, int]], lo: int, end: int | None
) -> list[tuple[int, int]]:
    """``ranges`` clipped to ``[lo, end)`` (``end`` None: no upper bound)."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        a = max(a, lo)
        if end is not None:
            b = min(b, end - 1)
        if a <= b:
            out.append((a, b))
    return out
