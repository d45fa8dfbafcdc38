"""``__transaction_state`` records: Kafka's TransactionLogKey v0 / TransactionLogValue v0-v1 bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.txn.metadata import TxnMetadata, TxnState
from coordinator.txn.records import (
    TxnRecordSerde,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    new_tombstone,
    new_txn_record,
)

S = TxnState


def test_key_is_version_0_and_an_int16_string() -> None:
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_key(b"\x00\x00\x00\x02tx") == "tx"
    assert decode_key(b"\x00\x07\x00\x02tx") is None  # unknown key version: skipped


def test_value_v0_bytes_match_kafkas_layout() -> None:
    meta = TxnMetadata("tx", 7, 3, 60_000, S.ONGOING, frozenset({("b", 1), ("a", 0), ("a", 2)}),
                       start_ms=100, last_update_ms=200)
    expected = (struct.pack(">hqhib", 0, 7, 3, 60_000, 1) + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 1)
                + struct.pack(">qq", 200, 100))
    assert encode_value(meta) == expected
    assert decode_value("tx", expected) == meta


def test_empty_writes_null_partitions() -> None:
    meta = TxnMetadata("tx", 7, 0, 1000, S.EMPTY, last_update_ms=5)
    data = encode_value(meta)
    assert data[2 + 15: 2 + 19] == b"\xff\xff\xff\xff"
    assert decode_value("tx", data) == meta


def test_value_v1_flexible_with_tagged_fields_is_read() -> None:
    body = struct.pack(">hqhib", 1, 9, 4, 1000, 2)
    body += bytes([2])  # compact array of 1
    body += bytes([2]) + b"t" + bytes([3]) + struct.pack(">ii", 0, 5) + bytes([0])
    body += struct.pack(">qq", 50, 40)
    body += bytes([3])  # three tagged fields
    body += bytes([0, 8]) + struct.pack(">q", 8)
    body += bytes([1, 8]) + struct.pack(">q", -1)
    body += bytes([2, 2]) + struct.pack(">h", 2)
    meta = decode_value("x", body)
    assert meta == TxnMetadata("x", 9, 4, 1000, S.PREPARE_COMMIT, frozenset({("t", 0), ("t", 5)}),
                               start_ms=40, last_update_ms=50, prev_producer_id=8,
                               next_producer_id=-1, client_tv=2)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x05" + b"\x00" * 40,
                                  encode_value(TxnMetadata("t", 1, 0, 1, S.EMPTY))[:-1],
                                  encode_value(TxnMetadata("t", 1, 0, 1, S.EMPTY)) + b"\x00"],
                         ids=["empty", "short", "unknown-version", "truncated", "trailing"])
def test_malformed_values_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_value("t", data)


def test_tombstones_round_trip() -> None:
    serde = TxnRecordSerde()
    key, value = serde.encode(new_tombstone("gone"))
    assert value is None
    assert serde.decode(key, value) == ("gone", None)


states = st.sampled_from([s for s in S if s not in (S.DEAD, S.PREPARE_EPOCH_FENCE)])
parts = st.frozensets(st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 1000)), max_size=6)


@given(st.text(max_size=20), st.integers(0, 2**63 - 1), st.integers(0, 32767),
       st.integers(1, 2**31 - 1), states, parts, st.integers(-1, 2**50), st.integers(-1, 2**50))
def test_any_record_round_trips(txn_id: str, pid: int, epoch: int, timeout: int, state: TxnState,
                                partitions: frozenset[tuple[str, int]], start: int,
                                update: int) -> None:
    if state is S.EMPTY:
        partitions = frozenset()
    meta = TxnMetadata(txn_id, pid, epoch, timeout, state, partitions, start, update)
    serde = TxnRecordSerde()
    assert serde.decode(*serde.encode(new_txn_record(meta))) == (txn_id, meta)


@pytest.mark.parametrize("meta", [
    TxnMetadata("x", 9, 0, 1000, S.EMPTY, last_update_ms=5, prev_producer_id=8),
    TxnMetadata("x", 9, 4, 1000, S.ONGOING, frozenset({("t", 0), ("t", 5), ("u", 1)}),
                start_ms=40, last_update_ms=50, client_tv=2),
    TxnMetadata("x", 9, 32766, 1000, S.PREPARE_ABORT, frozenset({("t", 0)}), start_ms=40,
                last_update_ms=50, prev_producer_id=3, next_producer_id=10, client_tv=2),
], ids=["empty-prev-id", "ongoing-tv2", "prepare-next-id"])
def test_a_state_with_v1_fields_is_written_as_v1_and_read_back(meta: TxnMetadata) -> None:
    data = encode_value(meta)
    assert data[:2] == b"\x00\x01"
    assert decode_value("x", data) == meta
