"""GroupCoordinatorService over the coordinator runtime and real ``__consumer_offsets`` partition logs,
with an in-memory persister standing in for durable share state: placement, restart (groups,
members, epochs and Initialized partitions survive; no re-initialization), COORDINATOR_LOAD_IN_PROGRESS
while loading, and member listeners told after commit."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.clock import FakeClock
from broker.config import BrokerConfig
from broker.group_configs import GroupConfigs
from coordinator.group.service import GroupCoordinatorService
from broker.log.topics import Topic
from coordinator.group.share.heartbeat import HeartbeatRequest
from coordinator.group.placement import partition_for_group
from coordinator.runtime.loop import PartitionStatus
from persister.api import InitializeParams, ReadParams, SharePartitionKey, WriteParams, WriteResult
from storage.segment_log import LogConfig, PartitionLog
from tests.doubles.memory_persister import InMemoryPersister

from tests.unit.coordinator.runtime.support import LogProxy

T0 = 1_700_000_000_000
TOPIC = Topic("t", uuid.UUID(int=0x77), 2)
PARTITIONS = 4


class CountingPersister(InMemoryPersister):
    """Durable share state for the test's lifetime (it outlives service restarts)."""

    def __init__(self) -> None:
        super().__init__()
        self.initialized: list[InitializeParams] = []

    async def initialize(self, params: InitializeParams) -> WriteResult:
        self.initialized.append(params)
        return await super().initialize(params)


@asynccontextmanager
async def service(directory: Path, persister: InMemoryPersister, *, hold_reads: bool = False
                  ) -> AsyncIterator[tuple[GroupCoordinatorService, list[Any]]]:
    """A service over ``PARTITIONS`` logs in ``directory`` (reopened if they exist), loaded
    (or loading, with reads held, when ``hold_reads``)."""
    config = BrokerConfig({"log.dirs": str(directory)})
    inner = [PartitionLog.open(directory / f"__consumer_offsets-{p}", LogConfig(), T0)
             for p in range(PARTITIONS)]
    logs: list[Any] = [LogProxy(lg) for lg in inner]
    if hold_reads:
        for lg in logs:
            lg.read_gate = threading.Event()
    svc = GroupCoordinatorService(clock=FakeClock(T0), broker_config=config,
                            group_configs=GroupConfigs(directory, config), persister=persister,
                            topics=lambda: [TOPIC], num_partitions=PARTITIONS)
    loading = asyncio.get_running_loop().create_task(svc.load(lambda p: logs[p]))
    try:
        if not hold_reads:
            await loading
        yield svc, logs
    finally:
        for lg in logs:
            if lg.read_gate is not None:
                lg.read_gate.set()
        await loading
        await svc.stop()
        for lg in inner:
            lg.close()


def join(group: str, member: str) -> HeartbeatRequest:
    return HeartbeatRequest(group, member, 0, subscribed_topic_names=("t",))


def test_placement_is_kafkas() -> None:
    # Java: "a".hashCode() == 97, "hello".hashCode() == 99162322
    assert partition_for_group("a", 50) == 47
    assert partition_for_group("hello", 50) == 22
    assert partition_for_group("hello", 1) == 0


async def test_records_go_to_the_groups_partition(tmp_path: Path) -> None:
    async with service(tmp_path, CountingPersister()) as (svc, logs):
        for gid in ("a", "b", "hello"):
            assert (await svc.heartbeat(join(gid, "m"))).error_code == ErrorCode.none
        used = {partition_for_group(g, PARTITIONS) for g in ("a", "b", "hello")}
        for p, lg in enumerate(logs):
            assert (lg.log_end_offset > 0) == (p in used), p


