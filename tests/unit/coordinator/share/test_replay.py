"""Replay properties of the share coordinator shard.

For random sequences of initialize/write/read/delete operations on a few keys:
- the live state equals a per-offset model of the writes (so snapshot and update paths agree);
- replaying the emitted log (through the binary serde) into a fresh shard rebuilds the live state;
- replaying the log truncated at any record boundary gives the state as of that record;
- reverting uncommitted records gives the same prefix states;
- replaying only the records from ``last_redundant_offset()`` on rebuilds the live state too.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from coordinator.share.records import ShareRecord, ShareUpdateValue
from coordinator.share.serde import decode_record, encode_record
from coordinator.share.shard import KeyState, ShareCoordinatorShard
from persister.api import SharePartitionKey

from tests.unit.coordinator.share.support import (
    TOPIC, ShardContext, b, delete, init, read, rebuild, states, write,
)

KEYS = [
    SharePartitionKey("group1", TOPIC, 0),
    SharePartitionKey("group1", TOPIC, 1),
    SharePartitionKey("group2", TOPIC, 0),
]
keys = st.sampled_from(KEYS)
batch = st.builds(
    lambda first, width, state, count: b(first, first + width, state, count),
    st.integers(0, 40),
    st.integers(0, 8),
    st.sampled_from([0, 2, 4]),
    st.integers(0, 5),
)
init_ops = st.builds(init, st.integers(0, 3), st.integers(-1, 20), keys)
epochs = st.one_of(st.just(-1), st.integers(0, 6))
write_ops = st.builds(
    lambda key, batches, start, leader, state, dcc: write(
        *batches,
        start_offset=start,
        leader_epoch=leader,
        state_epoch=state,
        delivery_complete_count=dcc,
        key=key,
    ),
    keys,
    st.lists(batch, max_size=4),
    st.integers(-1, 40),
    epochs,
    st.one_of(st.just(-1), st.integers(0, 3)),
    st.integers(-1, 50),
)
read_ops = st.builds(read, st.integers(-1, 6), keys)
delete_ops = st.builds(delete, keys)
# Every key starts initialized; then writes dominate, with the odd re-initialize, read and delete.
operations = st.builds(
    lambda starts, body: [init(0, start, key) for key, start in zip(KEYS, starts, strict=True)] + body,
    st.lists(st.integers(-1, 10), min_size=len(KEYS), max_size=len(KEYS)),
    st.lists(
        st.one_of(write_ops, write_ops, write_ops, write_ops, write_ops, read_ops, init_ops, delete_ops),
        min_size=8,
        max_size=60,
    ),
)
cadences = st.integers(0, 4)

Model = dict[SharePartitionKey, tuple[int, dict[int, tuple[int, int]]]]


def apply_to_model(model: Model, op: tuple[str, Any]) -> None:
    """What a successful op means per offset: max (count, state), pruned below the start offset."""
    kind, params = op
    if kind == "init":
        model[params.key] = (params.start_offset, {})
    elif kind == "delete":
        model.pop(params.key, None)
    elif kind == "write":
        start, offsets = model[params.key]
        start = max(start, params.start_offset)
        offsets = dict(offsets)
        for x in params.state_batches:
            for o in range(x.first_offset, x.last_offset + 1):
                info = (x.delivery_count, x.delivery_state)
                offsets[o] = max(offsets.get(o, info), info)
        model[params.key] = (start, {o: i for o, i in offsets.items() if start < 0 or o >= start})


def expand(entry: KeyState) -> dict[int, tuple[int, int]]:
    return {
        o: (x.delivery_count, x.delivery_state)
        for x in entry.state.state_batches
        for o in range(x.first_offset, x.last_offset + 1)
    }


def through_serde(log: list[tuple[int, ShareRecord]]) -> list[tuple[int, ShareRecord]]:
    return [(offset, decode_record(*encode_record(record))) for offset, record in log]


@settings(max_examples=200, deadline=None)
@given(cadences, operations)
def test_log_replay_rebuilds_state(n: int, ops: list[tuple[str, Any]]) -> None:
    shard = ShareCoordinatorShard(snapshot_update_records_per_snapshot=n)
    history: list[dict[SharePartitionKey, KeyState]] = [{}]  # history[k]: state after k records
    ctx = ShardContext(shard, on_replay=lambda _offset: history.append(states(shard)))
    model: Model = {}

    for op in ops:
        count_before = {k: e.updates_since_snapshot for k, e in shard.states.items()}
        log_size = len(ctx.log)
        response = ctx.run(op)
        if response.error is ErrorCode.none:
            apply_to_model(model, op)
        for _offset, record in ctx.log[log_size:]:
            if isinstance(record.value, ShareUpdateValue):  # an update only below the cadence
                assert count_before[record.share_partition_key()] < n
        assert {k: (e.state.start_offset, expand(e)) for k, e in shard.states.items()} == model
        assert all(e.updates_since_snapshot <= n for e in shard.states.values())

    log = through_serde(ctx.log)
    live = states(shard)

    # The whole log, into a fresh shard.
    assert states(rebuild(log, snapshot_update_records_per_snapshot=n)) == live

    # Truncated at every record boundary.
    for k in range(len(log) + 1):
        assert states(rebuild(log[:k], snapshot_update_records_per_snapshot=n)) == history[k]

    # Reverting uncommitted records walks back through the same states.
    uncommitted = ShareCoordinatorShard(snapshot_update_records_per_snapshot=n)
    for offset, record in log:
        uncommitted.replay(offset, record.key, record.value)
    for k in reversed(range(len(log) + 1)):
        uncommitted.revert(k)
        assert states(uncommitted) == history[k]

    # Pruned below the last redundant offset.
    redundant = shard.last_redundant_offset()
    kept = log if redundant is None else [(o, r) for o, r in log if o >= redundant]
    assert states(rebuild(kept, snapshot_update_records_per_snapshot=n)) == live
