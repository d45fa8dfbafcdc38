"""Choosing which offsets a ShareFetch acquires (pure planning over the in-flight cache).

The shell reads whole log batches starting at the share-partition's next fetch offset and passes
their (base_offset, last_offset) boundaries; it never shows us payload bytes. Planning walks those
boundaries against the cache and yields *candidates*: runs of AVAILABLE cached offsets with one
delivery count, or runs of offsets the cache has never seen ("new"). :func:`select` then applies
the request budget (reference section 3, "Acquire algorithm"):

- batch_optimized (ShareAcquireMode 0): once MaxRecords offsets are taken, stop at the end of the
  log batch holding the budget-th offset, so MaxRecords is a soft limit and log batches are never
  cut;
- record_limit (ShareAcquireMode 1, KIP-1206): take exactly MaxRecords offsets, cutting anywhere;
- delivery-count throttling (poison-batch isolation): a record whose delivery count reached
  ``max(2, ceil(limit / 2))`` caps the whole acquisition at ``budget >> (count - threshold + 1)``
  (at least one), and a record about to get its last delivery (``count == limit - 1`` when
  ``limit > 2``) caps it at one, so it is delivered alone. The cap applies exactly, without
  rounding to a log batch.

Log batches are treated as *spans*: span i runs from its base offset up to the next batch's base
offset minus one, so offsets missing between two batches (compaction) ride along with the batch
before them and the client acknowledges them as GAP, as Kafka does.

Planning (:func:`candidates`, :func:`select`) never mutates the cache; :func:`apply_plan` then
performs the chosen AVAILABLE -> ACQUIRED moves and creates cache batches for new offsets, split
into ranges of about BatchSize records only at log-batch boundaries.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum

from broker.share.inflight import (
    MAX_EXPLODED_OFFSETS,
    InFlightBatch,
    InFlightCache,
    LockIndex,
    RecordInfo,
)
from broker.share.record_state import RecordState

__all__ = [
    "AcquireMode",
    "AcquiredRecords",
    "Candidate",
    "acquire_budget",
    "apply_plan",
    "archive_missing",
    "archive_skipped_available",
    "archive_skipped_reached",
    "candidates",
    "log_spans",
    "records_holding_locks",
    "select",
    "throttle_cap",
]


class AcquireMode(IntEnum):
    """ShareFetch v2 ``ShareAcquireMode`` (v1 requests are always batch_optimized)."""

    BATCH_OPTIMIZED = 0
    RECORD_LIMIT = 1


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """One ``AcquiredRecords`` entry of a ShareFetch response (inclusive range)."""

    first_offset: int
    last_offset: int
    delivery_count: int

    @property
    def count(self) -> int:
        return self.last_offset - self.first_offset + 1


@dataclass(frozen=True, slots=True)
class Candidate:
    """A run of acquirable offsets: cached AVAILABLE (``batch`` set) or new (``batch`` None).

    ``span`` / ``last_span`` index the log spans holding the first and last offset; a cached run
    only crosses spans when it is a whole AVAILABLE batch re-acquired in one piece.
    """

    first: int
    last: int
    batch: InFlightBatch | None
    delivery_count: int
    span: int
    last_span: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1


def records_holding_locks(cache: InFlightCache, start: int, count_only_inflight: bool) -> int:
    """What counts toward ``share.partition.max.record.locks`` (reference 3, record lock limit).

    Kafka counts every offset of the window, SPEO - SPSO + 1, acknowledged ones included; with
    Shoal's opt-in rule only records not yet done (AVAILABLE or ACQUIRED) count.
    """
    last = cache.last_offset
    if last is None or last < start:
        return 0
    if not count_only_inflight:
        return last - start + 1
    return sum(
        hi - lo + 1 for lo, hi, info in cache.runs(start, last) if not info.state.is_terminal
    )


def acquire_budget(
    cache: InFlightCache,
    start: int,
    max_records: int,
    max_record_locks: int,
    count_only_inflight: bool,
    fetch_offset: int,
) -> tuple[int, int | None]:
    """(records this acquisition may take, last offset it may reach or None)."""
    held = records_holding_locks(cache, start, count_only_inflight)
    budget = min(max_records, max_record_locks - held)
    if budget > 0:
        return budget, None
    last = cache.last_offset
    if last is not None and last >= start and fetch_offset <= last:
        # At the limit only re-deliveries inside the window are allowed, and only up to SPEO.
        return min(max_records, last - max(fetch_offset, start) + 1), last
    return 0, None


def log_spans(
    log_batches: Sequence[tuple[int, int]],
    lo: int,
    hi: int | None,
    skip: Sequence[tuple[int, int]] = (),
) -> list[tuple[int, int]]:
    """Turn log batch boundaries into spans clipped to ``[lo, hi]``, contiguous unless ``skip``
    (ascending, disjoint offset ranges never to deliver, broker/share/txn_filter.py) cuts them.

    Raises:
        ValueError: the boundaries are not ascending, non-overlapping ranges (a shell bug).
    """
    spans: list[tuple[int, int]] = []
    prev_last: int | None = None
    for i, (base, last) in enumerate(log_batches):
        if last < base or (prev_last is not None and base <= prev_last):
            raise ValueError(f"log batches must be ascending and disjoint: {log_batches!r}")
        prev_last = last
        end = log_batches[i + 1][0] - 1 if i + 1 < len(log_batches) else last
        start = max(base, lo)
        if hi is not None:
            end = min(end, hi)
        if start <= end:
            spans.append((start, end))
    return _cut(spans, skip) if skip else spans


def _cut(spans: list[tuple[int, int]], skip: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` minus the ``skip`` ranges (both ascending and disjoint)."""
    out: list[tuple[int, int]] = []
    k = 0
    for lo, hi in spans:
        while k < len(skip) and skip[k][1] < lo:
            k += 1
        j = k
        while lo <= hi:
            if j == len(skip) or skip[j][0] > hi:
                out.append((lo, hi))
                break
            s_lo, s_hi = skip[j]
            if s_lo > lo:
                out.append((lo, s_lo - 1))
            lo = max(lo, s_hi + 1)
            j += 1
    return out