async def test_a_restart_keeps_groups_members_and_initialized_partitions(tmp_path: Path) -> None:
    persister = CountingPersister()
    async with service(tmp_path, persister) as (svc, _):
        first = await svc.heartbeat(join("g", "m1"))
        # group.share.initialize.wait.ms: the join answer already carries the partitions
        assert first.assignment == {TOPIC.topic_id: [0, 1]}
        second = await svc.heartbeat(join("g", "m2"))
        m1 = await svc.heartbeat(HeartbeatRequest("g", "m1", first.member_epoch))
        assert {p.key.partition for p in persister.initialized} == {0, 1}
        # Consumption progress on partition 0 (what ShareAcknowledge writes).
        key = SharePartitionKey("g", TOPIC.topic_id, 0)
        state_epoch = persister.initialized[0].state_epoch
        assert (await persister.write(WriteParams(key, state_epoch, 0, 5, 0, ()))).error == \
            ErrorCode.none
        (before,) = svc.describe(["g"])
        listed = svc.list_groups()
    calls = len(persister.initialized)
    async with service(tmp_path, persister) as (svc, _):
        (after,) = svc.describe(["g"])
        assert after.error_code == ErrorCode.none and after.state == "Stable"
        assert after.group == before.group  # members, epochs, target, initialized sets
        assert after.group is not None
        assert after.group.initialized_partitions() == {TOPIC.topic_id: frozenset({0, 1})}
        assert svc.list_groups() == listed
        # Members carry on at their epochs; nothing is initialized again; progress is kept.
        for member, last in (("m1", m1), ("m2", second)):
            resp = await svc.heartbeat(HeartbeatRequest("g", member, last.member_epoch))
            assert resp.error_code == ErrorCode.none
            assert resp.member_epoch == after.group.members[member].member_epoch
        assert svc.assignment("g", "m1") == after.group.members["m1"].assigned_partitions
        assert len(persister.initialized) == calls
        summary = await persister.read_summary(ReadParams(key, -1))
        assert (summary.state_epoch, summary.start_offset) == (state_epoch, 5)


async def test_requests_for_a_loading_partition_get_load_in_progress(tmp_path: Path) -> None:
    persister = CountingPersister()
    async with service(tmp_path, persister) as (svc, _):
        assert (await svc.heartbeat(join("g", "m1"))).error_code == ErrorCode.none
    async with service(tmp_path, persister, hold_reads=True) as (svc, logs):
        p = partition_for_group("g", PARTITIONS)
        for _ in range(100):
            if svc.runtime.status(p) is PartitionStatus.LOADING:
                break
            await asyncio.sleep(0.005)
        assert svc.loading()
        resp = await svc.heartbeat(HeartbeatRequest("g", "m1", 1))
        assert resp.error_code == ErrorCode.coordinator_load_in_progress
        assert svc.describe(["g"])[0].error_code == ErrorCode.coordinator_load_in_progress
        assert not svc.is_member("g", "m1")
        for lg in logs:
            lg.read_gate.set()
        for _ in range(200):
            if not svc.loading():
                break
            await asyncio.sleep(0.005)
        assert not svc.loading()
        assert svc.is_member("g", "m1")
        assert [g.group_id for g in svc.list_groups()] == ["g"]


async def test_member_listeners_hear_of_a_leave_once_it_is_durable(tmp_path: Path) -> None:
    async with service(tmp_path, CountingPersister()) as (svc, logs):
        removed: list[tuple[str, str]] = []
        svc.add_member_listener(lambda g, m: removed.append((g, m)))
        svc.add_member_listener(lambda g, m: 1 / 0)  # a failing listener is logged, not fatal
        resp = await svc.heartbeat(join("g", "m1"))
        p = partition_for_group("g", PARTITIONS)
        logs[p].fail_append = OSError("disk full")
        failed = await svc.heartbeat(HeartbeatRequest("g", "m1", -1))
        assert failed.error_code == ErrorCode.coordinator_not_available
        assert removed == [] and svc.is_member("g", "m1")
        logs[p].fail_append = None
        left = await svc.heartbeat(HeartbeatRequest("g", "m1", -1))
        assert left.error_code == ErrorCode.none and left.member_epoch == -1
        assert removed == [("g", "m1")] and not svc.is_member("g", "m1")
        assert resp.member_epoch > 0


async def test_initializing_a_partition_that_already_has_state_keeps_its_progress(
        tmp_path: Path) -> None:
    """A partition can be planned for initialization while its share state already exists (an
    earlier answer was lost, then the retry timer or a restart re-planned it); its progress and
    state epoch stay, so the loaded share-partition is neither reset nor fenced."""
    persister = CountingPersister()
    key = SharePartitionKey("g", TOPIC.topic_id, 0)
    assert (await persister.initialize(InitializeParams(key, 0, -1))).error == ErrorCode.none
    assert (await persister.write(WriteParams(key, 0, 0, 5, 0, ()))).error == ErrorCode.none
    persister.initialized.clear()
    async with service(tmp_path, persister) as (svc, _):
        joined = await svc.heartbeat(join("g", "m1"))
        assert joined.assignment == {TOPIC.topic_id: [0, 1]}
        assert [p.key.partition for p in persister.initialized] == [1]
        kept = await persister.read(ReadParams(key, 0))
        assert (kept.error, kept.start_offset, kept.state_epoch) == (ErrorCode.none, 5, 0)
        # The leader's next write at the state epoch it loaded is not fenced.
        assert (await persister.write(WriteParams(key, 0, 0, 7, 0, ()))).error == ErrorCode.none
