"""How many partitions a Produce frame lists, counted only up to a bound (issue 25, section 2).

A Produce frame is usually a few partitions with large record batches, cheap to decode however
big; but the same bytes can list tens of thousands of partitions without records, and kio then
builds an object per topic and partition (50 ms for 30,000 topics in 0.5 MB). The connection
decodes such a frame in a worker thread. ``lists_more_than`` tells the two apart by walking the
frame's topic and partition headers, skipping each record set by its length, and stops as soon
as ``most`` elements are seen: at most ``most`` cheap steps, whatever the frame holds. It does
not validate: anything it cannot follow counts as "more" (the full decoder, off the loop, then
refuses it as it would).

Produce v3-v13 layout: request header v1 (v2 from v9: flexible, with tagged fields), then
``transactional_id`` (nullable string), ``acks`` (int16), ``timeout_ms`` (int32), and
``topic_data``: per topic its name (its id from v13), then ``partition_data``: per partition
``index`` (int32), ``records`` (nullable bytes) and, when flexible, tagged fields; a topic ends
with its tagged fields.
"""

from __future__ import annotations

import struct

from protocol.errors import MalformedRequestError
from protocol.guard import uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FIRST_FLEXIBLE = 9
_FIRST_TOPIC_ID = 13


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = uvarint(buf, pos)
        size, pos = uvarint(buf, pos)
        pos += size
    return pos


def _skip_string(buf: bytes, pos: int, flexible: bool) -> int:
    if flexible:
        size, pos = uvarint(buf, pos)
        return pos + max(size - 1, 0)
    size = int(_I16.unpack_from(buf, pos)[0])
    return pos + 2 + max(size, 0)


def lists_more_than(frame: bytes, most: int) -> bool:
    """Whether the Produce request ``frame`` (without its size prefix) lists more than ``most``
    topics plus partitions, or cannot be followed (truncated, unknown version). At most about
    ``most`` steps."""
    try:
        return _count(frame, most) > most
    except (IndexError, ValueError, MalformedRequestError, struct.error):
        return True


def _count(buf: bytes, most: int) -> int:
    version = int(_I16.unpack_from(buf, 2)[0])
    if version < 3:
        return most + 1  # no transactional id field: not worth a second layout
    flexible = version >= _FIRST_FLEXIBLE
    (client_id,) = _I16.unpack_from(buf, 8)  # the header's client id is never compact
    pos = 10 + max(client_id, 0)
    if flexible:
        pos = _skip_tags(buf, pos)
    pos = _skip_string(buf, pos, flexible) + 6  # transactional id, acks, timeout
    if flexible:
        topics, pos = uvarint(buf, pos)
        topics -= 1
    else:
        (topics,) = _I32.unpack_from(buf, pos)
        pos += 4
    seen = 0
    for _ in range(max(topics, 0)):
        seen += 1
        if seen > most:
            return seen
        pos = pos + 16 if version >= _FIRST_TOPIC_ID else _skip_string(buf, pos, flexible)
        if flexible:
            partitions, pos = uvarint(buf, pos)
            partitions -= 1
        else:
            (partitions,) = _I32.unpack_from(buf, pos)
            pos += 4
        if seen + partitions > most:
            return seen + partitions
        for _ in range(max(partitions, 0)):
            seen += 1
            pos += 4  # index
            if flexible:
                size, pos = uvarint(buf, pos)
                pos = _skip_tags(buf, pos + max(size - 1, 0))
            else:
                (size,) = _I32.unpack_from(buf, pos)
                pos += 4 + max(size, 0)
        if flexible:
            pos = _skip_tags(buf, pos)
        if pos > len(buf):
            raise ValueError("past the end")
    return seen
