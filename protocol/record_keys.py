"""Record keys inside v2 record batches, for share.ordering=key (broker/share/key_order.py).

Each record of a batch is ``length, attributes, timestampDelta, offsetDelta, keyLength, key, ...``
(varints zig-zag encoded); a compressed batch is decompressed first (bounded). Keys are returned
as ``hash(key bytes)``: equal keys give equal hashes within one broker process, and the share
state keeps no key across restarts (it is rebuilt from the log), so the per-process hash seed
does not matter. A collision only makes two keys wait for each other.

Pure: bytes in, ``{offset: key hash or None}`` out (None = null key). Control batches and bytes
that do not parse give no entry for their offsets: such records are treated as keyless.
:class:`BatchKeys` decodes lazily, one batch when one of its offsets is first asked for, so a
fetch that acquires from the first batches never decodes the rest.

An uncompressed batch is parsed by aiokafka's compiled record reader when it is installed (a
PyPI wheel; the ``client`` extra), about 3x faster than the Python scan, which remains the
fallback (``COMPILED = False``, or aiokafka missing) and is what compressed batches use; the
unit tests run both and compare them.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right

import crc32c

from protocol.compression import DecompressionError, decompress
from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RECORD_COUNT_OFFSET,
    BatchHeader,
    CorruptRecordError,
    iter_batches,
)
from protocol.varint import read_varint

try:  # the compiled record reader of aiokafka's wheels (see the module docstring)
    from aiokafka.errors import CorruptRecordException as _CorruptRecord  # type: ignore[import-untyped]
    from aiokafka.record._crecords import (  # type: ignore[import-untyped]
        DefaultRecordBatch as _CompiledBatch,
    )
except ImportError:  # pragma: no cover - aiokafka is in every extra the tests install
    _CompiledBatch = None
    _CorruptRecord = CorruptRecordError

__all__ = ["COMPILED", "MAX_LAYOUTS", "BatchKeys", "Layout", "record_key_hashes", "trim_batch"]

#: Whether uncompressed batches go through aiokafka's compiled reader (tests switch it off to
#: run the pure-Python scan).
COMPILED = _CompiledBatch is not None

_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")

_MISSING: object = object()


def record_key_hashes(buf: bytes | bytearray | memoryview, min_offset: int,
                      max_decompressed: int) -> dict[int, int | None]:
    """``offset -> hash(key)`` (None for a null key) of every record at or after ``min_offset``
    in the concatenated batches ``buf``."""
    out: dict[int, int | None] = {}
    try:
        batches = list(iter_batches(buf))
    except (CorruptRecordError, ValueError):
        return out
    view = memoryview(buf)
    for pos, h in batches:
        if h.last_offset >= min_offset:
            _decode(view, pos, h, max_decompressed, out)
    return {o: k for o, k in out.items() if o >= min_offset}


class BatchKeys:
    """A read-only ``offset -> key hash`` mapping over batches already split by the caller
    (``(position, header)`` pairs in offset order), decoded a batch at a time on first use.

    ``memo`` may be a dict kept across reads (the share-partition's): decoded keys go there, and
    an offset found there is never decoded again. ``key_sets`` (kept across reads too) gets the
    distinct keys of each batch decoded (:meth:`key_set`).
    """

    __slots__ = ("_buf", "_firsts", "_headers", "_key_sets", "_layouts", "_limit", "_memo",
                 "_pending")

    _buf: bytes | bytearray | memoryview

    def __init__(self, buf: bytes | bytearray | memoryview,
                 headers: list[tuple[int, BatchHeader]], max_decompressed: int,
                 memo: dict[int, int | None] | None = None,
                 layouts: dict[int, Layout] | None = None,
                 key_sets: dict[tuple[int, int], frozenset[int | None]] | None = None) -> None:
        self._buf = buf
        self._headers = headers
        self._firsts: list[int] | None = None  # set on first use: construction costs nothing
        self._pending: set[int] = set()
        self._limit = max_decompressed
        self._memo: dict[int, int | None] = {} if memo is None else memo
        self._layouts = layouts
        self._key_sets = {} if key_sets is None else key_sets

    def get(self, offset: int, default: int | None = None) -> int | None:
        memo = self._memo
        if offset in memo:
            return memo[offset]
        i = self._index(offset)
        if i < 0 or i not in self._pending:
            return default
        self._pending.discard(i)
        pos, h = self._headers[i]
        _decode(memoryview(self._buf), pos, h, self._limit, memo, self._layouts, self._key_sets)
        return memo.get(offset, default)

    def _index(self, offset: int) -> int:
        """Which of the batches holds ``offset`` (-1 if none starts at or before it)."""
        if self._firsts is None:
            self._firsts = [h.base_offset for _pos, h in self._headers]
            self._pending = set(range(len(self._headers)))
        return bisect_right(self._firsts, offset) - 1

    def key_set(self, offset: int) -> tuple[int, frozenset[int | None]] | None:
        """(last offset, distinct keys) of the batch holding ``offset``, decoded if need be;
        the keys include None when a record has a null key, the batch cannot be read or lacks
        offsets (compacted). None if no batch holds ``offset``."""
        i = self._index(offset)
        if i < 0:
            return None
        _pos, h = self._headers[i]
        if offset > h.last_offset:
            return None
        got = self._key_sets.get((h.base_offset, h.record_count))
        if got is None:
            if i in self._pending:
                self.get(h.base_offset)
            got = self._key_sets.get((h.base_offset, h.record_count))
            if got is None:  # decoded before, its set forgotten since (or unreadable)
                memo = self._memo
                got = frozenset([memo.get(o) for o in range(h.base_offset, h.last_offset + 1)])
                _remember(self._key_sets, (h.base_offset, h.record_count), got)
        return h.last_offset, got

    def between(self, lo: int, hi: int) -> list[int | None]:
        """The keys of ``lo..hi`` in order (batches decoded as needed)."""
        memo = self._memo
        if lo not in memo or hi not in memo:
            self.get(lo)
            self.get(hi)
        out = [memo.get(o, _MISSING) for o in range(lo, hi + 1)]
        if _MISSING in out:  # a batch in between not decoded yet
            return [self.get(o) for o in range(lo, hi + 1)]
        return out  # type: ignore[return-value]

    def __getitem__(self, offset: int) -> int | None:
        return self.get(offset)


def _remember(key_sets: dict[tuple[int, int], frozenset[int | None]],
              batch: tuple[int, int], keys: frozenset[int | None]) -> None:
    if len(key_sets) >= MAX_LAYOUTS:
        key_sets.clear()
    key_sets[batch] = keys


def _decode(view: memoryview, pos: int, h: BatchHeader, limit: int,
            out: dict[int, int | None], layouts: dict[int, Layout] | None = None,
            key_sets: dict[tuple[int, int], frozenset[int | None]] | None = None) -> None:
    if h.is_control:
        return
    offsets: list[int] | None = None
    starts: list[int] | None = None
    if layouts is not None and not h.compression:
        offsets, starts = [], []
    found: dict[int, int | None] = {}
    try:
        body: bytes | bytearray | memoryview = view[pos + BATCH_HEADER_SIZE: pos + h.total_size]
        if h.compression:
            body = decompress(h.compression, body, limit)
            _scan(bytes(body), h.record_count, h.base_offset, found, offsets, starts)
        elif COMPILED and _CompiledBatch is not None:
            _scan_compiled(view[pos: pos + h.total_size], h.record_count, found, offsets)
            if starts is not None:
                _starts(bytes(body), h.record_count, starts)
        else:
            _scan(bytes(body), h.record_count, h.base_offset, found, offsets, starts)
    except (CorruptRecordError, _CorruptRecord, DecompressionError, IndexError, ValueError):
        return  # unreadable batch: its records count as keyless
    out.update(found)
    if key_sets is not None:
        keys = set(found.values())
        if len(found) != h.last_offset - h.base_offset + 1:
            keys.add(None)  # offsets without a record (compacted) are keyless
        _remember(key_sets, (h.base_offset, h.record_count), frozenset(keys))
    if layouts is not None and offsets is not None and starts is not None:
        if len(layouts) >= MAX_LAYOUTS:
            layouts.clear()
        layouts[h.base_offset] = (offsets, starts)


#: Record offsets and byte positions (relative to the records, plus their end) of a batch.
Layout = tuple[list[int], list[int]]
#: Layouts (and batch key sets) kept per share-partition (then forgotten all at once; they are
#: rebuilt on demand).
MAX_LAYOUTS = 64


def trim_batch(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader, lo: int, hi: int,
               layout: Layout) -> bytes | None:
    """The uncompressed batch at ``pos`` with only its records in ``[lo, hi]``: base offset,
    last offset delta, timestamps and producer fields unchanged (as a compacted batch), record
    count, length and CRC-32C rewritten. None if that would not drop anything."""
    offsets, starts = layout
    i = bisect_left(offsets, lo)
    j = bisect_right(offsets, hi)
    if i >= j or (i == 0 and j == len(offsets)):
        return None
    view = memoryview(buf)
    body = view[pos + BATCH_HEADER_SIZE + starts[i]: pos + BATCH_HEADER_SIZE + starts[j]]
    header = bytearray(view[pos: pos + BATCH_HEADER_SIZE])
    _INT32.pack_into(header, BATCH_LENGTH_OFFSET, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body))
    _INT32.pack_into(header, RECORD_COUNT_OFFSET, j - i)
    crc = crc32c.crc32c(body, crc32c.crc32c(header[ATTRIBUTES_OFFSET:]))
    _UINT32.pack_into(header, CRC_OFFSET, crc)
    return bytes(header) + bytes(body)


def _scan_compiled(batch: memoryview, count: int, out: dict[int, int | None],
                   offsets: list[int] | None) -> None:
    """:func:`_scan`'s keys and offsets through aiokafka's compiled reader (``batch`` is the
    whole uncompressed batch, header included)."""
    assert _CompiledBatch is not None
    n = 0
    for r in _CompiledBatch(batch):
        k = r.key
        o = r.offset
        out[o] = None if k is None else hash(k)
        if offsets is not None:
            offsets.append(o)
        n += 1
    if n != count:
        raise ValueError(f"{n} records read where the batch header says {count}")


def _starts(body: bytes | bytearray | memoryview, count: int, starts: list[int]) -> None:
    """The byte position of each of ``count`` records in ``body`` and the end of the last,
    read from their length varints alone."""
    pos = 0
    add = starts.append
    for _ in range(count):
        add(pos)
        x = body[pos]
        if x < 0x80:
            pos += 1 + ((x >> 1) ^ -(x & 1))
        elif body[pos + 1] < 0x80:
            x = (x & 0x7F) | (body[pos + 1] << 7)
            pos += 2 + ((x >> 1) ^ -(x & 1))
        else:
            length, q = read_varint(body, pos)
            pos = q + length
    if pos > len(body):
        raise IndexError("records run past their batch")
    add(pos)


def _scan(b: bytes, count: int, base_offset: int, out: dict[int, int | None],
          offsets: list[int] | None = None, starts: list[int] | None = None) -> None:
    """Keys of ``count`` records in ``b``. Varints of one byte (most lengths and deltas) are
    read inline; longer ones by :func:`_varint`. With ``offsets``/``starts``, each record's
    offset and byte position are appended (and the end of the last record to ``starts``)."""
    pos = 0
    for _ in range(count):
        if starts is not None:
            starts.append(pos)
        x = b[pos]
        if x < 0x80:
            length, q = (x >> 1) ^ -(x & 1), pos + 1
        elif b[pos + 1] < 0x80:
            x = (x & 0x7F) | (b[pos + 1] << 7)
            length, q = (x >> 1) ^ -(x & 1), pos + 2
        else:
            length, q = read_varint(b, pos)
        end = q + length
        q += 1  # attributes
        # timestamp delta: skipped (a varint ends at its first byte below 0x80)
        while b[q] >= 0x80:
            q += 1
        q += 1
        x = b[q]
        if x < 0x80:
            delta, q = (x >> 1) ^ -(x & 1), q + 1
        elif b[q + 1] < 0x80:
            x = (x & 0x7F) | (b[q + 1] << 7)
            delta, q = (x >> 1) ^ -(x & 1), q + 2
        else:
            delta, q = read_varint(b, q)
        x = b[q]
        if x < 0x80:
            key_len, q = (x >> 1) ^ -(x & 1), q + 1
        else:
            key_len, q = read_varint(b, q)
        if key_len < 0:
            out[base_offset + delta] = None
        else:
            if q + key_len > end:
                raise IndexError("key runs past its record")
            out[base_offset + delta] = hash(b[q:q + key_len])
        if offsets is not None:
            offsets.append(base_offset + delta)
        pos = end
    if pos > len(b):
        raise IndexError("records run past their batch")
    if starts is not None:
        starts.append(pos)
