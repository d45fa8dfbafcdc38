"""Log compaction of one partition: keep the latest record per key (Kafka's ``Cleaner``, behaviour
only).

A compacted log (``cleanup.policy`` with ``compact``) has a *clean* head, already compacted, and a
*dirty* tail: ``[log start, first dirty)`` and ``[first dirty, first uncleanable)``, where the
first dirty offset is the cleaner checkpoint (``PartitionLog.cleaner_offset``) and the first
uncleanable offset is the end of the cleanable segments (``PartitionLog.cleanable_segments``:
sealed and flushed, never the active segment) cut at the first segment holding a record younger
than ``min.compaction.lag.ms``. One pass (``clean``):

1. builds a map key -> latest offset over the dirty part, batch by batch, until it is done or the
   map holds ``max_entries`` keys (bounded memory, ``log.cleaner.dedupe.buffer.size``): the pass
   then ends at that batch and the next pass goes on from there;
2. rewrites every segment from the log start up to the map's end, in groups of adjacent segments
   that fit one segment (``segment.bytes``), into one new segment per group, keeping a record
   when no later record has its key. A tombstone (null value) is kept until its batch's delete
   horizon, set to *now* + ``delete.retention.ms`` the first time a pass keeps it (KIP-534: the
   horizon is the batch's base timestamp with attribute bit 6 set), and dropped by the first pass
   after it. Records without a key (written before the topic became compacted) are dropped.
   Batches keep their base offset, last offset delta, producer fields and partition leader epoch,
   so offsets are preserved and gaps appear where records went; a batch left with no record is
   dropped. Transactions (KIP-98, as Kafka's cleaner): nothing at or past the partition's last
   stable offset is cleaned (``cleanable``'s ``first_unstable``); batches of aborted
   transactions (the segments' transaction indexes, ``storage/txn_index.py``) are dropped and
   never enter the key map, so they hide no older record; an end-transaction marker is copied
   while data of its transaction remains in the log, and once none does it gets a delete
   horizon (now + ``delete.retention.ms``) and is dropped by the first pass after it. The
   cleaned segment's ``.txnindex`` keeps the entries whose ABORT marker it keeps;
3. swaps each group in (``PartitionLog.swap_cleaned``, crash-safe) and checkpoints the new first
   dirty offset.

Threads: runs in the cleaner thread (``broker/log/cleaner_driver.py``), never on the event loop. It
reads segment files through its own descriptors, so appends, reads, flushes and retention go on;
a group that retention removed meanwhile is discarded at the swap.
"""

from __future__ import annotations

import bisect
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from protocol.record_batch import (
    CONTROL_MASK,
    NO_TIMESTAMP,
    TRANSACTIONAL_MASK,
    control_type,
)
from storage.cleaner_io import (
    DELETE_HORIZON_MASK,
    CleanedSegmentWriter,
    batch_records,
    first_batch_timestamp,
    fsync_file,
    open_segment,
    rebuilt_batch,
    segment_batches,
)
from storage.segment import INT32_MAX, Segment
from storage.segment_log import PartitionLog
from storage.segment_swap import cleaned_paths, cleaned_txn_path
from storage.txn_index import write_file as write_txn_index

# Python dict entry + key digest + offset: about this many bytes per key in the map, which turns
# log.cleaner.dedupe.buffer.size into a key count.
MAP_ENTRY_BYTES = 100
NO_HORIZON = 1 << 63


@dataclass(slots=True)
class CleanerStats:
    """What the cleaner did (summed over passes)."""

    passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    swaps: int = 0


@dataclass(frozen=True, slots=True)
class Cleanable:
    """A partition's compaction state at one moment: what a pass would clean."""

    log: PartitionLog
    segments: list[tuple[Segment, int, int]]  # (segment, end offset, largest timestamp)
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    must_clean: bool  # max.compaction.lag.ms passed for the oldest dirty record

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(slots=True)
class PassResult:
    """The outcome of ``clean``: the new first dirty offset (None: aborted, nothing
    checkpointed) and the earliest delete horizon among the tombstones kept (None: none)."""

    end_offset: int | None
    next_horizon_ms: int | None = None
    stats: CleanerStats = field(default_factory=CleanerStats)


