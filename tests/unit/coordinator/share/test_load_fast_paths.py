"""The fast paths that make loading ``__share_group_state`` after a crash cheap give the same results
as the general code they shortcut:

- ``merge_state_batches(current, new, start)`` equals ``combine_state_batches(current + new, start)``
  for every canonical ``current`` (what a ``ShareGroupOffset`` holds) and any ``new``;
- ``ShareGroupOffset.apply_update`` equals the definition (epochs, start offset, combined batches);
- the struct fast path of value decoding gives exactly what the strict field reader gives, for
  values this module writes and for arbitrary bytes (same value or same error type);
- loading a log through ``load_shard`` (which commits as it goes) leaves the shard equal to
  replaying the same records one by one and committing once.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.runtime.loader import load_shard
from coordinator.runtime.records import encode_batch
from coordinator.share.batch_combiner import combine_state_batches, merge_state_batches
from coordinator.share.records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    StateBatch,
    new_share_snapshot_record,
    new_share_tombstone_record,
    new_share_update_record,
)
from coordinator.share.runtime_service import ShareRecordSerde, ShareStateShard
from coordinator.share.serde import (
    ShareRecordSerdeError,
    _decode_value_fast,
    _decode_value_strict,
    decode_value,
    encode_record,
    encode_value,
)
from coordinator.share.state import ShareGroupOffset
from persister.api import PersisterStateBatch, SharePartitionKey
from storage.segment_log import LogConfig, PartitionLog

TOPIC = uuid.UUID(int=7)


def b(first: int, last: int, state: int, count: int) -> PersisterStateBatch:
    return PersisterStateBatch(first, last, state, count)


batch = st.builds(
    lambda first, width, state, count: b(first, first + width, state, count),
    st.integers(0, 60),
    st.integers(0, 12),
    st.sampled_from([0, 2, 4]),
    st.integers(0, 4),
)
batch_lists = st.lists(batch, max_size=8)
starts = st.integers(-1, 70)
canonical = st.builds(combine_state_batches, batch_lists, starts)


MERGE_CASES = [
    ("only-moves-start", [b(0, 9, 0, 1)], [], 4, [b(4, 9, 0, 1)]),
    ("append-after-touching-coalesces", [b(0, 4, 2, 1)], [b(5, 9, 2, 1)], -1, [b(0, 9, 2, 1)]),
    ("append-after-gap", [b(0, 4, 2, 1)], [b(7, 9, 2, 1)], -1, [b(0, 4, 2, 1), b(7, 9, 2, 1)]),
    ("insert-before-touching", [b(5, 9, 0, 1)], [b(0, 4, 0, 1)], -1, [b(0, 9, 0, 1)]),
    ("fill-a-gap-joins-three", [b(0, 2, 2, 1), b(6, 9, 2, 1)], [b(3, 5, 2, 1)], -1, [b(0, 9, 2, 1)]),
    ("higher-count-splits", [b(0, 9, 2, 1)], [b(3, 5, 0, 2)], -1, [b(0, 2, 2, 1), b(3, 5, 0, 2), b(6, 9, 2, 1)]),
    ("lower-count-loses", [b(0, 9, 0, 3)], [b(2, 4, 4, 2)], -1, [b(0, 9, 0, 3)]),
    ("ack-shaped-slide", [b(10, 14, 2, 1)], [b(11, 15, 2, 1)], 11, [b(11, 15, 2, 1)]),
    ("new-overlapping-itself", [b(0, 3, 0, 1)], [b(2, 8, 0, 1), b(5, 6, 4, 2)], -1,
     [b(0, 4, 0, 1), b(5, 6, 4, 2), b(7, 8, 0, 1)]),
    ("prune-everything", [b(0, 3, 0, 1)], [b(5, 8, 2, 1)], 20, []),
]


@pytest.mark.parametrize(("current", "new", "start", "expected"), [c[1:] for c in MERGE_CASES],
                         ids=[c[0] for c in MERGE_CASES])
def test_merge_cases(current: list[PersisterStateBatch], new: list[PersisterStateBatch], start: int,
                     expected: list[PersisterStateBatch]) -> None:
    assert merge_state_batches(tuple(current), new, start) == tuple(expected)
    assert combine_state_batches(current + new, start) == tuple(expected)


@settings(max_examples=600, deadline=None)
@given(canonical, batch_lists, starts)
def test_merge_equals_combine(current: tuple[PersisterStateBatch, ...],
                              new: list[PersisterStateBatch], start: int) -> None:
    assert merge_state_batches(current, new, start) == combine_state_batches((*current, *new), start)


@settings(max_examples=200, deadline=None)
@given(canonical, st.lists(st.tuples(batch_lists, starts), max_size=12))
def test_merging_a_run_of_updates_equals_combining_step_by_step(
    current: tuple[PersisterStateBatch, ...], updates: list[tuple[list[PersisterStateBatch], int]]
) -> None:
    merged = slow = current
    for new, start in updates:
        merged = merge_state_batches(merged, new, start)
        slow = combine_state_batches((*slow, *new), start)
        assert merged == slow


def test_merge_rejects_an_inverted_new_batch() -> None:
    with pytest.raises(ValueError):
        merge_state_batches((b(0, 3, 0, 1),), [b(5, 4, 0, 1)])
    with pytest.raises(ValueError):
        merge_state_batches((), [b(0, 1, 0, 1), b(5, 4, 0, 1)])


# -- ShareGroupOffset.apply_update --------------------------------------------------------------

epochs = st.integers(-1, 5)


@given(canonical, starts, epochs, batch_lists, st.integers(-1, 70), epochs, st.integers(-1, 9))
def test_apply_update_matches_its_definition(
    batches: tuple[PersisterStateBatch, ...], start: int, leader: int,
    new: list[PersisterStateBatch], update_start: int, update_leader: int, dcc: int,
) -> None:
    state = ShareGroupOffset(snapshot_epoch=3, state_epoch=2, leader_epoch=leader, start_offset=start,
                             delivery_complete_count=4, state_batches=combine_state_batches(batches, start),
                             create_timestamp=11, write_timestamp=12)
    update = ShareUpdateValue(snapshot_epoch=3, leader_epoch=update_leader, start_offset=update_start,
                              delivery_complete_count=dcc, state_batches=tuple(new))
    effective = start if update_start == -1 else update_start
    assert state.apply_update(update) == ShareGroupOffset(
        snapshot_epoch=3, state_epoch=2, leader_epoch=max(leader, update_leader), start_offset=effective,
        delivery_complete_count=dcc,
        state_batches=combine_state_batches((*state.state_batches, *new), effective),
        create_timestamp=11, write_timestamp=12)


# -- value decoding: fast path == strict reader -------------------------------------------------

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
wire_batches = st.lists(st.builds(StateBatch, int64, int64, st.integers(-128, 127), int16),
                        max_size=140).map(tuple)
snapshot_values = st.builds(ShareSnapshotValue, snapshot_epoch=int32, state_epoch=int32,
                            leader_epoch=int32, start_offset=int64, delivery_complete_count=int32,
                            create_timestamp=int64, write_timestamp=int64, state_batches=wire_batches)
update_values = st.builds(ShareUpdateValue, snapshot_epoch=int32, leader_epoch=int32, start_offset=int64,
                          delivery_complete_count=int32, state_batches=wire_batches)


@settings(deadline=None)
@given(st.one_of(snapshot_values, update_values))
def test_fast_decoding_of_written_values(value: ShareSnapshotValue | ShareUpdateValue) -> None:
    data = encode_value(value)
    assert data is not None
    snapshot = isinstance(value, ShareSnapshotValue)
    assert _decode_value_fast(snapshot, data) == value  # the path a load takes for what we write
    assert _decode_value_strict(snapshot, data) == value


def test_fast_decoding_of_a_long_batch_array() -> None:
    # What a broker writes after scattered releases: hundreds of batches, a two-byte array length.
    batches = tuple(StateBatch(2 * i, 2 * i, i % 3, 1 + i % 2) for i in range(300))
    value = ShareUpdateValue(snapshot_epoch=1, leader_epoch=2, start_offset=0,
                             delivery_complete_count=7, state_batches=batches)
    data = encode_value(value)
    assert data is not None and data[18] & 0x80
    assert _decode_value_fast(False, data) == value


def _outcome(snapshot: bool, data: bytes) -> Any:
    try:
        return _decode_value_strict(snapshot, data)
    except ShareRecordSerdeError as exc:
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.binary(max_size=120))
def test_fast_decoding_agrees_with_strict_on_arbitrary_bytes(snapshot: bool, data: bytes) -> None:
    fast = _decode_value_fast(snapshot, data)
    if fast is not None:
        assert fast == _decode_value_strict(snapshot, data)
    key = ShareSnapshotKey("g", TOPIC, 0) if snapshot else ShareUpdateKey("g", TOPIC, 0)
    try:
        got: Any = decode_value(key, data)
    except ShareRecordSerdeError as exc:
        got = type(exc)
    assert got == _outcome(snapshot, data)


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.one_of(snapshot_values, update_values), st.data())
def test_fast_decoding_agrees_with_strict_on_mutated_values(
    snapshot: bool, value: ShareSnapshotValue | ShareUpdateValue, data: st.DataObject
) -> None:
    raw = bytearray(encode_value(value) or b"")
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.integers(0, len(raw) - 1))
        raw[where] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    for candidate in (bytes(raw), bytes(raw[:cut])):
        fast = _decode_value_fast(snapshot, candidate)
        if fast is not None:
            assert fast == _decode_value_strict(snapshot, candidate)


# -- loading commits as it goes ------------------------------------------------------------------

keys = st.sampled_from([SharePartitionKey("g1", TOPIC, 0), SharePartitionKey("g1", TOPIC, 1),
                        SharePartitionKey("g2", TOPIC, 0)])
record_ops = st.lists(st.tuples(st.sampled_from(["snapshot", "update", "update", "update", "delete"]),
                                keys, batch_lists, starts), min_size=1, max_size=80)


def _record(kind: str, key: SharePartitionKey, batches: list[PersisterStateBatch], start: int) -> Any:
    if kind == "snapshot":
        return new_share_snapshot_record(key, ShareSnapshotValue(
            snapshot_epoch=0, state_epoch=0, leader_epoch=0, start_offset=start, create_timestamp=1,
            write_timestamp=2, state_batches=tuple(batches)))
    if kind == "update":
        return new_share_update_record(key, ShareUpdateValue(
            snapshot_epoch=0, leader_epoch=0, start_offset=start, state_batches=tuple(batches)))
    return new_share_tombstone_record(key)


@settings(max_examples=60, deadline=None)
@given(record_ops, st.integers(1, 7), st.integers(1, 9))
def test_load_shard_equals_one_by_one_replay(ops: list[Any], per_batch: int, commit_every: int) -> None:
    records = [_record(*op) for op in ops]
    loaded = ShareStateShard()
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog.open(Path(tmp) / "p", LogConfig(), 0)
        try:
            for i in range(0, len(records), per_batch):
                log.append(encode_batch([encode_record(r) for r in records[i:i + per_batch]], 0), 0)
            summary = load_shard(log, loaded, ShareRecordSerde(), read_bytes=64,
                                 commit_every=commit_every)
        finally:
            log.close()
    expected = ShareStateShard()
    for offset, r in enumerate(records):
        expected.replay(offset, r.key, r.value)
    expected.commit(len(records))
    assert summary.records == len(records)
    assert dict(loaded.states) == dict(expected.states)
    assert loaded.committed_offset == expected.committed_offset == len(records)
    assert loaded.last_redundant_offset() == expected.last_redundant_offset()
