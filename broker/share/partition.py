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

Invariants (property-tested in tests/unit/broker/share/test_partition_stateful.py):
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
  tests/unit/broker/share/test_dead_letter.py): a REJECTed or delivery-limit record goes ACQUIRED ->
  ARCHIVING (persisted) and becomes ARCHIVED only through ``complete_dead_letters``, which the
  shell calls once the dead-letter record is durable (or was given up on: DLQ topic missing or
  not allowed); ARCHIVING records loaded from the share state are handed out again. Every
  ARCHIVING record is handed out by ``take_dead_letters`` exactly once per load (again only
  after ``retry_dead_letters``), and the SPSO stops at it until it is ARCHIVED.
- transaction markers are never acquired; with ``share.isolation.level=read_committed`` no
  acquisition includes an offset at or past the last stable offset or a record of an aborted
  transaction (:mod:`broker.share.txn_filter`; property-tested in
  tests/unit/broker/share/test_read_committed.py);
- with ``share.ordering=key`` (opt-in, :mod:`broker.share.key_order`; property-tested in
  tests/unit/broker/share/test_key_ordering_stateful.py): at most one record per key is in flight, and
  a record is acquired only when every lower record of its key is done, so a key's records are
  first delivered in offset order and a released record comes back before later ones of its key.

Config is read through a callable on every operation so live group-config changes apply at once
(reference section 2: lock duration, delivery count limit and record-lock limit are per call).

Where the parts live: this module holds the window's fields, loading, offsets, the common tail of
every change (SPSO, trim, wakeups) and observation. The operations are split by what happened:
:mod:`broker.share.partition_acquire` (acquisition, key ordering),
:mod:`broker.share.partition_ack` (acknowledgements and their writes' outcomes) and
:mod:`broker.share.partition_release` (lock timers, member release, dead letters). The objects
the window is made of own their operations: :class:`InFlightCache` (the records and the scans over
them), :class:`LockIndex` (lock deadlines), :class:`KeyIndex` (key holders),
:class:`BackoffIndex` (redelivery backoffs), :class:`DeadLetterBook` and :class:`StateWrites`
(what each share-state write says, and the writes not yet durable).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.share.acknowledgement import AckOutcome, ack_error_for_write_failure
from broker.share.acquisition import AcquiredRecords, AcquireMode, records_holding_locks
from broker.share.backoff import BackoffIndex, first_fetchable_at, redelivery_delay_ms
from broker.share.dead_letter import DeadLetterBook
from broker.share.drain import DecayingRate
from broker.share.inflight import (
    InFlightBatch,
    InFlightCache,
    LockIndex,
    RecordInfo,
    merge_ranges,
)
from broker.share.key_order import KeyIndex
from broker.share.log_read import ReadReuse
from broker.share.partition_ack import AckOps
from broker.share.partition_acquire import AcquireOps
from broker.share.partition_release import DEAD_LETTERS_PER_TAKE, ReleaseOps
from broker.share.record_state import AckType, RecordState
from broker.share.state_writes import StateWrites
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

__all__ = [
    "DEAD_LETTERS_PER_TAKE",
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


class SharePartition(AcquireOps, AckOps, ReleaseOps):
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
        self._locks = LockIndex(self._cache)
        # Ends of redelivery backoffs (broker/share/backoff.py); empty unless the group has
        # share.delivery.backoff.ms > 0, and then the only thing the fast paths look at.
        self._backoff = BackoffIndex()
        # The latest now_ms seen, for the calls that do not pass one (next_fetch_offset).
        self._now_ms = 0
        # Kafka's findNextFetchOffset: something below SPEO may be fetchable (released, expired,
        # record_limit remainder, gap window). Without it the next fetch is simply SPEO + 1.
        self._find_next = False
        self._wakeup = False
        # What each share-state write says, the acknowledgement writes in flight, the ranges of
        # failed writes to send again, and how far the persister knows the SPSO.
        self._writes = StateWrites(self._cache, key, state_epoch, leader_epoch, start_offset)
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
        # (base offset, record count) of a log batch -> its distinct keys, so a keyed walk can
        # pass over a batch whose keys are all held at once (protocol.record_keys.BatchKeys).
        self.batch_key_sets: dict[tuple[int, int], frozenset[int | None]] = {}
        # The shell's last keyed log read, reused while it would read the same bytes.
        self.read_reuse = ReadReuse()
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
        part._start = part._cache.advance_start(part._start)
        part._cache.trim_below(part._start)
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
        found = self._cache.first_fetchable(self._start)
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
        cache = self._cache
        cache.archive_available_below(self._start)
        self._start = cache.advance_start(self._start)
        cache.trim_below(self._start)
        if len(self.key_memo) > self._memo_cap:
            start = self._start
            self.key_memo = {o: k for o, k in self.key_memo.items() if o >= start}
            self._memo_cap = max(_MIN_MEMO, 2 * len(self.key_memo))
        self._key_version += 1
        if found_available or self._ordering_on:
            # With key ordering a record done frees its key: later records of it may be waiting.
            self._find_next = True
        self._wakeup = True

    def on_write_failed(self, write: WriteParams) -> None:
        """A write from ``on_timer``/``release_member``/``complete_write`` failed.

        The in-memory state stands (reference section 3); the ranges it described, and its
        start offset, are carried again by the next write this partition produces. Ack writes
        are not reported here: their failure goes to ``complete_write(token, False, ...)``.
        """
        self._writes.failed(write)

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

    # ------------------------------------------------------------------ observation

    def take_wakeup(self) -> bool:
        """True once after anything that could let a parked fetch make progress."""
        woke, self._wakeup = self._wakeup, False
        return woke

    def is_settled(self) -> bool:
        """Nothing here that is not durable, and nobody holds records: no acquisition lock,
        no acknowledgement write in flight, no failed write to resend, and the persister knows
        the start offset. Such a partition can be unloaded and rebuilt from the persister."""
        return (self._writes.settled(self._start)
                and not self._dlq.busy and self.next_deadline() is None)

    @property
    def pending_tokens(self) -> frozenset[int]:
        return self._writes.pending_tokens

    @property
    def delivery_complete_count(self) -> int:
        """Terminal records at or after the SPSO (KIP-1226 lag = LEO - SPSO - this)."""
        return self._cache.scan_prefix(self._start, None)[1]

    def oldest_unacked_acquired_at_ms(self) -> int | None:
        """Acquisition time of the oldest record still ACQUIRED (acks in flight included)."""
        return self._cache.oldest_acquired_at()

    def oldest_unacked_offset(self) -> int:
        """The first offset at/after the SPSO not yet acknowledged or archived (acquired,
        available again, in backoff, or never delivered), or the next new offset when every
        cached one is done. Its log batch's timestamp is the age of the oldest unacknowledged
        record (broker/share/drain.py); cheap, as the SPSO already sits on such a record."""
        return self._cache.advance_start(self._start)

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
