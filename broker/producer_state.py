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

State lives in memory and is rebuilt from the log tail on startup (``observe``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

MAX_CACHED_BATCHES = 5
INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class _Entry:
    epoch: int
    # (first seq, last seq, base offset, last offset), newest last
    batches: deque[tuple[int, int, int, int]] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))


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

    def check(self, producer_id: int, epoch: int, first_seq: int, record_count: int) -> SequenceCheck:
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
                base_offset: int, last_offset: int) -> None:
        """Record an appended batch (also used to rebuild state from the log)."""
        if producer_id < 0 or first_seq < 0:
            return
        e = self._entries.get(producer_id)
        if e is None or epoch > e.epoch:
            e = _Entry(epoch)
            self._entries[producer_id] = e
        e.batches.append((first_seq, _next_seq(first_seq, record_count - 1), base_offset, last_offset))
