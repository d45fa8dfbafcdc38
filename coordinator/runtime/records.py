"""Coordinator records as uncompressed Kafka v2 record batches, and back.

Concept: a coordinator appends its records to an internal topic (``__share_group_state``,
``__consumer_offsets``) as ordinary Kafka record batches, so the log is readable by any Kafka tool
and by ``PartitionLog`` recovery (CRC-32C, dense offsets). Each record is a key/value pair of bytes
already encoded by the coordinator's serde; a tombstone has a null value.

Layout written (Kafka "magic 2"; see ``protocol/record_batch.py`` for the header)::

    header: base offset 0 (the log assigns it), leader epoch 0, magic 2, CRC-32C, attributes 0
            (no compression, CreateTime), last offset delta n-1, base = max timestamp = now_ms,
            producer id/epoch/sequence -1, record count n
    record: length varint, attributes 0, timestamp delta 0, offset delta i, key length + key,
            value length (-1 for null) + value, 0 headers

Varints are zigzag-encoded (Kafka ``ByteUtils.writeVarint``).

Invariants:
- ``decode_batches(encode_batch(rs, t))`` yields ``rs`` in order at offsets 0..n-1;
- decoding checks the CRC, the record count and every length; malformed input raises
  ``CorruptRecordError`` and never yields a partial record; control batches are skipped;
- pure functions: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import crc32c

from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    CorruptRecordError,
)

CoordinatorRecordBytes = tuple[bytes, bytes | None]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
LEADER_EPOCH = 0

_CRC = struct.Struct(">I")
_CRC_OFFSET = 17


def _varint(n: int, out: bytearray) -> None:
    """Append ``n`` as a zigzag varint."""
    z = (n << 1) ^ (n >> 63)
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def encode_batch(records: Sequence[CoordinatorRecordBytes], timestamp_ms: int) -> bytes:
    """One uncompressed v2 batch holding ``records`` (base offset 0, rewritten on append).

    Raises:
        ValueError: ``records`` is empty.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    body = bytearray()
    rec = bytearray()
    for delta, (key, value) in enumerate(records):
        rec.clear()
        rec.append(0)  # attributes
        rec.append(0)  # timestamp delta (zigzag 0)
        _varint(delta, rec)
        _varint(len(key), rec)
        rec += key
        if value is None:
            rec.append(1)  # zigzag(-1)
        else:
            _varint(len(value), rec)
            rec += value
        rec.append(0)  # no headers
        _varint(len(rec), body)
        body += rec
    n = len(records)
    header = bytearray(
        HEADER_STRUCT.pack(
            0,  # base offset
            BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body),
            LEADER_EPOCH,
            MAGIC_V2,
            0,  # crc, filled below
            0,  # attributes
            n - 1,
            timestamp_ms,
            timestamp_ms,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            n,
        )
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _CRC.pack_into(header, _CRC_OFFSET, crc)
    return bytes(header + body)


def decode_batches(
    data: bytes | bytearray | memoryview, *, check_crc: bool = True
) -> Iterator[tuple[int, bytes, bytes | None]]:
    """Yield ``(offset, key, value)`` for every record of the whole batches in ``data``.

    Raises:
        CorruptRecordError: a batch is truncated, fails its CRC, is compressed, or a record does
            not parse (nothing of that batch is yielded after the bad record).
    """
    buf = bytes(data)
    end = len(buf)
    pos = 0
    unpack = HEADER_STRUCT.unpack_from
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"truncated batch header at position {pos}")
        h = unpack(buf, pos)
        size = h[1] + LOG_OVERHEAD
        if h[3] != MAGIC_V2 or h[1] < MIN_BATCH_LENGTH or pos + size > end:
            raise CorruptRecordError(f"malformed batch at position {pos}")
        if check_crc and crc32c.crc32c(buf[pos + ATTRIBUTES_OFFSET : pos + size]) != h[4]:
            raise CorruptRecordError(f"CRC mismatch in batch at position {pos}")
        attributes = h[5]
        if attributes & CONTROL_MASK:
            pos += size
            continue
        if attributes & COMPRESSION_MASK:
            raise CorruptRecordError("compressed coordinator batches are not supported")
        yield from _records(buf, pos + BATCH_HEADER_SIZE, pos + size, h[0], h[12])
        pos += size


def _records(
    buf: bytes, p: int, end: int, base_offset: int, count: int
) -> Iterator[tuple[int, bytes, bytes | None]]:
    for _ in range(count):
        length, p = _read_varint(buf, p, end)
        rec_end = p + length
        if length < 0 or rec_end > end:
            raise CorruptRecordError("record length out of bounds")
        p += 1  # attributes
        _ts, p = _read_varint(buf, p, rec_end)
        delta, p = _read_varint(buf, p, rec_end)
        klen, p = _read_varint(buf, p, rec_end)
        if klen < 0 or p + klen > rec_end:
            raise CorruptRecordError("coordinator records need a key")
        key = buf[p : p + klen]
        p += klen
        vlen, p = _read_varint(buf, p, rec_end)
        value: bytes | None
        if vlen < 0:
            value = None
        else:
            if p + vlen > rec_end:
                raise CorruptRecordError("record value out of bounds")
            value = buf[p : p + vlen]
            p += vlen
        # Headers are not used by coordinator records; skip whatever is there.
        p = rec_end
        yield base_offset + delta, key, value
    if p != end:
        raise CorruptRecordError("record count does not match the batch length")


def _read_varint(buf: bytes, p: int, end: int) -> tuple[int, int]:
    z = 0
    shift = 0
    while True:
        if p >= end or shift > 63:
            raise CorruptRecordError("truncated or overlong varint")
        b = buf[p]
        p += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), p
        shift += 7
