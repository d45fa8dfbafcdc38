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

Output invariants (the *canonical form*):
- sorted by first offset, non-overlapping, every batch has ``first_offset <= last_offset``;
- two batches that touch (``prev.last_offset + 1 == next.first_offset``) differ in state or count
  (equal neighbours are coalesced);
- with ``start_offset >= 0``, no offset below ``start_offset`` survives (batches are dropped or
  trimmed); a negative start offset (-1, "unknown/unchanged") prunes nothing.

Two entry points with one meaning: ``combine_state_batches`` takes any batches;
``merge_state_batches`` takes batches already in canonical form plus new ones and gives the same
result as combining all of them, recombining only the part the new batches touch (replaying a
ShareUpdate onto the state a key holds is the hot loop of loading ``__share_group_state``).
Input batches that come out unchanged are reused, not copied (they are immutable).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import pairwise
from operator import attrgetter

from persister.api import PersisterStateBatch

_FIRST = attrgetter("first_offset")
_LAST = attrgetter("last_offset")
# Past every offset (offsets are int64): "no next batch" in the overlay sweep.
_BEYOND = 2**63


def combine_state_batches(
    batches: Iterable[PersisterStateBatch], start_offset: int = -1
) -> tuple[PersisterStateBatch, ...]:
    """Merge possibly overlapping batches into the canonical disjoint form described above.

    Disjoint input (the usual case: one write's batches) takes one pass. Otherwise a sweep over
    the batch boundaries keeps a max-heap of the batches covering the current position (lazy
    removal of those that ended), so the cost is O(n log n) in the number of batches,
    independent of the width of the offset ranges.

    Raises:
        ValueError: a batch has ``first_offset > last_offset`` (callers validate requests first).
    """
    items = sorted(batches, key=_FIRST)
    _check_ranges(items)
    if all(a.last_offset < b.first_offset for a, b in pairwise(items)):
        out: list[PersisterStateBatch] = []
        for b in items:
            _append_batch(out, b)
        return _prune(out, start_offset)
    if start_offset >= 0:
        items = [b for b in items if b.last_offset >= start_offset]
    if not items:
        return ()

    # Elementary segments are delimited by every first offset and every last offset + 1.
    bounds = sorted({b.first_offset for b in items} | {b.last_offset + 1 for b in items})
    out = []
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


def merge_state_batches(
    current: Sequence[PersisterStateBatch],
    new: Sequence[PersisterStateBatch],
    start_offset: int = -1,
) -> tuple[PersisterStateBatch, ...]:
    """``combine_state_batches((*current, *new), start_offset)`` for ``current`` in canonical form.

    Only the batches of ``current`` that overlap the span of ``new`` are swept (found by
    bisection); those before and after it are kept as they are, coalesced at the two seams. So
    an update that only moves the start offset, or brings a few batches, costs O(log n + k) plus
    copying references, instead of re-sorting and re-sweeping the whole state.

    ``current`` must be canonical (what every ``ShareGroupOffset`` holds); ``new`` may be anything.

    Raises:
        ValueError: a batch of ``new`` has ``first_offset > last_offset``.
    """
    if not new:
        return _prune(current, start_offset)
    if len(new) == 1:
        return _merge_one(current, new[0], start_offset)
    incoming = sorted(new, key=_FIRST)
    _check_ranges(incoming)
    if any(a.last_offset >= b.first_offset for a, b in pairwise(incoming)):
        # Overlapping among themselves: combine them first (max is associative).
        incoming = list(combine_state_batches(incoming))
    if len(incoming) == 1:
        return _merge_one(current, incoming[0], start_offset)
    lo = incoming[0].first_offset
    hi = incoming[-1].last_offset  # disjoint and sorted: the last batch ends last
    i = bisect_left(current, lo, key=_LAST)  # first batch of current ending at or after lo
    k = bisect_right(current, hi, key=_FIRST, lo=i)  # first batch starting after hi
    out = list(current[:i])
    _overlay(out, current[i:k], incoming)
    _extend(out, current, k)
    return _prune(out, start_offset)


def _merge_one(
    current: Sequence[PersisterStateBatch], only: PersisterStateBatch, start_offset: int
) -> tuple[PersisterStateBatch, ...]:
    """``merge_state_batches`` for one new batch (what an acknowledgement usually writes).

    Raises:
        ValueError: ``only`` has ``first_offset > last_offset``.
    """
    lo, hi = only.first_offset, only.last_offset
    if lo > hi:
        raise ValueError(f"state batch with first_offset > last_offset: {only}")
    if hi < start_offset:
        return _prune(current, start_offset)  # pruned away, whatever it says
    n = len(current)
    if not n or current[-1].last_offset < lo:
        out = list(current)  # after everything held: an append
        _append_batch(out, only)
        return _prune(out, start_offset)
    if current[-1].first_offset <= hi and (n == 1 or current[-2].last_offset < lo):
        i, k = n - 1, n  # it overlaps the last batch only (acknowledgements near the end)
    else:
        i = bisect_left(current, lo, key=_LAST)  # first batch ending at or after lo
        k = bisect_right(current, hi, key=_FIRST, lo=i)  # first batch starting after hi
    out = list(current[:i])
    window = current[i:k]
    if not _dominates(only, window):
        _overlay(out, window, (only,))
        _extend(out, current, k)
        return _prune(out, start_offset)
    # The new batch wins over everything it covers: the result is what sticks out of the window
    # on the left and on the right, around the new batch (joined with it where they match).
    state, count = only.delivery_state, only.delivery_count
    first, last, right = lo, hi, None
    if window and window[0].first_offset < lo:
        w = window[0]
        if w.delivery_state == state and w.delivery_count == count:
            first = max(w.first_offset, min(start_offset, lo))  # no need to build what the prune drops
        else:
            _append_coalesced(out, w.first_offset, lo - 1, w.delivery_state, w.delivery_count)
    if window and window[-1].last_offset > hi:
        w = window[-1]
        if w.delivery_state == state and w.delivery_count == count:
            last = w.last_offset
        else:
            right = w
    _append_batch(out, only if first == lo and last == hi else PersisterStateBatch(first, last, state, count))
    if right is not None:
        _append_coalesced(out, hi + 1, right.last_offset, right.delivery_state, right.delivery_count)
    _extend(out, current, k)
    return _prune(out, start_offset)