def cleanable(log: PartitionLog, now_ms: int,
              first_unstable: int | None = None) -> Cleanable | None:
    """What a pass over ``log`` would clean, or None (closed log, nothing sealed and flushed).
    ``first_unstable``: the partition's last stable offset when a transaction is ongoing there
    (nothing at or past it is cleaned: its transaction may still abort).

    Raises:
        OSError: a segment could not be read.
    """
    cfg = log.config
    segs = log.cleanable_segments(with_timestamps=cfg.min_compaction_lag_ms > 0)
    if first_unstable is not None:
        segs = [x for x in (segs or []) if x[1] <= first_unstable]
    if not segs:
        return None
    first_dirty = max(log.cleaner_offset, segs[0][0].base_offset)
    uncleanable = segs[-1][1]
    if cfg.min_compaction_lag_ms > 0:
        for seg, _end, ts in segs:
            if ts > now_ms - cfg.min_compaction_lag_ms:
                uncleanable = seg.base_offset
                break
    segs = [x for x in segs if x[1] <= uncleanable]
    if not segs:
        return None
    clean_bytes = sum(seg.size for seg, end, _ in segs if end <= first_dirty)
    dirty = [seg for seg, end, _ in segs if end > first_dirty]
    dirty_bytes = sum(seg.size for seg in dirty)
    must = False
    if dirty and cfg.max_compaction_lag_ms < (1 << 63) - 1:
        first_ts = first_batch_timestamp(dirty[0])
        must = first_ts != NO_TIMESTAMP and now_ms - first_ts > cfg.max_compaction_lag_ms
    return Cleanable(log, segs, first_dirty, uncleanable, clean_bytes, dirty_bytes, must)


def clean(c: Cleanable, now_ms: int, max_entries: int,
          should_stop: Callable[[], bool] = lambda: False) -> PassResult:
    """One compaction pass over ``c.log`` (see the module doc). ``max_entries`` bounds the key map.

    Raises:
        OSError, LogError: a segment could not be read or the cleaned one written (the log
            directory may then be offline).
    """
    stats = CleanerStats(passes=1)
    log = c.log
    cfg = log.config
    offset_map: dict[bytes, int] = {}
    txns = _Transactions(log.aborted_txns(0, c.first_uncleanable))
    end = _build_map(c, offset_map, max(1, max_entries), stats, should_stop, txns)
    if end is None:
        return PassResult(None, None, stats)
    rewrite = [(seg, seg_end) for seg, seg_end, _ in c.segments if seg.base_offset < end]
    horizon: int | None = None
    for group in _groups(rewrite, cfg.segment_bytes):
        if should_stop():
            return PassResult(None, horizon, stats)
        result = _clean_group(log, group, offset_map, now_ms, cfg.delete_retention_ms,
                              cfg.index_interval_bytes, stats, should_stop, txns)
        if result is None:
            return PassResult(None, horizon, stats)
        if result != NO_HORIZON and (horizon is None or result < horizon):
            horizon = result
    log.set_cleaner_offset(end)
    return PassResult(end, horizon, stats)


# -- the key map ---------------------------------------------------------------------------------


def key_digest(key: bytes) -> bytes:
    """What the map stores for a key: the key itself up to 15 bytes, else its 16-byte MD5 (as
    Kafka's ``SkimpyOffsetMap``; the two forms never collide, their lengths differ)."""
    return key if len(key) < 16 else hashlib.md5(key, usedforsecurity=False).digest()


class _Transactions:
    """What a pass knows of transactions (KIP-98): the aborted ones (from the transaction
    index), and per producer whether the transaction being read kept any data."""

    def __init__(self, aborted: list[tuple[int, int, int, int]]) -> None:
        self.aborted: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last, _ in aborted:
            self.aborted.setdefault(pid, []).append((first, last))
        self.retained: dict[int, bool] = {}

    def is_aborted(self, pid: int, offset: int) -> bool:
        """Whether the transactional batch of ``pid`` at ``offset`` belongs to an aborted
        transaction."""
        spans = self.aborted.get(pid)
        if not spans:
            return False
        k = bisect.bisect_right(spans, (offset, 1 << 63)) - 1
        return k >= 0 and spans[k][0] <= offset <= spans[k][1]