def candidates(
    cache: InFlightCache, spans: list[tuple[int, int]], now_ms: int | None = None
) -> Iterator[Candidate]:
    """Yield acquirable runs over ``spans`` in offset order (lazily, so selection can stop).

    With ``now_ms`` (only while some record may be in redelivery backoff, broker/share/backoff.py)
    an AVAILABLE record whose ``available_at_ms`` is after it is skipped like an acquired one;
    without it no record is checked for backoff.
    """
    if not spans:
        return
    starts = [s for s, _ in spans]
    pos, end = spans[0][0], spans[-1][1]
    while pos <= end:
        i = bisect_right(starts, pos) - 1
        span_end = spans[i][1]
        if pos > span_end:  # a skipped range between two spans (txn_filter.py)
            pos = spans[i + 1][0]
            continue
        batch = cache.containing(pos)
        if batch is None:
            nxt = cache.next_after(pos)
            stop = span_end if nxt is None else min(span_end, nxt.first_offset - 1)
            yield Candidate(pos, stop, None, 0, i, i)
        elif batch.exploded:
            stop = min(batch.last_offset, span_end)
            if now_ms is None:
                yield from _available_runs(batch, pos, stop, i)
            else:
                yield from _available_runs_at(batch, pos, stop, i, now_ms)
        else:
            info = batch.whole
            if info.state is not RecordState.AVAILABLE or (
                now_ms is not None and info.available_at_ms > now_ms
            ):
                stop = batch.last_offset
            else:
                # A fully fetched AVAILABLE batch is re-acquired whole (one lock, one range);
                # one only partly fetched goes span by span.
                whole = batch.first_offset == pos and batch.last_offset <= end
                stop = batch.last_offset if whole else min(batch.last_offset, span_end)
                last_span = bisect_right(starts, stop) - 1
                yield Candidate(pos, stop, batch, info.delivery_count, i, last_span)
        pos = stop + 1


def _available_runs(batch: InFlightBatch, lo: int, hi: int, span: int) -> Iterator[Candidate]:
    """Runs of AVAILABLE offsets with one delivery count in ``[lo, hi]`` of an exploded batch."""
    run_start: int | None = None
    run_count = 0
    for offset in range(lo, hi + 1):
        rec = batch.info(offset)
        if rec.state is RecordState.AVAILABLE and run_start is not None and (
            rec.delivery_count == run_count
        ):
            continue
        if run_start is not None:
            yield Candidate(run_start, offset - 1, batch, run_count, span, span)
            run_start = None
        if rec.state is RecordState.AVAILABLE:
            run_start, run_count = offset, rec.delivery_count
    if run_start is not None:
        yield Candidate(run_start, hi, batch, run_count, span, span)


