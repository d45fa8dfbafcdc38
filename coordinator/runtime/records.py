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

Transactional writes (Kafka ``CoordinatorRuntime.scheduleTransactionalWriteOperation``): the same
batch with the producer id and epoch of the transaction and the transactional attribute (0x10).
End of a transaction (``scheduleTransactionCompletion``): a control batch (attributes 0x30) of
that producer holding one control record in Kafka's format, key = version int16 0 + type int16
(0 ABORT, 1 COMMIT), value = version int16 0 + coordinator epoch int32 (``EndTxnMarker``).

Invariants:
- ``decode_batches(encode_batch(rs, t))`` yields ``rs`` in order at offsets 0..n-1;
- decoding checks the CRC, the record count and every length; malformed input raises
  ``CorruptRecordError`` and never yields a partial record; ``decode_batches`` skips control
  batches, ``decode_log_batches`` yields every batch with its producer and kind;
- pure functions: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

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
    TRANSACTIONAL_MASK,
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


# Control record types (Kafka ``ControlRecordType``) and the marker's fixed bytes.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def encode_batch(records: Sequence[CoordinatorRecordBytes], timestamp_ms: int, *,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 transactional: bool = False, control: bool = False) -> bytes:
    """One uncompressed v2 batch holding ``records`` (base offset 0, rewritten on append);
    ``transactional``/``control`` set those attribute bits for ``producer_id``/``producer_epoch``.

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
            (TRANSACTIONAL_MASK if transactional or control else 0)
            | (CONTROL_MASK if control else 0),
            n - 1,
            timestamp_ms,
            timestamp_ms,
            producer_id,
            producer_epoch,
            NO_SEQUENCE,
            n,
        )
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _CRC.pack_into(header, _CRC_OFFSET, crc)
    return bytes(header + body)


def encode_end_txn_marker(producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool, timestamp_ms: int) -> bytes:
    """The control batch ending ``producer_id``'s transaction (COMMIT or ABORT marker)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch([(key, value)], timestamp_ms, producer_id=producer_id,
                        producer_epoch=producer_epoch, control=True)


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """A decoded end-transaction control record."""

    commit: bool
    coordinator_epoch: int


def parse_end_txn_marker(key: bytes, value: bytes | None) -> EndTxnMarker | None:
    """The marker a control record holds; None for another control type (Kafka skips unknown
    control records, e.g. a leader-change record).

    Raises:
        CorruptRecordError: the key or value is too short or of an unknown version.
    """
    if len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError("control record key too short")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version != 0:
        raise CorruptRecordError(f"unknown control record key version {version}")
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise CorruptRecordError("end-transaction marker value too short")
    vversion, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    if vversion != 0:
        raise CorruptRecordError(f"unknown end-transaction marker version {vversion}")
    return EndTxnMarker(kind == CONTROL_COMMIT, coordinator_epoch)


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One batch read back: its producer (-1 when not transactional), kind and records."""

    producer_id: int
    producer_epoch: int
    transactional: bool
    control: bool
    records: list[tuple[int, bytes, bytes | None]]


def decode_log_batches(data: bytes | bytearray | memoryview, *,
                       check_crc: bool = True) -> Iterator[LogBatch]:
    """Every whole batch of ``data``, control batches included (for loading).

    Raises:
        CorruptRecordError: as ``decode_batches``.
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
        if attributes & COMPRESSION_MASK:
            raise CorruptRecordError("compressed coordinator batches are not supported")
        records = list(_records(buf, pos + BATCH_HEADER_SIZE, pos + size, h[0], h[12]))
        yield LogBatch(h[9], h[10], bool(attributes & TRANSACTIONAL_MASK),
                       bool(attributes & CONTROL_MASK), records)
        pos += size


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
