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

Most of a walk is records waiting for their keys (with few keys, a window of whole log batches
holds many records of each): the keys of in-flight records walked over are passed in bulk, and
a log batch whose distinct keys (``BatchKeys.key_set``, kept per share-partition) have all been
passed in this walk is skipped whole, since none of its records may be acquired now.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from broker.share.acquisition import (
    AcquiredRecords,
    AcquireMode,
    log_spans,
    throttle_cap,
)
from broker.share.inflight import InFlightBatch, InFlightCache, LockIndex, RecordInfo
from broker.share.record_state import RecordState
from broker.share.views import SharePartitionConfig

__all__ = ["KeyIndex", "KeyMap", "KeyedFetch", "acquire_keyed"]

#: offset -> hash of the record's key, or None for a null key (absent offsets are keyless too).
KeyMap = Mapping[int, int | None]

_MIN_SWEEP = 1024
_CHUNK = 64  # keys read at once by the walk over free records
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

    @property
    def cache(self) -> InFlightCache:
        """The in-flight cache the holders are checked against."""
        return self._cache

    def holder(self, key: int) -> int | None:
        """The offset holding ``key``, or None if the key is free (stale entries dropped)."""
        offset = self.held.get(key)
        if offset is None:
            return None
        batch = self._cache.containing(offset)
        if batch is not None:
            state = batch.info(offset).state
            if state is _ACQUIRED or state is _AVAILABLE:
                return offset
        del self.held[key]
        return None

    def hold(self, key: int, offset: int) -> None:
        self.held[key] = offset
        self.maybe_sweep()

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

    def maybe_sweep(self) -> None:
        """Drop stale entries once the index doubled since the last sweep (bounded memory)."""
        if len(self.held) >= self._sweep_at:
            for k in list(self.held):
                self.holder(k)
            self._sweep_at = max(_MIN_SWEEP, 2 * len(self.held))

    def items(self) -> list[tuple[int, int]]:
        """(key hash, holding offset) of every entry, stale ones included."""
        return list(self.held.items())


@dataclass(slots=True)
class KeyedFetch:
    """One keyed acquisition: who asks, what the shell read, and the window's bounds (read-only
    by convention; not ``frozen``, which would make building one per fetch cost 4x).

    ``start`` is the SPSO, ``room_new`` how many new offsets the record-lock limit still allows
    (the walk caches those it passes over AVAILABLE, as a record_limit cut leaves them; in
    batch_optimized mode a log batch begun under the limit is cached whole),
    ``held_at`` the time when records may be in redelivery backoff (else None),
    ``untracked_last`` the highest offset acquired without ordering (those records may be in
    flight without holding their keys here), ``skip`` offset ranges never to deliver and
    ``stable_end`` the first offset not to acquire (broker/share/txn_filter.py).
    """

    member_id: str
    log_batches: Sequence[tuple[int, int]]
    max_records: int
    acquire_mode: AcquireMode
    cfg: SharePartitionConfig
    now_ms: int
    keys: KeyMap
    start: int
    room_new: int
    held_at: int | None = None
    untracked_last: int = -1
    skip: Sequence[tuple[int, int]] = ()
    stable_end: int | None = None


def acquire_keyed(
    index: KeyIndex, locks: LockIndex, fetch: KeyedFetch
) -> tuple[list[AcquiredRecords], bool, int]:
    """Acquire for ``fetch.member_id`` in offset order, at most one record per key in flight
    (the rules of this module). Returns (the ranges acquired, whether the walk stopped at the
    budget with records left, how many new offsets it cached).

    Whole (not exploded) AVAILABLE batches are handled in runs: a run of acquirable records is
    split off and acquired as one batch, a run of blocked ones is passed over in place, so
    acknowledging, persisting and scanning stay per batch as without ordering. Exploded batches
    go record by record.
    """
    return _KeyedWalk(index, locks, fetch).run()


