"""One segment of a partition log: its record file, sparse offset index and time index.

A segment whose first offset is *base* has three files, named by *base* zero-padded to 20 digits::

    00000000000000000000.log        batches byte-for-byte as produced, base offsets assigned
    00000000000000000000.index      sparse offset index: (relative offset int32, position int32)
    00000000000000000000.timeindex  time index: (running max timestamp int64, relative offset int32)

Invariants:
- Offsets increase: each batch starts after the previous batch's last offset, at or after the
  segment's base offset. As appended they are dense (the first batch starts at the base offset,
  each next one at the previous last offset + 1); the log cleaner (``storage/cleaner.py``)
  leaves gaps where it removed records, and keeps each surviving batch's base and last offset.
- The file holds whole batches only; ``size`` (in memory) is where the next batch goes. Recovery
  (``recover``, then ``truncate``) cuts anything after the last batch with a valid header and CRC.
- Index entry *j* describes the batch starting at ``position[j]`` with base offset
  ``base + rel[j]``; ``ts[j]`` is the largest batch max-timestamp of that batch and every batch
  before it in the segment (non-decreasing, so it can be bisected). Entries go in when more than
  ``index_interval_bytes`` were appended since the previous one, and once more for the last batch
  when a segment is sealed (rolled or closed); a sealed segment's last ``ts`` is its largest
  timestamp. The ``.index`` and ``.timeindex`` files always hold the same entries.
- Index entries are written at explicit positions, so a failed write never misaligns a file, and
  read back as the longest consistent prefix, so a torn tail after a crash is dropped.

Threads: a ``Segment`` has no lock of its own. ``PartitionLog`` (``segment_log.py``), which owns
the segment list, rolling, retention, checkpoints and the flush policy, touches a listed segment
only under its lock. The exceptions go by file name: ``fsync`` (safe against a concurrent close)
and ``unlink`` of a segment already taken off the list. Before that, ``log_loader.load`` opens and
recovers the segments on its own, before any other thread can see them.

I/O errors surface as ``OSError``; writes, truncates and syncs go through ``storage.fileops``
(the fault-injection seam). Kafka classes this mirrors: ``LogSegment``,
``OffsetIndex``/``TimeIndex`` and the per-segment part of ``LogLoader`` (behaviour only).
"""

from __future__ import annotations

import bisect
import operator
import os
import struct
import sys
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import crc32c

from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    CorruptRecordError,
)
from storage import fileops
from storage.log import LogError

INT32_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"  # storage/txn_index.py

_INDEX_ENTRY = INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = TIME_ENTRY = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
# Header walks read this much at a time (an index interval plus slack).
_WALK_CHUNK = 16 * 1024
# Recovery reads this much at a time to check CRCs.
_RECOVERY_CHUNK = 1 << 20
# Sealed segments whose index stays in memory (with an open descriptor) per partition. A 1 GiB
# segment indexed every 4 KiB takes 4 MiB of index.
MAX_LOADED_SEALED = 4


