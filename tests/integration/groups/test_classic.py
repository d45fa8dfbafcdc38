"""Classic consumer groups with real clients (issue 14, first increment).

confluent-kafka ``Consumer`` (group.protocol=classic) and aiokafka ``AIOKafkaConsumer`` join,
get disjoint assignments covering every partition, rebalance when a member leaves, commit, and
resume at the committed offsets after a SIGKILL; share and classic groups coexist on one topic.
Raw requests check the admin RPCs (OffsetFetch v8+ batches, ListGroups v5 types, DescribeGroups,
DeleteGroups, OffsetDelete) and that one group id has one type.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic, wait_assigned
from tests.integration.rawclient import RawClient, request, request_module
from tests.integration.share_helpers import (
    drain,
    produce,
    set_group_configs,
    share_consumer,
)

FAST = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def fast_broker(tmp_path: Path) -> Any:
    b = BrokerProcess(tmp_path / "data", overrides=FAST)
    b.start()
    yield b
    b.stop()


def consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000}
    conf.update(extra)
    return Consumer(conf)


def poll_all(consumers: list[Consumer], seconds: float) -> list[list[Any]]:
    got: list[list[Any]] = [[] for _ in consumers]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                got[i].append(msg)
    return got



def test_three_members_split_six_partitions_and_a_leaver_hands_over(fast_broker: Any) -> None:
    topic, group = "classic-six", "classic-six-g"
    create_topic(fast_broker.bootstrap, topic, partitions=6)
    cs = [consumer(fast_broker.bootstrap, group) for _ in range(3)]
    try:
        for c in cs:
            c.subscribe([topic])
        sets = wait_assigned(cs, 6)
        assert all(len(s) == 2 for s in sets), sets
        cs[2].close()
        rest = cs[:2]
        cs = rest
        sets = wait_assigned(rest, 6)
        assert sorted(map(len, sets)) == [3, 3], sets
    finally:
        for c in cs:
            c.close()


def test_commit_kill_restart_resumes_at_committed_offsets(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=FAST)
    b.start()
    try:
        topic, group = "classic-restart", "classic-restart-g"
        create_topic(b.bootstrap, topic, partitions=2)
        values = produce(b.bootstrap, topic, 40, partitions=2)
        c = consumer(b.bootstrap, group)
        c.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 20:
            assert time.monotonic() < deadline
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
        c.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)}
        assert sum(max(o, 0) for o in committed.values()) == len(seen)
        c.close()
        b.kill()
        b.start()
        c2 = consumer(b.bootstrap, group)
        c2.subscribe([topic])
        rest: list[bytes] = []
        deadline = time.monotonic() + 40
        while len(seen) + len(rest) < len(values):
            assert time.monotonic() < deadline, (len(seen), len(rest))
            msg = c2.poll(0.2)
            if msg is not None and msg.error() is None:
                rest.append(msg.value())
        assert sorted(seen + rest) == sorted(values)  # nothing skipped, nothing twice
        c2.close()
    finally:
        b.stop()


def test_aiokafka_group_consumes_and_commits(fast_broker: Any) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    topic, group = "classic-aio", "classic-aio-g"
    create_topic(fast_broker.bootstrap, topic, partitions=2)
    values = produce(fast_broker.bootstrap, topic, 10, partitions=2)

    async def run() -> tuple[list[bytes], dict[int, int]]:
        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=fast_broker.bootstrap,
                                      group_id=group, auto_offset_reset="earliest",
                                      enable_auto_commit=False)
        await c.start()
        got: list[bytes] = []
        try:
            while len(got) < len(values):
                batch = await asyncio.wait_for(c.getmany(timeout_ms=500), 30)
                for msgs in batch.values():
                    got.extend(m.value for m in msgs)
            await c.commit()
            tps = c.assignment()
            offsets = {tp.partition: await c.committed(tp) for tp in tps}
        finally:
            await c.stop()
        return got, offsets

    got, offsets = asyncio.run(run())
    assert sorted(got) == sorted(values)
    assert sum(offsets.values()) == len(values)


def test_share_and_classic_groups_share_a_topic(fast_broker: Any) -> None:
    topic = "classic-and-share"
    create_topic(fast_broker.bootstrap, topic, partitions=1)
    set_group_configs(fast_broker.bootstrap, "both-share", {"share.auto.offset.reset": "earliest"})
    values = produce(fast_broker.bootstrap, topic, 20)
    c = consumer(fast_broker.bootstrap, "both-classic")
    c.subscribe([topic])
    s = share_consumer(fast_broker.bootstrap, "both-share", topic)
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values):
            assert time.monotonic() < deadline
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        shared = [m.value() for m in drain(s, 5)]
        assert sorted(got) == sorted(values)
        assert sorted(shared) == sorted(values)
        c.commit(asynchronous=False)
    finally:
        c.close()
        s.close()
    # A share consumer with the classic group's id is refused.
    bad = share_consumer(fast_broker.bootstrap, "both-classic", topic)
    try:
        code = None
        deadline = time.monotonic() + 15
        while code is None and time.monotonic() < deadline:
            try:
                for msg in bad.poll(0.2):
                    if msg.error() is not None:
                        code = msg.error().code()
            except KafkaException as exc:
                code = exc.args[0].code()
        assert code == KafkaError.GROUP_ID_NOT_FOUND, code
    finally:
        bad.close()


# -- raw protocol: coexistence and admin RPCs --------------------------------------------------


def raw_join(c: RawClient, group: str, member: str = "", version: int = 9) -> Any:
    m = request_module(11, version)
    return c.call(11, version, request(
        11, version, group_id=group, session_timeout=timedelta(seconds=10),
        rebalance_timeout=timedelta(seconds=10), member_id=member, group_instance_id=None,
        protocol_type="consumer", protocols=(m.JoinGroupRequestProtocol(
            name="range", metadata=b"\x00\x01"),), reason=None))


def raw_commit(c: RawClient, group: str, topic: str, offset: int, member: str = "",
               generation: int = -1) -> Any:
    m = request_module(8, 9)
    return c.call(8, 9, request(
        8, 9, group_id=group, generation_id_or_member_epoch=generation, member_id=member,
        group_instance_id=None, topics=(m.OffsetCommitRequestTopic(name=topic, partitions=(
            m.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                           committed_leader_epoch=-1,
                                           committed_metadata="meta"),)),)))


def test_admin_rpcs_and_one_type_per_group_id(fast_broker: Any) -> None:
    topic = "classic-raw"
    create_topic(fast_broker.bootstrap, topic, partitions=1)
    share_group = "raw-share"
    s = share_consumer(fast_broker.bootstrap, share_group, topic)
    try:
        drain(s, 2)  # the share group exists now
        with RawClient(fast_broker.bootstrap) as c:
            # JoinGroup with a share group's id: INCONSISTENT_GROUP_PROTOCOL.
            assert raw_join(c, share_group).error_code == ErrorCode.inconsistent_group_protocol
            # A live classic group: MEMBER_ID_REQUIRED, then the rejoin completes at once.
            first = raw_join(c, "raw-live")
            assert first.error_code == ErrorCode.member_id_required and first.member_id
            joined = raw_join(c, "raw-live", first.member_id)
            assert (joined.error_code, joined.generation_id, joined.leader) == (
                ErrorCode.none, 1, first.member_id)
            m14 = request_module(14, 5)
            synced = c.call(14, 5, request(
                14, 5, group_id="raw-live", generation_id=1, member_id=first.member_id,
                group_instance_id=None, protocol_type="consumer", protocol_name="range",
                assignments=(m14.SyncGroupRequestAssignment(member_id=first.member_id,
                                                            assignment=b"A"),)))
            assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"A")
            # Simple commits on a standalone group, refused on a live group without a member.
            assert raw_commit(c, "raw-solo", topic, 3).topics[0].partitions[0].error_code == 0
            assert raw_commit(c, "raw-live", topic, 3).topics[0].partitions[0].error_code == \
                ErrorCode.unknown_member_id
            assert raw_commit(c, "raw-live", topic, 4, first.member_id, 1) \
                .topics[0].partitions[0].error_code == 0
            assert raw_commit(c, share_group, topic, 3).topics[0].partitions[0].error_code == \
                ErrorCode.group_id_not_found
            # OffsetFetch v8+: several groups at once.
            m9 = request_module(9, 9)
            fetched = c.call(9, 9, request(9, 9, groups=tuple(
                m9.OffsetFetchRequestGroup(group_id=g, topics=None)
                for g in ("raw-solo", "raw-live")), require_stable=False))
            assert [(g.group_id, g.topics[0].partitions[0].committed_offset,
                     g.topics[0].partitions[0].metadata) for g in fetched.groups] == [
                ("raw-solo", 3, "meta"), ("raw-live", 4, "meta")]
            # ListGroups v5: both kinds with their types; the types filter.
            listed = c.call(16, 5, request(16, 5, states_filter=(), types_filter=()))
            kinds = {g.group_id: (g.group_type, g.protocol_type, g.group_state)
                     for g in listed.groups}
            assert kinds[share_group][:2] == ("share", "share")
            assert kinds["raw-live"] == ("classic", "consumer", "Stable")
            assert kinds["raw-solo"] == ("classic", "", "Empty")
            only = c.call(16, 5, request(16, 5, states_filter=(), types_filter=("Classic",)))
            assert {g.group_id for g in only.groups} >= {"raw-live", "raw-solo"}
            assert share_group not in {g.group_id for g in only.groups}
            # DescribeGroups: the classic group with its member, metadata and assignment.
            (d,) = c.call(15, 5, request(15, 5, groups=("raw-live",),
                                         include_authorized_operations=False)).groups
            assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
                0, "Stable", "consumer", "range")
            assert [(x.member_id, x.member_metadata, x.member_assignment)
                    for x in d.members] == [(first.member_id, b"\x00\x01", b"A")]
            # DeleteGroups: NON_EMPTY_GROUP while a member remains; OffsetDelete likewise.
            m47 = request_module(47, 0)

            def offset_delete(group: str) -> Any:
                return c.call(47, 0, request(47, 0, group_id=group, topics=(
                    m47.OffsetDeleteRequestTopic(name=topic, partitions=(
                        m47.OffsetDeleteRequestPartition(partition_index=0),)),)))

            assert offset_delete("raw-live").topics[0].partitions[0].error_code == \
                ErrorCode.group_subscribed_to_topic
            deleted = c.call(42, 2, request(42, 2, groups_names=("raw-live", "raw-solo")))
            assert [(r.group_id, r.error_code) for r in deleted.results] == [
                ("raw-live", ErrorCode.non_empty_group), ("raw-solo", 0)]
            m13 = request_module(13, 5)
            left = c.call(13, 5, request(13, 5, group_id="raw-live", members=(
                m13.MemberIdentity(member_id=first.member_id, group_instance_id=None,
                                   reason=None),)))
            assert left.error_code == 0 and left.members[0].error_code == 0
            assert offset_delete("raw-live").topics[0].partitions[0].error_code == 0
            deleted = c.call(42, 2, request(42, 2, groups_names=("raw-live",)))
            assert deleted.results[0].error_code == 0
            listed = c.call(16, 5, request(16, 5, states_filter=(), types_filter=("classic",)))
            assert not {"raw-live", "raw-solo"} & {g.group_id for g in listed.groups}
    finally:
        s.close()


def test_static_member_restart_gets_its_partitions_back_without_a_rebalance(
        fast_broker: Any) -> None:
    topic, group = "classic-static", "classic-static-g"
    create_topic(fast_broker.bootstrap, topic, partitions=4)
    assigned: list[int] = []
    c1 = consumer(fast_broker.bootstrap, group, **{"group.instance.id": "static-1"})
    c1.subscribe([topic], on_assign=lambda c, parts: assigned.append(len(parts)))
    wait_assigned([c1], 4)
    c2 = consumer(fast_broker.bootstrap, group, **{"group.instance.id": "static-2"})
    c2.subscribe([topic])
    try:
        sets = wait_assigned([c1, c2], 4)
        before = sets[1]
        rebalances = len(assigned)
        c2.close()  # a static member does not leave: its session holds its partitions
        c2 = consumer(fast_broker.bootstrap, group, **{"group.instance.id": "static-2"})
        c2.subscribe([topic])
        again = wait_assigned([c1, c2], 4)
        assert again[1] == before
        poll_all([c1, c2], 2.0)
        assert len(assigned) == rebalances  # the other member was not rebalanced
    finally:
        c1.close()
        c2.close()


def test_static_leader_restart_keeps_the_group_stable(fast_broker: Any) -> None:
    """The first member to join leads; restarted with its group.instance.id it takes its place
    again without a rebalance of the other member (Kafka replaces a static leader in place;
    JoinGroup v9 tells it to skip the assignment, older versions make it a follower)."""
    topic, group = "classic-static-leader", "classic-static-leader-g"
    create_topic(fast_broker.bootstrap, topic, partitions=4)
    assigned: list[int] = []
    c1 = consumer(fast_broker.bootstrap, group, **{"group.instance.id": "leader-1"})
    c1.subscribe([topic])
    wait_assigned([c1], 4)
    c2 = consumer(fast_broker.bootstrap, group, **{"group.instance.id": "follower-2"})
    c2.subscribe([topic], on_assign=lambda c, parts: assigned.append(len(parts)))
    try:
        sets = wait_assigned([c1, c2], 4)
        with RawClient(fast_broker.bootstrap) as raw:
            (d,) = raw.call(15, 5, request(15, 5, groups=(group,),
                                           include_authorized_operations=False)).groups
            state_before = d.group_state
        rebalances = len(assigned)
        c1.close()  # a static member does not leave
        c1 = consumer(fast_broker.bootstrap, group, **{"group.instance.id": "leader-1"})
        c1.subscribe([topic])
        again = wait_assigned([c1, c2], 4)
        assert again == sets
        poll_all([c1, c2], 2.0)
        assert len(assigned) == rebalances  # c2 was not rebalanced
        with RawClient(fast_broker.bootstrap) as raw:
            (d,) = raw.call(15, 5, request(15, 5, groups=(group,),
                                           include_authorized_operations=False)).groups
            assert d.group_state == state_before == "Stable"
            assert len(d.members) == 2
    finally:
        c1.close()
        c2.close()


def test_offset_delete_on_a_live_group_refuses_only_its_subscribed_topics(
        fast_broker: Any) -> None:
    """OffsetDelete (as kafka-consumer-groups --delete-offsets sends it) on a group whose
    confluent-kafka member subscribes to one topic: that topic's offsets stay
    (GROUP_SUBSCRIBED_TO_TOPIC), those it committed for another topic go, as in Kafka (the broker
    reads the member's subscription from librdkafka's consumer protocol metadata)."""
    subscribed, other, group = "classic-od-sub", "classic-od-other", "classic-od-g"
    create_topic(fast_broker.bootstrap, subscribed, partitions=1)
    create_topic(fast_broker.bootstrap, other, partitions=1)
    c = consumer(fast_broker.bootstrap, group)
    c.subscribe([subscribed])
    try:
        wait_assigned([c], 1)
        c.commit(offsets=[TopicPartition(subscribed, 0, 3), TopicPartition(other, 0, 7)],
                 asynchronous=False)
        m47 = request_module(47, 0)
        with RawClient(fast_broker.bootstrap) as raw:
            res = raw.call(47, 0, request(47, 0, group_id=group, topics=tuple(
                m47.OffsetDeleteRequestTopic(name=t, partitions=(
                    m47.OffsetDeleteRequestPartition(partition_index=0),))
                for t in (subscribed, other))))
        assert res.error_code == ErrorCode.none
        assert {t.name: t.partitions[0].error_code for t in res.topics} == {
            subscribed: ErrorCode.group_subscribed_to_topic, other: ErrorCode.none}
        left = {tp.topic: tp.offset for tp in c.committed(
            [TopicPartition(subscribed, 0), TopicPartition(other, 0)], timeout=10)}
        assert left == {subscribed: 3, other: -1001}  # -1001: no committed offset
    finally:
        c.close()
