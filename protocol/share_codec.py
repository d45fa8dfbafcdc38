"""Direct writers for the ShareFetch (78) and ShareAcknowledge (79) v1-2 response bodies.

Every ShareFetch and ShareAcknowledge is answered, and a share consumer sends one of them per
poll (librdkafka acknowledges each broker's records in a ShareAcknowledge of their own), so
their response encoding is per-request cost on the share path. kio's generic writer walks the
schema field by field and writes each flexible struct's (always empty) tagged fields through a
temporary buffer: 25-80 us per response. These writers produce the same bytes from the same kio
response objects with a handful of ``struct`` packs.

Contract: ``write_share_fetch(buf, body)`` / ``write_share_acknowledge(buf, body)`` take a
``ShareFetchResponse`` / ``ShareAcknowledgeResponse`` of version 1 or 2 (kio's classes; v1 of
ShareAcknowledge has no AcquisitionLockTimeoutMs) and call ``buf.write`` with exactly the bytes
kio's ``entity_writer`` would write (tests/unit/protocol/test_share_codec.py compares them on
generated responses). Record data is handed to ``buf.write`` as its own ``bytes`` object, so
``protocol.codec``'s parts writer can keep large record batches by reference. A value that does
not fit its field raises ``struct.error`` / ``OverflowError`` / ``AttributeError``, as kio's
writer raises on it; ``protocol.codec`` turns either into ``LocalProtocolError``.

Pure: no I/O, no kio.serial import (STYLE.md 1.11 keeps that to ``protocol/codec.py``).
"""

from __future__ import annotations

import struct
from typing import Any

_H = struct.Struct(">h")
_TOP = struct.Struct(">ih")                 # ThrottleTimeMs, ErrorCode
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ih")      # PartitionIndex, ErrorCode
_LEADER = struct.Struct(">iiB")             # LeaderId, LeaderEpoch, (no) tagged fields
_ACQUIRED = struct.Struct(">qqhB")          # FirstOffset, LastOffset, DeliveryCount, tags
_ZERO_UUID = bytes(16)
_NO_TAGS = b"\x00"


def uvarint(out: bytearray, value: int) -> None:
    """Append ``value`` as an unsigned varint (also protocol/share_state_codec.py)."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def compact_string(out: bytearray, value: str | bytes | None) -> None:
    """A nullable compact string (null is length 0, else length + 1)."""
    if value is None:
        out.append(0)
        return
    data = value.encode() if isinstance(value, str) else value
    uvarint(out, len(data) + 1)
    out += data


def _ms(td: Any) -> int:
    return round(float(td.total_seconds()) * 1000)


def _top(out: bytearray, body: Any, lock_timeout: bool) -> None:
    out += _TOP.pack(_ms(body.throttle_time), body.error_code.value)
    compact_string(out, body.error_message)
    if lock_timeout:
        out += _I32.pack(_ms(body.acquisition_lock_timeout))


def _leader(out: bytearray, leader: Any) -> None:
    out += _LEADER.pack(leader.leader_id, leader.leader_epoch, 0)


def _endpoints(out: bytearray, endpoints: Any) -> None:
    uvarint(out, len(endpoints) + 1)
    for e in endpoints:
        out += _I32.pack(e.node_id)
        compact_string(out, e.host)
        out += _I32.pack(e.port)
        compact_string(out, e.rack)
        out.append(0)


def _uuid(topic_id: Any) -> bytes:
    return _ZERO_UUID if topic_id is None else topic_id.bytes


def write_share_fetch(buf: Any, body: Any) -> None:
    """Write a ShareFetchResponse v1/v2 body (see the module docstring)."""
    out = bytearray()
    _top(out, body, True)
    responses = body.responses
    uvarint(out, len(responses) + 1)
    for t in responses:
        out += _uuid(t.topic_id)
        partitions = t.partitions
        uvarint(out, len(partitions) + 1)
        for p in partitions:
            out += _PARTITION_HEAD.pack(p.partition_index, p.error_code.value)
            compact_string(out, p.error_message)
            out += _H.pack(p.acknowledge_error_code)
            compact_string(out, p.acknowledge_error_message)
            _leader(out, p.current_leader)
            records = p.records
            if records is None:
                raise TypeError("Unexpectedly received None value")  # as kio: not nullable
            uvarint(out, len(records) + 1)
            if records:
                buf.write(bytes(out))
                out.clear()
                buf.write(records if type(records) is bytes else bytes(records))
            acquired = p.acquired_records
            uvarint(out, len(acquired) + 1)
            for a in acquired:
                out += _ACQUIRED.pack(a.first_offset, a.last_offset, a.delivery_count, 0)
            out.append(0)
        out.append(0)
    _endpoints(out, body.node_endpoints)
    out.append(0)
    buf.write(bytes(out))


def write_share_acknowledge(buf: Any, body: Any) -> None:
    """Write a ShareAcknowledgeResponse v1/v2 body (see the module docstring)."""
    out = bytearray()
    _top(out, body, hasattr(body, "acquisition_lock_timeout"))
    responses = body.responses
    uvarint(out, len(responses) + 1)
    for t in responses:
        out += _uuid(t.topic_id)
        partitions = t.partitions
        uvarint(out, len(partitions) + 1)
        for p in partitions:
            out += _PARTITION_HEAD.pack(p.partition_index, p.error_code.value)
            compact_string(out, p.error_message)
            _leader(out, p.current_leader)
            out.append(0)
        out.append(0)
    _endpoints(out, body.node_endpoints)
    out.append(0)
    buf.write(bytes(out))


# (api key, version) -> body writer, for protocol.codec.
WRITERS: dict[tuple[int, int], Any] = {
    (78, 1): write_share_fetch, (78, 2): write_share_fetch,
    (79, 1): write_share_acknowledge, (79, 2): write_share_acknowledge,
}