def _build_map(c: Cleanable, offset_map: dict[bytes, int], max_entries: int,
               stats: CleanerStats, should_stop: Callable[[], bool],
               txns: _Transactions | None = None) -> int | None:
    """Fill ``offset_map`` from the dirty part; return the offset after the last batch mapped
    (the pass's end), or None if a segment vanished (retention) meanwhile or ``should_stop``."""
    end = c.first_dirty
    for seg, seg_end, _ in c.segments:
        if seg_end <= c.first_dirty:
            continue
        fd = open_segment(seg)
        if fd is None:
            return None
        try:
            for f, batch in segment_batches(fd, seg.size, seg.log_path):
                last = f[0] + f[6]
                if last < c.first_dirty:
                    continue
                if f[5] & CONTROL_MASK or (f[5] & TRANSACTIONAL_MASK and txns is not None
                                           and txns.is_aborted(f[9], f[0])):
                    # Markers hold no keys; aborted records must not hide older ones (Kafka).
                    end = last + 1
                    continue
                if offset_map and len(offset_map) + f[12] > max_entries:
                    return end
                if should_stop():
                    return None
                _map_batch(f, batch, offset_map)
                stats.records_read += f[12]
                end = last + 1
        finally:
            os.close(fd)
        end = max(end, seg_end)
    return end


def _map_batch(f: tuple[int, ...], batch: memoryview, offset_map: dict[bytes, int]) -> None:
    """Record every keyed record of a batch in the map (``batch_records`` specialised to keys: the
    hot loop of map building)."""
    base = f[0]
    md5 = hashlib.md5
    for delta, key, *_ in batch_records(f, batch):
        if key is not None:
            offset_map[key if len(key) < 16 else md5(key, usedforsecurity=False).digest()] = \
                base + delta


def _groups(segs: list[tuple[Segment, int]], max_bytes: int) -> Iterator[list[Segment]]:
    """Adjacent segments whose total size fits one segment and whose offsets fit int32
    relative offsets: each group becomes one cleaned segment."""
    group: list[Segment] = []
    size = 0
    for seg, end in segs:
        if group and (size + seg.size > max_bytes or end - group[0].base_offset > INT32_MAX):
            yield group
            group, size = [], 0
        group.append(seg)
        size += seg.size
    if group:
        yield group


# -- rewriting a group ---------------------------------------------------------------------------


def _clean_group(log: PartitionLog, group: list[Segment], offset_map: dict[bytes, int],
                 now_ms: int, delete_retention_ms: int, index_interval: int,
                 stats: CleanerStats, should_stop: Callable[[], bool],
                 txns: _Transactions | None = None) -> int | None:
    """Write the cleaned copy of ``group`` and swap it in. Returns the earliest delete horizon
    of the tombstones and markers kept (``NO_HORIZON`` if none), or None if the group left the
    log or ``should_stop`` (checked every batch: a broker stopping does not wait for a whole
    group)."""
    base = group[0].base_offset
    log_path, index_path, time_path = cleaned_paths(log.directory, base)
    out = CleanedSegmentWriter(log_path, base, index_interval)
    txns = txns if txns is not None else _Transactions([])
    old_entries = [e for seg in group for e in log.segment_aborted_txns(seg.base_offset)]
    kept_markers: set[int] = set()
    horizon = NO_HORIZON
    try:
        for seg in group:
            fd = open_segment(seg)
            if fd is None:
                out.abort()
                return None
            try:
                for f, batch in segment_batches(fd, seg.size, seg.log_path):
                    if should_stop():
                        out.abort()
                        return None
                    stats.bytes_read += len(batch)
                    if f[5] & CONTROL_MASK:
                        kept, h = _clean_marker(f, batch, txns, now_ms, delete_retention_ms)
                        if kept is not None:
                            kept_markers.add(f[0])
                    elif f[5] & TRANSACTIONAL_MASK and txns.is_aborted(f[9], f[0]):
                        kept, h = None, NO_HORIZON  # data of an aborted transaction
                    else:
                        kept, h = _clean_batch(f, batch, offset_map, now_ms,
                                               delete_retention_ms)
                        if kept is not None and f[5] & TRANSACTIONAL_MASK:
                            txns.retained[f[9]] = True
                    if h < horizon:
                        horizon = h
                    if kept is not None:
                        out.add(f, kept)
            finally:
                os.close(fd)
        size, max_ts = out.finish(index_path, time_path)
        aborted = None
        if old_entries:
            # The cleaned segment indexes the aborted transactions whose marker it keeps.
            aborted = [e for e in old_entries if e[2] in kept_markers]
            txn_path = cleaned_txn_path(log.directory, base)
            out.paths.append(txn_path)
            write_txn_index(txn_path, aborted)
            fsync_file(txn_path)
    except OSError as exc:
        out.abort()
        if log.closed:
            return None  # the topic was deleted meanwhile
        # As for any write error (storage/log_dir.py): the directory goes offline.
        raise log.log_dir.fail(f"writing cleaned segment {log_path}", exc) from exc
    except BaseException:
        out.abort()
        raise
    stats.bytes_written += size
    if not log.swap_cleaned(group, size, max_ts, aborted):
        return None
    stats.swaps += 1
    return horizon


