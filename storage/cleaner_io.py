"""The log cleaner's file side: reading segment files, rebuilding batches, writing the copy.

``storage/cleaner.py`` decides what a compaction pass keeps; this module does the bytes. It reads
segment files through its own descriptors (``open_segment``, ``segment_batches`` in large chunks,
``batch_records`` with the records decompressed), so the log's appends, reads and retention go on
meanwhile. ``rebuilt_batch`` re-encodes a batch with only the records kept (same base offset,
last offset delta, producer fields and leader epoch; a new CRC; the delete horizon of KIP-534 in
the base timestamp when asked), and ``CleanedSegmentWriter`` writes the cleaned segment and its
indexes in a sealed segment's shape (``storage/segment.py``) and fsyncs them.

Errors: a batch or record that does not parse raises ``LogError``; I/O errors are ``OSError``
(the cleaner takes the log directory offline for a write error).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import cramjam
import crc32c

from protocol.compression import decompress
from protocol.record_batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
)
from protocol.varint import encode_varint, read_varint
from storage import fileops
from storage.log import LogError
from storage.segment import INDEX_ENTRY, TIME_ENTRY, Segment, pwrite_all

# KIP-534: attribute bit 6 says the base timestamp is the batch's delete horizon.
DELETE_HORIZON_MASK = 0x40
_CHUNK = 1 << 20
_OUT_CHUNK = 1 << 20
# Decompressed records of one batch may be this large (a sanity bound for data already in the log).
_MAX_DECOMPRESSED = 1 << 30
_BEFORE_CRC = struct.Struct(">qiibI")
_AFTER_CRC = struct.Struct(">hiqqqhii")


# -- rebuilding and writing ----------------------------------------------------------------------


def rebuilt_batch(f: tuple[int, ...], records: list[tuple[int, bytes | None, bool, int, int, int,
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


class CleanedSegmentWriter:
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


def fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fileops.OPS.fsync(fd)
    finally:
        os.close(fd)


def open_segment(seg: Segment) -> int | None:
    try:
        return os.open(seg.log_path, os.O_RDONLY)
    except FileNotFoundError:
        return None


def first_batch_timestamp(seg: Segment) -> int:
    fd = open_segment(seg)
    if fd is None:
        return NO_TIMESTAMP
    try:
        buf = os.pread(fd, BATCH_HEADER_SIZE, 0)
    finally:
        os.close(fd)
    if len(buf) < BATCH_HEADER_SIZE:
        return NO_TIMESTAMP
    return int(HEADER_STRUCT.unpack(buf)[8])


def segment_batches(fd: int, size: int, path: str) -> Iterator[tuple[tuple[int, ...], memoryview]]:
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


def batch_records(f: tuple[int, ...], batch: memoryview
             ) -> Iterator[tuple[int, bytes | None, bool, int, int, int, bytes | memoryview]]:
    """(offset delta, key, value is null, record start, timestamp delta position, position
    after it, records buffer) per record of a batch (decompressed if need be).

    Raises:
        LogError: the records do not parse.
    """
    codec = f[5] & COMPRESSION_MASK
    if codec:
        try:
            body = bytes(decompress(codec, batch[BATCH_HEADER_SIZE:], _MAX_DECOMPRESSED))
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