class _KeyedWalk:
    """The state of one :func:`acquire_keyed` walk across the spans of a read."""

    __slots__ = ("added", "cache", "cap", "deadline", "fetch", "index", "key_of", "key_set",
                 "locks", "need", "out", "passed", "single", "soft", "soft_end", "span_hi",
                 "stopped", "taken", "window_last")

    def __init__(self, index: KeyIndex, locks: LockIndex, fetch: KeyedFetch) -> None:
        self.index = index
        self.locks = locks
        self.cache = index.cache
        self.fetch = fetch
        self.key_of = fetch.keys.get
        self.deadline = fetch.now_ms + fetch.cfg.record_lock_duration_ms
        last = self.cache.last_offset
        self.window_last = fetch.start - 1 if last is None or last < fetch.start else last
        self.out: list[AcquiredRecords] = []
        self.single: list[bool] = []  # out[i] came from one record of an exploded batch
        self.taken = 0
        self.passed: set[int] = set()  # keys of non-terminal records walked over in this walk
        # The distinct keys of a log batch (protocol.record_keys.BatchKeys.key_set), and per log
        # batch how many keys ``passed`` must hold before its keys may all be in it.
        self.key_set = getattr(fetch.keys, "key_set", None)
        self.need: dict[int, int] = {}
        self.cap: int | None = None
        self.added = 0
        self.stopped = False
        # batch_optimized: MaxRecords is soft, as without ordering: once it is reached the walk
        # may go on to the end of that log batch (soft_end), still one record per key.
        self.soft = fetch.acquire_mode is AcquireMode.BATCH_OPTIMIZED
        self.soft_end: int | None = None
        self.span_hi = 0

    def run(self) -> tuple[list[AcquiredRecords], bool, int]:
        fetch = self.fetch
        hi = None if fetch.room_new > 0 else self.window_last
        if fetch.stable_end is not None:  # read_committed: nothing from the LSO on
            hi = fetch.stable_end - 1 if hi is None else min(hi, fetch.stable_end - 1)
        for lo, span_hi in log_spans(fetch.log_batches, fetch.start, hi, fetch.skip):
            self.span_hi = span_hi
            pos = lo
            while pos <= span_hi and not self.stopped:
                batch = self._batch_at(pos, span_hi)
                if batch is None:
                    break
                end = min(span_hi, batch.last_offset)
                if batch.exploded:
                    self._walk_exploded(batch, pos, end)
                    pos = end + 1
                else:
                    pos = self._walk_whole(batch, pos, end)
            if self.stopped:
                break
        return self.out, self.stopped, self.added

    def _batch_at(self, pos: int, span_hi: int) -> InFlightBatch | None:
        """The cached batch at ``pos``, caching new offsets up to the lock limit (None and
        ``stopped`` when the limit allows none)."""
        cache = self.cache
        batch = cache.containing(pos)
        if batch is not None:
            return batch
        nxt = cache.next_after(pos)
        stop = span_hi if nxt is None else min(span_hi, nxt.first_offset - 1)
        if pos > self.window_last:  # new records widen the window: lock limit
            room = self.fetch.room_new - self.added
            if room <= 0:
                self.stopped = True
                return None
            # batch_optimized: the limit is checked where a log batch starts, and the batch
            # enters the window whole, as without ordering (acquisition.py: a batch crossing
            # the budget is acquired whole); still one record per key is acquired from it.
            # record_limit: up to the limit exactly.
            n = stop - pos + 1 if self.soft else min(stop - pos + 1, room)
            self.added += n
            stop = pos + n - 1
        batch = InFlightBatch(pos, stop, RecordInfo(RecordState.AVAILABLE, 0))
        cache.add(batch)
        return batch

    def _covered(self, pos: int) -> int | None:
        """The last offset of the log batch holding ``pos`` if every key of that batch was
        passed in this walk (so none of its records from ``pos`` on may be acquired now), else
        None. A failed check is not repeated until ``passed`` grew by the keys it lacked."""
        key_set = self.key_set
        if key_set is None:
            return None
        got = key_set(pos)
        if got is None:
            return None
        last, keys = got
        passed = self.passed
        need = self.need.get(last)
        if need is not None and len(passed) < need:
            return None
        missing = len(keys.difference(passed))
        if missing == 0:
            return last
        self.need[last] = len(passed) + missing
        return None

    def _throttle(self, delivery_count: int) -> None:
        fetch = self.fetch
        c = throttle_cap(delivery_count, fetch.max_records, fetch.cfg.delivery_count_limit)
        if c is not None:
            self.cap = c if self.cap is None else min(self.cap, c)

    def _room(self, pos: int) -> int:
        """How many more records the walk may take at ``pos``."""
        max_records = self.fetch.max_records
        cap = self.cap
        left = (max_records if cap is None else min(cap, max_records)) - self.taken
        if left > 0 or not self.soft or cap is not None:
            return left
        if self.soft_end is None:
            self.soft_end = self.span_hi
        return self.soft_end - pos + 1

    def _walk_exploded(self, batch: InFlightBatch, pos: int, end: int) -> None:
        """Record by record over ``[pos, end]`` of an exploded batch."""
        fetch = self.fetch
        held_at = fetch.held_at
        key_of = self.key_of
        passed = self.passed
        index = self.index
        out = self.out
        single = self.single
        member_id, now_ms, deadline = fetch.member_id, fetch.now_ms, self.deadline
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
            self._throttle(info.delivery_count)
            if self._room(pos) <= 0:  # (soft end counted from the segment's start)
                self.stopped = True
                return
            info.acquire(member_id, now_ms, deadline)
            self.taken += 1
            self.locks.push(deadline, o, o)
            prev = out[-1] if out else None
            count = info.delivery_count
            if (prev is not None and single[-1] and prev.last_offset + 1 == o
                    and prev.delivery_count == count):
                out[-1] = AcquiredRecords(prev.first_offset, o, count)
            else:
                out.append(AcquiredRecords(o, o, count))
                single.append(True)
            if k is not None:
                index.hold(k, o)
                passed.add(k)

    def _walk_whole(self, batch: InFlightBatch, pos: int, end: int) -> int:
        """A whole batch from ``pos``: acquire its next run of free records as one batch, or
        pass over the records it cannot take; returns where the walk goes on."""
        fetch = self.fetch
        info = batch.whole
        if info.state is not RecordState.AVAILABLE or (
            fetch.held_at is not None and info.available_at_ms > fetch.held_at
        ):
            if not info.state.is_done and self._covered(pos) is None:
                # Their keys are held (in KeyIndex too, if acquired with ordering): passed in
                # bulk here rather than looked up one by one when later records meet them.
                between = getattr(fetch.keys, "between", None)
                ks = (between(pos, end) if between is not None
                      else [fetch.keys.get(o) for o in range(pos, end + 1)])
                self.passed.update(ks)
                self.passed.discard(None)  # type: ignore[arg-type]
            return end + 1
        self._throttle(info.delivery_count)
        budget = self._room(pos)
        if budget <= 0:
            self.stopped = True
            return pos
        index, passed = self.index, self.passed
        n, free = _free_run(index, pos, min(end, pos + budget - 1), fetch.keys, passed)
        if n == 0:
            last = self._covered(pos)
            if last is not None:  # every record of the log batch from pos waits for its key
                return min(end, last) + 1
            return _blocked_run(index, pos, end, fetch.keys, passed)
        # Split the run [pos, pos + n - 1] off and acquire it as one batch.
        cache = self.cache
        if pos > batch.first_offset:
            batch = cache.split(batch, pos)
        if pos + n - 1 < batch.last_offset:
            cache.split(batch, pos + n)
        batch.whole.acquire(fetch.member_id, fetch.now_ms, self.deadline)
        self.locks.push(self.deadline, pos, pos + n - 1)
        self.out.append(AcquiredRecords(pos, pos + n - 1, batch.whole.delivery_count))
        self.single.append(False)
        self.taken += n
        for k, o in free.items():
            index.hold_new(k, o)
        passed.update(free)
        index.maybe_sweep()
        return pos + n


