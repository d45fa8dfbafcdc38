"""InMemoryPersister: the Persister protocol over share coordinator shards, routed by partition_for."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from coordinator.share.records import ShareSnapshotValue, ShareUpdateValue
from coordinator.share.service import partition_for_key
from persister.api import (
    DeleteParams,
    InitializeParams,
    Persister,
    PersisterStateBatch,
    ReadParams,
    SharePartitionKey,
    SummaryResult,
    WriteParams,
    WriteResult,
)
from tests.doubles.memory_persister import InMemoryPersister

from tests.unit.coordinator.share.support import rebuild, states

TOPIC = uuid.UUID(int=0xABCDEF)
KEY = SharePartitionKey("orders", TOPIC, 2)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def write_params(
    *batches: PersisterStateBatch, start: int = 0, leader: int = 1, state: int = 0, done: int = 0
) -> WriteParams:
    return WriteParams(KEY, state, leader, start, done, batches)


async def test_lifecycle() -> None:
    clock = FakeClock()
    persister: Persister = InMemoryPersister(clock_ms=clock)

    assert (await persister.read(ReadParams(KEY, 1))).error is ErrorCode.invalid_request
    assert await persister.write(write_params()) == WriteResult(
        ErrorCode.invalid_request, "Write state for an uninitialized share partition."
    )
    assert await persister.read_summary(ReadParams(KEY, -1)) == SummaryResult(ErrorCode.none)

    assert await persister.initialize(InitializeParams(KEY, 0, -1)) == WriteResult(ErrorCode.none)
    first = await persister.read(ReadParams(KEY, 1))
    assert (first.error, first.state_epoch, first.start_offset, first.state_batches) == (
        ErrorCode.none,
        0,
        -1,
        (),
    )

    acked = PersisterStateBatch(0, 9, 2, 1)
    available = PersisterStateBatch(10, 14, 0, 1)
    clock.now = 2_000
    assert (await persister.write(write_params(acked, available, done=10))).error is ErrorCode.none
    second = await persister.read(ReadParams(KEY, 1))
    assert second.state_batches == (acked, available)
    assert await persister.read_summary(ReadParams(KEY, -1)) == SummaryResult(
        ErrorCode.none, state_epoch=0, leader_epoch=1, start_offset=0, delivery_complete_count=10
    )

    # A new leader reads (epoch 2): the old leader's writes are fenced from now on.
    assert (await persister.read(ReadParams(KEY, 2))).error is ErrorCode.none
    assert (await persister.write(write_params(leader=1))).error is ErrorCode.fenced_leader_epoch
    assert (await persister.read(ReadParams(KEY, 1))).error is ErrorCode.fenced_leader_epoch

    # Alter offsets re-initializes with a newer state epoch; writes from the old epoch are fenced.
    assert (await persister.initialize(InitializeParams(KEY, 1, 100))).error is ErrorCode.none
    assert (await persister.write(write_params(leader=2, state=0))).error is ErrorCode.fenced_state_epoch
    assert (await persister.initialize(InitializeParams(KEY, 0, 5))).error is ErrorCode.fenced_state_epoch

    assert (await persister.delete(DeleteParams(KEY))).error is ErrorCode.none
    assert (await persister.read(ReadParams(KEY, 3))).error is ErrorCode.invalid_request
    assert (await persister.delete(DeleteParams(KEY))).error is ErrorCode.none


async def test_routes_by_coordinator_partition_and_log_rebuilds_shards() -> None:
    persister = InMemoryPersister(num_partitions=7, snapshot_update_records_per_snapshot=2, keep_log=True)
    keys = [SharePartitionKey(f"group-{g}", TOPIC, p) for g in range(3) for p in range(4)]
    for key in keys:
        await persister.initialize(InitializeParams(key, 0, 0))
        for i in range(4):
            await persister.write(WriteParams(key, 0, 0, i, -1, (PersisterStateBatch(i, i + 3, 0, i),)))
    used = {persister.partition_of(k) for k in keys}
    assert used == {partition_for_key(k, 7) for k in keys}
    kinds: set[type] = set()
    for partition in used:
        log = list(persister.log(partition))
        assert {r.share_partition_key() for _, r in log} == {
            k for k in keys if persister.partition_of(k) == partition
        }
        kinds |= {type(r.value) for _, r in log}
        assert states(rebuild(log, snapshot_update_records_per_snapshot=2)) == states(
            persister.shard(partition)
        )
    assert kinds == {ShareSnapshotValue, ShareUpdateValue}


def test_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError):
        InMemoryPersister(num_partitions=0)
    with pytest.raises(ValueError):
        InMemoryPersister(snapshot_update_records_per_snapshot=501)


async def test_unknown_partition_from_metadata() -> None:
    persister = InMemoryPersister(partition_exists=lambda topic, partition: partition < 2)
    assert (
        await persister.initialize(InitializeParams(KEY, 0, 0))
    ).error is ErrorCode.unknown_topic_or_partition
    assert (await persister.read_summary(ReadParams(KEY, -1))).error is ErrorCode.unknown_topic_or_partition
