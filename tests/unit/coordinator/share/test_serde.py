"""ShareSnapshot/ShareUpdate serde: golden bytes computed by hand from the schemas, round trips,
and strict decoding."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.share.records import (
    ShareRecord,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    StateBatch,
)
from coordinator.share.serde import (
    ShareRecordSerdeError,
    UnknownRecordTypeError,
    UnsupportedValueVersionError,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_record,
    encode_value,
)

TOPIC_ONE = uuid.UUID(int=1)  # Kafka's Uuid.ONE_UUID


def h(text: str) -> bytes:
    """Hex with spaces and '|' separators allowed, for readable golden bytes."""
    return bytes.fromhex(text.replace("|", " "))


# ShareUpdateKey {GroupId "g", TopicId 0..01, Partition 3}; not flexible (classic string).
GOLDEN_UPDATE_KEY = h(
    "00 01"  # int16 record type 1 = ShareUpdate
    "| 00 01 67"  # GroupId: int16 length 1, 'g'
    "| 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01"  # TopicId: 16 bytes big-endian
    "| 00 00 00 03"  # Partition int32
)

# ShareUpdateValue v0 {SnapshotEpoch 1, LeaderEpoch 2, StartOffset 10, DeliveryCompleteCount 5,
# StateBatches [{10, 12, Acked(2), count 1}]}; flexible.
GOLDEN_UPDATE_VALUE = h(
    "00 00"  # int16 value version 0
    "| 00 00 00 01"  # SnapshotEpoch int32
    "| 00 00 00 02"  # LeaderEpoch int32
    "| 00 00 00 00 00 00 00 0a"  # StartOffset int64
    "| 02"  # StateBatches: compact array, uvarint(1 + 1)
    "| 00 00 00 00 00 00 00 0a"  # FirstOffset int64
    "| 00 00 00 00 00 00 00 0c"  # LastOffset int64
    "| 02"  # DeliveryState int8
    "| 00 01"  # DeliveryCount int16
    "| 00"  # StateBatch tagged fields: none
    "| 01 | 00 | 04 | 00 00 00 05"  # 1 tagged field: tag 0 (DeliveryCompleteCount), size 4, int32 5
)

# ShareSnapshotValue v0 with the default DeliveryCompleteCount (-1), which is not written.
GOLDEN_SNAPSHOT_VALUE = h(
    "00 00"  # version
    "| 00 00 00 00"  # SnapshotEpoch 0
    "| 00 00 00 07"  # StateEpoch 7
    "| ff ff ff ff"  # LeaderEpoch -1
    "| ff ff ff ff ff ff ff ff"  # StartOffset -1
    "| 00 00 00 00 00 00 01 00"  # CreateTimestamp 256
    "| 00 00 00 00 00 00 01 01"  # WriteTimestamp 257
    "| 01"  # StateBatches: empty compact array
    "| 00"  # no tagged fields
)


def test_golden_update_record() -> None:
    key = ShareUpdateKey("g", TOPIC_ONE, 3)
    value = ShareUpdateValue(
        snapshot_epoch=1,
        leader_epoch=2,
        start_offset=10,
        delivery_complete_count=5,
        state_batches=(StateBatch(10, 12, 2, 1),),
    )
    assert encode_key(key) == GOLDEN_UPDATE_KEY
    assert encode_value(value) == GOLDEN_UPDATE_VALUE
    assert decode_record(GOLDEN_UPDATE_KEY, GOLDEN_UPDATE_VALUE) == ShareRecord(key, value)


def test_golden_snapshot_value_omits_default_tagged_field() -> None:
    value = ShareSnapshotValue(
        snapshot_epoch=0,
        state_epoch=7,
        leader_epoch=-1,
        start_offset=-1,
        create_timestamp=256,
        write_timestamp=257,
    )
    assert encode_value(value) == GOLDEN_SNAPSHOT_VALUE
    assert decode_value(ShareSnapshotKey("g", TOPIC_ONE, 0), GOLDEN_SNAPSHOT_VALUE) == value


def test_tombstone_has_no_value_bytes() -> None:
    key = ShareSnapshotKey("group", TOPIC_ONE, 0)
    key_bytes, value_bytes = encode_record(ShareRecord(key, None))
    assert key_bytes[:2] == b"\x00\x00"
    assert value_bytes is None
    assert decode_record(key_bytes, None) == ShareRecord(key, None)


# -- round trips --------------------------------------------------------------------------------

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
batches = st.lists(
    st.builds(StateBatch, int64, int64, st.integers(-128, 127), st.integers(-(2**15), 2**15 - 1)),
    max_size=5,
).map(tuple)
group_ids = st.text(max_size=40).filter(lambda s: len(s.encode("utf-8")) <= 0x7FFF)
uuids = st.uuids()


@given(st.sampled_from([ShareSnapshotKey, ShareUpdateKey]), group_ids, uuids, int32)
def test_key_round_trip(
    cls: type[ShareSnapshotKey] | type[ShareUpdateKey], group: str, topic: uuid.UUID, partition: int
) -> None:
    key = cls(group, topic, partition)
    assert decode_key(encode_key(key)) == key


@given(
    st.builds(
        ShareSnapshotValue,
        snapshot_epoch=int32,
        state_epoch=int32,
        leader_epoch=int32,
        start_offset=int64,
        delivery_complete_count=int32,
        create_timestamp=int64,
        write_timestamp=int64,
        state_batches=batches,
    )
)
def test_snapshot_value_round_trip(value: ShareSnapshotValue) -> None:
    data = encode_value(value)
    assert data is not None
    assert decode_value(ShareSnapshotKey("g", TOPIC_ONE, 0), data) == value


@given(
    st.builds(
        ShareUpdateValue,
        snapshot_epoch=int32,
        leader_epoch=int32,
        start_offset=int64,
        delivery_complete_count=int32,
        state_batches=batches,
    )
)
def test_update_value_round_trip(value: ShareUpdateValue) -> None:
    data = encode_value(value)
    assert data is not None
    assert decode_value(ShareUpdateKey("g", TOPIC_ONE, 0), data) == value


# -- strict decoding ----------------------------------------------------------------------------

DECODE_ERRORS = [
    ("unknown-record-type", h("00 0b 00 01 67") + bytes(16) + bytes(4), None, UnknownRecordTypeError),
    ("truncated-key", GOLDEN_UPDATE_KEY[:-1], None, ShareRecordSerdeError),
    ("trailing-key-bytes", GOLDEN_UPDATE_KEY + b"\x00", None, ShareRecordSerdeError),
    ("null-group-id", h("00 01 ff ff") + bytes(20), None, ShareRecordSerdeError),
    (
        "unknown-value-version",
        GOLDEN_UPDATE_KEY,
        h("00 01") + GOLDEN_UPDATE_VALUE[2:],
        UnsupportedValueVersionError,
    ),
    ("truncated-value", GOLDEN_UPDATE_KEY, GOLDEN_UPDATE_VALUE[:-1], ShareRecordSerdeError),
    ("trailing-value-bytes", GOLDEN_UPDATE_KEY, GOLDEN_UPDATE_VALUE + b"\x00", ShareRecordSerdeError),
    ("null-state-batches", GOLDEN_UPDATE_KEY, GOLDEN_UPDATE_VALUE[:18] + h("00 00"), ShareRecordSerdeError),
    ("update-tombstone", GOLDEN_UPDATE_KEY, None, ShareRecordSerdeError),
]


@pytest.mark.parametrize(
    ("key_bytes", "value_bytes", "error"), [c[1:] for c in DECODE_ERRORS], ids=[c[0] for c in DECODE_ERRORS]
)
def test_decode_rejects(key_bytes: bytes, value_bytes: bytes | None, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode_record(key_bytes, value_bytes)


def test_unknown_tagged_field_is_skipped() -> None:
    # Same update value with an extra tagged field (tag 9, 2 bytes) after DeliveryCompleteCount.
    data = GOLDEN_UPDATE_VALUE[:-7] + h("02 | 00 04 00 00 00 05 | 09 02 ab cd")
    value = decode_value(ShareUpdateKey("g", TOPIC_ONE, 3), data)
    assert isinstance(value, ShareUpdateValue)
    assert value.delivery_complete_count == 5


def test_encode_rejects_out_of_range_fields() -> None:
    value = ShareUpdateValue(snapshot_epoch=2**31, leader_epoch=0, start_offset=0)
    with pytest.raises(ShareRecordSerdeError):
        encode_value(value)


@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=96)))
def test_decoding_arbitrary_bytes_gives_a_record_or_a_serde_error(
    key_bytes: bytes, value_bytes: bytes | None
) -> None:
    with contextlib.suppress(ShareRecordSerdeError):
        decode_record(key_bytes, value_bytes)