def _free_run(
    index: KeyIndex, lo: int, hi: int, keys: KeyMap, passed: set[int]
) -> tuple[int, dict[int, int]]:
    """How many records from ``lo`` (up to ``hi``, at most the fetch's budget) of a whole
    AVAILABLE batch may be acquired together now (keys free and distinct), and their key ->
    offset. The keys are read a chunk at a time; KeyIndex is asked only about keys it has."""
    between = getattr(keys, "between", None)
    held = index.held
    blocked = index.blocks
    free: dict[int, int] = {}
    o = lo
    while o <= hi:
        top = min(hi, o + _CHUNK - 1)
        ks = between(o, top) if between is not None else [keys.get(x) for x in range(o, top + 1)]
        for k in ks:
            if k is not None:
                if k in passed or k in free or (k in held and blocked(k, o)):
                    return o - lo, free
                free[k] = o
            o += 1
    return hi - lo + 1, free

def _blocked_run(index: KeyIndex, lo: int, hi: int, keys: KeyMap, passed: set[int]) -> int:
    """The first offset from ``lo`` (at most ``hi + 1``) whose record is not blocked by its
    key; the keys of the blocked ones are added to ``passed``. The hot loop of a walk over
    records waiting for their keys: :meth:`KeyIndex.blocks` inlined."""
    between = getattr(keys, "between", None)
    ks = between(lo, hi) if between is not None else [keys.get(o) for o in range(lo, hi + 1)]
    held = index.held
    containing = index.cache.containing
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
