"""Direct writers for WriteShareGroupState (85) v0-1.

On a cluster, a share-partition leader whose share coordinator is on another broker sends a
WriteShareGroupState per persister flush, about one per acknowledgement batch, and that broker
answers it: both ends are per-request cost on the share path. kio's generic writer walks the
schema field by field and validates every integer through its phantom types; with the header
that was about a third of a share-state RPC's CPU on both brokers. These writers produce the
same bytes from the same kio objects with a few ``struct`` packs (``protocol.codec`` writes
the request header the same way).

Contract:
- ``write_write_state_request(buf, body)`` takes a ``WriteShareGroupStateRequest`` of version 0
  or 1 (kio's classes; only v1 carries DeliveryCompleteCount), ``write_write_state_response``
  a ``WriteShareGroupStateResponse`` (the same in both versions), and call ``buf.write`` with
  exactly the bytes kio's ``entity_writer`` writes;
- tests/unit/protocol/test_share_state_codec.py compares both with kio on generated values.
  A value that does not fit its field raises ``struct.error`` / ``OverflowError``, as kio's
  writer raises on it.

Pure: no I/O, no kio.serial import (STYLE.md 1.11 keeps that to ``protocol/codec.py``).
"""

from __future__ import annotations

import struct
from typing import Any

from protocol.share_codec import compact_string, uvarint

_PARTITION_V0 = struct.Struct(">iiiq")   # Partition, StateEpoch, LeaderEpoch, StartOffset
_PARTITION_V1 = struct.Struct(">iiiqi")  # ... DeliveryCompleteCount
_BATCH = struct.Struct(">qqbhB")     # FirstOffset, LastOffset, DeliveryState, DeliveryCount, tags
_RESULT = struct.Struct(">ih")       # Partition, ErrorCode
_ZERO_UUID = bytes(16)


def _write_state_request(buf: Any, body: Any, v1: bool) -> None:
    out = bytearray()
    compact_string(out, body.group_id)
    topics = body.topics
    uvarint(out, len(topics) + 1)
    for t in topics:
        out += _ZERO_UUID if t.topic_id is None else t.topic_id.bytes
        partitions = t.partitions
        uvarint(out, len(partitions) + 1)
        for p in partitions:
            if v1:
                out += _PARTITION_V1.pack(p.partition, p.state_epoch, p.leader_epoch,
                                          p.start_offset, p.delivery_complete_count)
            else:
                out += _PARTITION_V0.pack(p.partition, p.state_epoch, p.leader_epoch,
                                          p.start_offset)
            batches = p.state_batches
            uvarint(out, len(batches) + 1)
            for b in batches:
                out += _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state,
                                   b.delivery_count, 0)
            out.append(0)
        out.append(0)
    out.append(0)
    buf.write(bytes(out))


def write_write_state_request_v0(buf: Any, body: Any) -> None:
    """Write a WriteShareGroupStateRequest v0 body (see the module docstring)."""
    _write_state_request(buf, body, False)


def write_write_state_request_v1(buf: Any, body: Any) -> None:
    """Write a WriteShareGroupStateRequest v1 body (see the module docstring)."""
    _write_state_request(buf, body, True)


def write_write_state_response(buf: Any, body: Any) -> None:
    """Write a WriteShareGroupStateResponse v0/v1 body (see the module docstring)."""
    out = bytearray()
    results = body.results
    uvarint(out, len(results) + 1)
    for t in results:
        out += _ZERO_UUID if t.topic_id is None else t.topic_id.bytes
        partitions = t.partitions
        uvarint(out, len(partitions) + 1)
        for p in partitions:
            out += _RESULT.pack(p.partition, p.error_code.value)
            compact_string(out, p.error_message)
            out.append(0)
        out.append(0)
    out.append(0)
    buf.write(bytes(out))


# (api key, version) -> body writer, for protocol.codec.
REQUEST_WRITERS: dict[tuple[int, int], Any] = {
    (85, 0): write_write_state_request_v0, (85, 1): write_write_state_request_v1,
}
RESPONSE_WRITERS: dict[tuple[int, int], Any] = {
    (85, 0): write_write_state_response, (85, 1): write_write_state_response,
}
