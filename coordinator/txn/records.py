"""``__transaction_state`` records in Kafka's format (``TransactionLogKey``/``TransactionLogValue``).

Key (version 0, int16 version prefix): ``transactional_id`` (int16-length string).
Value (int16 version prefix):

- v0 (what Kafka writes until transaction.version >= 1): producer_id int64,
  producer_epoch int16, transaction_timeout_ms int32, transaction_status int8, partitions
  (nullable array, int32 count: topic string, partition ids int32 array; null for Empty),
  last_update_timestamp_ms int64, start_timestamp_ms int64.
- v1 (flexible): the same fields with compact strings/arrays and tagged fields
  0 previous_producer_id int64, 1 next_producer_id int64, 2 client_transaction_version int16.

Shoal writes v0 unless the state holds one of v1's tagged fields (a previous or next producer id,
or a client transaction version): then v1, so what only v1 can hold survives a reload.

A null value is a tombstone (the id expired). An unknown key version is skipped on load (as Kafka);
an unknown value version is an error (as Kafka).

Invariants: ``decode(*encode(r)) == (r.key, r.value)`` for every record this module builds;
decoding never reads past the buffer (``ValueError`` on malformed bytes). Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from coordinator.txn.metadata import TopicPartition, TxnMetadata, TxnState

KEY_VERSION = 0
VALUE_VERSION = 0

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_V0_HEAD = struct.Struct(">qhib")
_TAIL = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """One ``__transaction_state`` record: the id and its whole new state (None: tombstone)."""

    key: str
    value: TxnMetadata | None


def new_txn_record(meta: TxnMetadata) -> TxnRecord:
    return TxnRecord(meta.transactional_id, meta)


def new_tombstone(transactional_id: str) -> TxnRecord:
    return TxnRecord(transactional_id, None)


def _string(s: str) -> bytes:
    data = s.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _H.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    """Raises:
    ValueError: the id is longer than 32767 bytes.
    """
    return _H.pack(KEY_VERSION) + _string(transactional_id)


def _grouped(partitions: frozenset[TopicPartition]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())


def encode_value(meta: TxnMetadata) -> bytes:
    """Value bytes, v0 or v1 (module doc; Kafka writes partitions as null for Empty).

    Raises:
        ValueError: a field does not fit its wire type, or an Empty state holds partitions.
    """
    if meta.prev_producer_id != -1 or meta.next_producer_id != -1 or meta.client_tv != 0:
        return _encode_value_v1(meta)
    out = bytearray(_H.pack(VALUE_VERSION))
    out += _V0_HEAD.pack(meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.state.id)
    if meta.state is TxnState.EMPTY:
        if meta.partitions:
            raise ValueError("an Empty transaction holds no partitions")
        out += _I.pack(-1)
    else:
        groups = _grouped(meta.partitions)
        out += _I.pack(len(groups))
        for topic, parts in groups:
            out += _string(topic)
            out += _I.pack(len(parts))
            out += b"".join(_I.pack(p) for p in parts)
    out += _TAIL.pack(meta.last_update_ms, meta.start_ms)
    return bytes(out)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_string(s: str) -> bytes:
    data = s.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _uvarint(len(data) + 1) + data


def _encode_value_v1(meta: TxnMetadata) -> bytes:
    out = bytearray(_H.pack(1))
    out += _V0_HEAD.pack(meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.state.id)
    if meta.state is TxnState.EMPTY:
        if meta.partitions:
            raise ValueError("an Empty transaction holds no partitions")
        out += _uvarint(0)  # null
    else:
        groups = _grouped(meta.partitions)
        out += _uvarint(len(groups) + 1)
        for topic, parts in groups:
            out += _compact_string(topic)
            out += _uvarint(len(parts) + 1)
            out += b"".join(_I.pack(p) for p in parts)
            out += _uvarint(0)  # no tagged fields
    out += _TAIL.pack(meta.last_update_ms, meta.start_ms)
    tags = []
    if meta.prev_producer_id != -1:
        tags.append((0, _Q.pack(meta.prev_producer_id)))
    if meta.next_producer_id != -1:
        tags.append((1, _Q.pack(meta.next_producer_id)))
    if meta.client_tv != 0:
        tags.append((2, _H.pack(meta.client_tv)))
    out += _uvarint(len(tags))
    for tag, data in tags:
        out += _uvarint(tag) + _uvarint(len(data)) + data
    return bytes(out)


def encode_record(record: TxnRecord) -> tuple[bytes, bytes | None]:
    return encode_key(record.key), None if record.value is None else encode_value(record.value)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError("truncated __transaction_state record")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, st: struct.Struct) -> tuple[int, ...]:
        return st.unpack(self.take(st.size))

    def string(self) -> str:
        (n,) = self.unpack(_H)
        return self.take(n).decode()

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            (b,) = self.take(1)
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise ValueError("overlong varint")

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise ValueError("null topic name")
        return self.take(n).decode()

    def skip_tags(self) -> dict[int, bytes]:
        tags = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise ValueError("trailing bytes in __transaction_state record")


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for an unknown key version (skipped, as Kafka).

    Raises:
        ValueError: malformed bytes.
    """
    r = _Reader(bytes(data))
    (version,) = r.unpack(_H)
    if version != KEY_VERSION:
        return None
    out = r.string()
    r.done()
    return out


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    """Raises:
    ValueError: malformed bytes, an unknown value version or state id.
    """
    r = _Reader(bytes(data))
    (version,) = r.unpack(_H)
    if version not in (0, 1):
        raise ValueError(f"unknown __transaction_state value version {version}")
    pid, epoch, timeout, status = r.unpack(_V0_HEAD)
    state = TxnState.from_id(status)
    parts: set[TopicPartition] = set()
    if version == 0:
        (count,) = r.unpack(_I)
        for _ in range(max(count, 0)):
            topic = r.string()
            (n,) = r.unpack(_I)
            for _ in range(max(n, 0)):
                parts.add((topic, r.unpack(_I)[0]))
    else:
        count = r.uvarint() - 1
        for _ in range(max(count, 0)):
            topic = r.compact_string()
            for _ in range(max(r.uvarint() - 1, 0)):
                parts.add((topic, r.unpack(_I)[0]))
            r.skip_tags()
    last_update, start = r.unpack(_TAIL)
    prev_pid = next_pid = -1
    client_tv = 0
    if version == 1:
        tags = r.skip_tags()
        if 0 in tags:
            (prev_pid,) = _Q.unpack(tags[0])
        if 1 in tags:
            (next_pid,) = _Q.unpack(tags[1])
        if 2 in tags:
            (client_tv,) = _H.unpack(tags[2])
    r.done()
    if state is TxnState.EMPTY:
        parts.clear()  # Kafka ignores partitions of an Empty state
    return TxnMetadata(transactional_id, pid, epoch, timeout, state, frozenset(parts), start,
                       last_update, prev_pid, next_pid, client_tv)


class TxnRecordSerde:
    """``RecordSerde`` of ``__transaction_state`` (``coordinator/runtime/shard.py``)."""

    def encode(self, record: TxnRecord) -> tuple[bytes, bytes | None]:
        return encode_record(record)

    def key_value(self, record: TxnRecord) -> tuple[str, TxnMetadata | None]:
        return record.key, record.value

    def decode(self, key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None] | None:
        """Raises:
        ValueError: malformed bytes or an unknown value version.
        """
        txn_id = decode_key(key)
        if txn_id is None:
            return None
        return txn_id, None if value is None else decode_value(txn_id, value)
