"""coordinator/runtime/records.py: coordinator records as v2 batches, and back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.records.readers import read_batch

from coordinator.runtime.records import decode_batches, encode_batch
from protocol.record_batch import CorruptRecordError, validate_batches, with_base_offset

T = 1_700_000_000_000

records = st.lists(
    st.tuples(st.binary(min_size=0, max_size=300), st.one_of(st.none(), st.binary(max_size=3000))),
    min_size=1,
    max_size=40,
)


@given(records)
def test_roundtrip_at_offsets(rs: list[tuple[bytes, bytes | None]]) -> None:
    data = bytearray(encode_batch(rs, T))
    with_base_offset(data, 0, 1000)
    assert list(decode_batches(data)) == [(1000 + i, k, v) for i, (k, v) in enumerate(rs)]


@given(records)
def test_batches_are_valid_kafka_batches(rs: list[tuple[bytes, bytes | None]]) -> None:
    data = encode_batch(rs, T)
    (header,) = validate_batches(data, 1 << 30)
    assert (header.record_count, header.compression, header.producer_id) == (len(rs), 0, -1)
    assert header.max_timestamp == T
    batch, size = read_batch(data, 0)  # an independent reader agrees
    assert size == len(data)
    assert [(r.offset, r.key or b"", r.value) for r in batch.records] == [
        (i, k, v) for i, (k, v) in enumerate(rs)
    ]


def test_several_batches_in_one_buffer() -> None:
    a = bytearray(encode_batch([(b"a", b"1"), (b"b", None)], T))
    b = bytearray(encode_batch([(b"c", b"3")], T))
    with_base_offset(b, 0, 2)
    assert list(decode_batches(bytes(a + b))) == [(0, b"a", b"1"), (1, b"b", None), (2, b"c", b"3")]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda d: d.__setitem__(-1, d[-1] ^ 1), id="flipped-bit"),
        pytest.param(lambda d: d.__delitem__(slice(-3, None)), id="truncated"),
        pytest.param(lambda d: d.__setitem__(16, 1), id="magic-1"),
    ],
)
def test_damaged_batches_raise(damage) -> None:
    data = bytearray(encode_batch([(b"key", b"value"), (b"k2", b"v2")], T))
    damage(data)
    with pytest.raises(CorruptRecordError):
        list(decode_batches(data))


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_batch([], T)
