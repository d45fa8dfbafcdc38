"""Idempotent-producer state: per (partition, producer id), the epoch and recent batches.

Kafka's rules (KIP-98), checked before a batch is appended:

- a batch with producer id -1 is not idempotent and is always accepted;
- an epoch lower than the known one is fenced (INVALID_PRODUCER_EPOCH);
- a new epoch must start at sequence 0 (else OUT_OF_ORDER_SEQUENCE_NUMBER);
- a batch identical (first and last sequence) to one of the last five appended is a duplicate: it
  is not appended again and the original offsets are returned with no error, as Kafka does;
- otherwise the first sequence must be the last sequence + 1 (wrapping at 2^31-1);
- a producer id this partition has never seen may start anywhere only if the broker lost its state
  (restart): then UNKNOWN_PRODUCER_ID, which clients handle by bumping their epoch.

This is the in-memory state of one partition (pure: ``now_ms`` comes in). It survives restarts
through snapshot files and a replay of the log after the newest one
(``broker/producer_state_manager.py``, ``persister/producer_snapshot.py``). A producer id with no
append for ``producer.id.expiration.ms`` is forgotten (``expire``), which bounds memory.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from persister.producer_snapshot import ProducerSnapshotEntry

MAX_CACHED_BATCHES = 5
INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class _Entry:
    epoch: int
    last_append_ms: int = -1
    # (first seq, last seq, base offset, last offset), newest last
    batches: deque[tuple[int, int, int, int]] = field(
        default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))


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

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, producer_id: int, epoch: int, first_seq: int, record_count: int,
              now_ms: int = 0) -> SequenceCheck:
        """Whether a batch may be appended, or is a duplicate of a recent one."""
        del now_ms  # reserved for the transaction timeout checks of issue 15
        if producer_id < 0 or first_seq < 0:
            return SequenceCheck(ErrorCode.none)
        last_seq = _next_seq(first_seq, record_count - 1)
        e = self._entries.get(producer_id)
        if e is None:
            if first_seq == 0:
                return SequenceCheck(ErrorCode.none)
            return SequenceCheck(ErrorCode.unknown_producer_id)
        if epoch < e.epoch:
            return SequenceCheck(ErrorCode.invalid_producer_epoch)
        if epoch > e.epoch:
            return SequenceCheck(ErrorCode.none if first_seq == 0
                                 else ErrorCode.out_of_order_sequence_number)
        for f, l, base, last in e.batches:
            if f == first_seq and l == last_seq:
                return SequenceCheck(ErrorCode.none, duplicate_of=(base, last))
        if not e.batches:
            return SequenceCheck(ErrorCode.none)
        expected = _next_seq(e.batches[-1][1], 1)
        if first_seq != expected:
            return SequenceCheck(ErrorCode.out_of_order_sequence_number)
        return SequenceCheck(ErrorCode.none)

    def observe(self, producer_id: int, epoch: int, first_seq: int, record_count: int,
                base_offset: int, last_offset: int, now_ms: int = 0) -> None:
        """Record an appended batch (also used to rebuild state from the log)."""
        if producer_id < 0 or first_seq < 0:
            return
        e = self._entries.get(producer_id)
        if e is None or epoch > e.epoch:
            e = _Entry(epoch)
            self._entries[producer_id] = e
        elif epoch < e.epoch:
            return  # a fenced epoch's batch seen while replaying: it was refused when produced
        e.last_append_ms = max(e.last_append_ms, now_ms)
        e.batches.append((first_seq, _next_seq(first_seq, record_count - 1), base_offset,
                          last_offset))

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producer ids idle for longer than ``expiration_ms``; return how many."""
        stale = [pid for pid, e in self._entries.items()
                 if now_ms - e.last_append_ms >= expiration_ms]
        for pid in stale:
            del self._entries[pid]
        return len(stale)

    # -- snapshots -----------------------------------------------------------------------------

    def to_snapshot(self) -> list[ProducerSnapshotEntry]:
        return [ProducerSnapshotEntry(pid, e.epoch, e.last_append_ms, tuple(e.batches))
                for pid, e in self._entries.items()]

    @classmethod
    def from_snapshot(cls, entries: list[ProducerSnapshotEntry]) -> ProducerStates:
        states = cls()
        for s in entries:
            e = _Entry(s.producer_epoch, s.last_append_ms)
            e.batches.extend(s.batches)
            states._entries[s.producer_id] = e
        return states
