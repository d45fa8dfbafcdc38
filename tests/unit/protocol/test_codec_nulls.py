"""Null where the schema forbids it: refused at decode time, as Kafka's readers do.

Found by ``tests/integration/wire/test_fuzz.py``: kio decodes a null array as ``None`` even when
the field is non-nullable, and handlers then crashed iterating it (CreateTopics v5 with a
compact ``topics`` length of 0, Fetch v14 with a null ``partitions``).
"""

from __future__ import annotations

import struct

import pytest

from protocol import codec
from protocol.errors import MalformedRequestError


def _header(key: int, version: int, flexible: bool) -> bytes:
    return struct.pack(">hhih", key, version, 1, 1) + b"c" + (b"\x00" if flexible else b"")


CASES = {
    # CreateTopics v5: topics (compact, non-nullable) = null, timeout, validate_only, no tags
    "create-topics-v5-null-topics": _header(19, 5, True) + b"\x00" + struct.pack(">i", 0)
    + b"\x00\x00",
    # DeleteTopics v1 (not flexible): topic_names = null (-1), timeout
    "delete-topics-v1-null-names": _header(20, 1, False) + struct.pack(">ii", -1, 0),
    # FindCoordinator v4: key_type, coordinator_keys = null, no tags
    "find-coordinator-v4-null-keys": _header(10, 4, True) + b"\x00\x00\x00",
}


@pytest.mark.parametrize("name", list(CASES))
def test_null_non_nullable_array_is_malformed(name: str) -> None:
    with pytest.raises(MalformedRequestError, match="serialized as null"):
        codec.decode_request(CASES[name])


def test_null_nullable_array_is_kept() -> None:
    # Metadata v12: topics is nullable (null = all topics).
    frame = _header(3, 12, True) + b"\x00" + b"\x00\x00" + b"\x00"
    assert codec.decode_request(frame).body.topics is None


def test_nested_null_array_is_malformed() -> None:
    # CreateTopics v5, one topic "t" whose assignments (compact, non-nullable) are null.
    topic = b"\x02t" + struct.pack(">ih", 1, 1) + b"\x00" + b"\x01" + b"\x00"
    frame = _header(19, 5, True) + b"\x02" + topic + struct.pack(">i", 0) + b"\x00\x00"
    with pytest.raises(MalformedRequestError, match="CreatableTopic.assignments"):
        codec.decode_request(frame)
