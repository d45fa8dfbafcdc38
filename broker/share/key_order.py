"""Per-key ordering while sharing (``share.ordering=key``, a Shoal extension, opt-in per group).

Within one share-partition:

- at most one record per key is acquired at a time, and a key's records are first delivered in
  offset order;
- a record of a key that was delivered and is not done yet (ACQUIRED, an acknowledgement write in
  flight, or AVAILABLE again after RELEASE, lock expiry or its member leaving, in redelivery
  backoff or not) *holds* its key: only that record can be acquired for the key, so it is
  delivered again before any later record of the key;
- a record that becomes terminal (ACCEPT, REJECT, delivery-limit or any other archive) or goes
  to ARCHIVING (dead-lettered, broker/share/dead_letter.py) frees its key; the next record of
  the key in offset order is then acquirable;
- records with a null key (or in batches whose keys cannot be read) are not ordered.

The rule the acquisition applies is: *an AVAILABLE record is acquirable only if no record of its
key below it is still non-terminal*. Acquisition walks offsets in order from the first fetchable
one, so for records ahead of the walk the rule is kept by remembering, during one walk, every key
whose record was passed over. For records behind it (acquired, or waiting in backoff) the
share-partition keeps :class:`KeyIndex`: key hash -> offset of the record holding the key.
Entries are checked lazily against the in-flight cache (a holder that became terminal or left
the cache no longer holds), so no transition needs to update the index, and a periodic sweep
keeps its size bounded by the in-flight window.

With ordering on, acquisition works record by record (like ShareAcquireMode record_limit), so a
log batch can be split between keys; the shell hands the record keys of the batches it read
(``protocol/record_keys.py``). Keys are compared by ``hash(bytes)``: a collision only makes two
keys wait for each other, never breaks the order.

Restart: the share state does not record keys. A loaded AVAILABLE record with delivery count
>= 1 was delivered before, so it holds its key: the shell reads the keys of those records from
the log (``SharePartition.unkeyed_ranges`` / ``register_keys``) before the first keyed
acquisition. Records ACQUIRED at the crash come back as their persisted state says, as in Kafka.

Switching ``share.ordering`` applies to new acquisitions: records acquired before the switch to
``key`` do not hold their keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from broker.share.acquisition import (
    AcquiredRecords,
    AcquireMode,
    log_spans,
    throttle_cap,
)
from broker.share.inflight import InFlightBatch, InFlightCache, LockIndex, RecordInfo
from broker.share.record_state import RecordState
from broker.share.views import SharePartitionConfig

__all__ = ["KeyIndex", "KeyMap", "acquire_keyed"]

#: offset -> hash of the record's key, or None for a null key (absent offsets are keyless too).
KeyMap = Mapping[int, int | None]

_MIN_SWEEP = 1024
_ACQUIRED = RecordState.ACQUIRED
_AVAILABLE = RecordState.AVAILABLE


class KeyIndex:
    """key hash -> offset of the delivered, not yet terminal record holding that key."""

    __slots__ = ("_cache", "_sweep_at", "held")

    def __init__(self, cache: InFlightCache) -> None:
        self._cache = cache
        self.held: dict[int, int] = {}
        self._sweep_at = _MIN_SWEEP

    def blocks(self, key: int, offset: int) -> bool:
        """Whether another record holds ``key``, so the record at ``offset`` must wait (the
        hot path of acquisition: :meth:`holder` inlined)."""
        held = self.held.get(key)
        if held is None or held == offset:
            return False
        batch = self._cache.containing(held)
        if batch is not None:
            state = batch.info(held).state
            if state is _ACQUIRED or state is _AVAILABLE:
                return True
        del self.held[key]
        return False

    def __len__(self) -> int:
        return len(self.held)

    def holder(self, cache: InFlightCache, key: int) -> int | None:
        """The offset holding ``key``, or None if the key is free (stale entries dropped)."""
        offset = self.held.get(key)
        if offset is None:
            return None
        batch = cache.containing(offset)
        if batch is not None:
            state = batch.info(offset).state
            if state is _ACQUIRED or state is _AVAILABLE:
                return offset
        del self.held[key]
        return None

    def hold(self, cache: InFlightCache, key: int, offset: int) -> None:
        self.held[key] = offset
        self.maybe_sweep(cache)

    def hold_new(self, key: int, offset: int) -> None:
        """As :meth:`hold`, the caller sweeping (:meth:`maybe_sweep`) after a run of them."""
        self.held[key] = offset

    def release(self, keys: KeyMap, lo: int, hi: int) -> None:
        """The records ``lo..hi`` (keys in ``keys``) became terminal: drop the entries they hold
        now rather than when a walk next meets their keys (two dict look-ups per record, no
        search of the in-flight cache). Entries missed here are still found stale lazily."""
        held = self.held
        key_of = keys.get
        for o in range(lo, hi + 1):
            k = key_of(o)
            if k is not None and held.get(k) == o:
                del held[k]

    def maybe_sweep(self, cache: InFlightCache) -> None:
        """Drop stale entries once the index doubled since the last sweep (bounded memory)."""
        if len(self.held) >= self._sweep_at:
            for k in list(self.held):
                self.holder(cache, k)
            self._sweep_at = max(_MIN_SWEEP, 2 * len(self.held))

    def items(self) -> list[tuple[int, int]]:
        """(key hash, holding offset) of every entry, stale ones included."""
        return list(self.held.items())


def acquire_keyed(
    cache: InFlightCache,
    locks: LockIndex,
    index: KeyIndex,
    start: int,
    untracked_last: int,
    room_new: int,
    member_id: str,
    log_batches: Sequence[tuple[int, int]],
    max_records: int,
    acquire_mode: AcquireMode,
    cfg: SharePartitionConfig,
    now_ms: int,
    held_at: int | None,
    keys: KeyMap,
    skip: Sequence[tuple[int, int]] = (),
    stable_end: int | None = None,
) -> tuple[list[AcquiredRecords], bool, int]:
    """Acquire for ``member_id`` in offset order, at most one record per key in flight (the
    rules of this module). Returns (the ranges acquired, whether the walk stopped at the budget
    with records left, how many new offsets it cached).

    ``start`` is the SPSO, ``room_new`` how many new offsets the record-lock limit still allows
    (the walk caches those it passes over AVAILABLE, as a record_limit cut leaves them),
    ``held_at`` the time when records may be in redelivery backoff (else None), and
    ``untracked_last`` the highest offset acquired without ordering (those records may be in
    flight without holding their keys here), ``skip`` offset ranges never to deliver and
    ``stable_end`` the first offset not to acquire (broker/share/txn_filter.py).

    Whole (not exploded) AVAILABLE batches are handled in runs: a run of acquirable records is
    split off and acquired as one batch, a run of blocked ones is passed over in place, so
    acknowledging, persisting and scanning stay per batch as without ordering. Exploded batches
    go record by record.
    """
    deadline = now_ms + cfg.record_lock_duration_ms
    last = cache.last_offset
    window_last = start - 1 if last is None or last < start else last
    hi = None if room_new > 0 else window_last
    if stable_end is not None:  # read_committed: nothing from the last stable offset on
        hi = stable_end - 1 if hi is None else min(hi, stable_end - 1)
    spans = log_spans(log_batches, start, hi, skip)
    key_of = keys.get
    out: list[AcquiredRecords] = []
    single: list[bool] = []  # out[i] came from one record of an exploded batch (mergeable)
    taken = 0
    passed: set[int] = set()  # keys of non-terminal records walked over in this walk
    cap: int | None = None
    added = 0
    stopped = False

    # batch_optimized: MaxRecords is soft, as without ordering: once it is reached the walk
    # may go on to the end of that log batch (soft_end), still one record per key.
    soft = acquire_mode is AcquireMode.BATCH_OPTIMIZED
    soft_end: int | None = None

    def room() -> int:
        nonlocal soft_end
        left = (max_records if cap is None else min(cap, max_records)) - taken
        if left > 0 or not soft or cap is not None:
            return left
        if soft_end is None:
            soft_end = hi
        return soft_end - pos + 1

    for lo, hi in spans:
        pos = lo
        while pos <= hi and not stopped:
            batch = cache.containing(pos)
            if batch is None:
                nxt = cache.next_after(pos)
                stop = hi if nxt is None else min(hi, nxt.first_offset - 1)
                if pos > window_last:  # new records widen the window: lock limit
                    n = min(stop - pos + 1, room_new - added)
                    if n <= 0:
                        stopped = True
                        break
                    added += n
                    stop = pos + n - 1
                batch = InFlightBatch(pos, stop, RecordInfo(RecordState.AVAILABLE, 0))
                cache.add(batch)
            end = min(hi, batch.last_offset)
            if batch.exploded:
                for o in range(pos, end + 1):
                    info = batch.info(o)
                    k = key_of(o)
                    if info.state is not RecordState.AVAILABLE or (
                        held_at is not None and info.available_at_ms > held_at
                    ):
                        if k is not None and not info.state.is_done:
                            passed.add(k)
                        continue
                    if k is not None:
                        if k in passed:
                            continue
                        if index.blocks(k, o):
                            passed.add(k)
                            continue
                    c = throttle_cap(
                        info.delivery_count, max_records, cfg.delivery_count_limit
                    )
                    if c is not None:
                        cap = c if cap is None else min(cap, c)
                    if room() <= 0:
                        stopped = True
                        break
                    info.acquire(member_id, now_ms, deadline)
                    taken += 1
                    locks.push(deadline, o, o)
                    prev = out[-1] if out else None
                    count = info.delivery_count
                    if (prev is not None and single[-1] and prev.last_offset + 1 == o
                            and prev.delivery_count == count):
                        out[-1] = AcquiredRecords(prev.first_offset, o, count)
                    else:
                        out.append(AcquiredRecords(o, o, count))
                        single.append(True)
                    if k is not None:
                        index.hold(cache, k, o)
                        passed.add(k)
                pos = end + 1
                continue
            info = batch.whole
            if info.state is not RecordState.AVAILABLE or (
                held_at is not None and info.available_at_ms > held_at
            ):
                if not info.state.is_done and (
                    info.state is not RecordState.ACQUIRED or pos <= untracked_last
                ):
                    # Keys of records acquired with ordering are in KeyIndex already.
                    passed.update(
                        k for o in range(pos, end + 1) if (k := key_of(o)) is not None
                    )
                pos = end + 1
                continue
            c = throttle_cap(info.delivery_count, max_records, cfg.delivery_count_limit)
            if c is not None:
                cap = c if cap is None else min(cap, c)
            budget = room()
            if budget <= 0:
                stopped = True
                break
            n, free = _free_run(cache, index, pos, min(end, pos + budget - 1), key_of, passed)
            if n == 0:
                pos = _blocked_run(cache, index, pos, end, keys, passed)
                continue
            # Split the run [pos, pos + n - 1] off and acquire it as one batch.
            if pos > batch.first_offset:
                batch = cache.split(batch, pos)
            if pos + n - 1 < batch.last_offset:
                cache.split(batch, pos + n)
            batch.whole.acquire(member_id, now_ms, deadline)
            locks.push(deadline, pos, pos + n - 1)
            out.append(AcquiredRecords(pos, pos + n - 1, batch.whole.delivery_count))
            single.append(False)
            taken += n
            for k, o in free.items():
                index.hold_new(k, o)
            passed.update(free)
            index.maybe_sweep(cache)
            pos += n
        if stopped:
            break
    return out, stopped, added

def _free_run(
    cache: InFlightCache, index: KeyIndex, lo: int, hi: int, key_of: Callable[[int], int | None], passed: set[int]
) -> tuple[int, dict[int, int]]:
    """How many records from ``lo`` (up to ``hi``) of a whole AVAILABLE batch may be
    acquired together now (keys free and distinct), and their key -> offset."""
    blocked = index.blocks
    free: dict[int, int] = {}
    for o in range(lo, hi + 1):
        k = key_of(o)
        if k is None:
            continue
        if k in passed or k in free or blocked(k, o):
            return o - lo, free
        free[k] = o
    return hi - lo + 1, free

def _blocked_run(cache: InFlightCache, index: KeyIndex, lo: int, hi: int, keys: KeyMap, passed: set[int]) -> int:
    """The first offset from ``lo`` (at most ``hi + 1``) whose record is not blocked by its
    key; the keys of the blocked ones are added to ``passed``. The hot loop of a walk over
    records waiting for their keys: :meth:`KeyIndex.blocks` inlined."""
    between = getattr(keys, "between", None)
    ks = between(lo, hi) if between is not None else [keys.get(o) for o in range(lo, hi + 1)]
    held = index.held
    containing = cache.containing
    acquired, available = RecordState.ACQUIRED, RecordState.AVAILABLE
    o = lo
    for k in ks:
        if k is None:
            return o
        if k not in passed:
            h = held.get(k)
            if h is None or h == o:
                return o
            b = containing(h)
            if b is None or (state := b.info(h).state) is not acquired and (
                state is not available
            ):
                del held[k]
                return o
            passed.add(k)
        o += 1
    return hi + 1
