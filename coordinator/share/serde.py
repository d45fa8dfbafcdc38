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
- Values in the layout this module writes are decoded with whole-struct reads (a load decodes one
  value per replayed record); anything else goes through the strict field reader. Both paths
  give the same value or the same error (property-tested against each other).
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

# The fixed-width head of each value (version, then the scalar fields before StateBatches), and
# one StateBatch followed by an empty tagged-field section: what ``_decode_value_fast`` reads.
_SNAPSHOT_HEAD = struct.Struct(">hiiiqqq")
_UPDATE_HEAD = struct.Struct(">hiiq")
_PLAIN_BATCH = struct.Struct(">qqbhB")
# A value's tagged section holding only DeliveryCompleteCount: count 1, tag 0, size 4 (+ int32).
_DCC_ONLY = bytes((1, _DELIVERY_COMPLETE_COUNT_TAG, 4))


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
    """Strict reader over a buffer. Fixed-width fields are unpacked in place (no slicing)."""

    __slots__ = ("_data", "_end", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0
        self._end = len(data)

    def _advance(self, n: int) -> int:
        """The current position, after checking that ``n`` more bytes exist and moving past them."""
        pos = self._pos
        end = pos + n
        if n < 0 or end > self._end:
            raise ShareRecordSerdeError("record truncated")
        self._pos = end
        return pos

    def int8(self) -> int:
        return int(_INT8.unpack_from(self._data, self._advance(1))[0])

    def int16(self) -> int:
        return int(_INT16.unpack_from(self._data, self._advance(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack_from(self._data, self._advance(4))[0])

    def int64(self) -> int:
        return int(_INT64.unpack_from(self._data, self._advance(8))[0])

    def uvarint(self) -> int:
        result = 0
        data = self._data
        for shift in range(0, 35, 7):
            byte = data[self._advance(1)]
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
        pos = self._advance(length)
        try:
            return bytes(self._data[pos : pos + length]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ShareRecordSerdeError("string is not valid UTF-8") from exc

    def uuid(self) -> uuid.UUID:
        pos = self._advance(16)
        return uuid.UUID(bytes=bytes(self._data[pos : pos + 16]))

    def skip(self, n: int) -> None:
        self._advance(n)

    def expect_end(self) -> None:
        if self._pos != self._end:
            raise ShareRecordSerdeError(f"{self._end - self._pos} trailing bytes")


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
    snapshot = isinstance(key, ShareSnapshotKey)
    value = _decode_value_fast(snapshot, data)
    if value is not None:
        return value
    return _decode_value_strict(snapshot, data)


def _decode_value_fast(snapshot: bool, data: bytes) -> ShareValue | None:
    """The layout this module writes, unpacked with whole-struct reads; ``None`` for anything else.

    Covers version 0 with no tagged fields in the batches and a value tagged section that is
    empty or holds just DeliveryCompleteCount. Every input it accepts decodes to the same value
    through ``_decode_value_strict``; everything else (including every malformed input) is left
    to that strict reader, so errors stay identical. A load after a crash decodes one value per
    update since each key's last snapshot: this is most of its decoding time.
    """
    head = _SNAPSHOT_HEAD if snapshot else _UPDATE_HEAD
    pos = head.size
    end = len(data)
    if end <= pos:
        return None
    fields = head.unpack_from(data)
    if fields[0] != (SHARE_SNAPSHOT_VALUE_VERSION if snapshot else SHARE_UPDATE_VALUE_VERSION):
        return None
    length = data[pos]  # compact array length N + 1, an unsigned varint
    pos += 1
    if length & 0x80:
        length, pos = _uvarint_at(data, pos - 1)
    count = length - 1
    if count < 0:
        return None
    stop = pos + count * _PLAIN_BATCH.size
    tail = end - stop
    if tail == 1 and data[stop] == 0:
        delivery_complete_count = UNKNOWN_DELIVERY_COMPLETE_COUNT
    elif tail == len(_DCC_ONLY) + 4 and data[stop : stop + 3] == _DCC_ONLY:
        delivery_complete_count = _INT32.unpack_from(data, stop + 3)[0]
    else:
        return None
    batches: tuple[StateBatch, ...] = ()
    if count == 1:  # the usual acknowledgement write
        first, last, state, delivery_count, tagged = _PLAIN_BATCH.unpack_from(data, pos)
        if tagged:
            return None
        batches = (StateBatch(first, last, state, delivery_count),)
    elif count:
        out = []
        for first, last, state, delivery_count, tagged in _PLAIN_BATCH.iter_unpack(data[pos:stop]):
            if tagged:
                return None
            out.append(StateBatch(first, last, state, delivery_count))
        batches = tuple(out)
    if snapshot:
        _, snapshot_epoch, state_epoch, leader_epoch, start_offset, created, written = fields
        return ShareSnapshotValue(
            snapshot_epoch=snapshot_epoch,
            state_epoch=state_epoch,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            delivery_complete_count=delivery_complete_count,
            create_timestamp=created,
            write_timestamp=written,
            state_batches=batches,
        )
    _, snapshot_epoch, leader_epoch, start_offset = fields
    return ShareUpdateValue(
        snapshot_epoch=snapshot_epoch,
        leader_epoch=leader_epoch,
        start_offset=start_offset,
        delivery_complete_count=delivery_complete_count,
        state_batches=batches,
    )


def _uvarint_at(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at ``pos``; value -1 if malformed or
    truncated (the caller then leaves the input to the strict reader)."""
    result = 0
    end = len(data)
    for shift in range(0, 35, 7):
        if pos >= end:
            break
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result, pos) if result <= 0xFFFFFFFF else (-1, pos)
    return -1, pos


def _decode_value_strict(snapshot: bool, data: bytes) -> ShareValue:
    """Field-by-field decoding of any valid value (unknown tagged fields, long varints).

    Raises:
        UnsupportedValueVersionError: the version prefix is not 0.
        ShareRecordSerdeError: the bytes are malformed.
    """
    r = _Reader(data)
    version = r.int16()
    value: ShareValue
    if snapshot:
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
