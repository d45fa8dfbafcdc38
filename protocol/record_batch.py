"""Kafka record batch v2 ("magic 2") as raw bytes: header access, validation and offset rewriting.

A batch is a 61-byte header followed by the records. This module reads the header, checks the
CRC and rewrites the two fields that sit outside it; reading the records of a produced batch is
``protocol/log_validator.py``. Layout (big-endian)::

    0  base_offset int64          23 last_offset_delta int32   51 producer_epoch int16
    8  batch_length int32         27 base_timestamp int64      53 base_sequence int32
    12 partition_leader_epoch     35 max_timestamp int64       57 record_count int32
    16 magic int8 (= 2)           43 producer_id int64         61 records...
    17 crc uint32 (CRC-32C of bytes 21..end)
    21 attributes int16: bits 0-2 compression, 3 timestamp type, 4 transactional, 5 control

Invariants:
- ``batch_length`` counts the bytes after itself, so a batch occupies ``batch_length + 12`` bytes
  and ``batch_length >= 49`` (a header without records).
- The CRC covers attributes through the end of the batch; base offset and partition leader epoch
  are outside it, which is why the broker may assign offsets without recomputing it.
- Offsets in a batch are ``base_offset .. base_offset + last_offset_delta``.

Transaction markers (KIP-98) are control batches: attributes transactional + control, no sequence,
one record whose key is (version int16 = 0, type int16: 0 ABORT, 1 COMMIT) and whose value is
(version int16 = 0, coordinator epoch int32). ``control_batch`` builds one and
``control_type`` reads the type back.

Pure functions over ``bytes``/``bytearray``/``memoryview``: no I/O, no per-record work.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from protocol.varint import encode_varint, read_varint

# Byte offsets of the header fields.
BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORD_COUNT_OFFSET = 57
BATCH_HEADER_SIZE = 61

# base_offset + batch_length: the bytes not counted by batch_length.
LOG_OVERHEAD = 12
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
MAGIC_V2 = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
# none, gzip, snappy, lz4, zstd; 5-7 are unassigned.
MAX_COMPRESSION_CODEC = 4

NO_TIMESTAMP = -1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert HEADER_STRUCT.size == BATCH_HEADER_SIZE
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")


class CorruptRecordError(ValueError):
    """Bytes that are not a well-formed v2 batch (Kafka CORRUPT_MESSAGE)."""


class RecordTooLargeError(ValueError):
    """A batch larger than the allowed maximum (Kafka MESSAGE_TOO_LARGE)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed fields of one v2 batch, in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def total_size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Read the header of the batch starting at ``pos`` (the records may be absent).

    Raises:
        CorruptRecordError: fewer than 61 bytes at ``pos``, magic is not 2, or batch_length < 49.
    """
    if len(buf) - pos < BATCH_HEADER_SIZE or pos < 0:
        raise CorruptRecordError(f"truncated batch header at position {pos}")
    fields = HEADER_STRUCT.unpack_from(buf, pos)
    if fields[3] != MAGIC_V2:
        raise CorruptRecordError(f"unsupported magic {fields[3]} at position {pos}")
    if fields[1] < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {fields[1]} below minimum at position {pos}")
    return BatchHeader(*fields)


def crc_ok(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    """Whether the stored CRC-32C matches the batch bytes (False if the batch is incomplete)."""
    end = pos + header.total_size
    if end > len(buf):
        return False
    with memoryview(buf) as view:
        return crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : end]) == header.crc


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each whole batch in a buffer of concatenated batches.

    Does not check CRCs (see ``validate_batches``).

    Raises:
        CorruptRecordError: a header is malformed or the last batch is incomplete.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        header = parse_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > end:
            raise CorruptRecordError(f"incomplete batch at {pos}: {end - pos} of {size} bytes")
        yield pos, header
        pos += size


def validate_batches(
    buf: bytes | bytearray | memoryview, max_batch_bytes: int
) -> list[BatchHeader]:
    """Check the headers and CRCs of concatenated batches; return their headers in order.

    Header-level only: produced batches go through ``protocol.log_validator.validate_produced``,
    which also reads every record.

    Checks per batch: well-formed header, size within ``max_batch_bytes``, complete, CRC matches,
    a known compression codec, and ``record_count == last_offset_delta + 1`` (true for every batch
    a producer builds; Kafka's LogValidator insists on it too). An empty buffer gives ``[]``.

    Raises:
        RecordTooLargeError: a batch is larger than ``max_batch_bytes``.
        CorruptRecordError: anything else is wrong, including trailing bytes after the last batch.
    """
    headers: list[BatchHeader] = []
    pos = 0
    end = len(buf)
    with memoryview(buf) as view:
        while pos < end:
            header = parse_header(view, pos)
            size = header.batch_length + LOG_OVERHEAD
            if size > max_batch_bytes:
                raise RecordTooLargeError(
                    f"batch of {size} bytes at {pos} exceeds the maximum of {max_batch_bytes}"
                )
            if pos + size > end:
                raise CorruptRecordError(f"incomplete batch at {pos}: {end - pos} of {size} bytes")
            if crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) != header.crc:
                raise CorruptRecordError(f"CRC mismatch in batch at position {pos}")
            if header.attributes & COMPRESSION_MASK > MAX_COMPRESSION_CODEC:
                raise CorruptRecordError(f"unknown compression {header.compression} at {pos}")
            if header.last_offset_delta < 0 or header.record_count != header.last_offset_delta + 1:
                raise CorruptRecordError(
                    f"batch at position {pos} has {header.record_count} records but offset delta "
                    f"{header.last_offset_delta}"
                )
            headers.append(header)
            pos += size
    return headers


def with_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Set the base offset of the batch at ``pos`` in place (outside the CRC, so it stays valid)."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def with_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Set the partition leader epoch of the batch at ``pos`` in place (outside the CRC)."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


# -- transaction markers (control batches) ----------------------------------------------------

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_AFTER_CRC = struct.Struct(">hiqqqhii")
_BEFORE_CRC = struct.Struct(">qiibI")


def control_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                  timestamp_ms: int) -> bytes:
    """An end-transaction marker as Kafka writes it: one control record, base offset 0 (the log
    assigns the real one), no sequence."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    body = (b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(len(key)) + key
            + encode_varint(len(value)) + value + encode_varint(0))
    record = encode_varint(len(body)) + body
    after = _AFTER_CRC.pack(TRANSACTIONAL_MASK | CONTROL_MASK, 0, timestamp_ms, timestamp_ms,
                            producer_id, producer_epoch, -1, 1) + record
    return _BEFORE_CRC.pack(0, len(after) + 9, 0, MAGIC_V2, crc32c.crc32c(after)) + after


