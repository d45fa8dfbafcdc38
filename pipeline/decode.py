"""Undecoded share-fetch partitions to Arrow rows, on the executors (numpy, no per-record objects).

The driver-side members hand out each partition as the broker sent it (``client.RawPartition``:
v2 record batches plus the acquired ranges). ``pack``/``pack_pieces`` frame a Spark partition's worth of them
into one payload; on the executor ``to_batches`` turns a payload into ``pyarrow.RecordBatch``es
in the source's schema (``pipeline/rows.py``): one for the whole payload (a Spark task's
records), split only past ``_MAX_BATCH_BYTES`` of values. Every Arrow batch costs the Python
worker and the JVM a fixed amount, so few large ones are cheaper than one per topic-partition.

Decoding one record batch:

- One short Python loop finds where each record starts (its length varint; the only step that
  is per record).
- Every field of every record is then read at once with numpy: each varint is gathered as a
  row of up to 10 bytes, its length is the first byte without the continuation bit.
- The values and keys are joined into one buffer and become Arrow binary arrays through their
  offsets; the other columns are numpy arrays or constants.
- Only offsets inside the acquired ranges are kept, each with its range's delivery count
  (the broker may send whole batches that reach past them). Control batches are skipped.
- Records with headers are rare: their headers are read record by record.

Compressed batches (gzip, snappy, lz4, zstd) are decompressed first (``protocol.compression``).
Malformed bytes raise ``CorruptBatchError`` naming the topic-partition; nothing is skipped
silently.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any

import numpy as np

# A chunk: topic, partition, acquired (first, last, delivery count) ranges, record batches.
Chunk = tuple[str, int, Sequence[tuple[int, int, int]], bytes]

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 batch header (protocol/record_batch)
_COUNT = struct.Struct(">i")
_CHUNK = struct.Struct(">iii")  # partition, ranges, topic length
_RANGE = struct.Struct(">qqi")
_LENGTH = struct.Struct(">q")
_CONTROL = 0x20
_LOG_APPEND_TIME = 0x08
_COMPRESSION = 0x07
# A decompressed batch larger than this is refused (the broker's own fetch limit is far lower).
_MAX_DECOMPRESSED = 1 << 31
# An Arrow batch is closed once its values and keys pass this many bytes (binary arrays have
# 32-bit offsets; a payload is one fetch response, 50 MiB by default, so this rarely splits).
_MAX_BATCH_BYTES = 1 << 28


class CorruptBatchError(ValueError):
    """Record batches that do not parse; the message names the topic-partition."""


# -- framing (driver side packs, executor side unpacks) -------------------------------------------


def pack(chunks: Sequence[Chunk]) -> bytes:
    """One payload holding ``chunks`` (a Spark partition's share of a micro-batch)."""
    return b"".join(pack_pieces(chunks))


def pack_pieces(chunks: Sequence[Chunk]) -> list[bytes]:
    """``pack``'s payload as pieces to send one after the other (the record batches are not
    copied)."""
    out = [_COUNT.pack(len(chunks))]
    for topic, partition, ranges, data in chunks:
        name = topic.encode()
        out.append(_CHUNK.pack(partition, len(ranges), len(name)))
        out.append(name)
        out.extend(_RANGE.pack(*r) for r in ranges)
        out.append(_LENGTH.pack(len(data)))
        out.append(data)
    return out


def unpack(payload: bytes | bytearray | memoryview) -> list[Chunk]:
    """The chunks of a ``pack`` payload (the record batches as zero-copy views)."""
    view = memoryview(payload)
    try:
        (n,), pos = _COUNT.unpack_from(view, 0), _COUNT.size
        chunks: list[Chunk] = []
        for _ in range(n):
            partition, nranges, name_len = _CHUNK.unpack_from(view, pos)
            pos += _CHUNK.size
            topic = bytes(view[pos:pos + name_len]).decode()
            pos += name_len
            ranges = [_RANGE.unpack_from(view, pos + i * _RANGE.size) for i in range(nranges)]
            pos += nranges * _RANGE.size
            (size,) = _LENGTH.unpack_from(view, pos)
            pos += _LENGTH.size
            if size < 0 or pos + size > len(view):
                raise CorruptBatchError("truncated micro-batch payload")
            chunks.append((topic, partition, ranges, view[pos:pos + size]))  # type: ignore[arg-type]
            pos += size
    except struct.error as e:
        raise CorruptBatchError(f"truncated micro-batch payload: {e}") from None
    return chunks


# -- decoding -------------------------------------------------------------------------------------


def to_batches(payload: bytes | bytearray | memoryview) -> Iterator[Any]:
    """The rows of a ``pack`` payload: one Arrow record batch for all its chunks (split past
    ``_MAX_BATCH_BYTES``), none if no chunk has rows."""
    cols = _Columns()
    for topic, partition, ranges, data in unpack(payload):
        before = cols.count
        try:
            _decode_chunk(topic, partition, ranges, data, cols)
        except (IndexError, ValueError, struct.error) as e:
            where = f"{topic}-{partition}"
            if isinstance(e, CorruptBatchError) and str(e).startswith(where):
                raise
            raise CorruptBatchError(f"{where}: record batches do not parse: {e}") from None
        if cols.count > before:
            cols.runs.append((topic, partition, cols.count - before))
        if cols.bytes > _MAX_BATCH_BYTES:
            yield _arrow(cols)
            cols = _Columns()
    if cols.count:
        yield _arrow(cols)


class _Columns:
    """Per-record numpy arrays of the kept records of a payload, batch by batch."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int, int]] = []  # (topic, partition, rows) per chunk
        self.offset: list[Any] = []
        self.timestamp: list[Any] = []
        self.ts_type: list[Any] = []
        self.delivery: list[Any] = []
        self.key_len: list[Any] = []
        self.value_len: list[Any] = []
        self.keys: list[Any] = []  # iterators of memoryview slices, joined at the end
        self.values: list[Any] = []
        self.headers: list[list[dict[str, Any]]] | None = None  # only if some record has any
        self.count = 0
        self.bytes = 0  # of keys and values


def _decode_chunk(topic: str, partition: int, ranges: Sequence[tuple[int, int, int]],
                  data: Any, cols: _Columns) -> None:
    """Append the kept records of one chunk's record batches to ``cols``."""
    if not ranges or not len(data):
        return
    rs = sorted(ranges)
    firsts = np.array([r[0] for r in rs], np.int64)
    lasts = np.array([r[1] for r in rs], np.int64)
    counts = np.array([r[2] for r in rs], np.int32)
    lo, hi = int(firsts[0]), int(lasts.max())
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < _HEADER.size:
            raise CorruptBatchError(f"{topic}-{partition}: truncated batch header at {pos}")
        (base, length, _epoch, magic, _crc, attrs, last_delta, base_ts, max_ts, _pid, _pe,
         _seq, count) = _HEADER.unpack_from(view, pos)
        size = length + 12
        if magic != 2 or length < 49 or pos + size > end:
            raise CorruptBatchError(f"{topic}-{partition}: malformed batch at {pos} (magic "
                                    f"{magic}, length {length})")
        body = view[pos + _HEADER.size:pos + size]
        pos += size
        if attrs & _CONTROL or base + last_delta < lo or base > hi or count <= 0:
            continue
        if attrs & _COMPRESSION:
            from protocol.compression import decompress  # lazy: compressed batches only

            body = decompress(attrs & _COMPRESSION, body, _MAX_DECOMPRESSED)
        _decode_records(topic, partition, body, count, base,
                        max_ts if attrs & _LOG_APPEND_TIME else None, base_ts,
                        (attrs & _LOG_APPEND_TIME) >> 3, firsts, lasts, counts, cols)


def _starts(buf: Any, count: int) -> tuple[list[int], list[int]]:
    """Where each record's body starts and ends (after its length varint); per record."""
    starts: list[int] = []
    ends: list[int] = []
    p, n = 0, len(buf)
    for _ in range(count):
        b = buf[p]
        if b < 0x80:
            ln = b
            p += 1
        else:
            ln, shift = b & 0x7F, 7
            p += 1
            while True:
                b = buf[p]
                ln |= (b & 0x7F) << shift
                p += 1
                if b < 0x80:
                    break
                shift += 7
                if shift > 28:
                    raise CorruptBatchError("record length varint too long")
        ln = (ln >> 1) ^ -(ln & 1)
        if ln < 0 or p + ln > n:
            raise CorruptBatchError(f"record length {ln} does not fit the batch")
        starts.append(p)
        p += ln
        ends.append(p)
    return starts, ends


_WIDTHS = {w: np.arange(w) for w in (5, 10)}
_SHIFTS = {w: (7 * np.arange(w)).astype(np.uint64) for w in (5, 10)}


def _varints(arr: Any, pos: Any, width: int) -> tuple[Any, Any]:
    """The zigzag varints at positions ``pos`` of the byte array ``arr``: values and sizes."""
    idx = pos[:, None] + _WIDTHS[width]
    np.minimum(idx, len(arr) - 1, out=idx)
    rows = arr[idx]
    done = rows < 0x80
    if not done.any(axis=1).all():
        raise CorruptBatchError("a varint is too long")
    size = done.argmax(axis=1) + 1
    parts = (rows & 0x7F).astype(np.uint64) << _SHIFTS[width]
    parts[_WIDTHS[width] >= size[:, None]] = 0
    raw = parts.sum(axis=1, dtype=np.uint64)
    value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return value, size


def _decode_records(topic: str, partition: int, body: Any, count: int, base: int,
                    append_ts: int | None, base_ts: int, ts_type: int, firsts: Any, lasts: Any,
                    counts: Any, cols: _Columns) -> None:
    starts, ends = _starts(body, count)
    arr = np.frombuffer(body, np.uint8)
    p = np.array(starts, np.int64) + 1  # skip the attributes byte
    end = np.array(ends, np.int64)
    ts_delta, size = _varints(arr, p, 10)
    p += size
    off_delta, size = _varints(arr, p, 5)
    p += size
    key_len, size = _varints(arr, p, 5)
    p += size
    key_at = p.copy()
    p += np.maximum(key_len, 0)
    value_len, size = _varints(arr, np.minimum(p, len(arr) - 1), 5)
    p += size
    value_at = p.copy()
    p += np.maximum(value_len, 0)
    n_headers, size = _varints(arr, np.minimum(p, len(arr) - 1), 5)
    p += size
    if (n_headers < 0).any() or (key_len < -1).any() or (value_len < -1).any():
        raise CorruptBatchError("negative length in a record")
    has_headers = n_headers > 0
    if not (p == end)[~has_headers].all():
        raise CorruptBatchError("a record's fields do not add up to its length")
    offsets = base + off_delta
    which = np.searchsorted(firsts, offsets, side="right") - 1
    keep = (which >= 0) & (offsets <= lasts[np.maximum(which, 0)])
    if not keep.any():
        return
    if not keep.all():
        idx = np.flatnonzero(keep)
        offsets, which, ts_delta = offsets[idx], which[idx], ts_delta[idx]
        key_len, key_at, value_len, value_at = key_len[idx], key_at[idx], value_len[idx], value_at[idx]
        has_headers, n_headers, p, end = has_headers[idx], n_headers[idx], p[idx], end[idx]
    n = len(offsets)
    cols.offset.append(offsets)
    cols.delivery.append(counts[which])
    cols.timestamp.append(np.full(n, append_ts, np.int64) if append_ts is not None
                          else base_ts + ts_delta)
    cols.ts_type.append(np.full(n, ts_type, np.int32))
    cols.key_len.append(key_len)
    cols.value_len.append(value_len)
    cols.bytes += int(np.maximum(key_len, 0).sum() + np.maximum(value_len, 0).sum())
    view = memoryview(body)
    # Slices made and joined in C (map), not in a Python loop; a null is an empty slice.
    if (key_len > 0).any():
        cols.keys.append(map(view.__getitem__, map(
            slice, key_at.tolist(), (key_at + np.maximum(key_len, 0)).tolist())))
    cols.values.append(map(view.__getitem__, map(
        slice, value_at.tolist(), (value_at + np.maximum(value_len, 0)).tolist())))
    if has_headers.any() or cols.headers is not None:
        if cols.headers is None:
            cols.headers = [[] for _ in range(cols.count)]
        for at, stop, k in zip(p.tolist(), end.tolist(), n_headers.tolist()):
            cols.headers.append(_read_headers(view, at, stop, k) if k else [])
    cols.count += n


def _read_headers(view: memoryview, at: int, stop: int, count: int) -> list[dict[str, Any]]:
    """One record's ``count`` headers, from ``at`` (just after the count) to ``stop``."""
    out: list[dict[str, Any]] = []
    p = at
    for _ in range(count):
        klen, p = _varint(view, p)
        if klen < 0 or p + klen > stop:
            raise CorruptBatchError("header key runs past the record")
        key = bytes(view[p:p + klen]).decode()
        p += klen
        vlen, p = _varint(view, p)
        if vlen > 0 and p + vlen > stop:
            raise CorruptBatchError("header value runs past the record")
        value = None if vlen < 0 else bytes(view[p:p + vlen])
        p += max(vlen, 0)
        out.append({"key": key, "value": value})
    if p != stop:
        raise CorruptBatchError("a record's headers do not add up to its length")
    return out


def _varint(view: memoryview, p: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = view[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), p
        shift += 7
        if shift > 28:
            raise CorruptBatchError("varint too long")


def _binary(lengths: Any, pieces: list[Any]) -> Any:
    """An Arrow binary array from per-record lengths (-1: null) and the non-empty pieces."""
    import pyarrow as pa  # type: ignore[import-untyped]  # lazy: optional (spark extra)

    valid = lengths >= 0
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(np.maximum(lengths, 0), out=offsets[1:])
    data = pa.py_buffer(b"".join(chain.from_iterable(pieces)))
    validity = None
    nulls = int(len(lengths) - valid.sum())
    if nulls:
        validity = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.Array.from_buffers(pa.binary(), len(lengths),
                                 [validity, pa.py_buffer(offsets.tobytes()), data], nulls)


def _topics(runs: Sequence[tuple[str, int, int]]) -> Any:
    """The topic column (an Arrow string array) of ``runs`` of rows."""
    import pyarrow as pa  # lazy: optional (spark extra)

    names = [t.encode() for t, _, _ in runs]
    rows = np.array([n for _, _, n in runs], np.int64)
    offsets = np.zeros(int(rows.sum()) + 1, np.int32)
    np.cumsum(np.repeat(np.array([len(b) for b in names], np.int32), rows), out=offsets[1:])
    data = b"".join(name * n for name, (_, _, n) in zip(names, runs, strict=True))
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)])


def _arrow(cols: _Columns) -> Any:
    import pyarrow as pa  # lazy: optional (spark extra)

    from pipeline.rows import _HEADERS_TYPE  # lazy: pipeline.rows imports pyarrow

    n = cols.count
    cat = np.concatenate
    partitions = np.repeat(np.array([p for _, p, _ in cols.runs], np.int32),
                           [k for _, _, k in cols.runs])
    timestamp_us = cat(cols.timestamp) * 1000
    if cols.headers is None:
        headers = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)),
                                           pa.array([], _HEADERS_TYPE().value_type))
    else:
        headers = pa.array(cols.headers, _HEADERS_TYPE())
    return pa.RecordBatch.from_arrays([
        _binary(cat(cols.key_len), cols.keys),
        _binary(cat(cols.value_len), cols.values),
        _topics(cols.runs),
        pa.array(partitions),
        pa.array(cat(cols.offset)),
        pa.array(timestamp_us, pa.timestamp("us", tz="UTC")),
        pa.array(cat(cols.ts_type)),
        headers,
        pa.array(cat(cols.delivery).astype(np.int32)),
    ], names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
              "headers", "deliveryCount"])
