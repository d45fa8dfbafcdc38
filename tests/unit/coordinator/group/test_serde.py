"""Share-group coordinator records: binary round trips for every record type, a golden encoding
worked out by hand from the schema rules, tombstones, and rejection of malformed bytes."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group.share import records as r
from coordinator.group import serde

T1 = uuid.UUID("11111111-2222-3333-4444-555555555555")
T2 = uuid.UUID(int=7)

EXAMPLES: list[tuple[str, r.Record]] = [
    (
        "member-metadata",
        r.new_member_record(
            "grp",
            "m-1",
            rack_id="rack-a",
            client_id="cid",
            client_host="/10.0.0.1",
            subscribed_topic_names=["b", "a"],
        ),
    ),
    (
        "member-metadata-null-rack",
        r.new_member_record(
            "grp", "m-1", rack_id=None, client_id="", client_host="", subscribed_topic_names=[]
        ),
    ),
    ("group-metadata", r.new_share_group_metadata_record("grp", 7, -(2**63))),
    ("target-metadata", r.new_target_assignment_metadata_record("grp", 3)),
    (
        "target-metadata-timestamp",
        r.new_target_assignment_metadata_record("grp", 3, 1_700_000_000_000),
    ),
    ("target-member", r.new_target_assignment_member_record("grp", "m", {T1: [2, 0], T2: [5]})),
    ("target-member-empty", r.new_target_assignment_member_record("grp", "m", {})),
    (
        "current-assignment",
        r.new_current_assignment_record(
            "grp", "m", member_epoch=5, previous_member_epoch=4, assigned_partitions={T1: {1}}
        ),
    ),
    (
        "state-partition-metadata",
        r.new_state_partition_metadata_record(
            "grp",
            initializing={T1: ("t1", [3, 4])},
            initialized={T1: ("t1", [0, 1, 2]), T2: ("ünïcode", [0])},
            deleting={T2: "gone"},
        ),
    ),
    ("tombstone-member", r.new_member_tombstone("grp", "m")),
    ("tombstone-group", r.new_share_group_metadata_tombstone("grp")),
    ("tombstone-target-metadata", r.new_target_assignment_metadata_tombstone("grp")),
    ("tombstone-target-member", r.new_target_assignment_member_tombstone("grp", "m")),
    ("tombstone-current", r.new_current_assignment_tombstone("grp", "m")),
    ("tombstone-state", r.new_state_partition_metadata_tombstone("grp")),
]


@pytest.mark.parametrize("record", [rec for _, rec in EXAMPLES], ids=[i for i, _ in EXAMPLES])
def test_round_trip(record: r.Record) -> None:
    key_bytes, value_bytes = serde.encode_record(record)
    assert serde.peek_record_type(key_bytes) == record.key.RECORD_TYPE
    assert (value_bytes is None) == record.is_tombstone
    assert serde.decode_record(key_bytes, value_bytes) == record


def test_every_record_type_is_covered() -> None:
    assert {rec.key.RECORD_TYPE for _, rec in EXAMPLES} == set(r.RECORD_TYPES)
    assert {type(rec.value) for _, rec in EXAMPLES if rec.value is not None} == {
        v for _, v in r.RECORD_TYPES.values()
    }


def test_golden_member_metadata_bytes() -> None:
    record = r.new_member_record(
        "g", "m", rack_id=None, client_id="c", client_host="h", subscribed_topic_names=["t"]
    )
    key, value = serde.encode_record(record)
    # key: int16 type 10, then non-flexible strings (int16 length + bytes)
    assert key == b"\x00\x0a" + b"\x00\x01g" + b"\x00\x01m"
    # value: int16 version 0; compact nullable string null = 0; compact strings len+1;
    # compact array of 1 string = 2; empty tagged-field section = 0
    assert value == b"\x00\x00" + b"\x00" + b"\x02c" + b"\x02h" + b"\x02\x02t" + b"\x00"


def test_golden_tagged_assignment_timestamp() -> None:
    _, plain = serde.encode_record(r.new_target_assignment_metadata_record("g", 1))
    assert plain == b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00"
    _, tagged = serde.encode_record(r.new_target_assignment_metadata_record("g", 1, 258))
    # one tagged field: tag 0, size 8, int64 258
    assert tagged == b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x01\x00\x08" + (258).to_bytes(8, "big")


def test_golden_current_assignment_nested_struct() -> None:
    record = r.new_current_assignment_record(
        "g", "m", member_epoch=2, previous_member_epoch=1, assigned_partitions={T2: [0, 3]}
    )
    _, value = serde.encode_record(record)
    assert value == (
        b"\x00\x00"  # version
        + b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x01"
        + b"\x00"  # epochs, state STABLE
        + b"\x02"  # one TopicPartitions
        + T2.bytes
        + b"\x03"
        + b"\x00\x00\x00\x00"
        + b"\x00\x00\x00\x03"
        + b"\x00"  # + struct tags
        + b"\x00"  # top-level tagged fields
    )


def test_unknown_tagged_fields_are_skipped() -> None:
    _, value = serde.encode_record(r.new_share_group_metadata_record("g", 1, 2))
    assert value is not None
    with_unknown = value[:-1] + b"\x01\x05\x02\xab\xcd"  # tag 5, 2 bytes
    assert serde.decode_value(11, with_unknown) == r.ShareGroupMetadataValue(1, 2)


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        (b"\x00", None, serde.RecordDecodeError),
        (b"\x00\x02\x00\x01g", None, serde.UnknownRecordType),  # offset-commit type 2
        (b"\x00\x0b\x00\x05g", None, serde.RecordDecodeError),  # truncated string
        (b"\x00\x0b\x00\x01gX", None, serde.RecordDecodeError),  # trailing byte
        (b"\x00\x0b\x00\x01g", b"\x00\x01" + b"\x00" * 13, serde.RecordDecodeError),  # version 1
        (b"\x00\x0b\x00\x01g", b"\x00\x00\x00\x00\x00\x01", serde.RecordDecodeError),  # short
        (b"\x00\x0a\x00\x01g\x00\x01m", b"\x00\x00\x00\x01\xff", serde.RecordDecodeError),
    ],
    ids=[
        "short-key",
        "foreign-type",
        "truncated",
        "trailing",
        "bad-version",
        "short-value",
        "bad-utf8",
    ],
)
def test_malformed_bytes_are_rejected(key: bytes, value: bytes | None, error: type) -> None:
    with pytest.raises(error):
        serde.decode_record(key, value)


_ids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
_text = st.text(max_size=20)
_parts = st.lists(st.integers(0, 2**31 - 1), max_size=5)
_assign = st.dictionaries(_ids, _parts, max_size=4)
_named = st.dictionaries(_ids, st.tuples(_text, _parts), max_size=3)

_records = st.one_of(
    st.builds(
        lambda g, m, rack, c, h, subs: r.new_member_record(
            g, m, rack_id=rack, client_id=c, client_host=h, subscribed_topic_names=subs
        ),
        _text,
        _text,
        st.none() | _text,
        _text,
        _text,
        st.lists(_text, max_size=5),
    ),
    st.builds(
        r.new_share_group_metadata_record,
        _text,
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**63), 2**63 - 1),
    ),
    st.builds(
        r.new_target_assignment_metadata_record,
        _text,
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**63), 2**63 - 1),
    ),
    st.builds(r.new_target_assignment_member_record, _text, _text, _assign),
    st.builds(
        lambda g, m, e, p, a: r.new_current_assignment_record(
            g, m, member_epoch=e, previous_member_epoch=p, assigned_partitions=a
        ),
        _text,
        _text,
        st.integers(-1, 2**31 - 1),
        st.integers(-1, 2**31 - 1),
        _assign,
    ),
    st.builds(
        lambda g, i, d, x: r.new_state_partition_metadata_record(
            g, initializing=i, initialized=d, deleting=x
        ),
        _text,
        _named,
        _named,
        st.dictionaries(_ids, _text, max_size=3),
    ),
)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(_records)
def test_round_trip_property(record: r.Record) -> None:
    assert serde.decode_record(*serde.encode_record(record)) == record


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=64), st.none() | st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_decode_error(key: bytes, value: bytes | None) -> None:
    try:
        serde.decode_record(key, value)
    except serde.RecordDecodeError:
        pass
