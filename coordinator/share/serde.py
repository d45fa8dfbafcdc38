"""Binary encoding of ShareSnapshot / ShareUpdate records, byte-compatible with Kafka.

Concept: a coordinator record on ``__share_group_state`` is a Kafka record whose key and value are
(reference section 6; Kafka ``CoordinatorRecordSerde`` / ``MessageUtil``):

- key bytes   = int16 record type (0 ShareSnapshot, 1 ShareUpdate) + the key struct at version 0.
  The key schemas are not flexible: GroupId is a classic string (int16 length + UTF-8), TopicId a
  16-byte uuid, Partition an int32.
- value bytes = int16 value version (0) + the value struct. The value schemas are flexible
  ("flexibleVersions": "0+"): the StateBatches array is a compact array (uvarint length + 1), every
  struct ends with a tagged-field section (uvarint count, then uvarint tag, uvarint size, data),
  and DeliveryCompleteCount is tagged field 0, written only when it differs from its default -1.
- a tombstone has no value bytes (``None``).

Invariants:
- ``decode_*(encode_*(x)) == x`` for every record the shard can build (round-trip tests).
- Decoding is strict: truncated input, trailing bytes, a null non-nullable field, an unknown record
  type or value version raise ``ShareRecordSerdeError`` (subclasses say which). Unknown tagged
  fields are skipped, as Kafka's generated readers do, so newer writers stay readable.
- Only this module knows the byte layout; it uses no kio.serial (STYLE 1.11) and no I/O.
"""

from __future__ import annotations

import struct
import uuid

from coordinator.share.records import (
    SHARE_SNAPSHOT_RECORD_TYPE,
    SHARE_SNAPSHOT_VALUE_VERSION,
    SHARE_UPDATE_RECORD_TYPE,
    SHARE_UPDATE_VALUE_VERSION,
    UNKNOWN_DELIVERY_COMPLETE_COUNT,
    ShareKey,
    ShareRecord,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    ShareValue,
    StateBatch,
)

# Tag of DeliveryCompleteCount in both value schemas ("tag": 0).
_DELIVERY_COMPLETE_COUNT_TAG = 0

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class ShareRecordSerdeError(ValueError):
    """Bytes that are not a valid ShareSnapshot/ShareUpdate record, or a value that cannot be encoded."""


class UnknownRecordTypeError(ShareRecordSerdeError):
    """A key whose record type is not 0 or 1. A loader may skip such records (Kafka does)."""

    def __init__(self, record_type: int) -> None:
        super().__init__(f"unknown share coordinator record type {record_type}")
        self.record_type = record_type


class UnsupportedValueVersionError(ShareRecordSerdeError):
    """A value written with a version this code does not know."""


# --------------------------------------------------------------------------------------------
# Primitive writer / reader


class _Writer:
    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def _pack(self, fmt: struct.Struct, value: int, what: str) -> None:
        try:
            self._buf += fmt.pack(value)
        except struct.error as exc:
            raise ShareRecordSerdeError(f"{what} {value!r} out of range") from exc

    def int8(self, value: int) -> None:
        self._pack(_INT8, value, "int8")

    def int16(self, value: int) -> None:
        self._pack(_INT16, value, "int16")

    def int32(self, value: int) -> None:
        self._pack(_INT32, value, "int32")

    def int64(self, value: int) -> None:
        self._pack(_INT64, value, "int64")

    def uvarint(self, value: int) -> None:
        if value < 0 or value > 0xFFFFFFFF:
            raise ShareRecordSerdeError(f"uvarint {value} out of range")
        while value >= 0x80:
            self._buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self._buf.append(value)

    def string(self, value: str) -> None:
        """Classic (non-flexible) string: int16 length then UTF-8."""
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ShareRecordSerdeError("string longer than 32767 bytes")
        self.int16(len(data))
        self._buf += data

    def uuid(self, value: uuid.UUID) -> None:
        # Kafka writes a Uuid as its most then least significant long, i.e. the 16 big-endian bytes.
        self._buf += value.bytes

    def getvalue(self) -> bytes:
        return bytes(self._buf)