def _available_runs_at(
    batch: InFlightBatch, lo: int, hi: int, span: int, now_ms: int
) -> Iterator[Candidate]:
    """:func:`_available_runs` leaving out records still in redelivery backoff at ``now_ms``
    (a separate loop so the path without backoff does no extra work per record)."""
    run_start: int | None = None
    run_count = 0
    for offset in range(lo, hi + 1):
        rec = batch.info(offset)
        ok = rec.state is RecordState.AVAILABLE and rec.available_at_ms <= now_ms
        if ok and run_start is not None and rec.delivery_count == run_count:
            continue
        if run_start is not None:
            yield Candidate(run_start, offset - 1, batch, run_count, span, span)
            run_start = None
        if ok:
            run_start, run_count = offset, rec.delivery_count
    if run_start is not None:
        yield Candidate(run_start, hi, batch, run_count, span, span)


def throttle_cap(delivery_count: int, budget: int, limit: int) -> int | None:
    """How many records an acquisition may take once it includes this record, or None."""
    threshold = max(2, (limit + 1) // 2)
    if delivery_count < threshold:
        return None
    if limit > 2 and delivery_count == limit - 1:
        return 1  # its next delivery is the last one: deliver it alone
    return max(1, budget >> (delivery_count - threshold + 1))


def select(
    cands: Iterator[Candidate], budget: int, mode: AcquireMode, delivery_limit: int
) -> list[tuple[Candidate, int]]:
    """Pick (candidate, how many of its leading offsets to take) under the budget rules."""
    plan: list[tuple[Candidate, int]] = []
    taken = 0
    cap: int | None = None
    last_span: int | None = None
    for cand in cands:
        if cand.batch is not None:
            c = throttle_cap(cand.delivery_count, budget, delivery_limit)
            if c is not None:
                cap = c if cap is None else min(cap, c)
        if cap is not None:
            room = cap - taken
        elif mode is AcquireMode.RECORD_LIMIT:
            room = budget - taken
        else:
            # batch_optimized: keep going to the end of the log batch that reached the budget.
            if taken >= budget and cand.span != last_span:
                break
            room = cand.size
        if room <= 0:
            break
        take = min(cand.size, room)
        plan.append((cand, take))
        taken += take
        last_span = cand.last_span
        if take < cand.size:
            break
    return plan


def apply_plan(
    cache: InFlightCache,
    locks: LockIndex,
    plan: list[tuple[Candidate, int]],
    member_id: str,
    now_ms: int,
    deadline_ms: int,
    batch_size: int,
) -> tuple[list[AcquiredRecords], bool]:
    """Acquire the planned offsets; return the response ranges and whether any new offsets were
    left AVAILABLE behind a record_limit (or throttle) cut, so the next fetch must look back.

    Per-offset runs next to each other with equal delivery counts are merged into one range; a
    whole re-acquired cached batch and each batch of new offsets are ranges of their own
    (reference: createBatches and accumulateAcquiredRecords). Runs of new offsets are grouped
    into one cached batch per contiguous stretch of about ``batch_size`` records.
    """
    taker = _Taker(cache, locks, member_id, now_ms, deadline_ms)
    group: list[tuple[int, int, int]] = []  # new runs: (first, last taken, last of its span)
    for cand, take in plan:
        last_taken = cand.first + take - 1
        if cand.batch is None:
            if group and (
                group[-1][2] + 1 != cand.first
                or (batch_size > 0 and group[-1][1] - group[0][0] + 1 >= batch_size)
            ):
                taker.take_new(group)
            group.append((cand.first, last_taken, cand.last))
            continue
        if group:
            taker.take_new(group)
        taker.take_cached(cand, last_taken)
    if group:
        taker.take_new(group)
    return taker.out, taker.left_available


class _Taker:
    """The AVAILABLE -> ACQUIRED moves of one :func:`apply_plan`, and the ranges they give."""

    __slots__ = ("cache", "deadline_ms", "left_available", "locks", "member_id", "mergeable",
                 "now_ms", "out")

    def __init__(self, cache: InFlightCache, locks: LockIndex, member_id: str, now_ms: int,
                 deadline_ms: int) -> None:
        self.cache = cache
        self.locks = locks
        self.member_id = member_id
        self.now_ms = now_ms
        self.deadline_ms = deadline_ms
        self.out: list[AcquiredRecords] = []
        self.mergeable: list[bool] = []  # out[i] may merge with a following per-offset run
        self.left_available = False

    def take_new(self, group: list[tuple[int, int, int]]) -> None:
        """Cache the new offsets of ``group`` as one batch and acquire its taken part; clears
        ``group``."""
        cache = self.cache
        first, last_taken, last_span = group[0][0], group[-1][1], group[-1][2]
        batch = InFlightBatch(first, last_span, RecordInfo(RecordState.AVAILABLE, 0))
        if last_taken < last_span:
            # A cut inside a log batch: the cached batch still covers the whole log batch and the
            # rest stays AVAILABLE with delivery count 0 (reference, record_limit mode). A huge
            # batch is split at the cut instead of exploded (MAX_EXPLODED_OFFSETS).
            if batch.size > MAX_EXPLODED_OFFSETS:
                cache.add(batch)
                cache.split(batch, last_taken + 1)
            else:
                batch.explode()
                cache.add(batch)
            self.left_available = True
        else:
            cache.add(batch)
        for _lo, _hi, info in cache.units(first, last_taken):
            info.acquire(self.member_id, self.now_ms, self.deadline_ms)
        self.locks.push(self.deadline_ms, first, last_taken)
        self.out.append(AcquiredRecords(first, last_taken, 1))
        self.mergeable.append(False)
        group.clear()

    def take_cached(self, cand: Candidate, last_taken: int) -> None:
        """Acquire ``cand.first..last_taken`` of a cached AVAILABLE run again."""
        batch = cand.batch
        assert batch is not None
        whole = not batch.exploded and (batch.first_offset, batch.last_offset) == (
            cand.first,
            last_taken,
        )
        for _lo, _hi, info in self.cache.units(cand.first, last_taken):
            info.acquire(self.member_id, self.now_ms, self.deadline_ms)
        self.locks.push(self.deadline_ms, cand.first, last_taken)
        count = cand.delivery_count + 1
        out = self.out
        prev = out[-1] if out else None
        if (
            not whole
            and prev is not None
            and self.mergeable[-1]
            and prev.delivery_count == count
            and prev.last_offset + 1 == cand.first
        ):
            out[-1] = AcquiredRecords(prev.first_offset, last_taken, count)
        else:
            out.append(AcquiredRecords(cand.first, last_taken, count))
            self.mergeable.append(not whole)


def archive_missing(cache: InFlightCache, lo: int, hi: int) -> bool:
    """Archive ``[lo, hi]``, known to hold no records any more (compaction); True if changed.

    AVAILABLE cached records there are archived and holes are filled with ARCHIVED entries
    (delivery count 0), so the SPSO can move over records that do not exist. In memory only: if
    the leader restarts, the same fetch archives them again.
    """
    if lo > hi:
        return False
    changed = False
    for _a, _b, info in cache.units(lo, hi):
        if info.state is RecordState.AVAILABLE:
            info.settle(RecordState.ARCHIVED)
            changed = True
    pos = lo
    for batch in cache.overlapping(lo, hi):
        if batch.first_offset > pos:
            hole = InFlightBatch(pos, batch.first_offset - 1, RecordInfo(RecordState.ARCHIVED, 0))
            cache.add(hole)
            changed = True
        pos = batch.last_offset + 1
    if pos <= hi:
        cache.add(InFlightBatch(pos, hi, RecordInfo(RecordState.ARCHIVED, 0)))
        changed = True
    return changed


def archive_skipped_available(cache: InFlightCache, skip: Sequence[tuple[int, int]]) -> bool:
    """Archive cached AVAILABLE records inside ``skip`` (markers, aborted data: txn_filter.py)
    before planning, so a released or never-acquired one is not acquired again; True if any.

    ACQUIRED records there (taken before a switch to read_committed) are left to their owner.
    """
    changed = False
    for lo, hi in skip:
        if not any(info.state is RecordState.AVAILABLE for _a, _b, info in cache.runs(lo, hi)):
            continue  # nothing cached there, the usual case: no explosion
        for _a, _b, info in cache.units(lo, hi):
            if info.state is RecordState.AVAILABLE:
                info.settle(RecordState.ARCHIVED)
                changed = True
    return changed


def archive_skipped_reached(
    cache: InFlightCache, skip: Sequence[tuple[int, int]], reach: int
) -> bool:
    """After planning, fill the uncached offsets of ``skip`` ranges with ARCHIVED entries, for
    every range below the cache's end or ``reach`` and those following on from there; True if any.

    A range past an offset that was neither acquired nor cached stays untouched (the next fetch
    reads it again), so archiving never leaves an uncached hole behind the cache's end.
    """
    last = cache.last_offset
    end = reach if last is None else max(reach, last)
    changed = False
    for lo, hi in skip:
        if lo > end + 1:
            break
        changed = archive_missing(cache, lo, hi) or changed
        end = max(end, hi)
    return changed