class Segment:
    """One segment's files and in-memory index. Mutated only under ``PartitionLog._lock``."""

    __slots__ = (
        "base_offset",
        "log_path",
        "index_path",
        "time_path",
        "fd",
        "size",
        "loaded",
        "max_known",
        "rel",
        "pos",
        "ts",
        "max_timestamp",
        "last_batch_pos",
        "last_batch_rel",
        "bytes_since_index",
        "created_ms",
        "dirty",
        "index_fds",
    )

    def __init__(self, directory: Path, base_offset: int) -> None:
        stem = os.path.join(directory, f"{base_offset:020d}")
        self.base_offset = base_offset
        self.log_path = stem + LOG_SUFFIX
        self.index_path = stem + INDEX_SUFFIX
        self.time_path = stem + TIME_INDEX_SUFFIX
        self.fd = -1
        self.size = 0
        self.loaded = False
        self.max_known = False
        self.rel = array("i")
        self.pos = array("i")
        self.ts = array("q")
        self.max_timestamp = NO_TIMESTAMP
        # Append state, kept for the active segment (and sealed ones recovered in this process).
        self.last_batch_pos = -1
        self.last_batch_rel = -1
        self.bytes_since_index = 0
        self.created_ms = 0
        self.dirty = False
        # (index, time index) write descriptors, held while the segment is active.
        self.index_fds: tuple[int, int] | None = None

    @classmethod
    def create(cls, directory: Path, base_offset: int, now_ms: int) -> Segment:
        """An empty segment at ``base_offset`` (files replaced if left over), open for appends.

        Raises:
            OSError: a file could not be created.
        """
        seg = cls(directory, base_offset)
        seg.fd = os.open(seg.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        for path in (seg.index_path, seg.time_path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        seg.loaded = seg.max_known = True
        seg.created_ms = now_ms
        return seg

    def paths(self) -> tuple[str, str, str]:
        return self.log_path, self.index_path, self.time_path

    def open_index_files(self) -> None:
        if self.index_fds is None:
            fd = os.open(self.index_path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                self.index_fds = (fd, os.open(self.time_path, os.O_WRONLY | os.O_CREAT, 0o644))
            except OSError:
                os.close(fd)
                raise

    def close_index_files(self) -> None:
        if self.index_fds is not None:
            fds, self.index_fds = self.index_fds, None
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        self.close_index_files()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def unload(self) -> None:
        """Drop the in-memory index and the descriptor of a sealed segment (kept: its maximum)."""
        self.close()
        self.rel, self.pos, self.ts = array("i"), array("i"), array("q")
        self.loaded = False

    def all_paths(self) -> tuple[str, ...]:
        """``paths()`` plus the aborted-transaction index (``storage/txn_index.py``), which
        exists only for segments that got an ABORT marker."""
        return (*self.paths(), self.log_path[: -len(LOG_SUFFIX)] + TXN_INDEX_SUFFIX)

    def unlink(self) -> None:
        """Remove the segment's files; already gone is fine."""
        for path in self.all_paths():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def fsync(self) -> None:
        """fsync the data and index files by name (safe while the owner closes the segment)."""
        for path in self.all_paths():
            _fsync_path(path)

    def load(self) -> None:
        """Make the index, largest timestamp and descriptor available, whichever are missing."""
        if self.fd < 0:
            self.fd = os.open(self.log_path, os.O_RDONLY)
        if not self.loaded:
            self.read_index()
            self.loaded = True
        if not self.max_known and self.size:
            # The seal entry makes the last ``ts`` the maximum; walk whatever follows the last
            # entry in case the seal is missing.
            running = self.ts[-1] if self.ts else NO_TIMESTAMP
            for _, f in walk(self.fd, self.pos[-1] if self.pos else 0, self.size):
                running = max(running, f[8])
            self.max_timestamp = running
        self.max_known = True

    # -- index -------------------------------------------------------------------------------

    def read_index(self) -> None:
        """Read the index files, keeping the longest consistent prefix of entries (increasing
        offsets and positions inside the file, non-decreasing timestamps)."""
        idx = _read_file(self.index_path)
        tix = _read_file(self.time_path)
        n = min(len(idx) // _INDEX_ENTRY.size, len(tix) // _TIME_ENTRY.size)
        idx, tix = idx[: n * _INDEX_ENTRY.size], tix[: n * _TIME_ENTRY.size]
        rel, pos = _column(idx, 8, 0, 4, "i"), _column(idx, 8, 4, 4, "i")
        ts, time_rel = _column(tix, 12, 0, 8, "q"), _column(tix, 12, 8, 4, "i")
        consistent = n == 0 or (
            rel[0] >= 0
            and pos[0] >= 0
            and pos[-1] < self.size
            and rel == time_rel
            and all(map(operator.lt, rel, rel[1:]))
            and all(map(operator.lt, pos, pos[1:]))
            and all(map(operator.le, ts, ts[1:]))
        )
        if not consistent:
            # A torn tail after a crash: find where the entries stop making sense.
            keep = 0
            prev_rel = prev_pos = -1
            prev_ts = NO_TIMESTAMP
            for i in range(n):
                r, p, t = rel[i], pos[i], ts[i]
                if r <= prev_rel or p <= prev_pos or p >= self.size or t < prev_ts:
                    break
                if time_rel[i] != r:
                    break
                keep, prev_rel, prev_pos, prev_ts = i + 1, r, p, t
            del rel[keep:], pos[keep:], ts[keep:]
        self.rel, self.pos, self.ts = rel, pos, ts

    def add_entries(self, entries: list[tuple[int, int, int]]) -> None:
        """Write index entries after the existing ones (explicit positions: a failed earlier
        write can never misalign the file) and record them in memory."""
        count = len(self.rel)
        idx = b"".join(_INDEX_ENTRY.pack(rel, pos) for rel, pos, _ in entries)
        tix = b"".join(_TIME_ENTRY.pack(ts, rel) for rel, _, ts in entries)
        if self.index_fds is not None:
            pwrite_all(self.index_fds[0], idx, count * _INDEX_ENTRY.size)
            pwrite_all(self.index_fds[1], tix, count * _TIME_ENTRY.size)
        else:
            _pwrite_file(self.index_path, idx, count * _INDEX_ENTRY.size)
            _pwrite_file(self.time_path, tix, count * _TIME_ENTRY.size)
        for rel, pos, ts in entries:
            self.rel.append(rel)
            self.pos.append(pos)
            self.ts.append(ts)

    def truncate_index(self, count: int) -> None:
        """Keep the first ``count`` entries, in memory and on disk."""
        del self.rel[count:], self.pos[count:], self.ts[count:]
        _truncate_file(self.index_path, count * _INDEX_ENTRY.size)
        _truncate_file(self.time_path, count * _TIME_ENTRY.size)

    def seal(self) -> None:
        """Index the last batch so the segment's largest timestamp is its last ``ts``."""
        if self.last_batch_pos < 0 or (self.pos and self.pos[-1] == self.last_batch_pos):
            return
        self.add_entries([(self.last_batch_rel, self.last_batch_pos, self.max_timestamp)])
        self.dirty = True

    # -- writes ------------------------------------------------------------------------------

    def append(
        self,
        buf: bytes | bytearray,
        metas: list[tuple[int, int, int, int]],
        offset: int,
        index_interval_bytes: int,
        keep_offsets: bool = False,
    ) -> tuple[int, list[tuple[int, int, int]]]:
        """Write whole batches at the end of the file, giving them offsets from ``offset`` on
        (``keep_offsets``: the base offsets already in ``buf``, a follower's append; ``buf``
        may then be read-only ``bytes``, else it must be a ``bytearray``).

        ``metas`` holds (position in ``buf``, size, last offset delta, max timestamp) per batch;
        the base offsets are packed into ``buf``. Returns the offset after the batches and the
        index entries they call for, which the caller writes with ``add_entries`` once its own
        bookkeeping is done (a failed index write must not undo the append).

        Raises:
            OSError: the write failed (the segment is left as it was).
        """
        start = self.size
        seg_base = self.base_offset
        since = self.bytes_since_index
        running = self.max_timestamp
        entries: list[tuple[int, int, int]] = []
        pack_offset = _INT64.pack_into
        for p, size, delta, max_ts in metas:
            if keep_offsets:
                offset = _INT64.unpack_from(buf, p)[0]
            else:
                pack_offset(cast(bytearray, buf), p, offset)
            if max_ts > running:
                running = max_ts
            if since > index_interval_bytes and offset - seg_base <= INT32_MAX:
                entries.append((offset - seg_base, start + p, running))
                since = 0
            since += size
            offset += delta + 1
        pwrite_all(self.fd, buf, start)
        self.size = start + len(buf)
        self.dirty = True
        self.max_timestamp = running
        self.bytes_since_index = since
        self.last_batch_pos = start + metas[-1][0]
        self.last_batch_rel = offset - metas[-1][2] - 1 - seg_base
        return offset, entries

    def truncate(self, end: int) -> None:
        """Cut the file at ``end`` (a batch boundary) and drop the index entries at or past it."""
        fileops.OPS.ftruncate(self.fd, end)
        self.size = end
        self.truncate_index(bisect.bisect_left(self.pos, end))

    # -- recovery ----------------------------------------------------------------------------

    def restore_sealed(self, end_offset: int) -> bool:
        """After a clean shutdown, take the append state from the seal entry.

        Checks one header: the seal entry must point at a batch that ends the file and ends at
        ``end_offset``. Returns False (scan instead) otherwise.
        """
        self.read_index()
        self.fd = os.open(self.log_path, os.O_RDWR)
        if self.size == 0:
            ok = not self.rel and end_offset == self.base_offset
        elif self.rel:
            f = header_at(self.fd, self.pos[-1])
            ok = (
                f is not None
                and f[0] == self.base_offset + self.rel[-1]
                and self.pos[-1] + f[1] + LOG_OVERHEAD == self.size
                and f[0] + f[6] + 1 == end_offset
            )
            if ok and f is not None:
                self.last_batch_pos = self.pos[-1]
                self.last_batch_rel = self.rel[-1]
                self.bytes_since_index = f[1] + LOG_OVERHEAD
                self.max_timestamp = self.ts[-1]
        else:
            ok = False
        if ok:
            self.loaded = self.max_known = True
        return ok

    def recover(self, index_interval_bytes: int, dense_from: int = 0) -> tuple[int, int]:
        """CRC-check batches from the last index entry on and rebuild entries after it.

        A batch must start right after the previous one once that offset is at or past
        ``dense_from``; below it (flushed data the log cleaner may have compacted) a gap is fine.
        Returns the end of the last valid batch and the offset after it.
        """
        if self.fd < 0:
            self.fd = os.open(self.log_path, os.O_RDWR)
        if self.rel:
            pos = self.pos[-1]
            expected = self.base_offset + self.rel[-1]
            running = self.ts[-1]
        else:
            pos, expected, running = 0, self.base_offset, NO_TIMESTAMP
        resumed_at = pos if self.rel else -1
        since = 0
        entries: list[tuple[int, int, int]] = []
        buf = b""
        buf_start = pos
        end = self.size
        while end - pos >= BATCH_HEADER_SIZE:
            if pos + BATCH_HEADER_SIZE > buf_start + len(buf):
                buf, buf_start = os.pread(self.fd, min(_RECOVERY_CHUNK, end - pos), pos), pos
            f = HEADER_STRUCT.unpack_from(buf, pos - buf_start)
            size = f[1] + LOG_OVERHEAD
            if (
                f[3] != MAGIC_V2
                or f[1] < MIN_BATCH_LENGTH
                or pos + size > end
                or f[0] < expected
                or (f[0] != expected and expected >= dense_from)
                or f[6] < 0
                or f[0] - self.base_offset > INT32_MAX
            ):
                break
            if pos + size > buf_start + len(buf):
                want = min(max(_RECOVERY_CHUNK, size), end - pos)
                buf, buf_start = os.pread(self.fd, want, pos), pos
            off = pos - buf_start
            if crc32c.crc32c(memoryview(buf)[off + ATTRIBUTES_OFFSET : off + size]) != f[4]:
                break
            if f[8] > running:
                running = f[8]
            if since > index_interval_bytes and pos != resumed_at:
                entries.append((f[0] - self.base_offset, pos, running))
                since = 0
            since += size
            self.last_batch_pos = pos
            self.last_batch_rel = f[0] - self.base_offset
            expected = f[0] + f[6] + 1
            pos += size
        if entries:
            self.add_entries(entries)
        self.max_timestamp = running
        self.bytes_since_index = since
        self.loaded = self.max_known = True
        return pos, expected

    # -- reads -------------------------------------------------------------------------------

    def locate(self, offset: int) -> tuple[int, int]:
        """Position and base offset of the first batch whose last offset is at or past
        ``offset`` (index bisect, then a short walk): the batch holding ``offset``, or after a
        compaction gap the next one. ``(size, -1)`` when no batch of the segment reaches
        ``offset`` (the cleaner removed the segment's tail). The index must be loaded (``load``).
        """
        j = bisect.bisect_right(self.rel, offset - self.base_offset) - 1
        start = self.pos[j] if j >= 0 else 0
        for pos, f in walk(self.fd, start, self.size):
            if f[0] + f[6] >= offset:
                return pos, f[0]
        return self.size, -1

    def cut(self, pos: int, limit: int, start_offset: int, bound: int) -> tuple[int, int]:
        """How many bytes from ``pos`` (where offset ``start_offset`` begins) up to ``limit`` are
        whole batches with base offsets below ``bound``; returns that length and the offset after
        them.

        The index jumps close to the end: an entry at or before ``limit`` whose batch starts below
        ``bound`` is preceded only by batches that qualify, so only the last few headers are read.
        """
        j = min(
            bisect.bisect_right(self.pos, limit) - 1,
            bisect.bisect_left(self.rel, bound - self.base_offset) - 1,
        )
        start, next_offset = pos, start_offset
        if j >= 0 and self.pos[j] > pos:
            start, next_offset = self.pos[j], self.base_offset + self.rel[j]
        end = start
        for p, f in walk(self.fd, start, self.size):
            if f[0] >= bound or p + f[1] + LOG_OVERHEAD > limit:
                break
            end = p + f[1] + LOG_OVERHEAD
            next_offset = f[0] + f[6] + 1
        return end - pos, next_offset


def track_loaded(loaded: OrderedDict[int, Segment], seg: Segment) -> None:
    """Note the loaded sealed ``seg`` as most recently used in ``loaded`` (least recent first,
    by base offset); unload the least recent ones past ``MAX_LOADED_SEALED``."""
    loaded[seg.base_offset] = seg
    loaded.move_to_end(seg.base_offset)
    while len(loaded) > MAX_LOADED_SEALED:
        loaded.popitem(last=False)[1].unload()


# -- file helpers -----------------------------------------------------------------------------


def base_of(name: str) -> int:
    """The base offset a ``.log`` file name stands for, or -1 if it is not a segment's name."""
    stem = name[: -len(LOG_SUFFIX)]
    return int(stem) if len(stem) == 20 and stem.isdigit() else -1


def batch_metas(buf: bytes | bytearray) -> tuple[list[tuple[int, int, int, int]], int]:
    """Check that ``buf`` is a sequence of whole v2 batches (headers only) and describe them for
    ``Segment.append``: (position, size, last offset delta, max timestamp) per batch, and how
    many offsets they take.

    Raises:
        CorruptRecordError: ``buf`` is not a sequence of whole v2 batches.
    """
    n = len(buf)
    unpack = HEADER_STRUCT.unpack_from
    metas: list[tuple[int, int, int, int]] = []
    offsets = 0
    p = 0
    while p < n:
        if n - p < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"truncated batch header at position {p}")
        f = unpack(buf, p)
        size = f[1] + LOG_OVERHEAD
        if f[3] != MAGIC_V2 or f[1] < MIN_BATCH_LENGTH or f[6] < 0 or p + size > n:
            raise CorruptRecordError(f"malformed batch at position {p}")
        metas.append((p, size, f[6], f[8]))
        offsets += f[6] + 1
        p += size
    return metas, offsets


def walk(fd: int, start: int, end: int) -> Iterator[tuple[int, tuple[int, ...]]]:
    """Yield ``(position, header fields)`` for the batches in ``[start, end)``, headers only."""
    pos = start
    buf = b""
    buf_start = start
    while pos < end:
        if pos + BATCH_HEADER_SIZE > buf_start + len(buf):
            buf, buf_start = os.pread(fd, min(_WALK_CHUNK, end - pos), pos), pos
            if len(buf) < BATCH_HEADER_SIZE:
                raise LogError(f"truncated batch header at position {pos}")
        f = HEADER_STRUCT.unpack_from(buf, pos - buf_start)
        if f[3] != MAGIC_V2 or f[1] < MIN_BATCH_LENGTH or pos + f[1] + LOG_OVERHEAD > end:
            raise LogError(f"malformed batch header at position {pos}")
        yield pos, f
        pos += f[1] + LOG_OVERHEAD


def header_at(fd: int, pos: int) -> tuple[int, ...] | None:
    """The header fields of the batch at ``pos``, or None if none starts there."""
    buf = os.pread(fd, BATCH_HEADER_SIZE, pos)
    if len(buf) < BATCH_HEADER_SIZE:
        return None
    f = HEADER_STRUCT.unpack(buf)
    if f[3] != MAGIC_V2 or f[1] < MIN_BATCH_LENGTH:
        return None
    return f


def pwrite_all(fd: int, data: bytes | bytearray, pos: int) -> None:
    """Write all of ``data`` at ``pos`` (``pwrite`` may write less than asked)."""
    view = memoryview(data)
    ops = fileops.OPS
    written = ops.pwrite(fd, view, pos)
    while written < len(view):
        written += ops.pwrite(fd, view[written:], pos + written)


def _column(data: bytes, record: int, start: int, width: int, typecode: str) -> array[int]:
    """Bytes ``[start, start + width)`` of every ``record``-byte entry as a big-endian integer
    array (strided slices run in C: loading a large index costs milliseconds)."""
    out = bytearray(len(data) // record * width)
    for k in range(width):
        out[k::width] = data[start + k :: record]
    column = array(typecode, bytes(out))
    if sys.byteorder == "little":
        column.byteswap()
    return column


def _pwrite_file(path: str, data: bytes, pos: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        pwrite_all(fd, data, pos)
    finally:
        os.close(fd)


def _truncate_file(path: str, size: int) -> None:
    try:
        if os.stat(path).st_size == size:
            return
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fileops.OPS.ftruncate(fd, size)
    finally:
        os.close(fd)


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _fsync_path(path: str) -> None:
    """fsync a file by name (an fsync through any descriptor flushes the file); gone is fine."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fileops.OPS.fsync(fd)
    finally:
        os.close(fd)
