"""Idempotent-producer state: per (partition, producer id), the epoch and recent batches.

Kafka's rules (KIP-98), checked before a batch is appended:

- a batch with producer id -1 is not idempotent and is always accepted;
- an epoch lower than the known one is fenced (INVALID_PRODUCER_EPOCH);
- a new epoch must start at sequence 0 (else OUT_OF_ORDER_SEQUENCE_NUMBER);
- a batch identical (first and last sequence) to one of the last five appended is a duplicate: it
  is not appended again and the original offsets are returned with no error, as Kafka does;
- otherwise the first sequence must be the last sequence + 1 (wrapping at 2^31-1);
- a producer id this partition holds no state for (never seen, or expired after
  ``producer.id.expiration.ms``, or its batches removed by retention) is accepted at any sequence
  (KIP-360, Kafka's ``ProducerAppendInfo.checkSequence``): UNKNOWN_PRODUCER_ID is never answered,
  so a producer idle for longer than the expiration carries on where it was.

Transactions (KIP-98): a transactional batch of a producer with no ongoing transaction in this
partition begins one there (its first offset is remembered); a COMMIT or ABORT marker of that
producer ends it (``observe_marker``). While it is ongoing, a non-transactional batch of the
producer is INVALID_TXN_STATE, as Kafka answers. The last stable offset of the partition is the
first offset of its oldest ongoing transaction (``first_unstable_offset``), or the log end offset
when none is ongoing; a producer with an ongoing transaction is never expired. A marker with an
epoch below the producer's is INVALID_PRODUCER_EPOCH and one with an older coordinator epoch is
TRANSACTION_COORDINATOR_FENCED (``check_marker``); a newer marker epoch becomes the producer's
(the coordinator bumps it when it aborts a timed-out transaction).

This is the in-memory state of one partition (pure: ``now_ms`` comes in). It survives restarts
through snapshot files and a replay of the log after the newest one
(``broker/log/producer_state_manager.py``, ``storage/producer_snapshot.py``). A producer id with no
append for ``producer.id.expiration.ms`` is forgotten (``expire``), which bounds memory.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from storage.producer_snapshot import ProducerSnapshotEntry

MAX_CACHED_BATCHES = 5
INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class _Entry:
    epoch: int
    last_append_ms: int = -1
    # (first seq, last seq, base offset, last offset), newest last
    batches: deque[tuple[int, int, int, int]] = field(
        default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    txn_first_offset: int = -1  # first offset of the ongoing transaction here, -1: none
    coordinator_epoch: int = -1  # of the last marker written for this producer


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker: its data spans ``first_offset`` up to the marker at
    ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    error: ErrorCode
    duplicate_of: tuple[int, int] | None = None  # (base offset, last offset) of the original


def _next_seq(seq: int, count: int) -> int:
    n = seq + count
    return n - INT32_MAX - 1 if n > INT32_MAX else n


class ProducerStates:
    """Producer state of one partition."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        # producer id -> first offset of its ongoing transaction (mirrors _Entry.txn_first_offset)
        self._ongoing: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, producer_id: int, epoch: int, first_seq: int, record_count: int,
              now_ms: int = 0, transactional: bool = False) -> SequenceCheck:
        """Whether a batch may be appended, or is a duplicate of a recent one."""
        del now_ms  # no time-based check (transaction timeouts are the coordinator's)
        if producer_id < 0 or first_seq < 0:
            return SequenceCheck(ErrorCode.none)
        last_seq = _next_seq(first_seq, record_count - 1)
        e = self._entries.get(producer_id)
        if e is None:
            return SequenceCheck(ErrorCode.none)  # KIP-360: no state, any sequence (module doc)
        if epoch < e.epoch:
            return SequenceCheck(ErrorCode.invalid_producer_epoch)
        if epoch > e.epoch:
            if first_seq != 0:
                return SequenceCheck(ErrorCode.out_of_order_sequence_number)
        else:
            for f, l, base, last in e.batches:
                if f == first_seq and l == last_seq:
                    return SequenceCheck(ErrorCode.none, duplicate_of=(base, last))
            if e.batches and first_seq != _next_seq(e.batches[-1][1], 1):
                return SequenceCheck(ErrorCode.out_of_order_sequence_number)
        if not transactional and e.txn_first_offset >= 0:
            # Kafka's ProducerAppendInfo: a plain write while the producer's transaction is open.
            return SequenceCheck(ErrorCode.invalid_txn_state)
        return SequenceCheck(ErrorCode.none)

    def observe(self, producer_id: int, epoch: int, first_seq: int, record_count: int,
                base_offset: int, last_offset: int, now_ms: int = 0,
                transactional: bool = False) -> None:
        """Record an appended batch (also used to rebuild state from the log)."""
        if producer_id < 0 or first_seq < 0:
            return
        e = self._entries.get(producer_id)
        if e is None:
            e = self._entries[producer_id] = _Entry(epoch)
        elif epoch > e.epoch:
            # A new epoch forgets the sequences; an ongoing transaction stays until its marker.
            e = self._entries[producer_id] = _Entry(epoch, txn_first_offset=e.txn_first_offset,
                                                    coordinator_epoch=e.coordinator_epoch)
        elif epoch < e.epoch:
            return  # a fenced epoch's batch seen while replaying: it was refused when produced
        e.last_append_ms = max(e.last_append_ms, now_ms)
        e.batches.append((first_seq, _next_seq(first_seq, record_count - 1), base_offset,
                          last_offset))
        if transactional and e.txn_first_offset < 0:
            e.txn_first_offset = base_offset
            self._ongoing[producer_id] = base_offset

    # -- transactions --------------------------------------------------------------------------

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> ErrorCode:
        """Whether an end-transaction marker of this producer may be written."""
        e = self._entries.get(producer_id)
        if e is None:
            return ErrorCode.none
        if epoch < e.epoch:
            return ErrorCode.invalid_producer_epoch
        if coordinator_epoch < e.coordinator_epoch:
            return ErrorCode.transaction_coordinator_fenced
        return ErrorCode.none

    def observe_marker(self, producer_id: int, epoch: int, coordinator_epoch: int, offset: int,
                       commit: bool, now_ms: int = 0) -> CompletedTxn | None:
        """Record an appended COMMIT/ABORT marker at ``offset`` (also when replaying the log).
        Returns the transaction it ended, or None if the producer had none ongoing here."""
        e = self._entries.get(producer_id)
        if e is None:
            e = self._entries[producer_id] = _Entry(epoch)
        elif epoch > e.epoch:
            e.epoch = epoch
            e.batches.clear()
        e.coordinator_epoch = max(e.coordinator_epoch, coordinator_epoch)
        e.last_append_ms = max(e.last_append_ms, now_ms)
        first = e.txn_first_offset
        if first < 0:
            return None
        e.txn_first_offset = -1
        del self._ongoing[producer_id]
        return CompletedTxn(producer_id, first, offset, not commit)

    def ongoing_first_offset(self, producer_id: int) -> int:
        """First offset of the producer's ongoing transaction here, or -1."""
        return self._ongoing.get(producer_id, -1)

    def begins_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether a transactional batch of the producer at ``epoch`` would begin a transaction
        here (so the coordinator is asked first): none is ongoing, or the ongoing one is of an
        earlier epoch (a transaction-version-2 producer's next transaction, produced before the
        previous one's marker is written here)."""
        if producer_id not in self._ongoing:
            return True
        return epoch > self._entries[producer_id].epoch

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest ongoing transaction (the last stable offset), or None."""
        ongoing = self._ongoing
        return min(ongoing.values()) if ongoing else None

    def ongoing(self) -> dict[int, int]:
        """Producer id -> first offset, for every ongoing transaction (a copy)."""
        return dict(self._ongoing)

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producer ids idle for longer than ``expiration_ms``; return how many."""
        stale = [pid for pid, e in self._entries.items()
                 if now_ms - e.last_append_ms >= expiration_ms and e.txn_first_offset < 0]
        for pid in stale:
            del self._entries[pid]
        return len(stale)

    # -- snapshots -----------------------------------------------------------------------------

    def to_snapshot(self) -> list[ProducerSnapshotEntry]:
        return [ProducerSnapshotEntry(pid, e.epoch, e.last_append_ms, tuple(e.batches),
                                      e.txn_first_offset, e.coordinator_epoch)
                for pid, e in self._entries.items()]

    @classmethod
    def from_snapshot(cls, entries: list[ProducerSnapshotEntry]) -> ProducerStates:
        states = cls()
        for s in entries:
            e = _Entry(s.producer_epoch, s.last_append_ms, txn_first_offset=s.txn_first_offset,
                       coordinator_epoch=s.coordinator_epoch)
            e.batches.extend(s.batches)
            states._entries[s.producer_id] = e
            if s.txn_first_offset >= 0:
                states._ongoing[s.producer_id] = s.txn_first_offset
        return states

    # -- description ---------------------------------------------------------------------------

    def describe(self) -> list[ProducerView]:
        """Every producer id known here, as DescribeProducers tells it (sorted by id)."""
        return [ProducerView(pid, e.epoch, e.batches[-1][1] if e.batches else -1,
                             e.last_append_ms, e.coordinator_epoch, e.txn_first_offset)
                for pid, e in sorted(self._entries.items())]


@dataclass(frozen=True, slots=True)
class ProducerView:
    """One producer id's state in a partition: its epoch, last sequence (-1: none cached), last
    append time (-1: none), the coordinator epoch of its last marker (-1: none) and the first
    offset of its ongoing transaction (-1: none)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_append_ms: int
    coordinator_epoch: int
    txn_start_offset: int
