"""Acknowledgement on a share-partition: the ``acknowledge`` side of :class:`SharePartition`.

An acknowledgement is validated as a whole (:func:`broker.share.acknowledgement.plan_acknowledgement`)
and then applied *tentatively*: each record gets a :class:`PendingAck` carrying the write token
and its target state, while its committed state stays ACQUIRED. The returned write is persisted by
the shell, which then calls :meth:`AckOps.complete_write`:

- commit applies the targets (a RELEASE may start a redelivery backoff; ACCEPT/REJECT free the
  record's key under ``share.ordering=key``; with a dead-letter topic REJECT and the delivery
  limit go to ARCHIVING), then the SPSO moves and the cache is trimmed;
- rollback drops the pending marks, re-arms the locks still running and releases those that
  expired meanwhile, as the timer would have.

KIP-1222 RENEW restarts the lock at once and is never written. Part of
:class:`broker.share.partition.SharePartition` (a mixin over its fields, listed below).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker.share.acknowledgement import AckBatch, AckOutcome, AckSegment, plan_acknowledgement
from broker.share.dead_letter import REASON_DELIVERY_LIMIT, REASON_REJECTED, DeadLetterBook
from broker.share.drain import DecayingRate
from broker.share.inflight import InFlightCache, LockIndex, PendingAck, RecordInfo, merge_ranges
from broker.share.key_order import KeyIndex
from broker.share.record_state import ACK_TARGET_STATE, AckType, RecordState
from broker.share.state_writes import StateWrites
from broker.share.views import SharePartitionConfig
from persister.api import WriteParams

__all__ = ["AckOps"]

_ARCHIVING = RecordState.ARCHIVING
_ARCHIVED = RecordState.ARCHIVED


class AckOps:
    """Acknowledgements and their state writes' outcomes for :class:`SharePartition`."""

    # Fields of SharePartition this part reads and writes (set in SharePartition.__init__).
    _config: Callable[[], SharePartitionConfig]
    _start: int
    _cache: InFlightCache
    _locks: LockIndex
    _writes: StateWrites
    _keys: KeyIndex
    key_memo: dict[int, int | None]
    _ordering_on: bool
    _dlq: DeadLetterBook
    _acks: dict[AckType, int]
    _archived: int
    _limit_archives: int
    _drain: DecayingRate

    if TYPE_CHECKING:
        def _after_change(self, found_available: bool) -> None: ...
        def _hold(self, units: list[tuple[int, int, RecordInfo]], cfg: SharePartitionConfig,
                  now_ms: int) -> None: ...
        def _release_expired(self, ranges: list[tuple[int, int]],
                             now_ms: int) -> WriteParams | None: ...

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
        token = self._writes.next_token
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
            self._locks.maybe_compact()
        if not changed:
            return AckOutcome(ErrorCode.none)
        write = self._writes.begin(self._start, merge_ranges(changed))
        return AckOutcome(ErrorCode.none, write=write, token=token)

    def complete_write(self, token: int, ok: bool, now_ms: int, *,
                       defer_start: bool = False) -> WriteParams | None:
        """Finish an acknowledgement's state write: commit it (``ok``) or roll it back.

        Commit applies the pending transitions, then the SPSO moves over the terminal prefix
        and the cache is trimmed. Rollback leaves the records ACQUIRED by their member, except
        those whose lock expired meanwhile, which are released as on a timeout. Returns a
        follow-up write to persist (fire and forget, like a timer write), or None.

        A commit's follow-up only tells the persister a start offset beyond the one the write
        predicted (acknowledgements of several members committing out of order) unless earlier
        failed writes are to be sent again. With ``defer_start`` that start-only follow-up is
        not made: the next write carries the start offset anyway, and the shell asks for it
        with :meth:`start_write` a little later if none came. Nothing is lost by the wait: every
        record below the new SPSO is durably terminal already, so a load moves past them.

        Raises:
            KeyError: ``token`` is unknown or already completed (a shell bug).
        """
        ranges = self._writes.finish(token, ok)
        if ok:
            found_available = self._commit(token, ranges, now_ms)
            self._after_change(found_available)
            if defer_start and not self._writes.has_dirty:
                return None
            return self._writes.committed(self._start, [])
        self._roll_back(token, ranges, now_ms)
        # A lock that expired while the write was in flight is released now, as the timer
        # would have done (reference section 3: roll back to AVAILABLE/ARCHIVED).
        return self._release_expired(ranges, now_ms)

    @property
    def start_write_due(self) -> bool:
        """The SPSO is beyond every start offset sent to the persister (see ``start_write``)."""
        return self._start > self._writes.written_start

    def start_write(self) -> WriteParams | None:
        """The write a deferred commit follow-up (``complete_write(defer_start=True)``) left
        to do: the SPSO (and any failed ranges) if the persister does not know them yet."""
        return self._writes.committed(self._start, [])

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