class _Reader:
    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def _take(self, n: int) -> memoryview:
        end = self._pos + n
        if n < 0 or end > len(self._data):
            raise ShareRecordSerdeError("record truncated")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def int8(self) -> int:
        return int(_INT8.unpack(self._take(1))[0])

    def int16(self) -> int:
        return int(_INT16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_INT64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        result = 0
        for shift in range(0, 35, 7):
            byte = self._take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if result > 0xFFFFFFFF:
                    break
                return result
        raise ShareRecordSerdeError("malformed unsigned varint")

    def string(self) -> str:
        length = self.int16()
        if length < 0:
            raise ShareRecordSerdeError("null string in a non-nullable field")
        try:
            return bytes(self._take(length)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ShareRecordSerdeError("string is not valid UTF-8") from exc

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def skip(self, n: int) -> None:
        self._take(n)

    def expect_end(self) -> None:
        if self._pos != len(self._data):
            raise ShareRecordSerdeError(f"{len(self._data) - self._pos} trailing bytes")


# --------------------------------------------------------------------------------------------
# Keys


def encode_key(key: ShareKey) -> bytes:
    """Key bytes: int16 record type + (GroupId string, TopicId uuid, Partition int32).

    Raises:
        ShareRecordSerdeError: a field does not fit its wire type.
    """
    w = _Writer()
    w.int16(key.record_type)
    w.string(key.group_id)
    w.uuid(key.topic_id)
    w.int32(key.partition)
    return w.getvalue()


def decode_key(data: bytes) -> ShareKey:
    """Parse key bytes.

    Raises:
        UnknownRecordTypeError: the type prefix is not 0 or 1.
        ShareRecordSerdeError: the bytes are malformed.
    """
    r = _Reader(data)
    record_type = r.int16()
    if record_type not in (SHARE_SNAPSHOT_RECORD_TYPE, SHARE_UPDATE_RECORD_TYPE):
        raise UnknownRecordTypeError(record_type)
    group_id = r.string()
    topic_id = r.uuid()
    partition = r.int32()
    r.expect_end()
    if record_type == SHARE_SNAPSHOT_RECORD_TYPE:
        return ShareSnapshotKey(group_id, topic_id, partition)
    return ShareUpdateKey(group_id, topic_id, partition)


# --------------------------------------------------------------------------------------------
# Values


def _write_batches(w: _Writer, batches: tuple[StateBatch, ...]) -> None:
    w.uvarint(len(batches) + 1)  # compact array: N + 1 (0 would be null)
    for b in batches:
        w.int64(b.first_offset)
        w.int64(b.last_offset)
        w.int8(b.delivery_state)
        w.int16(b.delivery_count)
        w.uvarint(0)  # the StateBatch struct's own (empty) tagged-field section


def _read_batches(r: _Reader) -> tuple[StateBatch, ...]:
    n = r.uvarint()
    if n == 0:
        raise ShareRecordSerdeError("null StateBatches in a non-nullable field")
    batches = []
    for _ in range(n - 1):
        first = r.int64()
        last = r.int64()
        state = r.int8()
        count = r.int16()
        _skip_tagged_fields(r)
        batches.append(StateBatch(first, last, state, count))
    return tuple(batches)


def _write_value_tagged_fields(w: _Writer, delivery_complete_count: int) -> None:
    # Tagged fields are written only when they differ from their default.
    if delivery_complete_count == UNKNOWN_DELIVERY_COMPLETE_COUNT:
        w.uvarint(0)
        return
    w.uvarint(1)
    w.uvarint(_DELIVERY_COMPLETE_COUNT_TAG)
    w.uvarint(4)
    w.int32(delivery_complete_count)


def _read_value_tagged_fields(r: _Reader) -> int:
    """Read a value's tagged section; returns DeliveryCompleteCount (default -1)."""
    delivery_complete_count = UNKNOWN_DELIVERY_COMPLETE_COUNT
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        size = r.uvarint()
        if tag == _DELIVERY_COMPLETE_COUNT_TAG:
            if size != 4:
                raise ShareRecordSerdeError(f"DeliveryCompleteCount tagged field of size {size}")
            delivery_complete_count = r.int32()
        else:
            r.skip(size)
    return delivery_complete_count


def _skip_tagged_fields(r: _Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.skip(r.uvarint())


def encode_value(value: ShareValue | None) -> bytes | None:
    """Value bytes (int16 version + flexible struct), or ``None`` for a tombstone.

    Raises:
        ShareRecordSerdeError: a field does not fit its wire type.
    """
    if value is None:
        return None
    w = _Writer()
    w.int16(value.version)
    if isinstance(value, ShareSnapshotValue):
        w.int32(value.snapshot_epoch)
        w.int32(value.state_epoch)
        w.int32(value.leader_epoch)
        w.int64(value.start_offset)
        w.int64(value.create_timestamp)
        w.int64(value.write_timestamp)
    else:
        w.int32(value.snapshot_epoch)
        w.int32(value.leader_epoch)
        w.int64(value.start_offset)
    _write_batches(w, value.state_batches)
    _write_value_tagged_fields(w, value.delivery_complete_count)
    return w.getvalue()


def decode_value(key: ShareKey, data: bytes | None) -> ShareValue | None:
    """Parse the value that goes with ``key``; ``None`` bytes are a tombstone.

    Raises:
        UnsupportedValueVersionError: the version prefix is not 0.
        ShareRecordSerdeError: the bytes are malformed.
    """
    if data is None:
        return None
    r = _Reader(data)
    version = r.int16()
    value: ShareValue
    if isinstance(key, ShareSnapshotKey):
        if version != SHARE_SNAPSHOT_VALUE_VERSION:
            raise UnsupportedValueVersionError(f"ShareSnapshotValue version {version}")
        snapshot_epoch = r.int32()
        state_epoch = r.int32()
        leader_epoch = r.int32()
        start_offset = r.int64()
        create_timestamp = r.int64()
        write_timestamp = r.int64()
        batches = _read_batches(r)
        value = ShareSnapshotValue(
            snapshot_epoch=snapshot_epoch,
            state_epoch=state_epoch,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            delivery_complete_count=_read_value_tagged_fields(r),
            create_timestamp=create_timestamp,
            write_timestamp=write_timestamp,
            state_batches=batches,
        )
    else:
        if version != SHARE_UPDATE_VALUE_VERSION:
            raise UnsupportedValueVersionError(f"ShareUpdateValue version {version}")
        snapshot_epoch = r.int32()
        leader_epoch = r.int32()
        start_offset = r.int64()
        batches = _read_batches(r)
        value = ShareUpdateValue(
            snapshot_epoch=snapshot_epoch,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            delivery_complete_count=_read_value_tagged_fields(r),
            state_batches=batches,
        )
    r.expect_end()
    return value


# --------------------------------------------------------------------------------------------
# Whole records


def encode_record(record: ShareRecord) -> tuple[bytes, bytes | None]:
    """``(key bytes, value bytes or None)`` as appended to ``__share_group_state``.

    Raises:
        ShareRecordSerdeError: a field does not fit its wire type.
    """
    return encode_key(record.key), encode_value(record.value)


def decode_record(key_data: bytes, value_data: bytes | None) -> ShareRecord:
    """Parse a record read back from ``__share_group_state``.

    Raises:
        UnknownRecordTypeError: the key's record type is not 0 or 1.
        ShareRecordSerdeError: the bytes are malformed or the value does not fit the key.
    """
    key = decode_key(key_data)
    value = decode_value(key, value_data)
    try:
        return ShareRecord(key, value)
    except TypeError as exc:  # an update key with a null value
        raise ShareRecordSerdeError(str(exc)) from exc
