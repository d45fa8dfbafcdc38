"""Acquisition on a share-partition: the ``acquire`` side of :class:`SharePartition`.

A ShareFetch's shell reads whole log batches from ``next_fetch_offset`` and calls
:meth:`AcquireOps.acquire`. Before anything is acquired the read is cleaned: offsets missing
before the first batch (compaction) are archived, with ``share.isolation.level=read_committed``
nothing at or past the last stable offset is taken, and transaction markers (and, in
read_committed, aborted records) become ``skip`` ranges that are archived, never acquired
(:mod:`broker.share.txn_filter`). Then one of two planners runs:

- Kafka's (:mod:`broker.share.acquisition`): whole runs of offsets under the request budget;
- ``share.ordering=key`` (:mod:`broker.share.key_order`): record by record, one record per key
  in flight. A walk that found nothing is remembered (``_fruitless``, ``keyed_idle``) and not
  repeated until something frees a key, so parked fetches do not walk the window again.

This module is one part of :class:`broker.share.partition.SharePartition` (a mixin over its
fields, listed below); the window's invariants are in that module's docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.share.acquisition import (
    AcquiredRecords,
    AcquireMode,
    acquire_budget,
    apply_plan,
    archive_missing,
    archive_skipped_available,
    archive_skipped_reached,
    candidates,
    log_spans,
    records_holding_locks,
    select,
)
from broker.share.key_order import KeyedFetch, KeyMap, acquire_keyed
from broker.share.txn_filter import AbortedRange, TxnBatch, skip_ranges
from broker.share.views import SharePartitionConfig
from persister.api import WriteParams

if TYPE_CHECKING:
    from broker.share.backoff import BackoffIndex
    from broker.share.inflight import InFlightCache, LockIndex
    from broker.share.key_order import KeyIndex
    from broker.share.state_writes import StateWrites

__all__ = ["AcquireOps"]


@dataclass(slots=True)
class _Acquisition:
    """One cleaned read to acquire from: who asks, the budget, and what not to take.

    Read-only by convention; not ``frozen`` because one is built per ShareFetch and a frozen
    dataclass's ``__init__`` costs about four times as much.
    """

    member_id: str
    log_batches: Sequence[tuple[int, int]]
    fetch_start: int  # where the read started (the first batch's base without a fetch offset)
    max_records: int
    batch_size: int
    acquire_mode: AcquireMode
    cfg: SharePartitionConfig
    now_ms: int
    held_at: int | None  # now_ms while records may be in redelivery backoff, else None
    skip: Sequence[tuple[int, int]]
    stable_end: int | None  # read_committed: the first offset not to acquire


class AcquireOps:
    """Acquisition and the key-ordering state of :class:`SharePartition`."""

    # Fields of SharePartition this part reads and writes (set in SharePartition.__init__).
    _config: Callable[[], SharePartitionConfig]
    _start: int
    _cache: InFlightCache
    _locks: LockIndex
    _backoff: BackoffIndex
    _writes: StateWrites
    _find_next: bool
    _wakeup: bool
    _keys: KeyIndex
    _key_version: int
    _fruitless: tuple[object, ...] | None
    _idle: tuple[object, ...] | None
    _walk_complete: bool
    _untracked_last: int
    _ordering_on: bool
    _unkeyed: list[tuple[int, int]]
    _skipped: bool

    if TYPE_CHECKING:
        def _after_change(self, found_available: bool) -> None: ...
        def _tick(self, now_ms: int | None) -> int: ...

    def acquire(
        self,
        member_id: str,
        log_batches: Sequence[tuple[int, int]],
        max_records: int,
        batch_size: int,
        acquire_mode: AcquireMode,
        now_ms: int,
        *,
        fetch_offset: int | None = None,
        txn_batches: Sequence[TxnBatch] = (),
        stable_end: int | None = None,
        aborted: Sequence[AbortedRange] = (),
        keys: KeyMap | None = None,
        read_key: object = None,
    ) -> list[AcquiredRecords]:
        """Acquire records for ``member_id`` from log batches read at the next fetch offset.

        ``log_batches`` are the (base_offset, last_offset) of whole log batches as read;
        ``fetch_offset`` is the offset the read started at: offsets from there up to the first
        returned batch no longer exist (compaction) and are archived so the window can move.
        ``txn_batches`` are the read batches with the transactional or control attribute:
        control batches (transaction markers) are archived, never acquired, in either isolation
        level. With ``share.isolation.level=read_committed`` (the config, read per call, so a
        live switch applies to the next acquisition, re-deliveries included) nothing at or past
        ``stable_end`` (the partition's last stable offset; None = no limit) is acquired, and
        transactional batches of the ``aborted`` transactions are archived too
        (broker/share/txn_filter.py). Returns the ranges to put in the response; the shell
        subtracts their total size from the request's MaxRecords budget. ``batch_size`` <= 0
        means no BatchSize splitting. With ``share.ordering=key`` the shell passes ``keys``
        (offset -> key hash or None) of the records read, and acquisition goes record by
        record (broker/share/key_order.py).

        Raises:
            ValueError: ``log_batches`` are not ascending, disjoint ranges (a shell bug).
        """
        if max_records <= 0 or not log_batches:
            return []
        cfg = self._config()
        held_at = self._end_backoffs(now_ms)
        if fetch_offset is not None and log_batches[0][0] > fetch_offset:
            self._archive_compacted(fetch_offset, log_batches[0][0] - 1)
        if not cfg.read_committed:
            stable_end = None
        elif stable_end is not None and log_batches[-1][0] >= stable_end:
            log_batches = [b for b in log_batches if b[0] < stable_end]
            if not log_batches:
                return []  # an open transaction holds the share-partition at the LSO
        start = fetch_offset if fetch_offset is not None else log_batches[0][0]
        skip = self._skip_txn(log_batches, txn_batches, aborted, cfg, stable_end)
        todo = _Acquisition(member_id, log_batches, start, max_records, batch_size, acquire_mode,
                            cfg, now_ms, held_at, skip, stable_end)
        self._ordering_on = cfg.key_ordering
        if cfg.key_ordering:
            if keys is None:
                raise ValueError("share.ordering=key needs the record keys of the log batches")
            ranges = self._acquire_keyed(todo, keys)
            # Nothing is left to find in this read until something frees a key (or more log
            # arrives): the walk found nothing, or went to its end taking every free record.
            self._idle = (
                (self._key_version, read_key, cfg)
                if (not ranges or self._walk_complete) and read_key is not None
                and not self._backoff else None
            )
        else:
            ranges = self._acquire_ranges(todo)
        if skip:
            reach = ranges[-1].last_offset if ranges else start - 1
            if archive_skipped_reached(self._cache, skip, reach):
                self._after_change(found_available=False)
                self._skipped = True
        return ranges

    def _end_backoffs(self, now_ms: int) -> int | None:
        """End the redelivery backoffs due at ``now_ms``; returns ``now_ms`` while records are
        still in backoff (acquisition then skips them), else None."""
        if not self._backoff:
            return None
        self._tick(now_ms)
        if self._backoff.pop_due(now_ms):
            self._key_version += 1
            self._find_next = True
        return now_ms if self._backoff else None

    def _archive_compacted(self, lo: int, hi: int) -> None:
        """Compaction (Kafka maybeArchiveStaleBatches): nothing exists from the fetch offset
        ``lo`` up to the first batch returned (``hi``), so those records are done (in memory)."""
        if archive_missing(self._cache, max(lo, self._start), hi):
            self._after_change(found_available=False)

    def _skip_txn(
        self,
        log_batches: Sequence[tuple[int, int]],
        txn_batches: Sequence[TxnBatch],
        aborted: Sequence[AbortedRange],
        cfg: SharePartitionConfig,
        stable_end: int | None,
    ) -> list[tuple[int, int]]:
        """Ranges of the read never to deliver (markers; aborted records in read_committed),
        clipped to the window; the AVAILABLE ones already cached are archived now."""
        if not txn_batches:
            return []
        skip = skip_ranges(log_batches, txn_batches, aborted if cfg.read_committed else None)
        if skip:
            skip = _clip(skip, self._start, stable_end)
        if skip and archive_skipped_available(self._cache, skip):
            self._after_change(found_available=False)
            self._skipped = True
        return skip

    def _acquire_ranges(self, todo: _Acquisition) -> list[AcquiredRecords]:
        """Kafka's acquisition: whole runs of offsets under the request budget (acquisition.py),
        leaving out ``skip`` and everything from ``stable_end`` on."""
        cfg = todo.cfg
        budget, clamp = acquire_budget(
            self._cache,
            self._start,
            todo.max_records,
            cfg.max_record_locks,
            cfg.count_only_inflight_toward_lock_limit,
            todo.fetch_start,
        )
        if budget <= 0:
            return []
        stable_end = todo.stable_end
        if stable_end is not None:
            clamp = stable_end - 1 if clamp is None else min(clamp, stable_end - 1)
        spans = log_spans(todo.log_batches, self._start, clamp, todo.skip)
        plan = select(
            candidates(self._cache, spans, todo.held_at), budget, todo.acquire_mode,
            cfg.delivery_count_limit,
        )
        deadline = todo.now_ms + cfg.record_lock_duration_ms
        ranges, left_available = apply_plan(
            self._cache, self._locks, plan, todo.member_id, todo.now_ms, deadline,
            todo.batch_size,
        )
        if left_available:
            self._find_next = self._wakeup = True
        self._locks.maybe_compact()
        if ranges:
            self._untracked_last = max(self._untracked_last, ranges[-1].last_offset)
        return ranges

    def _acquire_keyed(self, todo: _Acquisition, keys: KeyMap) -> list[AcquiredRecords]:
        """share.ordering=key: :func:`broker.share.key_order.acquire_keyed`, skipped when a
        walk over the same records found nothing and nothing freed a key since."""
        cfg = todo.cfg
        held = records_holding_locks(
            self._cache, self._start, cfg.count_only_inflight_toward_lock_limit
        )
        room_new = cfg.max_record_locks - held
        log_batches = todo.log_batches
        sig = (self._key_version, log_batches[0][0], log_batches[-1][1], room_new, todo.held_at,
               cfg, todo.stable_end)
        if self._fruitless == sig:
            return []
        out, stopped, added = acquire_keyed(self._keys, self._locks, KeyedFetch(
            todo.member_id, log_batches, todo.max_records, todo.acquire_mode, cfg, todo.now_ms,
            keys, self._start, room_new, todo.held_at, self._untracked_last, todo.skip,
            todo.stable_end,
        ))
        # Records walked over stay AVAILABLE: the next fetch looks back for them.
        self._find_next = True
        if stopped:
            self._wakeup = True
        self._locks.maybe_compact()
        # A walk that found nothing, or went to the end of its read taking every free record,
        # leaves nothing for another walk over the same read until a key is freed (version) or
        # the log, lock room or config change: remembered as the next walk will see it. (Without
        # this, the parked fetches woken by an acknowledgement walked the window once more after
        # the acknowledging consumer's own fetch took the freed keys.)
        self._walk_complete = not stopped
        if out and stopped:
            self._fruitless = None
        else:
            self._fruitless = sig[:3] + (room_new - added,) + sig[4:]
        return out

    @property
    def read_committed(self) -> bool:
        """Whether the group has share.isolation.level=read_committed now (the shell then reads
        only up to the last stable offset and passes the aborted transactions)."""
        return self._config().read_committed

    def take_archive_write(self) -> WriteParams | None:
        """After an acquisition archived transaction markers or aborted records: a write telling
        the persister the start offset they let the SPSO move to, or None if it knows it (so an
        idle share-partition can settle, and a restart does not read them again)."""
        if not self._skipped:
            return None
        self._skipped = False
        return self._writes.committed(self._start, [])

    # ------------------------------------------------------------------ key ordering

    def keyed_idle(self, read_key: object) -> bool:
        """Whether a keyed acquisition from the read described by ``read_key`` (the shell's
        fetch offset, log end, budget) would find nothing: one did, and nothing that frees a key
        or makes a record acquirable happened since. The shell then skips reading the log."""
        idle = self._idle
        return (idle is not None and idle[0] == self._key_version and idle[1] == read_key
                and idle[2] == self._config())

    @property
    def key_ordering(self) -> bool:
        """Whether the group has share.ordering=key now (the shell then passes record keys)."""
        return self._config().key_ordering

    @property
    def ordering_on(self) -> bool:
        """share.ordering=key was in force at the last acquisition."""
        return self._ordering_on

    @property
    def has_unkeyed(self) -> bool:
        """Whether :meth:`unkeyed_ranges` is not empty (cheap)."""
        return bool(self._unkeyed)

    def unkeyed_ranges(self) -> list[tuple[int, int]]:
        """Offset ranges whose record keys the shell should read from the log and hand to
        :meth:`register_keys` before the next keyed acquisition (restart rule of
        broker/share/key_order.py); empty once done."""
        return list(self._unkeyed)

    def register_keys(self, keys: KeyMap) -> None:
        """Loaded records delivered before hold their keys (the lowest such offset per key)."""
        for lo, hi in self._unkeyed:
            for offset in range(lo, hi + 1):
                k = keys.get(offset)
                if k is None or self._keys.holder(k) is not None:
                    continue
                batch = self._cache.containing(offset)
                if batch is None:
                    continue
                info = batch.info(offset)
                if not info.state.is_terminal and info.delivery_count >= 1:
                    self._keys.hold(k, offset)
        self._unkeyed = []


def _clip(
    ranges: list[tuple[int, int]], lo: int, end: int | None
) -> list[tuple[int, int]]:
    """``ranges`` clipped to ``[lo, end)`` (``end`` None: no upper bound)."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        a = max(a, lo)
        if end is not None:
            b = min(b, end - 1)
        if a <= b:
            out.append((a, b))
    return out
