"""A consumer group with members loses the committed offsets of topics it does not subscribe to
after ``offsets.retention.minutes`` (issue 25, section 4), as Kafka's offset expiration does.

An in-process broker with a hand-moved clock (``FakeClock``): a consumer-protocol member
subscribed to ``kept`` commits offsets for ``kept`` and ``dropped``, then keeps heartbeating and
committing ``kept`` while the clock moves past the retention. The real coordinator, its timers and
its ``__consumer_offsets`` log run; the requests go through the handlers (ConsumerGroupHeartbeat,
OffsetCommit, OffsetFetch).
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.app import Broker
from broker.clock import FakeClock
from broker.config import BrokerConfig
from broker.context import RequestContext
from broker.handlers import consumer_group_heartbeat, offset_commit, offset_fetch
from protocol.codec import request_module
from protocol.messages import make

from tests.integration.rawclient import request

GROUP = "expiring"
RETENTION_MS = 60_000


async def call(b: Broker, module: Any, version: int, req: Any) -> Any:
    ctx = RequestContext(b, module.API_KEY, version, 1, "test", "127.0.0.1", 1)
    out = module.handle(ctx, req)
    return await out if inspect.isawaitable(out) else out


async def test_offsets_of_unsubscribed_topics_expire_while_the_group_is_stable(
        tmp_path: Path) -> None:
    clock = FakeClock()
    b = Broker(BrokerConfig({
        "log.dirs": str(tmp_path), "offsets.topic.num.partitions": 1,
        "share.coordinator.state.topic.num.partitions": 1,
        "offsets.retention.minutes": RETENTION_MS // 60_000,
        "offsets.retention.check.interval.ms": 1000}), clock=clock)
    await b.start()
    try:
        b.create_topic("kept", 1)
        b.create_topic("dropped", 1)

        async def heartbeat(member: str, epoch: int) -> Any:
            resp = await call(b, consumer_group_heartbeat, 1, request(
                68, 1, group_id=GROUP, member_id=member, member_epoch=epoch, instance_id=None,
                rack_id=None, rebalance_timeout=timedelta(seconds=30),
                subscribed_topic_names=("kept",) if epoch == 0 else None,
                subscribed_topic_regex=None, server_assignor=None,
                topic_partitions=() if epoch == 0 else None))
            assert resp.error_code == ErrorCode.none, resp
            return resp

        async def commit(member: str, epoch: int, *topics: str) -> None:
            m = request_module(8, 9)
            resp = await call(b, offset_commit, 9, request(
                8, 9, group_id=GROUP, generation_id_or_member_epoch=epoch, member_id=member,
                group_instance_id=None, topics=tuple(
                    make(m.OffsetCommitRequestTopic, name=t, partitions=(
                        make(m.OffsetCommitRequestPartition, partition_index=0,
                             committed_offset=clock.now_ms() % 1000, committed_leader_epoch=-1,
                             committed_metadata=""),)) for t in topics)))
            assert {p.error_code for t in resp.topics for p in t.partitions} == {ErrorCode.none}

        async def committed() -> set[str]:
            m = request_module(9, 9)
            resp = await call(b, offset_fetch, 9, request(9, 9, groups=(
                make(m.OffsetFetchRequestGroup, group_id=GROUP, member_id=None, member_epoch=-1,
                     topics=None),), require_stable=False))
            return {t.name for t in resp.groups[0].topics
                    if any(p.committed_offset >= 0 for p in t.partitions)}

        member = str(uuid.uuid4())  # v1: the member chooses its id (KIP-1082)
        epoch = (await heartbeat(member, 0)).member_epoch
        await commit(member, epoch, "kept", "dropped")
        assert await committed() == {"kept", "dropped"}
        # The member stays: it heartbeats and commits "kept" every 5 s of the clock.
        while clock.now_ms() - 1_700_000_000_000 < RETENTION_MS + 10_000:
            clock.advance(5_000)
            epoch = (await heartbeat(member, epoch)).member_epoch
            await commit(member, epoch, "kept")
        for _ in range(100):  # the retention check runs on the coordinator's timer
            if await committed() == {"kept"}:
                break
            await asyncio.sleep(0.05)
        assert await committed() == {"kept"}
        assert (await heartbeat(member, epoch)).error_code == ErrorCode.none  # still a member
    finally:
        await b.stop()
