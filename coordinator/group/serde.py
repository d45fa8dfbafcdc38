"""Binary encoding of share-group coordinator records (Kafka's coordinator-record format).

Concept: a record on ``__consumer_offsets`` is a Kafka v2 record whose key and value bytes are:

- key:   int16 record type (the schema's ``apiKey``: 10..15), then the key struct at version 0.
  Key schemas have ``flexibleVersions: none``: strings are int16-length-prefixed.
- value: int16 value version (0), then the value struct. Value schemas are flexible (``0+``):
  compact strings/arrays (unsigned-varint length + 1, 0 = null), and every struct (the top level
  and each nested one) ends with a tagged-field section (uvarint count, then uvarint tag, uvarint
  size, bytes per field).
- a tombstone has no value bytes at all (``None``).

This is our own small encoder for the handful of types these schemas use (string, nullable
string, int8, int32, int64, uuid, bytes, arrays of int32/string/structs, tagged fields, and a
tagged nullable struct: uvarint 1 then the struct, 0 for null); it is driven by
the declarative ``_SCHEMAS`` table below, which mirrors the JSON schemas field by field.

Invariants:
- ``decode_*(encode_*(x)) == x`` for every record (round-trip tested).
- Decoding rejects trailing bytes, truncated input, unknown record types and unknown value
  versions with ``RecordDecodeError``; unknown *tagged* fields are skipped (forward compatible,
  as Kafka does). Corrupt log data is not an expected protocol outcome, hence an exception.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from coordinator.group.classic import records as cr
from coordinator.group.consumer import records as cg
from coordinator.group.share import records as r


class RecordDecodeError(ValueError):
    """The bytes are not a valid share-group coordinator record."""


class UnknownRecordType(RecordDecodeError):
    """The key's record type is not one of the share-group types (10..15).

    ``__consumer_offsets`` also holds offset commits and classic/consumer group records; the
    loader uses ``peek_record_type`` to route those elsewhere before calling ``decode_record``.
    """

    def __init__(self, record_type: int) -> None:
        super().__init__(f"not a share-group record type: {record_type}")
        self.record_type = record_type


# --------------------------------------------------------------------------- field types


@dataclass(frozen=True)
class _Prim:
    name: str  # "string" | "nullable_string" | "int8" | "int32" | "int64" | "uuid"


@dataclass(frozen=True)
class _Array:
    elem: Any  # _Prim | _Struct


@dataclass(frozen=True)
class _Nullable:
    """A nullable struct (Kafka's ``nullableVersions`` on a struct field); only as a tagged field
    here, where it is written only when set: uvarint 1, then the struct."""

    struct: Any  # _Struct


@dataclass(frozen=True)
class _Struct:
    cls: type
    fields: tuple[tuple[str, Any], ...]
    tagged: tuple[tuple[int, str, Any, Any], ...] = ()  # (tag, attr, type, default)


STRING = _Prim("string")
NULLABLE_STRING = _Prim("nullable_string")
INT8 = _Prim("int8")
INT32 = _Prim("int32")
INT64 = _Prim("int64")
UUID = _Prim("uuid")
BYTES = _Prim("bytes")

_TOPIC_PARTITIONS = _Struct(r.TopicPartitions, (("topic_id", UUID), ("partitions", _Array(INT32))))
_TOPIC_PARTITIONS_INFO = _Struct(
    r.TopicPartitionsInfo,
    (("topic_id", UUID), ("topic_name", STRING), ("partitions", _Array(INT32))),
)
_TOPIC_INFO = _Struct(r.TopicInfo, (("topic_id", UUID), ("topic_name", STRING)))

# record type -> (key struct, value struct); mirrors kafka-schemas/records/ShareGroup*.json.
_SCHEMAS: dict[int, tuple[_Struct, _Struct]] = {
    10: (
        _Struct(r.ShareGroupMemberMetadataKey, (("group_id", STRING), ("member_id", STRING))),
        _Struct(
            r.ShareGroupMemberMetadataValue,
            (
                ("rack_id", NULLABLE_STRING),
                ("client_id", STRING),
                ("client_host", STRING),
                ("subscribed_topic_names", _Array(STRING)),
            ),
        ),
    ),
    11: (
        _Struct(r.ShareGroupMetadataKey, (("group_id", STRING),)),
        _Struct(r.ShareGroupMetadataValue, (("epoch", INT32), ("metadata_hash", INT64))),
    ),
    12: (
        _Struct(r.ShareGroupTargetAssignmentMetadataKey, (("group_id", STRING),)),
        _Struct(
            r.ShareGroupTargetAssignmentMetadataValue,
            (("assignment_epoch", INT32),),
            tagged=((0, "assignment_timestamp", INT64, 0),),
        ),
    ),
    13: (
        _Struct(
            r.ShareGroupTargetAssignmentMemberKey, (("group_id", STRING), ("member_id", STRING))
        ),
        _Struct(
            r.ShareGroupTargetAssignmentMemberValue,
            (("topic_partitions", _Array(_TOPIC_PARTITIONS)),),
        ),
    ),
    14: (
        _Struct(
            r.ShareGroupCurrentMemberAssignmentKey, (("group_id", STRING), ("member_id", STRING))
        ),
        _Struct(
            r.ShareGroupCurrentMemberAssignmentValue,
            (
                ("member_epoch", INT32),
                ("previous_member_epoch", INT32),
                ("state", INT8),
                ("assigned_partitions", _Array(_TOPIC_PARTITIONS)),
            ),
        ),
    ),
    15: (
        _Struct(r.ShareGroupStatePartitionMetadataKey, (("group_id", STRING),)),
        _Struct(
            r.ShareGroupStatePartitionMetadataValue,
            (
                ("initializing_topics", _Array(_TOPIC_PARTITIONS_INFO)),
                ("initialized_topics", _Array(_TOPIC_PARTITIONS_INFO)),
                ("deleting_topics", _Array(_TOPIC_INFO)),
            ),
        ),
    ),
}

_CLASSIC_MEMBER_METADATA = _Nullable(_Struct(
    cg.ClassicMemberMetadata,
    (("session_timeout_ms", INT32),
     ("supported_protocols",
      _Array(_Struct(cg.ClassicProtocol, (("name", STRING), ("metadata", BYTES)))))),
))

# Consumer-group (KIP-848) records, types 3 and 5-8 and 16; mirrors Kafka 4.x
# group-coordinator/src/main/resources/common/message/ConsumerGroup*.json.
_SCHEMAS.update({
    3: (
        _Struct(cg.ConsumerGroupMetadataKey, (("group_id", STRING),)),
        _Struct(cg.ConsumerGroupMetadataValue, (("epoch", INT32),),
                tagged=((0, "metadata_hash", INT64, 0),)),
    ),
    5: (
        _Struct(cg.ConsumerGroupMemberMetadataKey, (("group_id", STRING), ("member_id", STRING))),
        _Struct(
            cg.ConsumerGroupMemberMetadataValue,
            (
                ("instance_id", NULLABLE_STRING),
                ("rack_id", NULLABLE_STRING),
                ("client_id", STRING),
                ("client_host", STRING),
                ("subscribed_topic_names", _Array(STRING)),
                ("subscribed_topic_regex", NULLABLE_STRING),
                ("rebalance_timeout_ms", INT32),
                ("server_assignor", NULLABLE_STRING),
            ),
            tagged=((0, "classic_member_metadata", _CLASSIC_MEMBER_METADATA, None),),
        ),
    ),
    6: (
        _Struct(cg.ConsumerGroupTargetAssignmentMetadataKey, (("group_id", STRING),)),
        _Struct(cg.ConsumerGroupTargetAssignmentMetadataValue, (("assignment_epoch", INT32),),
                tagged=((0, "assignment_timestamp", INT64, 0),)),
    ),
    7: (
        _Struct(cg.ConsumerGroupTargetAssignmentMemberKey,
                (("group_id", STRING), ("member_id", STRING))),
        _Struct(cg.ConsumerGroupTargetAssignmentMemberValue,
                (("topic_partitions", _Array(_TOPIC_PARTITIONS)),)),
    ),
    8: (
        _Struct(cg.ConsumerGroupCurrentMemberAssignmentKey,
                (("group_id", STRING), ("member_id", STRING))),
        _Struct(
            cg.ConsumerGroupCurrentMemberAssignmentValue,
            (
                ("member_epoch", INT32),
                ("previous_member_epoch", INT32),
                ("state", INT8),
                ("assigned_partitions", _Array(_TOPIC_PARTITIONS)),
                ("partitions_pending_revocation", _Array(_TOPIC_PARTITIONS)),
            ),
        ),
    ),
    16: (
        _Struct(cg.ConsumerGroupRegularExpressionKey,
                (("group_id", STRING), ("regular_expression", STRING))),
        _Struct(cg.ConsumerGroupRegularExpressionValue,
                (("topics", _Array(STRING)), ("version", INT64), ("timestamp", INT64))),
    ),
})

_VALUE_VERSION = 0  # the only version of these value schemas (validVersions "0")

# --------------------------------------------------------------------------- writer

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _uvarint(n: int, out: bytearray) -> None:
    if n < 0:
        raise ValueError("uvarint must be non-negative")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_string(s: str | None, flexible: bool, nullable: bool, out: bytearray) -> None:
    if s is None:
        if not nullable:
            raise ValueError("null for a non-nullable string")
        if flexible:
            out.append(0)
        else:
            out += _I16.pack(-1)
        return
    data = s.encode("utf-8")
    if flexible:
        _uvarint(len(data) + 1, out)
    else:
        if len(data) > 0x7FFF:
            raise ValueError("string too long for int16 length")
        out += _I16.pack(len(data))
    out += data


_FIXED = {"int8": _I8, "int32": _I32, "int64": _I64}


def _write_prim(value: Any, name: str, flexible: bool, out: bytearray) -> None:
    fixed = _FIXED.get(name)
    if fixed is not None:
        out += fixed.pack(value)
    elif name == "uuid":
        out += value.bytes
    elif name == "bytes":
        if flexible:
            _uvarint(len(value) + 1, out)
        else:
            out += _I32.pack(len(value))
        out += value
    else:
        _write_string(value, flexible, name == "nullable_string", out)


def _write(value: Any, typ: Any, flexible: bool, out: bytearray) -> None:
    if isinstance(typ, _Prim):
        _write_prim(value, typ.name, flexible, out)
    elif isinstance(typ, _Array):
        if flexible:
            _uvarint(len(value) + 1, out)
        else:
            out += _I32.pack(len(value))
        for item in value:
            _write(item, typ.elem, flexible, out)
    elif isinstance(typ, _Nullable):
        _uvarint(0 if value is None else 1, out)
        if value is not None:
            _write_struct(value, typ.struct, flexible, out)
    else:
        _write_struct(value, typ, flexible, out)


def _write_struct(obj: Any, schema: _Struct, flexible: bool, out: bytearray) -> None:
    for attr, typ in schema.fields:
        _write(getattr(obj, attr), typ, flexible, out)
    if not flexible:
        return
    present = [
        (tag, getattr(obj, attr), typ)
        for tag, attr, typ, default in schema.tagged
        if getattr(obj, attr) != default  # tagged fields at their default are omitted
    ]
    _uvarint(len(present), out)
    for tag, value, typ in present:
        buf = bytearray()
        _write(value, typ, flexible, buf)
        _uvarint(tag, out)
        _uvarint(len(buf), out)
        out += buf


# --------------------------------------------------------------------------- reader


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise RecordDecodeError("truncated record")
        chunk = bytes(self.data[self.pos : end])
        self.pos = end
        return chunk

    def unpack(self, s: struct.Struct) -> int:
        value: int = s.unpack(self.take(s.size))[0]
        return value

    def uvarint(self) -> int:
        result = 0
        shift = 0
        while True:
            if shift > 28:
                raise RecordDecodeError("uvarint too long")
            byte = self.take(1)[0]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7

    def done(self) -> None:
        if self.pos != len(self.data):
            raise RecordDecodeError(f"{len(self.data) - self.pos} trailing bytes")


def _read_string(rd: _Reader, flexible: bool, nullable: bool) -> str | None:
    if flexible:
        n = rd.uvarint() - 1
    else:
        n = rd.unpack(_I16)
    if n < 0:
        if not nullable:
            raise RecordDecodeError("null for a non-nullable string")
        return None
    try:
        return rd.take(n).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordDecodeError("invalid utf-8 in string") from exc


def _read_prim(rd: _Reader, name: str, flexible: bool) -> Any:
    fixed = _FIXED.get(name)
    if fixed is not None:
        return rd.unpack(fixed)
    if name == "uuid":
        return uuid.UUID(bytes=rd.take(16))
    if name == "bytes":
        n = rd.uvarint() - 1 if flexible else rd.unpack(_I32)
        if n < 0:
            raise RecordDecodeError("null for non-nullable bytes")
        return rd.take(n)
    return _read_string(rd, flexible, name == "nullable_string")


def _read(rd: _Reader, typ: Any, flexible: bool) -> Any:
    if isinstance(typ, _Prim):
        return _read_prim(rd, typ.name, flexible)
    if isinstance(typ, _Array):
        n = rd.uvarint() - 1 if flexible else rd.unpack(_I32)
        if n < 0:
            raise RecordDecodeError("null array in a non-nullable field")
        if n > len(rd.data) - rd.pos:  # every element takes at least one byte
            raise RecordDecodeError("array length exceeds record size")
        return tuple(_read(rd, typ.elem, flexible) for _ in range(n))
    if isinstance(typ, _Nullable):
        return None if rd.uvarint() <= 0 else _read_struct(rd, typ.struct, flexible)
    return _read_struct(rd, typ, flexible)


def _read_struct(rd: _Reader, schema: _Struct, flexible: bool) -> Any:
    kwargs = {attr: _read(rd, typ, flexible) for attr, typ in schema.fields}
    for _, attr, _, default in schema.tagged:
        kwargs[attr] = default
    if flexible:
        known = {tag: (attr, typ) for tag, attr, typ, _ in schema.tagged}
        for _ in range(rd.uvarint()):
            tag = rd.uvarint()
            size = rd.uvarint()
            raw = rd.take(size)
            if tag in known:
                attr, typ = known[tag]
                sub = _Reader(raw)
                kwargs[attr] = _read(sub, typ, flexible)
                sub.done()
            # Unknown tags are skipped: a newer writer may add tagged fields.
    return schema.cls(**kwargs)


# --------------------------------------------------------------------------- public API


def encode_key(key: r.RecordKey) -> bytes:
    """Key bytes: int16 record type, then the non-flexible key struct."""
    schema = _SCHEMAS[key.RECORD_TYPE][0]
    out = bytearray(_I16.pack(key.RECORD_TYPE))
    _write_struct(key, schema, False, out)
    return bytes(out)


def encode_value(value: r.RecordValue | None) -> bytes | None:
    """Value bytes: int16 version, then the flexible value struct; None for a tombstone."""
    if value is None:
        return None
    schema = _value_schema_for(type(value))
    out = bytearray(_I16.pack(_VALUE_VERSION))
    _write_struct(value, schema, True, out)
    return bytes(out)


def encode_record(record: r.Record) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None) for one record."""
    return encode_key(record.key), encode_value(record.value)


def peek_record_type(key_bytes: bytes) -> int:
    """The record type (first int16) of a ``__consumer_offsets`` key.

    Raises:
        RecordDecodeError: fewer than two bytes.
    """
    if len(key_bytes) < 2:
        raise RecordDecodeError("key shorter than its record type")
    value: int = _I16.unpack_from(key_bytes)[0]
    return value


def decode_key(key_bytes: bytes) -> r.RecordKey:
    """Raises:
    UnknownRecordType: not a share-group record type.
    RecordDecodeError: malformed bytes.
    """
    record_type = peek_record_type(key_bytes)
    if record_type not in _SCHEMAS:
        raise UnknownRecordType(record_type)
    rd = _Reader(key_bytes)
    rd.take(2)
    key = _read_struct(rd, _SCHEMAS[record_type][0], False)
    rd.done()
    result: r.RecordKey = key
    return result


def decode_value(record_type: int, value_bytes: bytes | None) -> r.RecordValue | None:
    """Raises:
    UnknownRecordType: not a share-group record type.
    RecordDecodeError: malformed bytes or an unknown value version.
    """
    if record_type not in _SCHEMAS:
        raise UnknownRecordType(record_type)
    if value_bytes is None:
        return None
    rd = _Reader(value_bytes)
    version = rd.unpack(_I16)
    if version != _VALUE_VERSION:
        raise RecordDecodeError(f"unsupported value version {version} for type {record_type}")
    value = _read_struct(rd, _SCHEMAS[record_type][1], True)
    rd.done()
    result: r.RecordValue = value
    return result


def decode_record(key_bytes: bytes, value_bytes: bytes | None) -> r.Record:
    """Raises:
    UnknownRecordType: not a share-group record type.
    RecordDecodeError: malformed bytes.
    """
    key = decode_key(key_bytes)
    return r.Record(key, decode_value(key.RECORD_TYPE, value_bytes))


def _value_schema_for(cls: type) -> _Struct:
    for _, value_schema in _SCHEMAS.values():
        if value_schema.cls is cls:
            return value_schema
    raise TypeError(f"not a share-group record value: {cls.__name__}")


class GroupRecordSerde:
    """The runtime's ``RecordSerde`` (``coordinator/runtime/shard.py``) for share-group records.

    Offset commits (key versions 0/1) and classic group metadata (2) go through
    ``classic_records``; other record types (consumer groups) are skipped on load (``decode``
    returns None), as Kafka skips record types it does not know.
    """

    def encode(self, record: r.Record) -> tuple[bytes, bytes | None]:
        key: Any = record.key
        if isinstance(key, (cr.OffsetCommitKey, cr.GroupMetadataKey)):
            return cr.encode_key(key), cr.encode_value(record.value)
        return encode_record(record)

    def key_value(self, record: r.Record) -> tuple[r.RecordKey, r.RecordValue | None]:
        return record.key, record.value

    def decode(
        self, key: bytes, value: bytes | None
    ) -> tuple[r.RecordKey, r.RecordValue | None] | None:
        """Raises:
        RecordDecodeError: malformed bytes of a share-group record.
        """
        if peek_record_type(key) in cr.CLASSIC_RECORD_TYPES:
            try:
                ckey = cr.decode_key(key)
                return ckey, cr.decode_value(ckey, value)  # type: ignore[return-value]
            except cr.ClassicDecodeError as exc:
                raise RecordDecodeError(str(exc)) from exc
        try:
            decoded = decode_key(key)
        except UnknownRecordType:
            return None
        return decoded, decode_value(decoded.RECORD_TYPE, value)
