"""Redelivery backoff: a record made available again waits before it can be acquired again.

A Shoal extension (SHARE_GROUPS.md section 3; no Kafka release has it), opt-in per share group:

- ``share.delivery.backoff.ms`` (default 0 = Kafka's behaviour: a released record is acquirable
  at once), ``share.delivery.backoff.max.ms`` (default 60000) and
  ``share.delivery.backoff.multiplier`` (default 2.0).
- A record that becomes AVAILABLE again after its n-th delivery (RELEASE acknowledgement,
  acquisition-lock expiry, its member's share session ending, a failed ack write after the lock
  expired) is acquirable only from ``release time + delay(n)`` with
  ``delay(n) = min(max, backoff * multiplier^(n-1))``. A record at the delivery count limit is
  archived as before, never backed off.
- The group config in force when the record is released decides its delay; a later change
  applies to records released afterwards.

Rules the share-partition keeps (``broker/share/partition.py``):

1. Nothing else waits for a record in backoff. Acquisition skips it and hands out the AVAILABLE
   records and new records after it; the next fetch offset skips it. It is still AVAILABLE (not
   terminal), so the share-partition start offset (SPSO) stops at it and it counts toward
   ``share.partition.max.record.locks`` as any in-flight record does.
2. The earliest end of a backoff is a deadline of the share-partition
   (``SharePartition.next_deadline``), like a lock expiry: the shell arms its timer for it, and
   ``on_timer`` then wakes parked ShareFetches, so a long poll returns as soon as the first
   backed-off record can be delivered, neither spinning nor sleeping its whole MaxWaitMs.
3. With backoff 0 and nothing in backoff the acquisition path is the one Kafka's rules need, with
   no extra work per record: the backoff-aware scans (:func:`first_fetchable_at`,
   ``acquisition.candidates(..., now_ms)``) only run while :class:`BackoffIndex` is not empty.

Restart rule. The share-state records on ``__share_group_state`` stay in Kafka's
ShareSnapshot/ShareUpdate format, which has no field for a backoff deadline. So a share-partition
loaded while its group has ``share.delivery.backoff.ms`` > 0 holds back every persisted AVAILABLE
record with delivery count n >= 1 for its full ``delay(n)`` counted from the load. A record
released just before a crash therefore never comes back early; one whose backoff had already
ended waits once more (a conservative, bounded delay of at most ``share.delivery.backoff.max.ms``).
Records that were ACQUIRED at the crash come back as their persisted state says, as in Kafka.
"""

from __future__ import annotations

import heapq
import math

from broker.share.inflight import InFlightCache
from broker.share.record_state import RecordState
from broker.share.views import SharePartitionConfig

__all__ = ["BackoffIndex", "first_fetchable_at", "redelivery_delay_ms"]

# multiplier^exponent stays finite in a float for multipliers up to 10 (the config bound).
_MAX_EXPONENT = 64


def redelivery_delay_ms(cfg: SharePartitionConfig, delivery_count: int) -> int:
    """How long a record released after ``delivery_count`` deliveries waits (0 = not at all)."""
    base = cfg.delivery_backoff_ms
    if base <= 0:
        return 0
    exponent = min(max(delivery_count - 1, 0), _MAX_EXPONENT)
    delay = base * cfg.delivery_backoff_multiplier**exponent
    cap = max(cfg.delivery_backoff_max_ms, 0)
    if not math.isfinite(delay) or delay >= cap:
        return cap
    return int(delay)


class BackoffIndex:
    """Lazy min-heap of (available_at_ms, first_offset, last_offset) backoff ends.

    Like ``LockIndex``: an entry is only acted on if a record in its range is still AVAILABLE
    with that exact ``available_at_ms``; entries for records acquired or archived since are
    dropped when they reach the top.
    """

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int]] = []

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def push_runs(self, runs: list[tuple[int, int, int]]) -> None:
        """Add (available_at_ms, first, last) runs given in offset order; adjacent runs with one
        end are merged into one entry."""
        merged: list[tuple[int, int, int]] = []
        for at, lo, hi in runs:
            if merged and merged[-1][0] == at and merged[-1][2] + 1 == lo:
                merged[-1] = (at, merged[-1][1], hi)
            else:
                merged.append((at, lo, hi))
        for entry in merged:
            heapq.heappush(self._heap, entry)

    def pop_due(self, now_ms: int) -> bool:
        """Drop every entry ending at or before ``now_ms``; True if any was dropped."""
        heap = self._heap
        popped = False
        while heap and heap[0][0] <= now_ms:
            heapq.heappop(heap)
            popped = True
        return popped

    def next_end(self, cache: InFlightCache) -> int | None:
        """The earliest backoff end of a record still waiting for it (stale entries dropped)."""
        heap = self._heap
        while heap:
            at, lo, hi = heap[0]
            live = next(
                (
                    u_lo
                    for u_lo, _u_hi, info in cache.runs(lo, hi)
                    if info.state is RecordState.AVAILABLE and info.available_at_ms == at
                ),
                None,
            )
            if live is None:
                heapq.heappop(heap)
                continue
            if live > lo:
                heapq.heapreplace(heap, (at, live, hi))
            return at
        return None


def first_fetchable_at(cache: InFlightCache, start: int, now_ms: int) -> int | None:
    """Like ``inflight.first_fetchable``, but an AVAILABLE record still in backoff at ``now_ms``
    is not fetchable: the first hole or AVAILABLE record out of backoff at/after ``start``."""
    expected = start
    for batch in cache.from_offset(start):
        if batch.first_offset > expected:
            return expected
        for first, _last, info in batch.runs(max(batch.first_offset, start), batch.last_offset):
            if info.state is RecordState.AVAILABLE and info.available_at_ms <= now_ms:
                return first
        expected = batch.last_offset + 1
    return None
