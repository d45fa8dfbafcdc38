"""Merging share state batches: a pure function over offset ranges.

Concept (reference section 6, Kafka ``PersisterStateBatchCombiner``): the share coordinator
combines the batches it holds with the batches a write brings, and the batches of one write among
themselves. Each batch says "offsets first..last are in delivery state S with delivery count C".

Per-offset rule (the model the property test checks against): the state of an offset is the
*maximum* ``(delivery_count, delivery_state)`` over every input batch that covers it. A higher
delivery count wins, then the higher state id (ARCHIVED 4 > ACKNOWLEDGED 2 > AVAILABLE 0). It is not
"last write wins": a stale writer cannot lower the delivery count of an offset. Because max is
commutative and associative, ``combine(a + combine(b))`` equals ``combine(a + b)``, which is what
lets a ShareUpdate replayed onto a snapshot give the same state as a new snapshot would.

Output invariants:
- sorted by first offset, non-overlapping, every batch has ``first_offset <= last_offset``;
- two batches that touch (``prev.last_offset + 1 == next.first_offset``) differ in state or count
  (equal neighbours are coalesced);
- with ``start_offset >= 0``, no offset below ``start_offset`` survives (batches are dropped or
  trimmed); a negative start offset (-1, "unknown/unchanged") prunes nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from itertools import pairwise

from persister.api import PersisterStateBatch


def combine_state_batches(
    batches: Iterable[PersisterStateBatch], start_offset: int = -1
) -> tuple[PersisterStateBatch, ...]:
    """Merge possibly overlapping batches into the canonical disjoint form described above.

    A sweep over the batch boundaries keeps a max-heap of the batches covering the current
    position (lazy removal of those that ended), so the cost is O(n log n) in the number of
    batches, independent of the width of the offset ranges.

    Raises:
        ValueError: a batch has ``first_offset > last_offset`` (callers validate requests first).
    """
    items = sorted(batches, key=lambda b: b.first_offset)
    for b in items:
        if b.first_offset > b.last_offset:
            raise ValueError(f"state batch with first_offset > last_offset: {b}")
    if start_offset >= 0:
        items = [b for b in items if b.last_offset >= start_offset]
    if not items:
        return ()

    # Elementary segments are delimited by every first offset and every last offset + 1.
    bounds = sorted({b.first_offset for b in items} | {b.last_offset + 1 for b in items})
    out: list[PersisterStateBatch] = []
    # Heap entries: (-count, -state, last_offset) so the top is the winning batch.
    active: list[tuple[int, int, int]] = []
    i = 0
    for lo, hi in pairwise(bounds):
        while i < len(items) and items[i].first_offset == lo:
            b = items[i]
            heapq.heappush(active, (-b.delivery_count, -b.delivery_state, b.last_offset))
            i += 1
        while active and active[0][2] < lo:
            heapq.heappop(active)
        if active:  # else a gap: no batch covers [lo, hi)
            neg_count, neg_state, _ = active[0]
            _append_coalesced(out, max(lo, start_offset), hi - 1, -neg_state, -neg_count)
    return tuple(out)


def _append_coalesced(out: list[PersisterStateBatch], first: int, last: int, state: int, count: int) -> None:
    """Append [first, last] unless empty, extending the previous batch when it touches and matches."""
    if first > last:
        return
    prev = out[-1] if out else None
    if (
        prev is not None
        and prev.last_offset + 1 == first
        and (prev.delivery_state, prev.delivery_count) == (state, count)
    ):
        out[-1] = PersisterStateBatch(prev.first_offset, last, state, count)
    else:
        out.append(PersisterStateBatch(first, last, state, count))