def _extend(out: list[PersisterStateBatch], current: Sequence[PersisterStateBatch], k: int) -> None:
    """Append ``current[k:]`` (canonical, after everything in ``out``), coalescing at the seam."""
    if k < len(current):
        _append_batch(out, current[k])
        out.extend(current[k + 1 :])


def _dominates(b: PersisterStateBatch, batches: Sequence[PersisterStateBatch]) -> bool:
    """Whether ``b`` wins (or ties) the per-offset max against every one of ``batches``."""
    count, state = b.delivery_count, b.delivery_state
    for w in batches:
        if w.delivery_count > count or (w.delivery_count == count and w.delivery_state > state):
            return False
    return True


def _overlay(
    out: list[PersisterStateBatch],
    old: Sequence[PersisterStateBatch],
    new: Sequence[PersisterStateBatch],
) -> None:
    """Append the per-offset max of two sorted, disjoint batch lists to ``out``, coalesced.

    Each offset is covered by at most one batch of each list, so a two-pointer sweep suffices:
    from the current position, the next segment ends where a covering batch ends or where the
    other list's next batch begins. Segments are coalesced in local variables and a batch object
    is made only for each finished one (or the input batch is reused when it comes out whole).
    """
    n_old, n_new = len(old), len(new)
    i = j = 0
    pos = new[0].first_offset if not old else min(old[0].first_offset, new[0].first_offset)
    # The pending output segment, and the input batch it equals (None once it differs).
    p_first = p_last = p_state = p_count = -1
    p_same: PersisterStateBatch | None = None
    pending = flushed = False
    while i < n_old or j < n_new:
        a = old[i] if i < n_old else None
        b = new[j] if j < n_new else None
        a_first = a.first_offset if a is not None else _BEYOND
        b_first = b.first_offset if b is not None else _BEYOND
        if pos < a_first and pos < b_first:
            pos = min(a_first, b_first)  # skip a gap covered by neither
        if a is not None and a_first <= pos:
            if b is not None and b_first <= pos:
                end = min(a.last_offset, b.last_offset)
                win = b if (b.delivery_count, b.delivery_state) > (a.delivery_count, a.delivery_state) else a
            else:
                end = min(a.last_offset, b_first - 1)
                win = a
        else:
            assert b is not None  # pos is at the start of a or of b
            end = min(b.last_offset, a_first - 1)
            win = b
        state, count = win.delivery_state, win.delivery_count
        if pending and p_last + 1 == pos and p_state == state and p_count == count:
            p_last = end
            p_same = None
        else:
            if pending:
                segment = p_same or PersisterStateBatch(p_first, p_last, p_state, p_count)
                if flushed:
                    out.append(segment)
                else:  # only the first segment can touch what ``out`` already holds
                    _append_batch(out, segment)
                    flushed = True
            pending = True
            p_first, p_last, p_state, p_count = pos, end, state, count
            p_same = win if win.first_offset == pos and win.last_offset == end else None
        pos = end + 1
        if a is not None and a.last_offset < pos:
            i += 1
        if b is not None and b.last_offset < pos:
            j += 1
    if pending:
        _append_batch(out, p_same or PersisterStateBatch(p_first, p_last, p_state, p_count))


def _prune(batches: Sequence[PersisterStateBatch], start_offset: int) -> tuple[PersisterStateBatch, ...]:
    """Canonical ``batches`` without the offsets below a non-negative ``start_offset``."""
    if start_offset < 0:
        return tuple(batches)
    i = bisect_left(batches, start_offset, key=_LAST)  # first batch ending at or after start
    if i == len(batches):
        return ()
    first = batches[i]
    if first.first_offset >= start_offset:
        return tuple(batches[i:])
    trimmed = PersisterStateBatch(start_offset, first.last_offset, first.delivery_state, first.delivery_count)
    return (trimmed, *batches[i + 1 :])


def _check_ranges(batches: Iterable[PersisterStateBatch]) -> None:
    for b in batches:
        if b.first_offset > b.last_offset:
            raise ValueError(f"state batch with first_offset > last_offset: {b}")


def _append_batch(out: list[PersisterStateBatch], b: PersisterStateBatch) -> None:
    """Append ``b`` (after everything in ``out``), extending the previous batch when it touches
    and matches."""
    if out:
        prev = out[-1]
        if (
            prev.last_offset + 1 == b.first_offset
            and prev.delivery_state == b.delivery_state
            and prev.delivery_count == b.delivery_count
        ):
            out[-1] = PersisterStateBatch(prev.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            return
    out.append(b)


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
