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
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import crc32c
import cramjam

from storage import fileops
from protocol.compression import decompress
from protocol.record_batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    TRANSACTIONAL_MASK,
    control_type,
)
from protocol.varint import encode_varint, read_varint
from storage.log import LogError
from storage.segment import INDEX_ENTRY, INT32_MAX, TIME_ENTRY, Segment, pwrite_all
from storage.segment_log import PartitionLog
from storage.segment_swap import cleaned_paths, cleaned_txn_path
from storage.txn_index import write_file as write_txn_index

# KIP-534: attribute bit 6 says the base timestamp is the batch's delete horizon.
DELETE_HORIZON_MASK = 0x40
# Python dict entry + key digest + offset: about this many bytes per key in the map, which turns
# log.cleaner.dedupe.buffer.size into a key count.
MAP_ENTRY_BYTES = 100
_CHUNK = 1 << 20
_OUT_CHUNK = 1 << 20
# Decompressed records of one batch may be this large (a sanity bound for data already in the log).
_MAX_DECOMPRESSED = 1 << 30
_BEFORE_CRC = struct.Struct(">qiibI")
_AFTER_CRC = struct.Struct(">hiqqqhii")
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


def cleanable(log: PartitionLog, now_ms: int, first_unstable: int | None = None) -> Cleanable | None:
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
        first_ts = _first_batch_timestamp(dirty[0])
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
        fd = _open(seg)
        if fd is None:
            return None
        try:
            for f, batch in _batches(fd, seg.size, seg.log_path):
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
    """Record every keyed record of a batch in the map (``_records`` specialised to keys: the
    hot loop of map building)."""
    base = f[0]
    md5 = hashlib.md5
    for delta, key, *_ in _records(f, batch):
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
    out = _Writer(log_path, base, index_interval)
    txns = txns if txns is not None else _Transactions([])
    old_entries = [e for seg in group for e in log.segment_aborted_txns(seg.base_offset)]
    kept_markers: set[int] = set()
    horizon = NO_HORIZON
    try:
        for seg in group:
            fd = _open(seg)
            if fd is None:
                out.abort()
                return None
            try:
                for f, batch in _batches(fd, seg.size, seg.log_path):
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
            _fsync_file(txn_path)
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
    records = list(_records(f, batch))
    kept = [(start, ts_at, ts_end) for _, _, _, start, ts_at, ts_end, _ in records]
    horizon = now_ms + delete_retention_ms
    return _rebuilt(f, records, kept, horizon), horizon


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
    records = list(_records(f, batch))
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
    return _rebuilt(f, records, kept, new_horizon), reported


def _rebuilt(f: tuple[int, ...], records: list[tuple[int, bytes | None, bool, int, int, int,
                                                     bytes | memoryview]],
             kept: list[tuple[int, int, int]], new_horizon: int | None) -> bytes:
    """The batch of header ``f`` with only the ``kept`` records (start, timestamp delta
    position, position after it) and, with ``new_horizon``, that delete horizon."""
    attributes = f[5]
    base = f[0]
    body = records[0][6]
    # With a delete horizon the base timestamp is the horizon: re-encode each record's timestamp
    # delta so its timestamp stays the same (KIP-534).
    new_base_ts = f[7] if new_horizon is None else new_horizon
    shift = f[7] - new_base_ts
    parts = []
    for start, ts_at, ts_end in kept:
        rec_end = _record_end(body, start)
        if shift == 0:
            parts.append(bytes(body[start:rec_end]))
            continue
        ts_delta, _ = _varint(body, ts_at)
        rest = bytes(body[ts_at - 1 : ts_at]) + encode_varint(ts_delta + shift) + \
            bytes(body[ts_end:rec_end])
        parts.append(encode_varint(len(rest)) + rest)
    records_bytes = b"".join(parts)
    codec = attributes & COMPRESSION_MASK
    if codec:
        records_bytes = _compress(codec, records_bytes)
    new_attributes = attributes | (DELETE_HORIZON_MASK if new_horizon is not None else 0)
    after_crc = _AFTER_CRC.pack(new_attributes, f[6], new_base_ts, f[8], f[9], f[10], f[11],
                                len(kept)) + records_bytes
    head = _BEFORE_CRC.pack(base, len(after_crc) + 9, f[2], MAGIC_V2, crc32c.crc32c(after_crc))
    return head + after_crc


