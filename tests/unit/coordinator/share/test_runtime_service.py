"""ShareCoordinatorService + CoordinatorPersister over the coordinator runtime and real logs:
the persister scenario on every backend, batching of concurrent writes, reload after a crash,
cold-key snapshots, shutdown compaction and runtime errors as per-key replies."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.runtime.loop import CoordinatorRuntime
from coordinator.share.runtime_service import (
    ShareCoordinatorService,
    ShareRecordSerde,
    ShareStateShard,
    _ColdSnapshotTick,
    snapshot_keys_before,
)
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
from persister.coordinator_persister import CoordinatorPersister
from storage.segment_log import LogConfig, PartitionLog
from tests.doubles.memory_persister import InMemoryPersister

from tests.unit.coordinator.runtime.support import LogProxy
from tests.unit.coordinator.share.support import states

TOPIC = uuid.UUID(int=0xABCDEF)
KEY = SharePartitionKey("orders", TOPIC, 2)
T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@asynccontextmanager
async def durable(
    directory: Path,
    *,
    partitions: int = 3,
    per_snapshot: int = 500,
    segment_bytes: int = 1 << 20,
    clock: Callable[[], int] = lambda: T0,
    proxy: bool = False,
    close: bool = True,
    **runtime: Any,
) -> AsyncIterator[ShareCoordinatorService]:
    """A service over ``partitions`` logs in ``directory`` (reopened if they exist)."""
    logs: list[Any] = [
        PartitionLog.open(directory / f"s-{p}", LogConfig(segment_bytes=segment_bytes), T0)
        for p in range(partitions)
    ]
    if proxy:
        logs = [LogProxy(lg) for lg in logs]
    rt: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
        ShareCoordinatorService.shard_factory(snapshot_update_records_per_snapshot=per_snapshot,
                                              partition_exists=None),
        ShareRecordSerde(), clock_ms=clock, **runtime)
    svc = ShareCoordinatorService(rt, num_partitions=partitions, clock_ms=clock,
                                  cold_snapshot_interval_ms=None)
    await svc.load_all(logs.__getitem__)
    svc.logs = logs  # type: ignore[attr-defined]  # for the tests
    try:
        yield svc
    finally:
        if close:
            await svc.close()
        else:
            await svc.runtime.close()  # no shutdown compaction
        for lg in logs:
            lg.close()


def write_params(*batches: PersisterStateBatch, start: int = 0, leader: int = 1, state: int = 0,
                 done: int = 0, key: SharePartitionKey = KEY) -> WriteParams:
    return WriteParams(key, state, leader, start, done, batches)


@pytest.fixture(params=["memory", "coordinator"])
async def persister(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Persister]:
    if request.param == "memory":
        yield InMemoryPersister()
        return
    async with durable(tmp_path) as svc:
        yield CoordinatorPersister(svc)


async def test_persister_lifecycle_on_every_backend(persister: Persister) -> None:
    assert (await persister.read(ReadParams(KEY, 1))).error is ErrorCode.invalid_request
    assert (await persister.write(write_params())).error is ErrorCode.invalid_request
    assert await persister.read_summary(ReadParams(KEY, -1)) == SummaryResult(ErrorCode.none)
    assert await persister.initialize(InitializeParams(KEY, 0, -1)) == WriteResult(ErrorCode.none)
    acked, available = PersisterStateBatch(0, 9, 2, 1), PersisterStateBatch(10, 14, 0, 1)
    assert (await persister.write(write_params(acked, available, done=10))).error is ErrorCode.none
    assert (await persister.read(ReadParams(KEY, 1))).state_batches == (acked, available)
    assert await persister.read_summary(ReadParams(KEY, -1)) == SummaryResult(
        ErrorCode.none, state_epoch=0, leader_epoch=1, start_offset=0, delivery_complete_count=10)
    assert (await persister.read(ReadParams(KEY, 2))).error is ErrorCode.none
    assert (await persister.write(write_params(leader=1))).error is ErrorCode.fenced_leader_epoch
    assert (await persister.initialize(InitializeParams(KEY, 1, 100))).error is ErrorCode.none
    assert (await persister.write(write_params(leader=2, state=0))).error is ErrorCode.fenced_state_epoch
    assert (await persister.delete(DeleteParams(KEY))).error is ErrorCode.none
    assert (await persister.read(ReadParams(KEY, 3))).error is ErrorCode.invalid_request


async def test_concurrent_writes_share_one_append_and_fsync(tmp_path: Path) -> None:
    async with durable(tmp_path, partitions=1, proxy=True) as svc:
        p = CoordinatorPersister(svc)
        keys = [SharePartitionKey("g", TOPIC, i) for i in range(300)]
        await svc.initialize_state([InitializeParams(k, 0, 0) for k in keys])
        lg = svc.logs[0]  # type: ignore[attr-defined]
        appends, flushes = lg.appends, lg.flushes
        # 300 acknowledgements from 300 share-partitions, all at once.
        out = await asyncio.gather(*(
            p.write(write_params(PersisterStateBatch(0, 0, 2, 1), key=k)) for k in keys))
        assert {r.error for r in out} == {ErrorCode.none}
        assert lg.appends - appends == 1 and lg.flushes - flushes == 1
        stats = svc.runtime.stats(0)
        assert stats is not None and stats.max_writes_per_flush == 300


async def test_replies_keep_request_order_across_partitions(tmp_path: Path) -> None:
    async with durable(tmp_path, partitions=7) as svc:
        keys = [SharePartitionKey(f"g{i}", TOPIC, i) for i in range(30)]
        assert len({partition_for_key(k, 7) for k in keys}) > 3
        await svc.initialize_state([InitializeParams(k, 0, i) for i, k in enumerate(keys)])
        got = await svc.read_state([ReadParams(k, 0) for k in reversed(keys)])
        assert [r.start_offset for r in got] == list(reversed(range(30)))
        summaries = await svc.read_state_summary([ReadParams(k, 0) for k in keys])
        assert [s.start_offset for s in summaries] == list(range(30))


async def test_unloaded_partitions_answer_not_coordinator(tmp_path: Path) -> None:
    async with durable(tmp_path, partitions=2) as svc:
        svc.num_partitions = 5  # keys now map to partitions this runtime does not hold
        keys = [SharePartitionKey(f"g{i}", TOPIC, 0) for i in range(20)]
        missing = [k for k in keys if partition_for_key(k, 5) >= 2]
        assert missing
        out = await svc.initialize_state([InitializeParams(k, 0, 0) for k in missing])
        assert {r.error for r in out} == {ErrorCode.not_coordinator}
        summary = await svc.read_state_summary([ReadParams(k, 0) for k in missing])
        assert {r.error for r in summary} == {ErrorCode.not_coordinator}
        svc.num_partitions = 2


async def test_state_survives_a_crash(tmp_path: Path) -> None:
    """A copy of the log directories taken while the service runs (what SIGKILL leaves)."""
    keys = [SharePartitionKey(f"g{i % 4}", TOPIC, i) for i in range(40)]
    live: dict[int, Any] = {}
    async with durable(tmp_path / "a", per_snapshot=3) as svc:
        await svc.initialize_state([InitializeParams(k, 0, 0) for k in keys])
        for i in range(12):
            await svc.write_state([
                write_params(PersisterStateBatch(i, i + 2, (0, 2, 4)[i % 3], 1 + i % 2), start=i, key=k)
                for k in keys])
        await svc.delete_state([DeleteParams(keys[0])])
        await svc.read_state([ReadParams(keys[1], 5)])
        for p in range(3):
            shard = svc.runtime.shard(p)
            assert shard is not None
            live[p] = states(shard)
        shutil.copytree(tmp_path / "a", tmp_path / "b")
    async with durable(tmp_path / "b", per_snapshot=3) as svc:
        for p in range(3):
            shard = svc.runtime.shard(p)
            assert shard is not None and states(shard) == live[p]


async def test_cold_keys_are_resnapshotted_so_pruning_advances(tmp_path: Path) -> None:
    cold, hot = SharePartitionKey("g", TOPIC, 0), SharePartitionKey("g", TOPIC, 1)
    async with durable(tmp_path, partitions=1, per_snapshot=10, segment_bytes=2048,
                       prune_interval_ms=0) as svc:
        await svc.initialize_state([InitializeParams(cold, 0, 0), InitializeParams(hot, 0, 0)])
        tick = _ColdSnapshotTick()
        assert await svc.runtime.write(0, tick) is None  # first tick only sets the mark
        for i in range(200):
            await svc.write_state([write_params(start=i, key=hot)])
        lg = svc.logs[0]  # type: ignore[attr-defined]
        assert lg.log_start_offset == 0  # the cold key's snapshot at offset 0 pins the log
        await svc.runtime.write(0, tick)  # re-snapshots the cold key (and the hot one)
        for i in range(200, 230):
            await svc.write_state([write_params(start=i, key=hot)])
        # Background prunes run in a thread and may still be under way: prune now, as far as
        # the snapshots allow.
        await svc.runtime.prune(0)
        assert lg.log_start_offset > 200
        assert (await svc.read_state([ReadParams(cold, 1)]))[0].start_offset == 0
        assert (await svc.read_state([ReadParams(hot, 1)]))[0].start_offset == 229


def test_snapshot_keys_before_keeps_state_and_bumps_the_epoch() -> None:
    shard = ShareStateShard()
    from coordinator.share.records import ShareSnapshotValue, new_share_snapshot_record

    value = ShareSnapshotValue(snapshot_epoch=4, state_epoch=2, leader_epoch=3, start_offset=7,
                               create_timestamp=1, write_timestamp=1,
                               state_batches=(PersisterStateBatch(7, 9, 2, 1),))
    shard.replay_record(0, new_share_snapshot_record(KEY, value))
    shard.commit(1)
    (record,) = snapshot_keys_before(shard, 99, before_offset=1).records
    assert record.value == ShareSnapshotValue(
        snapshot_epoch=5, state_epoch=2, leader_epoch=3, start_offset=7, create_timestamp=1,
        write_timestamp=99, state_batches=(PersisterStateBatch(7, 9, 2, 1),))
    assert snapshot_keys_before(shard, 99, before_offset=0).records == ()


async def test_shutdown_compaction_makes_the_next_load_small(tmp_path: Path) -> None:
    keys = [SharePartitionKey("g", TOPIC, i) for i in range(50)]
    async with durable(tmp_path, partitions=1) as svc:
        await svc.initialize_state([InitializeParams(k, 0, 0) for k in keys])
        for i in range(20):
            await svc.write_state([write_params(start=i, key=k) for k in keys])
        shard = svc.runtime.shard(0)
        assert shard is not None
        before = states(shard)
    async with durable(tmp_path, partitions=1) as svc:
        stats = svc.runtime.stats(0)
        assert stats is not None and stats.load is not None
        assert stats.load.records == len(keys)  # one snapshot per key, not 21 records each
        shard = svc.runtime.shard(0)
        assert shard is not None
        def view(st: Any) -> dict[Any, Any]:
            return {k: (e.state.start_offset, e.state.state_batches, e.state.leader_epoch,
                        e.state.state_epoch, e.state.delivery_complete_count) for k, e in st.items()}

        assert view(shard.states) == view(before)