def _clean_marker(f: tuple[int, ...], batch: memoryview, txns: _Transactions, now_ms: int,
                  delete_retention_ms: int) -> tuple[bytes | memoryview | None, int]:
    """A control batch as it goes into the cleaned segment. An end-transaction marker whose
    transaction kept no data in the log (aborted, or committed and compacted away) is removable:
    the first pass that finds it so gives it a delete horizon (now + ``delete.retention.ms``,
    KIP-534, so consumers that read the data before it went still see the marker), and the
    first pass after the horizon drops it (Kafka's LogCleaner)."""
    had_data = txns.retained.pop(f[9], False)
    if had_data or control_type(batch) is None:
        return batch, NO_HORIZON
    if f[5] & DELETE_HORIZON_MASK:
        if now_ms >= f[7]:
            return None, NO_HORIZON
        return batch, f[7]
    records = list(batch_records(f, batch))
    kept = [(start, ts_at, ts_end) for _, _, _, start, ts_at, ts_end, _ in records]
    horizon = now_ms + delete_retention_ms
    return rebuilt_batch(f, records, kept, horizon), horizon


def _clean_batch(f: tuple[int, ...], batch: memoryview, offset_map: dict[bytes, int],
                 now_ms: int, delete_retention_ms: int) -> tuple[bytes | memoryview | None, int]:
    """The batch as it goes into the cleaned segment (itself when nothing changes, a rebuilt one,
    or None when no record stays) and its delete horizon if it keeps tombstones (else
    ``NO_HORIZON``)."""
    attributes = f[5]
    if attributes & CONTROL_MASK:
        return batch, NO_HORIZON
    base = f[0]
    horizon = f[7] if attributes & DELETE_HORIZON_MASK else None
    records = list(batch_records(f, batch))
    kept: list[tuple[int, int, int]] = []
    tombstones = False
    get = offset_map.get
    md5 = hashlib.md5
    for delta, key, null_value, start, ts_at, ts_end, _body in records:
        if key is None:
            continue  # written before the topic was compacted: Kafka drops these too
        digest = key if len(key) < 16 else md5(key, usedforsecurity=False).digest()
        if get(digest, -1) > base + delta:
            continue  # a later record has this key (key_digest, inlined)
        if null_value:
            if horizon is not None and now_ms >= horizon:
                continue  # a tombstone past its delete horizon
            tombstones = True
        kept.append((start, ts_at, ts_end))
    if not kept:
        return None, NO_HORIZON
    new_horizon = horizon
    if tombstones and horizon is None:
        new_horizon = now_ms + delete_retention_ms
    reported = new_horizon if tombstones and new_horizon is not None else NO_HORIZON
    if len(kept) == len(records) and new_horizon == horizon:
        return batch, reported
    return rebuilt_batch(f, records, kept, new_horizon), reported