class _Writer:
    """Writes a cleaned segment: batches, then index entries every ``index_interval`` bytes plus
    one for the last batch (a sealed segment's shape, ``storage/segment.py``)."""

    def __init__(self, path: str, base: int, index_interval: int) -> None:
        self.path = path
        self.base = base
        self.index_interval = index_interval
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.buf = bytearray()
        self.size = 0
        self.since = index_interval + 1  # first batch: no entry needed, position 0 is implied
        self.running = NO_TIMESTAMP
        self.entries: list[tuple[int, int, int]] = []
        self.last: tuple[int, int] | None = None
        self.paths = [path]

    def add(self, f: tuple[int, ...], batch: bytes | memoryview) -> None:
        pos = self.size + len(self.buf)
        max_ts = f[8]
        if max_ts > self.running:
            self.running = max_ts
        rel = f[0] - self.base
        if self.last is not None and self.since > self.index_interval:
            self.entries.append((rel, pos, self.running))
            self.since = 0
        self.since += len(batch)
        self.last = (rel, pos)
        self.buf += batch
        if len(self.buf) >= _OUT_CHUNK:
            pwrite_all(self.fd, self.buf, self.size)
            self.size += len(self.buf)
            self.buf.clear()

    def finish(self, index_path: str, time_path: str) -> tuple[int, int]:
        """Write the rest and the indexes, fsync all three; returns (size, largest timestamp)."""
        if self.buf:
            pwrite_all(self.fd, self.buf, self.size)
            self.size += len(self.buf)
            self.buf.clear()
        if self.last is not None and (not self.entries or self.entries[-1][1] != self.last[1]):
            self.entries.append((self.last[0], self.last[1], self.running))
        fileops.OPS.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        for path, data in (
            (index_path, b"".join(INDEX_ENTRY.pack(r, p) for r, p, _ in self.entries)),
            (time_path, b"".join(TIME_ENTRY.pack(t, r) for r, _, t in self.entries)),
        ):
            self.paths.append(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                pwrite_all(fd, data, 0)
                fileops.OPS.fsync(fd)
            finally:
                os.close(fd)
        return self.size, self.running

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for path in self.paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


# -- reading segment files -----------------------------------------------------------------------


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fileops.OPS.fsync(fd)
    finally:
        os.close(fd)


def _open(seg: Segment) -> int | None:
    try:
        return os.open(seg.log_path, os.O_RDONLY)
    except FileNotFoundError:
        return None


def _first_batch_timestamp(seg: Segment) -> int:
    fd = _open(seg)
    if fd is None:
        return NO_TIMESTAMP
    try:
        buf = os.pread(fd, BATCH_HEADER_SIZE, 0)
    finally:
        os.close(fd)
    if len(buf) < BATCH_HEADER_SIZE:
        return NO_TIMESTAMP
    return int(HEADER_STRUCT.unpack(buf)[8])


def _batches(fd: int, size: int, path: str) -> Iterator[tuple[tuple[int, ...], memoryview]]:
    """(header fields, whole batch) for every batch of a segment file, read in large chunks.

    Raises:
        LogError: a batch header does not parse.
    """
    pos = 0
    buf = b""
    start = 0
    while pos < size:
        if pos + BATCH_HEADER_SIZE > start + len(buf):
            buf, start = os.pread(fd, min(_CHUNK, size - pos), pos), pos
            if len(buf) < BATCH_HEADER_SIZE:
                raise LogError(f"{path}: truncated batch header at position {pos}")
        f = HEADER_STRUCT.unpack_from(buf, pos - start)
        total = f[1] + LOG_OVERHEAD
        if f[3] != MAGIC_V2 or f[1] < MIN_BATCH_LENGTH or pos + total > size:
            raise LogError(f"{path}: malformed batch header at position {pos}")
        if pos + total > start + len(buf):
            buf, start = os.pread(fd, min(max(_CHUNK, total), size - pos), pos), pos
        view = memoryview(buf)[pos - start : pos - start + total]
        yield f, view
        pos += total


def _records(f: tuple[int, ...], batch: memoryview
             ) -> Iterator[tuple[int, bytes | None, bool, int, int, int, bytes | memoryview]]:
    """(offset delta, key, value is null, record start, timestamp delta position, position
    after it, records buffer) per record of a batch (decompressed if need be).

    Raises:
        LogError: the records do not parse.
    """
    codec = f[5] & COMPRESSION_MASK
    if codec:
        try:
            body: bytes | memoryview = bytes(decompress(codec, batch[BATCH_HEADER_SIZE:],
                                                        _MAX_DECOMPRESSED))
        except ValueError as exc:
            raise LogError(f"batch at offset {f[0]}: {exc}") from None
        q = 0
    else:
        body = bytes(batch)
        q = BATCH_HEADER_SIZE
    # One-byte varints (the common case) are decoded inline, longer ones by ``_varint``.
    try:
        for _ in range(f[12]):
            start = q
            x = body[q]
            if x < 0x80:
                rec_end = q + 1 + ((x >> 1) ^ -(x & 1))
                q += 1
            elif (y := body[q + 1]) < 0x80:  # records of 64 B .. 8 KiB
                v = (x & 0x7F) | (y << 7)
                rec_end = q + 2 + ((v >> 1) ^ -(v & 1))
                q += 2
            else:
                length, q = _varint(body, q)
                rec_end = q + length
            ts_at = q + 1  # after the attributes byte
            p = ts_at + 1 if body[ts_at] < 0x80 else _varint(body, ts_at)[1]
            ts_end = p
            x = body[p]
            if x < 0x80:
                delta = (x >> 1) ^ -(x & 1)
                p += 1
            else:
                delta, p = _varint(body, p)
            x = body[p]
            if x == 1:  # zig-zag -1: null key
                key: bytes | None = None
                p += 1
            else:
                if x < 0x80:
                    klen = x >> 1
                    p += 1
                else:
                    klen, p = _varint(body, p)
                key = body[p : p + klen]
                p += klen
            # A null value is zig-zag -1, the single byte 0x01.
            yield delta, key, body[p] == 1, start, ts_at, ts_end, body
            q = rec_end
    except IndexError:
        raise LogError(f"batch at offset {f[0]}: records run past the batch") from None


def _record_end(body: bytes | memoryview, start: int) -> int:
    length, q = _varint(body, start)
    return q + length


def _varint(b: bytes | memoryview, q: int) -> tuple[int, int]:
    try:
        return read_varint(b, q)
    except ValueError as exc:
        raise LogError(str(exc)) from None


def _compress(codec: int, data: bytes) -> bytes:
    """Compress rewritten records with the batch's codec, in the formats producers write
    (snappy as one raw block, as librdkafka; lz4 and zstd frames)."""
    if codec == 1:
        return bytes(cramjam.gzip.compress(data))
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise LogError(f"unknown compression codec {codec}")


