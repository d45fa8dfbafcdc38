"""The in-flight window of a share-partition: batches of offsets with their delivery state.

A share-partition caches the offsets between its start offset (SPSO) and end offset (SPEO) in an
ordered map keyed by each batch's first offset (reference section 3, "In-flight cache"). A batch
first carries one :class:`RecordInfo` for its whole range: one state, delivery count, owner and
lock deadline. As soon as something has to treat part of it differently (a partial ack, per-offset
ack types, a record_limit acquisition, the SPSO landing inside it) it is *exploded* into one
:class:`RecordInfo` per offset, and stays that way until it is trimmed. A batch larger than :data:`MAX_EXPLODED_OFFSETS` is never
exploded whole: it is first split (``InFlightCache.carve``) into whole batches at the boundaries of
the range being worked on, so a log batch claiming billions of offsets costs a few objects, not
one per offset.

Invariants (checked by the property tests):
- batches never overlap, and ``first_offset <= last_offset``;
- an exploded batch holds exactly ``last_offset - first_offset + 1`` infos;
- ``pending`` is only ever set on an ACQUIRED record (an acknowledgement waiting for its state
  write); while it is set the committed state stays ACQUIRED, so a failed write needs no undo;
- the cache may hold a straddling batch that starts below the SPSO, and whole batches below the
  SPSO only while they still hold ACQUIRED records (after the log start offset jumped).

:class:`LockIndex` is a lazy min-heap of acquisition-lock deadlines over offset ranges of one
cache. Entries are never removed eagerly; a popped entry is only acted on if the records in its
range still hold a lock with that exact deadline, which keeps renewals, re-acquisitions and
explosions cheap.

:class:`InFlightCache` owns the scans of the window: ``advance_start`` and ``scan_prefix`` (where
the SPSO can move, and the delivery-complete count), ``state_batches`` (what a state write says;
with a write token both describe the window as it will be once that write commits),
``first_fetchable``, ``archive_available_below``, ``trim_below`` and ``oldest_acquired_at``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from sortedcontainers import SortedDict  # type: ignore[import-untyped]

from broker.share.record_state import RecordState, check_transition
from persister.api import PersisterStateBatch

__all__ = [
    "MAX_EXPLODED_OFFSETS",
    "InFlightBatch",
    "InFlightCache",
    "LockIndex",
    "PendingAck",
    "RecordInfo",
    "is_terminal_for",
    "merge_ranges",
]


# The most offsets one batch is exploded into (one RecordInfo each, about 100 bytes); larger whole
# batches are split at the edges of the range in use instead (InFlightCache.carve).
MAX_EXPLODED_OFFSETS = 1 << 16


@dataclass(frozen=True, slots=True)
class PendingAck:
    """An acknowledgement accepted in memory but not yet durable.

    ``target`` is where the record goes when the state write commits; ``at_limit`` marks a
    RELEASE that becomes ARCHIVED because the delivery count reached the limit (for metrics).
    """

    token: int
    target: RecordState
    at_limit: bool = False


@dataclass(slots=True)
class RecordInfo:
    """Mutable delivery state of one offset, or of a whole batch that has not been exploded."""

    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int | None = None
    acquired_at_ms: int | None = None
    pending: PendingAck | None = None
    # Redelivery backoff (broker/share/backoff.py): while AVAILABLE, not acquirable before this
    # time. Only ever set when a backoff applies and never cleared: a stale value lies in the past.
    available_at_ms: int = 0

    def copy(self) -> RecordInfo:
        return RecordInfo(
            self.state,
            self.delivery_count,
            self.member_id,
            self.deadline_ms,
            self.acquired_at_ms,
            self.pending,
            self.available_at_ms,
        )

    def acquire(self, member_id: str, now_ms: int, deadline_ms: int) -> None:
        """AVAILABLE -> ACQUIRED by ``member_id``; the only move that counts a delivery."""
        self.state = check_transition(self.state, RecordState.ACQUIRED)
        self.delivery_count += 1
        self.member_id = member_id
        self.deadline_ms = deadline_ms
        self.acquired_at_ms = now_ms

    def settle(self, new_state: RecordState) -> None:
        """Leave ACQUIRED (or AVAILABLE, for archiving) and drop owner and lock."""
        self.state = check_transition(self.state, new_state)
        self.member_id = None
        self.deadline_ms = None
        self.acquired_at_ms = None
        self.pending = None

    def holds_lock(self) -> bool:
        """ACQUIRED and not waiting on a state write: the lock timer applies to it."""
        return self.state is RecordState.ACQUIRED and self.pending is None


class InFlightBatch:
    """A contiguous offset range with batch-level state, or per-offset state once exploded."""

    __slots__ = ("_offsets", "_whole", "first_offset", "last_offset")

    def __init__(self, first_offset: int, last_offset: int, info: RecordInfo) -> None:
        if last_offset < first_offset:
            raise ValueError(f"empty batch {first_offset}..{last_offset}")
        self.first_offset = first_offset
        self.last_offset = last_offset
        self._whole: RecordInfo | None = info
        self._offsets: list[RecordInfo] | None = None

    def __repr__(self) -> str:
        kind = "exploded" if self._offsets is not None else repr(self._whole)
        return f"InFlightBatch({self.first_offset}..{self.last_offset}, {kind})"

    @property
    def size(self) -> int:
        return self.last_offset - self.first_offset + 1

    @property
    def exploded(self) -> bool:
        return self._offsets is not None

    @property
    def whole(self) -> RecordInfo:
        """The batch-level info. Only valid while not exploded."""
        if self._whole is None:
            raise RuntimeError("batch is exploded")
        return self._whole

    def explode(self) -> None:
        """Switch to per-offset state (idempotent). Each offset starts as a copy of the batch."""
        if self._whole is None:
            return
        whole = self._whole
        self._offsets = [whole.copy() for _ in range(self.size)]
        self._whole = None

    def info(self, offset: int) -> RecordInfo:
        if self._whole is not None:
            return self._whole
        assert self._offsets is not None
        return self._offsets[offset - self.first_offset]

    def runs(self, lo: int, hi: int) -> Iterator[tuple[int, int, RecordInfo]]:
        """(first, last, info) over ``[lo, hi]`` clipped to this batch; read-only view.

        A batch-level batch yields one clipped run sharing the batch's info, so callers must not
        mutate it unless the run spans the whole batch (use :meth:`InFlightCache.units`).
        """
        lo = max(lo, self.first_offset)
        hi = min(hi, self.last_offset)
        if lo > hi:
            return
        if self._whole is not None:
            yield lo, hi, self._whole
            return
        assert self._offsets is not None
        base = self.first_offset
        for offset in range(lo, hi + 1):
            yield offset, offset, self._offsets[offset - base]

    def all_infos(self) -> Iterator[RecordInfo]:
        if self._whole is not None:
            yield self._whole
        else:
            assert self._offsets is not None
            yield from self._offsets


class InFlightCache:
    """Non-overlapping in-flight batches ordered by first offset (a ``SortedDict``)."""

    __slots__ = ("_batches", "_hint")

    def __init__(self) -> None:
        self._batches: SortedDict = SortedDict()
        # The batch of the last single-batch lookup: most operations touch one batch in a row
        # (per-offset acks and re-acquisitions), so this skips the sorted lookup.
        self._hint: InFlightBatch | None = None

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self) -> Iterator[InFlightBatch]:
        return iter(list(self._batches.values()))

    def add(self, batch: InFlightBatch) -> None:
        """Insert a batch. Overlap with an existing batch is a bug."""
        before = self.floor(batch.first_offset)
        after = self.next_after(batch.first_offset)
        if before is not None and before.last_offset >= batch.first_offset:
            raise RuntimeError(f"{batch!r} overlaps {before!r}")
        if after is not None and after.first_offset <= batch.last_offset:
            raise RuntimeError(f"{batch!r} overlaps {after!r}")
        self._batches[batch.first_offset] = batch

    def remove(self, batch: InFlightBatch) -> None:
        del self._batches[batch.first_offset]
        if self._hint is batch:
            self._hint = None

    def clear(self) -> None:
        self._batches.clear()
        self._hint = None

    def first(self) -> InFlightBatch | None:
        return self._batches.peekitem(0)[1] if self._batches else None

    def last(self) -> InFlightBatch | None:
        return self._batches.peekitem(-1)[1] if self._batches else None

    @property
    def last_offset(self) -> int | None:
        last = self.last()
        return None if last is None else last.last_offset

    def floor(self, offset: int) -> InFlightBatch | None:
        """The batch with the greatest first offset ``<= offset``."""
        idx = self._batches.bisect_right(offset)
        return self._batches.peekitem(idx - 1)[1] if idx > 0 else None

    def containing(self, offset: int) -> InFlightBatch | None:
        hint = self._hint
        if hint is not None and hint.first_offset <= offset <= hint.last_offset:
            return hint
        batch = self.floor(offset)
        if batch is None or batch.last_offset < offset:
            return None
        self._hint = batch
        return batch

    def next_after(self, offset: int) -> InFlightBatch | None:
        """The first batch starting strictly after ``offset``."""
        idx = self._batches.bisect_right(offset)
        return self._batches.peekitem(idx)[1] if idx < len(self._batches) else None

    def overlapping(self, lo: int, hi: int) -> list[InFlightBatch]:
        """Batches intersecting ``[lo, hi]`` in offset order."""
        if lo > hi or not self._batches:
            return []
        hint = self._hint
        if hint is not None and hint.first_offset <= lo and hi <= hint.last_offset:
            return [hint]
        start = max(0, self._batches.bisect_right(lo) - 1)
        out: list[InFlightBatch] = []
        for key in self._batches.islice(start):
            batch: InFlightBatch = self._batches[key]
            if batch.first_offset > hi:
                break
            if batch.last_offset >= lo:
                out.append(batch)
        if len(out) == 1:
            self._hint = out[0]
        return out

    def from_offset(self, offset: int) -> Iterator[InFlightBatch]:
        """Batches whose last offset is ``>= offset``, in order, lazily (do not add or remove
        batches while iterating)."""
        start = max(0, self._batches.bisect_right(offset) - 1)
        for key in self._batches.islice(start):
            batch: InFlightBatch = self._batches[key]
            if batch.last_offset >= offset:
                yield batch

    def runs(self, lo: int, hi: int) -> Iterator[tuple[int, int, RecordInfo]]:
        """Read-only (first, last, info) runs over the cached part of ``[lo, hi]``."""
        for batch in self.overlapping(lo, hi):
            yield from batch.runs(lo, hi)

    def split(self, batch: InFlightBatch, at: int) -> InFlightBatch:
        """Split a whole cached batch before offset ``at`` (inside it); return the right part.

        Both parts keep the batch's state (the right one a copy), as an explosion would.
        """
        info = batch.whole
        if not batch.first_offset < at <= batch.last_offset:
            raise ValueError(f"cannot split {batch!r} at {at}")
        self.remove(batch)
        left = InFlightBatch(batch.first_offset, at - 1, info)
        right = InFlightBatch(at, batch.last_offset, info.copy())
        self._batches[left.first_offset] = left
        self._batches[right.first_offset] = right
        return right

    def carve(self, lo: int, hi: int, *cuts: int) -> None:
        """Split whole batches larger than MAX_EXPLODED_OFFSETS at ``lo``, ``hi + 1`` and any
        ``cuts`` inside them, so that working on ``[lo, hi]`` never explodes one of them."""
        points = sorted({lo, hi + 1, *cuts})
        for batch in self.overlapping(lo, hi):
            if batch.exploded or batch.size <= MAX_EXPLODED_OFFSETS:
                continue
            for at in points:
                if batch.first_offset < at <= batch.last_offset:
                    batch = self.split(batch, at)

    def units(self, lo: int, hi: int) -> Iterator[tuple[int, int, RecordInfo]]:
        """Mutable (first, last, info) units covering the cached part of ``[lo, hi]``.

        A batch fully inside the range is yielded whole; a batch only partly inside is exploded
        first (or split, if large), so mutating a yielded info never touches offsets outside
        ``[lo, hi]``.
        """
        self.carve(lo, hi)
        for batch in self.overlapping(lo, hi):
            if not batch.exploded and lo <= batch.first_offset and batch.last_offset <= hi:
                yield batch.first_offset, batch.last_offset, batch.whole
                continue
            batch.explode()
            yield from batch.runs(lo, hi)

    # ------------------------------------------------------------------ the window's scans

    def advance_start(self, start: int) -> int:
        """The start offset after the committed terminal prefix from ``start`` (stops at a
        hole)."""
        for batch in self.from_offset(start):
            if batch.first_offset > start:
                return start
            for lo, hi, info in batch.runs(start, batch.last_offset):
                if not info.state.is_terminal:
                    return lo
                start = hi + 1
        return start

    def scan_prefix(self, start: int, token: int | None) -> tuple[int, int]:
        """(start offset after the terminal prefix from ``start``, terminal records at/after it).

        The prefix stops at the first non-terminal record or hole (a hole is a record never
        delivered). With ``token`` the pending transitions of that write count as done: this is
        what the SPSO and delivery_complete_count will be once the write commits.
        """
        new_start = start
        moving = True
        complete = 0
        for batch in self.from_offset(start):
            for lo, hi, info in batch.runs(start, batch.last_offset):
                terminal = is_terminal_for(info, token)
                if moving:
                    if lo == new_start and terminal:
                        new_start = hi + 1
                        continue
                    moving = False
                if terminal:
                    complete += hi - lo + 1
        return new_start, complete

    def state_batches(
        self, ranges: list[tuple[int, int]], start: int, token: int | None
    ) -> list[PersisterStateBatch]:
        """Persistable (state, delivery count) runs over ``ranges`` at/after ``start``.

        With ``token`` a record pending on that write is described by its target state. Records
        in non-persisted states (ACQUIRED) are left out: acquisition is never written.
        """
        out: list[PersisterStateBatch] = []
        for lo, hi in ranges:
            for r_lo, r_hi, info in self.runs(max(lo, start), hi):
                pending = info.pending
                state = (
                    pending.target
                    if token is not None and pending is not None and pending.token == token
                    else info.state
                )
                if not state.is_persisted:
                    continue
                prev = out[-1] if out else None
                if (
                    prev is not None
                    and prev.last_offset + 1 == r_lo
                    and prev.delivery_state == state
                    and prev.delivery_count == info.delivery_count
                ):
                    out[-1] = PersisterStateBatch(
                        prev.first_offset, r_hi, int(state), prev.delivery_count
                    )
                else:
                    out.append(PersisterStateBatch(r_lo, r_hi, int(state), info.delivery_count))
        return out

    def first_fetchable(self, start: int) -> int | None:
        """The first offset at/after ``start`` a fetch should deliver again: a hole (gap window,
        never delivered) or an AVAILABLE record; None when everything cached is taken or done."""
        expected = start
        for batch in self.from_offset(start):
            if batch.first_offset > expected:
                return expected
            for first, _last, info in batch.runs(max(batch.first_offset, start), batch.last_offset):
                if info.state is RecordState.AVAILABLE:
                    return first
            expected = batch.last_offset + 1
        return None

    def archive_available_below(self, start: int) -> None:
        """AVAILABLE records below the start offset can never be delivered: archive them."""
        first = self.first()
        if first is None or first.first_offset >= start:
            return
        lo, hi = first.first_offset, start - 1
        if not any(info.state is RecordState.AVAILABLE for _a, _b, info in self.runs(lo, hi)):
            return  # do not explode a straddling batch for nothing
        for _a, _b, info in self.units(lo, hi):
            if info.state is RecordState.AVAILABLE:
                info.settle(RecordState.ARCHIVED)

    def trim_below(self, start: int) -> None:
        """Drop batches wholly below ``start`` unless they still hold ACQUIRED records or
        ARCHIVING ones (their dead-letter record is not durable yet; the log start offset jumped
        past them)."""
        first = self.first()
        if first is None or first.first_offset >= start:
            return
        for batch in self.overlapping(first.first_offset, start - 1):
            if batch.last_offset >= start:
                break
            if any(info.state in _KEPT_BELOW_START for info in batch.all_infos()):
                continue
            self.remove(batch)

    def oldest_acquired_at(self) -> int | None:
        """The earliest acquisition time of any ACQUIRED record, or None."""
        oldest: int | None = None
        for batch in self:
            for info in batch.all_infos():
                at = info.acquired_at_ms
                if info.state is RecordState.ACQUIRED and at is not None and (
                    oldest is None or at < oldest
                ):
                    oldest = at
        return oldest



_KEPT_BELOW_START = frozenset({RecordState.ACQUIRED, RecordState.ARCHIVING})


class LockIndex:
    """Lazy min-heap of (deadline_ms, first_offset, last_offset) acquisition locks over a cache.

    Entries are never removed eagerly: one is acted on only if records in its range still hold
    a lock with exactly that deadline (:meth:`next_deadline`), so renewals, re-acquisitions and
    explosions push new entries and leave the old ones to be dropped when they reach the top.
    """

    __slots__ = ("_cache", "_heap")

    def __init__(self, cache: InFlightCache) -> None:
        self._cache = cache
        self._heap: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, deadline_ms: int, first_offset: int, last_offset: int) -> None:
        heapq.heappush(self._heap, (deadline_ms, first_offset, last_offset))

    def next_deadline(self) -> int | None:
        """The earliest deadline still held by a record (stale entries on top are dropped)."""
        heap = self._heap
        while heap:
            deadline, lo, hi = heap[0]
            live = next(
                (
                    u_lo
                    for u_lo, _u_hi, info in self._cache.runs(lo, hi)
                    if info.holds_lock() and info.deadline_ms == deadline
                ),
                None,
            )
            if live is None:
                heapq.heappop(heap)
                continue
            if live > lo:
                # Nothing before ``live`` holds this lock any more (a new lock on those offsets
                # pushes its own entry), so the next check can start there.
                heapq.heapreplace(heap, (deadline, live, hi))
            return deadline
        return None

    def pop_due(self, now_ms: int) -> list[tuple[int, int]]:
        """Take every entry due at ``now_ms``: the merged offset ranges whose locks may have
        expired (the caller checks each record's own deadline)."""
        heap = self._heap
        due: list[tuple[int, int]] = []
        while heap and heap[0][0] <= now_ms:
            _deadline, lo, hi = heapq.heappop(heap)
            due.append((lo, hi))
        return merge_ranges(due) if due else due

    def maybe_compact(self) -> None:
        """Rebuild from the live locks of the cache once stale entries clearly dominate.

        Renewals and re-acquisitions leave stale entries behind; they are dropped lazily when
        they reach the top, but a rebuild keeps the heap proportional to the window meanwhile.
        """
        if len(self._heap) <= 1024 or len(self._heap) <= 4 * (len(self._cache) + 256):
            return
        entries: list[tuple[int, int, int]] = []
        for batch in self._cache:
            for lo, hi, info in batch.runs(batch.first_offset, batch.last_offset):
                if not info.holds_lock() or info.deadline_ms is None:
                    continue
                if entries and entries[-1][0] == info.deadline_ms and entries[-1][2] + 1 == lo:
                    entries[-1] = (info.deadline_ms, entries[-1][1], hi)
                else:
                    entries.append((info.deadline_ms, lo, hi))
        heapq.heapify(entries)
        self._heap = entries


def is_terminal_for(info: RecordInfo, token: int | None) -> bool:
    """Terminal as committed, or as it will be once write ``token`` commits."""
    if info.state.is_terminal:
        return True
    pending = info.pending
    return (
        token is not None
        and pending is not None
        and pending.token == token
        and pending.target.is_terminal
    )


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sort and coalesce overlapping or adjacent inclusive ranges."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
