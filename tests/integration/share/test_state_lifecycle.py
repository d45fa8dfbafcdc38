"""Share state over a share-partition's life, on an in-process broker (no sockets), where loaded
share-partitions, their lock timers and the share coordinator's keys can be inspected:

- deleting a topic removes its share state: loaded share-partitions and timers at once, the
  group's Initialized set via Deleting (record 15), the ``__share_group_state`` keys through
  DeleteShareGroupState; a topic re-created with the same name starts fresh, and a restart finds
  nothing stale (also when the broker stopped before the deletion finished);
- share-partitions of a group without members are unloaded after
  ``group.share.partition.unload.idle.ms`` and reloaded by the next fetch with their progress
  (acknowledged and rejected records, delivery counts); one holding acquired records stays.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.app import Broker
from broker.config import BrokerConfig
from broker.log.topics import Topic
from broker.share.acquisition import AcquireMode
from broker.share.partition import SharePartition
from coordinator.group.share.heartbeat import HeartbeatRequest
from persister.api import ReadParams, SharePartitionKey
from tests.unit.batches import make_batch

GROUP = "g"
CONFIGS = {"group.share.min.record.lock.duration.ms": "1000"}


@asynccontextmanager
async def running(data: Path, **overrides: str) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig({"log.dirs": str(data), **CONFIGS, **overrides}))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def produce(broker: Broker, topic: str, partition: int, n: int) -> None:
    lg = broker.logs.get(topic, partition)
    assert lg is not None
    lg.append(make_batch([(None, b"v%d" % i) for i in range(n)]), broker.clock.now_ms())
    broker.logs.appended(topic, partition)


async def join(broker: Broker, member: str, topic: str) -> None:
    """A member subscribes and heartbeats until it holds every partition of ``topic``."""
    svc = broker.share_groups
    resp = await svc.heartbeat(HeartbeatRequest(GROUP, member, 0, subscribed_topic_names=(topic,)))
    t = broker.topics.get(topic)
    assert t is not None
    for _ in range(100):
        assert resp.error_code == ErrorCode.none, resp
        held = (svc.assignment(GROUP, member) or {}).get(t.topic_id, frozenset())
        if len(held) == t.partitions:
            return
        await asyncio.sleep(0.02)
        resp = await svc.heartbeat(HeartbeatRequest(GROUP, member, resp.member_epoch))
    raise AssertionError(f"{member} was never assigned {topic}")


async def acquire(broker: Broker, topic: Topic, partition: int, member: str) -> SharePartition:
    sp = await broker.shares.partitions.get(GROUP, topic, partition)
    assert isinstance(sp, SharePartition), sp
    _data, got = broker.shares.partitions.acquire(sp, member, 100, 100,
                                                  AcquireMode.BATCH_OPTIMIZED, 1 << 20)
    assert got, "nothing acquired"
    return sp


def state_keys(broker: Broker, topic_id: uuid.UUID) -> list[SharePartitionKey]:
    """``__share_group_state`` keys of the topic, over every share coordinator shard."""
    runtime = broker.share_coordinator.runtime
    return [k for p in runtime.partitions() if (shard := runtime.shard(p)) is not None
            for k in shard.states if k.topic_id == topic_id]


def group(broker: Broker) -> Any:
    shard = broker.share_groups.shard_for(GROUP)
    assert shard is not None
    return shard.group(GROUP)


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not reached: {what}")


async def test_deleting_a_topic_deletes_its_share_state(tmp_path: Path) -> None:
    async with running(tmp_path, **{"auto.create.topics.enable": "false"}) as broker:
        broker.group_configs.alter(GROUP, {"share.auto.offset.reset": "earliest",
                                           "share.record.lock.duration.ms": "60000"})
        old = broker.create_topic("t", 2)
        produce(broker, "t", 0, 5)
        await join(broker, "m", "t")
        await acquire(broker, old, 0, "m")
        key = SharePartitionKey(GROUP, old.topic_id, 0)
        error, _ = await broker.shares.partitions.acknowledge(key, "m", [(0, 1, (1,))])
        assert error == ErrorCode.none
        manager = broker.shares.partitions
        assert key in manager.partitions() and manager.timer_count() == 1
        assert len(state_keys(broker, old.topic_id)) == 2
        assert old.topic_id in group(broker).initialized

        broker.delete_topic("t")
        # At once: the loaded share-partition and its lock timer are gone.
        assert not manager.partitions() and manager.timer_count() == 0
        await until(lambda: not state_keys(broker, old.topic_id), "state keys deleted")
        await until(lambda: not group(broker).deleting, "the topic left Deleting")
        assert old.topic_id not in group(broker).initialized
        # Read as a leader would: nothing there.
        read = await broker.persister.read(ReadParams(key, 0))  # type: ignore[union-attr]
        assert read.error != ErrorCode.none

        # The same name again: a new topic id, fresh state (start offset from the reset policy).
        new = broker.create_topic("t", 2)
        produce(broker, "t", 0, 3)
        await join(broker, "m", "t")
        sp = await acquire(broker, new, 0, "m")
        assert sp.start_offset == 0 and sp.key.topic_id == new.topic_id
        assert {k.topic_id for k in manager.partitions()} == {new.topic_id}
    async with running(tmp_path) as broker:
        assert not state_keys(broker, old.topic_id)
        assert not group(broker).deleting
        assert old.topic_id not in group(broker).initialized


async def test_a_restart_finishes_a_topic_deletion_that_was_cut_short(tmp_path: Path) -> None:
    """The broker stops after the topic is gone but before its share state is (simulated by a
    persister delete that never answers): the next start deletes the keys and clears Deleting."""
    async with running(tmp_path) as broker:
        broker.group_configs.alter(GROUP, {"share.auto.offset.reset": "earliest"})
        topic = broker.create_topic("t", 1)
        await join(broker, "m", "t")
        assert len(state_keys(broker, topic.topic_id)) == 1
        stuck = asyncio.get_running_loop().create_future()

        async def never(*_args: Any) -> Any:
            return await stuck

        broker.persister.delete = never  # type: ignore[union-attr, method-assign]
        broker.share_coordinator.delete_topics_state = never  # type: ignore[method-assign]
        broker.delete_topic("t")
        await until(lambda: bool(group(broker).deleting), "the topic is Deleting")
        assert len(state_keys(broker, topic.topic_id)) == 1
    async with running(tmp_path) as broker:
        assert not state_keys(broker, topic.topic_id)
        await until(lambda: not group(broker).deleting, "the topic left Deleting after restart")


async def test_idle_share_partitions_of_an_empty_group_unload_and_reload_intact(
        tmp_path: Path) -> None:
    """group.share.partition.unload.idle.ms: kept while the group has a member, unloaded once it
    has none, and loaded again by the next fetch with acknowledged state and delivery counts."""
    async with running(tmp_path, **{"group.share.partition.unload.idle.ms": "100"}) as broker:
        broker.group_configs.alter(GROUP, {"share.auto.offset.reset": "earliest"})
        topic = broker.create_topic("t", 1)
        produce(broker, "t", 0, 10)
        await join(broker, "m", "t")
        await acquire(broker, topic, 0, "m")
        key = SharePartitionKey(GROUP, topic.topic_id, 0)
        manager = broker.shares.partitions
        # ACCEPT 0-2, REJECT 3-4, RELEASE 5-9 (available again, delivered once).
        error, _ = await manager.acknowledge(key, "m", [(0, 2, (1,)), (3, 4, (3,)), (5, 9, (2,))])
        assert error == ErrorCode.none
        await asyncio.sleep(0.5)  # several sweeps: the group still has its member
        assert key in manager.partitions()
        resp = await broker.share_groups.heartbeat(HeartbeatRequest(GROUP, "m", -1))
        assert resp.error_code == ErrorCode.none
        await until(lambda: key not in manager.partitions(), "the share-partition unloaded")

        member = "m2"
        await join(broker, member, "t")
        sp = await broker.shares.partitions.get(GROUP, topic, 0)
        assert isinstance(sp, SharePartition)
        assert sp.start_offset == 5  # 0-4 done (accepted or rejected)
        _data, got = manager.acquire(sp, member, 100, 100, AcquireMode.BATCH_OPTIMIZED, 1 << 20)
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(5, 9, 2)]


async def test_a_share_partition_holding_records_is_not_unloaded(tmp_path: Path) -> None:
    async with running(tmp_path, **{"group.share.partition.unload.idle.ms": "50"}) as broker:
        broker.group_configs.alter(GROUP, {"share.auto.offset.reset": "earliest",
                                           "share.record.lock.duration.ms": "60000"})
        topic = broker.create_topic("t", 1)
        produce(broker, "t", 0, 3)
        await join(broker, "m", "t")
        await acquire(broker, topic, 0, "raw-fetcher")  # a session without group membership
        resp = await broker.share_groups.heartbeat(HeartbeatRequest(GROUP, "m", -1))
        assert resp.error_code == ErrorCode.none
        await asyncio.sleep(0.4)
        assert SharePartitionKey(GROUP, topic.topic_id, 0) in broker.shares.partitions.partitions()


async def test_a_share_partition_whose_start_offset_is_not_durable_is_not_unloaded(
        tmp_path: Path) -> None:
    """Loaded with start offset -1 resolved here (latest) and nothing written since: reloading
    would resolve "latest" again and skip what was produced meanwhile, so it stays loaded."""
    async with running(tmp_path, **{"group.share.partition.unload.idle.ms": "50"}) as broker:
        topic = broker.create_topic("t", 1)
        produce(broker, "t", 0, 3)
        await join(broker, "m", "t")
        sp = await broker.shares.partitions.get(GROUP, topic, 0)
        assert isinstance(sp, SharePartition) and sp.start_offset == 3
        resp = await broker.share_groups.heartbeat(HeartbeatRequest(GROUP, "m", -1))
        assert resp.error_code == ErrorCode.none
        produce(broker, "t", 0, 2)  # to be delivered: produced after the partition was loaded
        await asyncio.sleep(0.4)
        assert SharePartitionKey(GROUP, topic.topic_id, 0) in broker.shares.partitions.partitions()
