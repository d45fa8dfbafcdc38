"""Share coordinator placement (Kafka's partitionFor) and the split/gather of state RPCs."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from coordinator.share.service import (
    KeyedOp,
    StateOp,
    coordinator_key,
    error_for_exception,
    error_reply,
    gather_replies,
    java_string_hash,
    kafka_uuid_str,
    partition_for,
    partition_for_key,
    split_request,
)
from persister.api import ReadResult, SharePartitionKey, SummaryResult, WriteResult

# Expected values worked out by hand from Java's definition
# s.hashCode() = s[0]*31^(n-1) + s[1]*31^(n-2) + ... + s[n-1] over UTF-16 units, in int32.
HASH_CASES = [
    ("empty", "", 0, 0),
    ("a", "a", 97, 97 % 50),  # 'a' = 97 -> partition 47
    ("ab", "ab", 97 * 31 + 98, 3105 % 50),  # 3105 -> 5
    ("Aa", "Aa", 65 * 31 + 97, 2112 % 50),  # 2112 -> 12 (the classic collision with "BB")
    ("BB", "BB", 66 * 31 + 66, 2112 % 50),
    ("g:0", "g:0", (103 * 31 + 58) * 31 + 48, 100829 % 50),  # 3251*31 + 48 = 100829 -> 29
    # Known published values: "hello" and "Hello World" (negative: partition uses its absolute value).
    ("hello", "hello", 99162322, 99162322 % 50),
    ("Hello World", "Hello World", -862545276, 862545276 % 50),
    # Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0 instead of overflowing.
    ("min-int", "polygenelubricants", -(2**31), 0),
    # A character outside the BMP hashes as its two UTF-16 surrogates D83D DE00.
    ("surrogates", "\U0001f600", 0xD83D * 31 + 0xDE00, 1772899 % 50),
]


@pytest.mark.parametrize(
    ("text", "hash_code", "partition"), [c[1:] for c in HASH_CASES], ids=[c[0] for c in HASH_CASES]
)
def test_java_hash_and_partition(text: str, hash_code: int, partition: int) -> None:
    assert java_string_hash(text) == hash_code
    assert partition_for(text) == partition


def polynomial_hash(text: str) -> int:
    """Java's documented formula computed with Python big integers, then wrapped to int32."""
    data = text.encode("utf-16-be")
    units = [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
    n = len(units)
    value: int = sum(u * pow(31, n - 1 - i) for i, u in enumerate(units)) % (1 << 32)
    return value - (1 << 32) if value >= 1 << 31 else value


@given(st.text(max_size=60))
def test_hash_matches_documented_formula(text: str) -> None:
    assert java_string_hash(text) == polynomial_hash(text)


@given(st.text(max_size=60), st.integers(1, 200))
def test_partition_in_range(text: str, partitions: int) -> None:
    assert 0 <= partition_for(text, partitions) < partitions


def test_kafka_uuid_string_form() -> None:
    # Kafka's Uuid.ZERO_UUID / ONE_UUID print as URL-safe base64 without padding.
    assert kafka_uuid_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert kafka_uuid_str(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert kafka_uuid_str(uuid.UUID(int=2**128 - 1)) == "_____________________w"


def test_coordinator_key_and_partition() -> None:
    topic = uuid.UUID(int=1)
    key = coordinator_key("g", topic, 0)
    assert key == "g:AAAAAAAAAAAAAAAAAAAAAQ:0"
    assert java_string_hash(key) == polynomial_hash(key) == -92966823
    assert partition_for(key) == 92966823 % 50 == 23
    assert partition_for_key(SharePartitionKey("g", topic, 0)) == 23


def test_partition_for_rejects_no_partitions() -> None:
    with pytest.raises(ValueError):
        partition_for("x", 0)


# -- split / gather -----------------------------------------------------------------------------


def test_split_groups_by_owner_and_keeps_order() -> None:
    topic = uuid.UUID(int=7)
    items = [("grp", topic, p, f"params-{p}") for p in range(20)]
    split = split_request(items, num_partitions=5)
    seen = []
    for owner, ops in split.items():
        assert [op.index for op in ops] == sorted(op.index for op in ops)
        for op in ops:
            assert op.coordinator_partition == owner == partition_for_key(op.key, 5)
            assert op.params == items[op.index][3]
            seen.append(op.index)
    assert sorted(seen) == list(range(20))


@given(
    st.lists(
        st.tuples(st.sampled_from(["g1", "g2", "grp-three"]), st.uuids(), st.integers(0, 40)), max_size=30
    ),
    st.randoms(use_true_random=False),
)
def test_gather_restores_request_order(entries: list[tuple[str, uuid.UUID, int]], rnd: object) -> None:
    items = [(g, t, p, i) for i, (g, t, p) in enumerate(entries)]
    split = split_request(items)
    # Partitions answer in any order; each reply echoes its key.
    owners = list(split)
    rnd.shuffle(owners)  # type: ignore[attr-defined]
    replies = [(op.index, (op.key, op.params)) for owner in owners for op in split[owner]]
    gathered = gather_replies(len(items), replies)
    assert gathered == [(SharePartitionKey(g, t, p), i) for g, t, p, i in items]


def test_gather_rejects_missing_or_repeated_replies() -> None:
    with pytest.raises(ValueError):
        gather_replies(2, [(0, "a")])
    with pytest.raises(ValueError):
        gather_replies(2, [(0, "a"), (0, "b")])
    with pytest.raises(ValueError):
        gather_replies(1, [(1, "a")])
    assert gather_replies(0, []) == []


def test_keyed_op_is_immutable_data() -> None:
    op = KeyedOp(0, SharePartitionKey("g", uuid.UUID(int=1), 0), 23, None)
    assert op == KeyedOp(0, SharePartitionKey("g", uuid.UUID(int=1), 0), 23, None)


ERROR_REPLIES = [
    (StateOp.INITIALIZE, WriteResult(ErrorCode.not_coordinator, "not_coordinator")),
    (StateOp.WRITE, WriteResult(ErrorCode.not_coordinator, "not_coordinator")),
    (StateOp.DELETE, WriteResult(ErrorCode.not_coordinator, "not_coordinator")),
    (StateOp.READ, ReadResult(ErrorCode.not_coordinator, error_message="not_coordinator")),
    (StateOp.READ_SUMMARY, SummaryResult(ErrorCode.not_coordinator, error_message="not_coordinator")),
]


@pytest.mark.parametrize(("op", "expected"), ERROR_REPLIES, ids=[op.name for op, _ in ERROR_REPLIES])
def test_error_reply_shape(op: StateOp, expected: object) -> None:
    assert error_reply(op, ErrorCode.not_coordinator) == expected


def test_unexpected_exception_maps_to_unknown_server_error() -> None:
    assert error_for_exception(RuntimeError("boom")) is ErrorCode.unknown_server_error
