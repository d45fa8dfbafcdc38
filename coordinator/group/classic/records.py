"""Classic consumer-group records on ``__consumer_offsets`` (Kafka's formats, record types 0-2).

Concept: Kafka stores a classic group's durable state as one ``GroupMetadata`` record (key
version 2: the group id; value: protocol type, generation, protocol, leader and the members with
their subscription and assignment bytes), written when a generation's assignment is synced, and
committed offsets as ``OffsetCommit`` records (key version 1: group, topic, partition; value: the
offset, its leader epoch, metadata and commit timestamp). A tombstone (value None) deletes.

Encoding (Kafka's non-flexible versions, so older and newer Kafka tools read them):
- key: int16 key version (1 for offsets, 2 for group metadata), then the key struct with int16
  string lengths;
- OffsetCommitValue version 3: offset int64, leader_epoch int32, metadata string,
  commit_timestamp int64;
- GroupMetadataValue version 3: protocol_type string, generation int32, protocol nullable string,
  leader nullable string, current_state_timestamp int64, members array (int32 length) of
  member_id, group_instance_id (nullable), client_id, client_host, rebalance_timeout int32,
  session_timeout int32, subscription bytes, assignment bytes (int32 length-prefixed).

Decoding accepts key versions 0/1 (offsets) and 2 (groups) and value versions 0-3 of
OffsetCommitValue (v1's expire timestamp is skipped) and 3 of GroupMetadataValue; anything else
raises ``ClassicDecodeError`` (corrupt or unsupported log data).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
CLASSIC_RECORD_TYPES = frozenset({0, 1, 2})


class ClassicDecodeError(ValueError):
    """Malformed or unsupported classic-group record bytes."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    RECORD_TYPE: ClassVar[int] = OFFSET_KEY_VERSION
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    RECORD_TYPE: ClassVar[int] = GROUP_KEY_VERSION
    group_id: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


ClassicKey = OffsetCommitKey | GroupMetadataKey
ClassicValue = OffsetCommitValue | GroupMetadataValue

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


MAX_STRING_BYTES = 0x7FFF  # the records' strings have int16 lengths (Kafka's formats)


def fits(s: str | None) -> bool:
    """Whether ``s`` can be a string of these records (at most MAX_STRING_BYTES in UTF-8)."""
    return s is None or len(s) * 4 <= MAX_STRING_BYTES or \
        len(s.encode("utf-8")) <= MAX_STRING_BYTES


def _str(s: str | None, out: bytearray) -> None:
    if s is None:
        out += _I16.pack(-1)
        return
    data = s.encode("utf-8")
    if len(data) > MAX_STRING_BYTES:
        raise ValueError("string too long for int16 length")
    out += _I16.pack(len(data))
    out += data


def _bytes(b: bytes, out: bytearray) -> None:
    out += _I32.pack(len(b))
    out += b


def encode_key(key: ClassicKey) -> bytes:
    out = bytearray(_I16.pack(key.RECORD_TYPE))
    _str(key.group_id, out)
    if isinstance(key, OffsetCommitKey):
        _str(key.topic, out)
        out += _I32.pack(key.partition)
    return bytes(out)


def encode_value(value: ClassicValue | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        out = bytearray(_I16.pack(OFFSET_VALUE_VERSION))
        out += _I64.pack(value.offset)
        out += _I32.pack(value.leader_epoch)
        _str(value.metadata, out)
        out += _I64.pack(value.commit_timestamp)
        return bytes(out)
    out = bytearray(_I16.pack(GROUP_VALUE_VERSION))
    _str(value.protocol_type, out)
    out += _I32.pack(value.generation)
    _str(value.protocol, out)
    _str(value.leader, out)
    out += _I64.pack(value.current_state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        _str(m.member_id, out)
        _str(m.group_instance_id, out)
        _str(m.client_id, out)
        _str(m.client_host, out)
        out += _I32.pack(m.rebalance_timeout)
        out += _I32.pack(m.session_timeout)
        _bytes(m.subscription, out)
        _bytes(m.assignment, out)
    return bytes(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ClassicDecodeError("truncated classic record")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        v: int = _I16.unpack(self.take(2))[0]
        return v

    def i32(self) -> int:
        v: int = _I32.unpack(self.take(4))[0]
        return v

    def i64(self) -> int:
        v: int = _I64.unpack(self.take(8))[0]
        return v

    def string(self, nullable: bool = False) -> str | None:
        n = self.i16()
        if n < 0:
            if not nullable:
                raise ClassicDecodeError("null in a non-nullable string")
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ClassicDecodeError("invalid utf-8") from exc

    def sstr(self) -> str:
        s = self.string()
        assert s is not None
        return s

    def raw(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else self.take(n)

    def done(self) -> None:
        if self.pos != len(self.data):
            raise ClassicDecodeError("trailing bytes in classic record")


def decode_key(data: bytes) -> ClassicKey:
    rd = _Reader(data)
    version = rd.i16()
    if version in (0, 1):
        key: ClassicKey = OffsetCommitKey(rd.sstr(), rd.sstr(), rd.i32())
    elif version == 2:
        key = GroupMetadataKey(rd.sstr())
    else:
        raise ClassicDecodeError(f"not a classic record key version: {version}")
    rd.done()
    return key


def decode_value(key: ClassicKey, data: bytes | None) -> ClassicValue | None:
    if data is None:
        return None
    rd = _Reader(data)
    version = rd.i16()
    if isinstance(key, OffsetCommitKey):
        if not 0 <= version <= 3:
            raise ClassicDecodeError(f"unsupported OffsetCommitValue version {version}")
        offset = rd.i64()
        epoch = rd.i32() if version >= 3 else -1
        metadata = rd.sstr()
        ts = rd.i64()
        if version == 1:
            rd.i64()  # expire timestamp (no longer used)
        rd.done()
        return OffsetCommitValue(offset, epoch, metadata, ts)
    if version != 3:
        raise ClassicDecodeError(f"unsupported GroupMetadataValue version {version}")
    protocol_type = rd.sstr()
    generation = rd.i32()
    protocol = rd.string(True)
    leader = rd.string(True)
    ts = rd.i64()
    members = []
    for _ in range(rd.i32()):
        members.append(MemberMetadata(rd.sstr(), rd.string(True), rd.sstr(), rd.sstr(), rd.i32(),
                                      rd.i32(), rd.raw(), rd.raw()))
    rd.done()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(members))
