"""Table-driven tests of ShareCoordinatorShard: exact records and responses per operation."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.share.records import (
    ShareRecord,
    ShareSnapshotValue,
    ShareUpdateValue,
    new_share_snapshot_record,
    new_share_tombstone_record,
    new_share_update_record,
)
from coordinator.share.shard import ShareCoordinatorShard
from persister.api import ReadParams, ReadResult, SharePartitionKey, SummaryResult, WriteResult

from tests.unit.coordinator.share.support import (
    KEY,
    NOW,
    TOPIC,
    ShardContext,
    b,
    delete,
    init,
    read,
    rebuild,
    states,
    write,
)

OK = WriteResult(ErrorCode.none)


def snap(**fields: Any) -> ShareRecord:
    values: dict[str, Any] = {
        "snapshot_epoch": 0,
        "state_epoch": 0,
        "leader_epoch": -1,
        "start_offset": -1,
        "delivery_complete_count": -1,
        "create_timestamp": NOW,
        "write_timestamp": NOW,
    }
    values.update(fields)
    return new_share_snapshot_record(KEY, ShareSnapshotValue(**values))


def upd(**fields: Any) -> ShareRecord:
    values: dict[str, Any] = {
        "snapshot_epoch": 0,
        "leader_epoch": 0,
        "start_offset": 0,
        "delivery_complete_count": 0,
    }
    values.update(fields)
    return new_share_update_record(KEY, ShareUpdateValue(**values))


def error(code: ErrorCode, message: str | None = None) -> WriteResult:
    return WriteResult(code, message if message is not None else code.name)


def read_error(code: ErrorCode, message: str | None = None) -> ReadResult:
    return ReadResult(code, error_message=message if message is not None else code.name)


@dataclass(frozen=True)
class Case:
    id: str
    setup: tuple[tuple[str, Any], ...]
    op: tuple[str, Any]
    records: tuple[ShareRecord, ...]
    response: object
    partition_exists: bool = True


NEG = SharePartitionKey("group1", TOPIC, -1)

CASES = [
    # -- initialize ---------------------------------------------------------------------------
    Case("initialize-new-key", (), init(0, -1), (snap(),), OK),
    Case(
        "initialize-known-start-offset-completes-nothing",
        (),
        init(3, 10),
        (snap(state_epoch=3, start_offset=10, delivery_complete_count=0),),
        OK,
    ),
    Case(
        "initialize-again-bumps-snapshot-epoch-keeps-leader-epoch",
        (init(0, -1), read(4)),
        init(1, 20),
        (snap(snapshot_epoch=1, state_epoch=1, leader_epoch=4, start_offset=20, delivery_complete_count=0),),
        OK,
    ),
    Case(
        "initialize-same-state-epoch-allowed",
        (init(2, -1),),
        init(2, 5),
        (snap(snapshot_epoch=1, state_epoch=2, start_offset=5, delivery_complete_count=0),),
        OK,
    ),
    Case(
        "initialize-fenced-state-epoch", (init(5, -1),), init(4, 0), (), error(ErrorCode.fenced_state_epoch)
    ),
    Case(
        "initialize-negative-partition",
        (),
        init(0, 0, key=NEG),
        (),
        error(ErrorCode.invalid_request, "The partition id cannot be a negative number."),
    ),
    Case(
        "initialize-negative-state-epoch",
        (),
        init(-1, 0),
        (),
        error(ErrorCode.invalid_request, "The state epoch must be a non-negative int32."),
    ),
    Case(
        "initialize-unknown-topic-partition",
        (),
        init(0, 0),
        (),
        error(ErrorCode.unknown_topic_or_partition),
        partition_exists=False,
    ),
    # -- write --------------------------------------------------------------------------------
    Case(
        "write-before-initialize-is-invalid",
        (),
        write(b(0, 10, 0, 1)),
        (),
        error(ErrorCode.invalid_request, "Write state for an uninitialized share partition."),
    ),
    Case(
        "write-emits-update",
        (init(0, 0),),
        write(b(0, 10, 0, 1), delivery_complete_count=3),
        (upd(leader_epoch=0, delivery_complete_count=3, state_batches=(b(0, 10, 0, 1),)),),
        OK,
    ),
    Case(
        "write-combines-its-own-overlaps",
        (init(0, 0),),
        write(b(0, 10, 0, 1), b(5, 7, 2, 1), b(9, 12, 0, 2)),
        (upd(state_batches=(b(0, 4, 0, 1), b(5, 7, 2, 1), b(8, 8, 0, 1), b(9, 12, 0, 2))),),
        OK,
    ),
    Case(
        "write-prunes-below-start-offset",
        (init(0, 0),),
        write(b(0, 3, 2, 1), b(4, 10, 0, 1), start_offset=6),
        (upd(start_offset=6, state_batches=(b(6, 10, 0, 1),)),),
        OK,
    ),
    Case(
        "write-start-offset-minus-one-keeps-stored",
        (init(0, 10),),
        write(b(12, 15, 4, 1), start_offset=-1),
        (upd(start_offset=10, state_batches=(b(12, 15, 4, 1),)),),
        OK,
    ),
    Case(
        "write-start-offset-never-moves-back",
        (init(0, 10),),
        write(b(5, 15, 2, 1), start_offset=3),
        (upd(start_offset=10, state_batches=(b(10, 15, 2, 1),)),),
        OK,
    ),
    Case(
        "write-fenced-leader-epoch",
        (init(0, 0), read(5)),
        write(b(0, 1, 2, 1), leader_epoch=4),
        (),
        error(ErrorCode.fenced_leader_epoch),
    ),
    Case(
        "write-leader-epoch-minus-one-is-not-fenced",
        (init(0, 0), read(5)),
        write(b(0, 1, 2, 1), leader_epoch=-1),
        (upd(leader_epoch=5, state_batches=(b(0, 1, 2, 1),)),),
        OK,
    ),
    Case(
        "write-newer-leader-epoch-is-recorded",
        (init(0, 0), read(5)),
        write(b(0, 1, 2, 1), leader_epoch=6),
        (upd(leader_epoch=6, state_batches=(b(0, 1, 2, 1),)),),
        OK,
    ),
    Case(
        "write-fenced-state-epoch",
        (init(2, 0),),
        write(b(0, 1, 2, 1), state_epoch=1),
        (),
        error(ErrorCode.fenced_state_epoch),
    ),
    Case(
        "write-state-epoch-minus-one-is-not-fenced",
        (init(2, 0),),
        write(b(0, 1, 2, 1), state_epoch=-1),
        (upd(state_batches=(b(0, 1, 2, 1),)),),
        OK,
    ),
    Case(
        "write-leader-fence-checked-before-state-fence",
        (init(2, 0), read(5)),
        write(state_epoch=1, leader_epoch=4),
        (),
        error(ErrorCode.fenced_leader_epoch),
    ),
    Case(
        "write-batch-first-after-last-is-invalid",
        (init(0, 0),),
        write(b(5, 4, 0, 1)),
        (),
        error(ErrorCode.invalid_request, "Invalid state batch offsets 5..4."),
    ),
    Case(
        "write-unknown-topic-partition",
        (init(0, 0),),
        write(b(0, 1, 2, 1)),
        (),
        error(ErrorCode.unknown_topic_or_partition),
        partition_exists=False,
    ),
    Case(
        "write-negative-partition",
        (),
        write(key=NEG),
        (),
        error(ErrorCode.invalid_request, "The partition id cannot be a negative number."),
    ),
    # -- read ---------------------------------------------------------------------------------
    Case(
        "read-before-initialize-is-invalid",
        (),
        read(1),
        (),
        read_error(ErrorCode.invalid_request, "Read state for an uninitialized share partition."),
    ),
    Case(
        "read-newer-leader-epoch-records-it",
        (init(0, -1),),
        read(2),
        (upd(leader_epoch=2, start_offset=-1, delivery_complete_count=-1),),
        ReadResult(ErrorCode.none, state_epoch=0, start_offset=-1, state_batches=()),
    ),
    Case(
        "read-same-leader-epoch-no-record",
        (init(1, 0), read(2), write(b(0, 4, 2, 1), leader_epoch=2, state_epoch=1)),
        read(2),
        (),
        ReadResult(ErrorCode.none, state_epoch=1, start_offset=0, state_batches=(b(0, 4, 2, 1),)),
    ),
    Case(
        "read-leader-epoch-minus-one-no-record",
        (init(0, 0), read(2)),
        read(-1),
        (),
        ReadResult(ErrorCode.none, state_epoch=0, start_offset=0),
    ),
    Case(
        "read-fenced-leader-epoch",
        (init(0, 0), read(5)),
        read(3),
        (),
        read_error(ErrorCode.fenced_leader_epoch),
    ),
    Case(
        "read-unknown-topic-partition",
        (init(0, 0),),
        read(1),
        (),
        read_error(ErrorCode.unknown_topic_or_partition),
        partition_exists=False,
    ),
    Case(
        "read-uninitialized-checked-before-topic-partition",
        (),
        read(1),
        (),
        read_error(ErrorCode.invalid_request, "Read state for an uninitialized share partition."),
        partition_exists=False,
    ),
    # -- delete -------------------------------------------------------------------------------
    Case(
        "delete-writes-tombstone",
        (init(0, 0), write(b(0, 3, 2, 1))),
        delete(),
        (new_share_tombstone_record(KEY),),
        OK,
    ),
    Case("delete-missing-key-is-a-no-op", (), delete(), (), OK),
    Case(
        # The group coordinator deletes the state of a topic after DeleteTopics.
        "delete-of-a-deleted-topics-state-writes-tombstone",
        (init(0, 0),),
        delete(),
        (new_share_tombstone_record(KEY),),
        OK,
        partition_exists=False,
    ),
    Case(
        "delete-unknown-topic-partition-without-state",
        (),
        delete(),
        (),
        error(ErrorCode.unknown_topic_or_partition),
        partition_exists=False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_operation(case: Case) -> None:
    known = [True]  # the topic partition exists during setup; the case may then drop it
    ctx = ShardContext(ShareCoordinatorShard(partition_exists=lambda _topic, _partition: known[0]))
    for op in case.setup:
        response = ctx.run(op)
        assert response.error is ErrorCode.none, (op, response)
    known[0] = case.partition_exists
    before = states(ctx.shard)

    result = ctx.call(case.op)

    assert result.records == case.records
    assert result.response == case.response
    assert states(ctx.shard) == before  # Rule 1: ops never mutate


def test_write_after_replay_merges_with_stored_state() -> None:
    ctx = ShardContext(ShareCoordinatorShard())
    ctx.run(init(0, 0))
    ctx.run(write(b(0, 10, 0, 1)))
    ctx.run(write(b(11, 20, 0, 1)))
    ctx.run(write(b(5, 6, 2, 1), b(8, 8, 4, 2)))
    state = ctx.shard.get(KEY)
    assert state is not None
    assert state.state.state_batches == (
        b(0, 4, 0, 1),
        b(5, 6, 2, 1),
        b(7, 7, 0, 1),
        b(8, 8, 4, 2),
        b(9, 20, 0, 1),
    )
    assert state.updates_since_snapshot == 3
    # A stale writer cannot lower a delivery count: higher count wins, then higher state.
    ctx.run(write(b(8, 8, 0, 1), b(5, 5, 0, 1)))
    state = ctx.shard.get(KEY)
    assert state is not None
    assert state.state.state_batches[1:4] == (b(5, 6, 2, 1), b(7, 7, 0, 1), b(8, 8, 4, 2))


def test_delete_tombstone_removes_key_and_allows_fresh_initialize() -> None:
    ctx = ShardContext(ShareCoordinatorShard())
    ctx.run(init(5, 0))
    ctx.run(read(7))
    ctx.run(delete())
    assert ctx.shard.get(KEY) is None
    # Epochs went with the key: a lower state epoch initializes a fresh key at snapshot epoch 0.
    result = ctx.call(init(1, 3))
    assert result.records == (snap(state_epoch=1, start_offset=3, delivery_complete_count=0),)


# -- snapshot cadence ---------------------------------------------------------------------------


def test_snapshot_every_n_updates() -> None:
    n = 3
    ctx = ShardContext(ShareCoordinatorShard(snapshot_update_records_per_snapshot=n))
    ctx.run(init(0, 0))
    kinds = []
    for i in range(2 * (n + 1)):
        result = ctx.call(write(b(i, i, 2, 1), delivery_complete_count=i + 1))
        (record,) = result.records
        kinds.append(type(record.value).__name__)
        ctx.run(write(b(i, i, 2, 1), delivery_complete_count=i + 1))
    # Updates 1..N, then the would-be update N+1 is a snapshot, and the count starts again.
    assert kinds == ["ShareUpdateValue"] * n + ["ShareSnapshotValue"] + ["ShareUpdateValue"] * n + [
        "ShareSnapshotValue"
    ]
    snapshots = [(o, r.value) for o, r in ctx.log if isinstance(r.value, ShareSnapshotValue)]
    assert [v.snapshot_epoch for _, v in snapshots] == [0, 1, 2]
    # The second snapshot holds the full merged state at that point, not just the last write.
    _, second = snapshots[1]
    assert second.state_batches == (b(0, n, 2, 1),)
    assert second.delivery_complete_count == n + 1
    assert second.create_timestamp == NOW  # creation time of the state, kept across snapshots
    updates = [r.value for _, r in ctx.log if isinstance(r.value, ShareUpdateValue)]
    assert [u.snapshot_epoch for u in updates] == [0] * n + [1] * n


def test_snapshot_cadence_default_is_500() -> None:
    ctx = ShardContext(ShareCoordinatorShard())
    ctx.run(init(0, 0))
    for i in range(500):
        ctx.run(write(b(i, i, 2, 1)))
    (record,) = ctx.call(write(b(500, 500, 2, 1))).records
    assert isinstance(record.value, ShareSnapshotValue)
    assert record.value.state_batches == (b(0, 500, 2, 1),)


def test_zero_updates_per_snapshot_makes_every_write_a_snapshot() -> None:
    ctx = ShardContext(ShareCoordinatorShard(snapshot_update_records_per_snapshot=0))
    ctx.run(init(0, 100))
    ctx.run(read(1))  # the leader-epoch record is a state record too: here a snapshot
    ctx.run(write(b(100, 109, 2, 1), b(110, 119, 0, 2), b(120, 129, 0, 0), start_offset=100, leader_epoch=1))
    # Non-sequential progress (Kafka's testNonSequentialBatchUpdates): 110..119 must not be lost.
    ctx.run(write(b(120, 129, 2, 1), start_offset=110, leader_epoch=1, delivery_complete_count=10))
    assert all(isinstance(r.value, ShareSnapshotValue) for _, r in ctx.log)
    last = ctx.log[-1][1].value
    assert isinstance(last, ShareSnapshotValue)
    assert last.snapshot_epoch == 3
    assert last.start_offset == 110
    assert last.state_batches == (b(110, 119, 0, 2), b(120, 129, 2, 1))


def test_cadence_out_of_range_is_rejected() -> None:
    with pytest.raises(ValueError):
        ShareCoordinatorShard(snapshot_update_records_per_snapshot=501)
    with pytest.raises(ValueError):
        ShareCoordinatorShard(snapshot_update_records_per_snapshot=-1)


# -- summary ------------------------------------------------------------------------------------


SUMMARY_CASES = [
    ("summary-missing-key-is-uninitialized", (), ReadParams(KEY, -1), SummaryResult(ErrorCode.none)),
    (
        "summary-after-initialize",
        (init(4, -1),),
        ReadParams(KEY, -1),
        SummaryResult(
            ErrorCode.none, state_epoch=4, leader_epoch=-1, start_offset=-1, delivery_complete_count=-1
        ),
    ),
    (
        "summary-reports-delivery-complete-count",
        (
            init(1, 0),
            read(3),
            write(
                b(0, 9, 2, 1),
                b(10, 19, 0, 1),
                start_offset=0,
                leader_epoch=3,
                state_epoch=1,
                delivery_complete_count=10,
            ),
        ),
        ReadParams(KEY, -1),
        SummaryResult(
            ErrorCode.none, state_epoch=1, leader_epoch=3, start_offset=0, delivery_complete_count=10
        ),
    ),
    (
        "summary-is-not-leader-fenced",
        (init(1, 0), read(3)),
        ReadParams(KEY, 1),
        SummaryResult(
            ErrorCode.none, state_epoch=1, leader_epoch=3, start_offset=0, delivery_complete_count=0
        ),
    ),
    (
        "summary-negative-partition",
        (),
        ReadParams(SharePartitionKey("group1", TOPIC, -1), -1),
        SummaryResult(
            ErrorCode.invalid_request, error_message="The partition id cannot be a negative number."
        ),
    ),
]


@pytest.mark.parametrize(
    ("setup", "params", "expected"), [c[1:] for c in SUMMARY_CASES], ids=[c[0] for c in SUMMARY_CASES]
)
def test_summary(setup: tuple[tuple[str, Any], ...], params: ReadParams, expected: SummaryResult) -> None:
    ctx = ShardContext(ShareCoordinatorShard())
    for op in setup:
        assert ctx.run(op).error is ErrorCode.none
    assert ctx.shard.read_state_summary(params) == expected


def test_summary_unknown_topic_partition() -> None:
    shard = ShareCoordinatorShard(partition_exists=lambda topic, partition: partition < 2)
    assert (
        shard.read_state_summary(ReadParams(SharePartitionKey("g", uuid.uuid4(), 1), -1)).error
        is ErrorCode.none
    )
    result = shard.read_state_summary(ReadParams(SharePartitionKey("g", uuid.uuid4(), 2), -1))
    assert result.error is ErrorCode.unknown_topic_or_partition


def test_summary_reads_committed_state_only() -> None:
    shard = ShareCoordinatorShard()
    ctx = ShardContext(shard)
    ctx.run(init(0, 0))
    ctx.run(write(b(0, 4, 2, 1), delivery_complete_count=5))
    (record,) = shard.write_state(
        write(b(5, 9, 2, 1), start_offset=10, delivery_complete_count=0)[1], now_ms=NOW
    ).records
    shard.replay(shard.end_offset, record.key, record.value)  # appended, not yet committed
    committed = shard.read_state_summary(ReadParams(KEY, -1))
    assert (committed.start_offset, committed.delivery_complete_count) == (0, 5)
    shard.commit(shard.end_offset)
    after = shard.read_state_summary(ReadParams(KEY, -1))
    assert (after.start_offset, after.delivery_complete_count) == (10, 0)


# -- commit / revert / pruning ------------------------------------------------------------------


def test_revert_undoes_uncommitted_records() -> None:
    ctx = ShardContext(ShareCoordinatorShard())
    ctx.run(init(0, 0))
    ctx.run(write(b(0, 4, 2, 1)))
    committed = states(ctx.shard)
    shard = ctx.shard
    for op in (write(b(5, 9, 2, 1)), delete()):
        for record in ctx.call(op).records:
            shard.replay(shard.end_offset, record.key, record.value)
    assert shard.get(KEY) is None
    shard.revert(shard.committed_offset)
    assert states(shard) == committed
    assert shard.end_offset == shard.committed_offset
    with pytest.raises(ValueError):
        shard.revert(shard.committed_offset - 1)


def test_replay_offsets_must_increase() -> None:
    ctx = ShardContext(ShareCoordinatorShard())
    ctx.run(init(0, 0))
    offset, record = ctx.log[0]
    with pytest.raises(ValueError):
        ctx.shard.replay(offset, record.key, record.value)


def test_last_redundant_offset_tracks_oldest_live_snapshot() -> None:
    other = SharePartitionKey("group2", TOPIC, 1)
    ctx = ShardContext(ShareCoordinatorShard(snapshot_update_records_per_snapshot=1))
    assert ctx.shard.last_redundant_offset() is None
    ctx.run(init(0, 0))  # offset 0: snapshot KEY
    ctx.run(init(0, 0, key=other))  # offset 1: snapshot other
    assert ctx.shard.last_redundant_offset() == 0
    ctx.run(write(b(0, 1, 2, 1)))  # offset 2: update KEY
    ctx.run(write(b(2, 3, 2, 1)))  # offset 3: snapshot KEY
    assert ctx.shard.last_redundant_offset() == 1  # other's snapshot still needed
    ctx.run(delete(key=other))  # offset 4: tombstone other
    assert ctx.shard.last_redundant_offset() == 3
    ctx.run(delete())  # offset 5: tombstone KEY; nothing live, everything is redundant
    assert ctx.shard.last_redundant_offset() == 6
    assert states(rebuild([e for e in ctx.log if e[0] >= 6])) == {}


def test_last_redundant_offset_ignores_uncommitted_snapshots() -> None:
    ctx = ShardContext(ShareCoordinatorShard(snapshot_update_records_per_snapshot=0))
    ctx.run(init(0, 0))
    shard = ctx.shard
    (record,) = ctx.call(write(b(0, 1, 2, 1))).records
    shard.replay(shard.end_offset, record.key, record.value)
    assert shard.last_redundant_offset() == 0  # the new snapshot at 1 may still be reverted
    shard.commit(shard.end_offset)
    assert shard.last_redundant_offset() == 1
