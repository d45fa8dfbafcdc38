"""The first record at or after a timestamp inside v2 record batches (ListOffsets by timestamp).

A log finds the first *batch* whose max timestamp is late enough; Kafka answers with the first
*record* of it that is (``LogSegment.findOffsetByTimestamp`` reads the batch's records). This
module reads those records: the batch is decompressed when compressed (bounded), then each
record's length, attributes, timestamp delta and offset delta are read. A LogAppendTime batch
stamps every record with its max timestamp, so its first record answers.

Pure: bytes in, ``(offset, timestamp)`` or None out. Bytes that do not parse give None, and the
caller keeps the batch-level answer.
"""

from __future__ import annotations

from protocol.compression import DecompressionError, decompress
from protocol.record_batch import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    iter_batches,
)
from protocol.varint import read_varint

__all__ = ["first_record_at_or_after"]


def first_record_at_or_after(buf: bytes | bytearray | memoryview, target_ms: int,
                             min_offset: int, max_decompressed: int
                             ) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record at or after ``min_offset`` whose timestamp is
    ``>= target_ms`` in concatenated batches ``buf``, or None (none there, or unreadable)."""
    try:
        for pos, h in iter_batches(buf):
            if h.max_timestamp < target_ms or h.last_offset < min_offset:
                continue
            if h.timestamp_type == 1:  # LogAppendTime: every record has the max timestamp
                return max(h.base_offset, min_offset), h.max_timestamp
            body: bytes | bytearray | memoryview = memoryview(buf)[
                pos + BATCH_HEADER_SIZE: pos + h.total_size]
            if h.compression:
                body = decompress(h.compression, body, max_decompressed)
            found = _scan(bytes(body), h.record_count, h.base_offset, h.base_timestamp,
                          target_ms, min_offset)
            if found is not None:
                return found
    except (CorruptRecordError, DecompressionError, IndexError, ValueError):
        return None
    return None


def _scan(b: bytes, count: int, base_offset: int, base_ts: int, target_ms: int,
          min_offset: int) -> tuple[int, int] | None:
    pos = 0
    for _ in range(count):
        length, q = read_varint(b, pos)
        end = q + length
        ts_delta, q = read_varint(b, q + 1)  # after the attributes byte
        offset_delta, _ = read_varint(b, q)
        offset, ts = base_offset + offset_delta, base_ts + ts_delta
        if offset >= min_offset and ts >= target_ms:
            return offset, ts
        pos = end
    return None
