"""Record keys inside v2 record batches, for share.ordering=key (broker/share/key_order.py).

Each record of a batch is ``length, attributes, timestampDelta, offsetDelta, keyLength, key, ...``
(varints zig-zag encoded); a compressed batch is decompressed first (bounded). Keys are returned
as ``hash(key bytes)``: equal keys give equal hashes within one broker process, and the share
state keeps no key across restarts (it is rebuilt from the log), so the per-process hash seed
does not matter. A collision only makes two keys wait for each other.

Pure: bytes in, ``{offset: key hash or None}`` out (None = null key). Control batches and bytes
that do not parse give no entry for their offsets: such records are treated as keyless.
"""

from __future__ import annotations

from protocol.compression import DecompressionError, decompress
from protocol.record_batch import BATCH_HEADER_SIZE, CorruptRecordError, iter_batches
from protocol.record_timestamps import _varint

__all__ = ["record_key_hashes"]


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
        if h.last_offset < min_offset or h.is_control:
            continue
        try:
            body: bytes | bytearray | memoryview = view[pos + BATCH_HEADER_SIZE:
                                                        pos + h.total_size]
            if h.compression:
                body = decompress(h.compression, body, max_decompressed)
            _scan(bytes(body), h.record_count, h.base_offset, min_offset, out)
        except (CorruptRecordError, DecompressionError, IndexError, ValueError):
            continue  # unreadable batch: its records count as keyless
    return out


def _scan(b: bytes, count: int, base_offset: int, min_offset: int,
          out: dict[int, int | None]) -> None:
    pos = 0
    for _ in range(count):
        length, q = _varint(b, pos)
        end = q + length
        _ts_delta, q = _varint(b, q + 1)  # after the attributes byte
        offset_delta, q = _varint(b, q)
        offset = base_offset + offset_delta
        if offset >= min_offset:
            key_len, q = _varint(b, q)
            if key_len < 0:
                out[offset] = None
            else:
                if q + key_len > end:
                    raise IndexError("key runs past its record")
                out[offset] = hash(b[q:q + key_len])
        pos = end
