"""Releasing records on a share-partition: lock timers, closed sessions and dead letters.

Records leave ACQUIRED without an acknowledgement in three ways, each applied in memory at once
and returned as a fire-and-forget write (the in-memory change stands if the write fails,
reference section 3):

- an acquisition lock expires (:meth:`ReleaseOps.on_timer`, armed through ``next_deadline``);
- the member's share session closes (:meth:`ReleaseOps.release_member`);
- an acknowledgement write fails after the lock ran out (``_release_expired``).

A released record goes back to AVAILABLE (with a group redelivery backoff it waits first), or is
archived at the delivery-count limit (ARCHIVING with a dead-letter topic) or below the SPSO.
KIP-1191 ARCHIVING records are handed to the shell (``take_dead_letters``) and become ARCHIVED
once their dead-letter record is durable (``complete_dead_letters``).

Part of :class:`broker.share.partition.SharePartition` (a mixin over its fields, listed below).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from broker.share.backoff import BackoffIndex
from broker.share.dead_letter import REASON_DELIVERY_LIMIT, DeadLetterBook, DeadLetterRun
from broker.share.drain import DecayingRate
from broker.share.inflight import InFlightCache, LockIndex, RecordInfo, merge_ranges
from broker.share.record_state import RecordState
from broker.share.state_writes import StateWrites
from broker.share.views import SharePartitionConfig
from persister.api import WriteParams

__all__ = ["DEAD_LETTERS_PER_TAKE", "ReleaseOps"]

_ARCHIVING = RecordState.ARCHIVING
_ARCHIVED = RecordState.ARCHIVED
# Dead-letter records handed to the shell per take_dead_letters call (one DLQ append).
DEAD_LETTERS_PER_TAKE = 500


class ReleaseOps:
    """Lock expiry, member release and dead letters for :class:`SharePartition`."""

    # Fields of SharePartition this part reads and writes (set in SharePartition.__init__).
    _config: Callable[[], SharePartitionConfig]
    _start: int
    _cache: InFlightCache
    _locks: LockIndex
    _backoff: BackoffIndex
    _writes: StateWrites
    _find_next: bool
    _wakeup: bool
    _key_version: int
    _dlq: DeadLetterBook
    _lock_timeouts: int
    _limit_archives: int
    _archived: int
    _dead_lettered: int
    _dlq_skipped: int
    _drain: DecayingRate

    if TYPE_CHECKING:
        def _after_change(self, found_available: bool) -> None: ...
        def _hold(self, units: list[tuple[int, int, RecordInfo]], cfg: SharePartitionConfig,
                  now_ms: int) -> None: ...
        def _tick(self, now_ms: int | None) -> int: ...

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
        return self._writes.committed(self._start, released)

    def next_deadline(self) -> int | None:
        """Earliest live acquisition-lock deadline or end of a redelivery backoff, for the
        shell's ``loop.call_at`` (then ``on_timer``)."""
        lock = self._locks.next_deadline()
        if not self._backoff:
            return lock
        end = self._backoff.next_end(self._cache)
        if end is None or (lock is not None and lock <= end):
            return lock
        return end

    def next_backoff_end(self) -> int | None:
        """When the first record now in redelivery backoff becomes acquirable, or None."""
        return self._backoff.next_end(self._cache) if self._backoff else None

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
        due = self._locks.pop_due(now_ms)
        if not due:
            return None
        return self._release_expired(due, now_ms)

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
        return self._writes.committed(self._start, released)

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
        return self._writes.committed(self._start, merge_ranges(changed))