def marker_coordinator_epoch(batch: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The coordinator epoch in the value of the end-transaction marker at ``pos`` (-1 if it
    does not parse)."""
    try:
        q = pos + BATCH_HEADER_SIZE
        _, q = read_varint(batch, q)
        q += 1
        _, q = read_varint(batch, q)
        _, q = read_varint(batch, q)
        klen, q = read_varint(batch, q)
        q += max(klen, 0)
        vlen, q = read_varint(batch, q)
        if vlen < _CONTROL_VALUE.size or q + vlen > len(batch):
            return -1
        return int(_CONTROL_VALUE.unpack_from(batch, q)[1])
    except (IndexError, ValueError, struct.error):
        return -1


def control_type(batch: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """The marker type (``CONTROL_ABORT``/``CONTROL_COMMIT``) of the uncompressed control batch at
    ``pos``, or None when its first record has no readable control key (an unknown control
    batch, which readers skip as Kafka does)."""
    try:
        q = pos + BATCH_HEADER_SIZE
        _, q = read_varint(batch, q)  # record length
        q += 1  # record attributes
        _, q = read_varint(batch, q)  # timestamp delta
        _, q = read_varint(batch, q)  # offset delta
        klen, q = read_varint(batch, q)
        if klen < _CONTROL_KEY.size or q + klen > len(batch):
            return None
        version, kind = _CONTROL_KEY.unpack_from(batch, q)
    except (IndexError, ValueError, struct.error):
        return None
    if version < 0 or kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    return int(kind)
