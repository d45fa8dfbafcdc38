"""Share groups over the wire: group configs (IncrementalAlterConfigs/DescribeConfigs on GROUP
resources), ShareGroupHeartbeat, ShareGroupDescribe, ListGroups, and a ShareConsumer smoke test.

Heartbeats are raw kio requests (no client library lets a test choose member ids and epochs).
Tests that need short timeouts run on a broker whose ``group.share.min.*`` bounds are lowered.
Every wait is a bounded poll.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from broker.dispatch import default_dispatcher
from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, request, request_module

HEARTBEAT, DESCRIBE, LIST_GROUPS, METADATA = 76, 77, 16, 3

SHORT_BOUNDS = {
    "group.share.min.session.timeout.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.initialize.wait.ms": "0",
}


@pytest.fixture(scope="module")
def short_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose share-group bounds allow second-scale timeouts, and whose join answers do
    not wait for share-state initialization (Kafka's behaviour)."""
    b = BrokerProcess(tmp_path_factory.mktemp("short-bounds") / "data", SHORT_BOUNDS)
    b.start()
    yield b
    b.stop()


# --------------------------------------------------------------------------- helpers


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def alter_group(a: AdminClient, group: str, **configs: str | None) -> None:
    """SET (value) or DELETE (None) group configs; raises KafkaException on failure."""
    entries = [
        ConfigEntry(name.replace("_", "."), value,
                    incremental_operation=AlterConfigOpType.SET if value is not None
                    else AlterConfigOpType.DELETE)
        for name, value in configs.items()]
    for fut in a.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]).values():
        fut.result(timeout=10)


def group_configs(a: AdminClient, group: str) -> dict[str, Any]:
    fut = a.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    return dict(next(iter(fut.values())).result(timeout=10))


def topic_id(bootstrap: str, name: str) -> uuid.UUID:
    m = request_module(METADATA, 12)
    with RawClient(bootstrap) as c:
        resp = c.call(METADATA, 12, request(
            METADATA, 12, topics=(m.MetadataRequestTopic(topic_id=None, name=name),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    (t,) = resp.topics
    assert t.error_code == ErrorCode.none
    return t.topic_id


def heartbeat(c: RawClient, group: str, member: str, epoch: int,
              topics: tuple[str, ...] | None = None, rack: str | None = None) -> Any:
    return c.call(HEARTBEAT, 1, request(HEARTBEAT, 1, group_id=group, member_id=member,
                                        member_epoch=epoch, rack_id=rack,
                                        subscribed_topic_names=topics))


def assigned(resp: Any) -> dict[uuid.UUID, tuple[int, ...]]:
    assert resp.assignment is not None
    return {tp.topic_id: tuple(tp.partitions) for tp in resp.assignment.topic_partitions}


def heartbeat_until(c: RawClient, group: str, member: str, last: Any,
                    done: Callable[[dict[uuid.UUID, tuple[int, ...]]], bool],
                    timeout: float = 5.0) -> tuple[Any, dict[uuid.UUID, tuple[int, ...]]]:
    """Heartbeat on from the member's ``last`` response (its epoch and assignment) until the
    latest assignment satisfies ``done``; the assignment is only resent when it changes.
    Returns the last response and the assignment the member holds."""
    deadline = time.monotonic() + timeout
    current = assigned(last) if last.assignment is not None else {}
    epoch = last.member_epoch
    if done(current):
        return last, current
    while True:
        resp = heartbeat(c, group, member, epoch)
        assert resp.error_code == ErrorCode.none, resp
        epoch = resp.member_epoch
        if resp.assignment is not None:
            current = assigned(resp)
        if done(current):
            return resp, current
        assert time.monotonic() < deadline, f"assignment never satisfied the test: {current}"
        time.sleep(0.05)


def join(c: RawClient, group: str, member: str, topics: tuple[str, ...],
         rack: str | None = None) -> Any:
    resp = heartbeat(c, group, member, 0, topics, rack)
    assert resp.error_code == ErrorCode.none, resp
    assert resp.member_id == member and resp.member_epoch > 0
    return resp


def describe(c: RawClient, *groups: str, ops: bool = False) -> tuple[Any, ...]:
    resp = c.call(DESCRIBE, 1, request(DESCRIBE, 1, group_ids=groups,
                                       include_authorized_operations=ops))
    return tuple(resp.groups)


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


# --------------------------------------------------------------------------- group configs


def test_admin_client_sets_and_reads_back_group_configs(short_broker: BrokerProcess,
                                                        unique: str) -> None:
    a = admin(short_broker.bootstrap)
    alter_group(a, unique, share_auto_offset_reset="earliest",
                share_record_lock_duration_ms="2000")
    got = group_configs(a, unique)
    assert got["share.auto.offset.reset"].value == "earliest"
    assert got["share.record.lock.duration.ms"].value == "2000"
    assert got["share.record.lock.duration.ms"].source == ConfigSource.GROUP_CONFIG.value
    # Every share group config is listed with its effective value and source.
    assert got["share.delivery.count.limit"].value == "5"
    assert got["share.delivery.count.limit"].source == ConfigSource.DEFAULT_CONFIG.value
    assert got["share.isolation.level"].value == "read_uncommitted"
    assert {"share.session.timeout.ms", "share.heartbeat.interval.ms",
            "share.partition.max.record.locks", "share.renew.acknowledge.enable",
            "share.assignment.interval.ms", "share.record.locks.count.inflight.only"} <= set(got)
    # DELETE falls back to the broker default.
    alter_group(a, unique, share_record_lock_duration_ms=None)
    got = group_configs(a, unique)
    assert got["share.record.lock.duration.ms"].value == "30000"
    assert got["share.auto.offset.reset"].value == "earliest"


@pytest.mark.parametrize(("name", "value", "message"), [
    ("share.record.lock.duration.ms", "2000", "must be between 15000 and 60000"),
    ("share.delivery.count.limit", "11", "must be between 2 and 10"),
    ("share.auto.offset.reset", "by_duration:-PT1H", "must not be negative"),
    ("share.auto.offset.reset", "sometimes", "must be latest, earliest or by_duration"),
    ("share.isolation.level", "dirty", "must be one of"),
    ("share.no.such.thing", "1", "unknown group config"),
    # Kafka rate-limits assignment updates; Shoal has none to configure: refused, not ignored.
    ("share.assignment.interval.ms", "15000", "must be 0"),
], ids=["lock-below-min", "delivery-limit", "negative-duration", "reset-word", "isolation",
        "unknown", "assignment-interval"])
def test_bad_group_configs_are_rejected(broker: BrokerProcess, unique: str, name: str,
                                        value: str, message: str) -> None:
    a = admin(broker.bootstrap)
    with pytest.raises(KafkaException) as info:
        alter_group(a, unique, **{name: value})
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG
    assert name in err.str() and message in err.str()
    got = group_configs(a, unique)
    assert all(e.source != ConfigSource.GROUP_CONFIG.value for e in got.values())


def test_group_configs_survive_a_restart(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    alter_group(admin(fresh_broker.bootstrap), "durable", share_auto_offset_reset="by_duration:P1D",
                share_delivery_count_limit="3")
    fresh_broker.stop()
    fresh_broker.start()
    got = group_configs(admin(fresh_broker.bootstrap), "durable")
    assert got["share.auto.offset.reset"].value == "by_duration:PT24H"
    assert got["share.delivery.count.limit"].value == "3"
    assert (Path(fresh_broker.data_dir) / "group-configs.json").exists()


# --------------------------------------------------------------------------- heartbeat


def test_join_then_a_later_heartbeat_gets_every_partition(short_broker: BrokerProcess,
                                                          unique: str) -> None:
    """Kafka's flow (initialize.wait.ms=0): the join answer has an empty assignment; once the
    share state is initialized, a later heartbeat carries every partition."""
    create_topic(short_broker.bootstrap, unique, partitions=3)
    tid = topic_id(short_broker.bootstrap, unique)
    with RawClient(short_broker.bootstrap) as c:
        first = join(c, unique, "consumer-1", (unique,))  # client-chosen, not a UUID
        assert first.heartbeat_interval == timedelta(seconds=5)
        assert first.assignment is not None and assigned(first) == {}
        resp, _ = heartbeat_until(c, unique, "consumer-1", first,
                                  lambda a: a == {tid: (0, 1, 2)})
        assert resp.member_epoch > first.member_epoch
        # Nothing changed since: the assignment is not resent.
        again = heartbeat(c, unique, "consumer-1", resp.member_epoch)
        assert again.error_code == ErrorCode.none and again.assignment is None
        assert again.member_epoch == resp.member_epoch


def test_join_answer_carries_the_partitions(broker: BrokerProcess, unique: str) -> None:
    """Default group.share.initialize.wait.ms: the join waits for initialization."""
    create_topic(broker.bootstrap, unique, partitions=3)
    tid = topic_id(broker.bootstrap, unique)
    with RawClient(broker.bootstrap) as c:
        first = join(c, unique, "not-a-uuid", (unique,))
        assert assigned(first) == {tid: (0, 1, 2)}
        again = heartbeat(c, unique, "not-a-uuid", first.member_epoch)
        assert (again.error_code, again.member_epoch, again.assignment) == \
            (ErrorCode.none, first.member_epoch, None)


def test_heartbeat_interval_follows_the_group_config(short_broker: BrokerProcess,
                                                     unique: str) -> None:
    create_topic(short_broker.bootstrap, unique)
    with RawClient(short_broker.bootstrap) as c:
        first = join(c, unique, "m", (unique,))
        assert first.heartbeat_interval == timedelta(seconds=5)
        alter_group(admin(short_broker.bootstrap), unique, share_heartbeat_interval_ms="700")
        assert heartbeat(c, unique, "m", first.member_epoch).heartbeat_interval == \
            timedelta(milliseconds=700)


def test_two_members_share_a_single_partition(broker: BrokerProcess, unique: str) -> None:
    create_topic(broker.bootstrap, unique, partitions=1)
    tid = topic_id(broker.bootstrap, unique)
    with RawClient(broker.bootstrap) as c:
        a = join(c, unique, "a", (unique,))
        b = join(c, unique, "b", (unique,))
        heartbeat_until(c, unique, "a", a, lambda x: x == {tid: (0,)})
        heartbeat_until(c, unique, "b", b, lambda x: x == {tid: (0,)})


def test_two_members_split_four_partitions(broker: BrokerProcess, unique: str) -> None:
    create_topic(broker.bootstrap, unique, partitions=4)
    tid = topic_id(broker.bootstrap, unique)
    with RawClient(broker.bootstrap) as c:
        a = join(c, unique, "a", (unique,))
        b = join(c, unique, "b", (unique,))
        _, got_b = heartbeat_until(c, unique, "b", b, lambda x: len(x.get(tid, ())) == 2)
        _, got_a = heartbeat_until(c, unique, "a", a, lambda x: len(x.get(tid, ())) == 2)
        parts_a, parts_b = set(got_a[tid]), set(got_b[tid])
        assert parts_a.isdisjoint(parts_b) and parts_a | parts_b == {0, 1, 2, 3}


def test_leave_then_old_epoch_is_unknown(broker: BrokerProcess, unique: str) -> None:
    create_topic(broker.bootstrap, unique)
    with RawClient(broker.bootstrap) as c:
        j = join(c, unique, "leaver", (unique,))
        left = heartbeat(c, unique, "leaver", -1)
        assert left.error_code == ErrorCode.none and left.member_epoch == -1
        (g,) = describe(c, unique)
        assert g.group_state == "Empty" and g.members == ()
        assert heartbeat(c, unique, "leaver", j.member_epoch).error_code == \
            ErrorCode.unknown_member_id


def test_wrong_epoch_is_fenced_and_unknown_member_is_refused(broker: BrokerProcess,
                                                             unique: str) -> None:
    create_topic(broker.bootstrap, unique)
    with RawClient(broker.bootstrap) as c:
        j = join(c, unique, "m1", (unique,))
        fenced = heartbeat(c, unique, "m1", j.member_epoch + 5)
        assert fenced.error_code == ErrorCode.fenced_member_epoch
        assert fenced.error_message
        unknown = heartbeat(c, unique, "nobody", 1)
        assert unknown.error_code == ErrorCode.unknown_member_id
        unknown_group = heartbeat(c, unique + "-none", "m1", 1)
        assert unknown_group.error_code == ErrorCode.unknown_member_id
        bad = heartbeat(c, unique, "m2", 0, topics=None)
        assert bad.error_code == ErrorCode.invalid_request


def test_group_max_size(fresh_broker: BrokerProcess) -> None:
    fresh_broker.overrides["group.share.max.size"] = "2"
    fresh_broker.start()
    create_topic(fresh_broker.bootstrap, "t")
    with RawClient(fresh_broker.bootstrap) as c:
        join(c, "g", "one", ("t",))
        join(c, "g", "two", ("t",))
        third = heartbeat(c, "g", "three", 0, ("t",))
        assert third.error_code == ErrorCode.group_max_size_reached
        # A known member may still rejoin.
        assert heartbeat(c, "g", "two", 0, ("t",)).error_code == ErrorCode.none


def test_session_expiry_removes_a_silent_member(short_broker: BrokerProcess, unique: str) -> None:
    create_topic(short_broker.bootstrap, unique)
    alter_group(admin(short_broker.bootstrap), unique, share_session_timeout_ms="1000",
                share_heartbeat_interval_ms="200")
    with RawClient(short_broker.bootstrap) as c:
        silent = join(c, unique, "silent", (unique,))
        alive = join(c, unique, "alive", (unique,))
        assert alive.heartbeat_interval == timedelta(milliseconds=200)
        epoch = alive.member_epoch
        started = time.monotonic()

        def silent_gone() -> bool:
            nonlocal epoch
            resp = heartbeat(c, unique, "alive", epoch)  # keeps "alive" in the group
            assert resp.error_code == ErrorCode.none
            epoch = resp.member_epoch
            (g,) = describe(c, unique)
            return [m.member_id for m in g.members] == ["alive"]

        wait_until(silent_gone, timeout=5.0)
        assert time.monotonic() - started >= 0.5  # not removed before its session ran out
        assert heartbeat(c, unique, "silent", silent.member_epoch).error_code == \
            ErrorCode.unknown_member_id


def test_topic_created_after_subscribing_is_assigned(broker: BrokerProcess, unique: str) -> None:
    later = unique + "-later"
    with RawClient(broker.bootstrap) as c:
        first = join(c, unique, "early", (later,))
        assert first.assignment is not None and assigned(first) == {}
        create_topic(broker.bootstrap, later, partitions=2)
        tid = topic_id(broker.bootstrap, later)
        heartbeat_until(c, unique, "early", first, lambda a: a == {tid: (0, 1)})


# --------------------------------------------------------------------------- describe / list


def test_share_group_describe(broker: BrokerProcess, unique: str) -> None:
    create_topic(broker.bootstrap, unique, partitions=2)
    tid = topic_id(broker.bootstrap, unique)
    with RawClient(broker.bootstrap, client_id="describe-test") as c:
        j = join(c, unique, "member-a", (unique,), rack="rack-1")
        heartbeat_until(c, unique, "member-a", j, lambda a: a == {tid: (0, 1)})
        g, missing = describe(c, unique, unique + "-missing", ops=True)
    assert g.error_code == ErrorCode.none
    assert g.group_id == unique and g.group_state == "Stable"
    assert g.assignor_name == "simple"
    assert g.group_epoch >= g.assignment_epoch > 0
    assert g.authorized_operations > 0
    (m,) = g.members
    assert (m.member_id, m.rack_id, m.client_id, m.client_host) == \
        ("member-a", "rack-1", "describe-test", "/127.0.0.1")
    assert m.member_epoch == g.assignment_epoch
    assert m.subscribed_topic_names == (unique,)
    (tp,) = m.assignment.topic_partitions
    assert (tp.topic_id, tp.topic_name, tuple(tp.partitions)) == (tid, unique, (0, 1))
    assert missing.error_code == ErrorCode.group_id_not_found
    assert missing.group_id == unique + "-missing" and missing.group_state == "Dead"


def test_list_groups_shows_share_groups_with_type_and_state(broker: BrokerProcess,
                                                            unique: str) -> None:
    create_topic(broker.bootstrap, unique)
    stable, empty = unique + "-stable", unique + "-empty"
    with RawClient(broker.bootstrap) as c:
        join(c, stable, "m", (unique,))
        join(c, empty, "m", (unique,))
        assert heartbeat(c, empty, "m", -1).error_code == ErrorCode.none

        def listed(version: int, **filters: Any) -> dict[str, Any]:
            resp = c.call(LIST_GROUPS, version, request(LIST_GROUPS, version, **filters))
            assert resp.error_code == ErrorCode.none
            return {g.group_id: g for g in resp.groups if g.group_id in (stable, empty)}

        v5 = listed(5, states_filter=(), types_filter=())
        assert {g: (x.protocol_type, x.group_type, x.group_state) for g, x in v5.items()} == {
            stable: ("share", "share", "Stable"), empty: ("share", "share", "Empty")}
        assert set(listed(5, states_filter=(), types_filter=("Share",))) == {stable, empty}
        assert listed(5, states_filter=(), types_filter=("consumer", "classic")) == {}
        assert set(listed(4, states_filter=("stable",))) == {stable}
        assert set(listed(5, states_filter=("Empty",), types_filter=("share",))) == {empty}
        v0 = listed(0)
        assert {g: x.protocol_type for g, x in v0.items()} == {stable: "share", empty: "share"}


# --------------------------------------------------------------------------- real client


@pytest.mark.skipif(default_dispatcher().known(78) is None,
                    reason="ShareFetch (78) is not registered in the dispatcher yet")
def test_share_consumer_subscribes_and_polls(broker: BrokerProcess, unique: str) -> None:
    from confluent_kafka import ShareConsumer

    create_topic(broker.bootstrap, unique, partitions=2)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": unique})
    try:
        consumer.subscribe([unique])
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            for msg in consumer.poll(0.5) or []:
                assert msg.error() is None, msg.error()
        with RawClient(broker.bootstrap) as c:
            (g,) = describe(c, unique)
        assert g.group_state == "Stable" and len(g.members) == 1
        assert g.members[0].subscribed_topic_names == (unique,)
    finally:
        consumer.close()
    with RawClient(broker.bootstrap) as c:
        wait_until(lambda: describe(c, unique)[0].group_state == "Empty")


# --------------------------------------------------------------------------- service API


async def test_service_api_in_process(tmp_path: Path) -> None:
    """What ShareFetch code uses: live group configs, member-removal listeners, assignments;
    and topic deletion taking partitions away."""
    import asyncio

    from broker.app import Broker
    from broker.config import BrokerConfig
    from coordinator.group.share.heartbeat import HeartbeatRequest

    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path), **SHORT_BOUNDS}))
    await broker.start()
    try:
        service = broker.share_groups
        removed: list[tuple[str, str]] = []
        service.add_member_listener(lambda g, m: removed.append((g, m)))
        topic = broker.create_topic("t", 2)
        broker.group_configs.alter("g", {"share.session.timeout.ms": "1000",
                                         "share.heartbeat.interval.ms": "200",
                                         "share.record.lock.duration.ms": "1500"})
        assert service.config("g").record_lock_duration_ms == 1500

        async def beat(member: str, epoch: int, topics: tuple[str, ...] | None = None) -> Any:
            resp = await service.heartbeat(HeartbeatRequest("g", member, epoch,
                                                            subscribed_topic_names=topics))
            assert resp.error_code == ErrorCode.none, resp
            return resp

        a = await beat("a", 0, ("t",))
        b = await beat("b", 0, ("t",))
        for _ in range(50):  # the assignment settles once the share state is initialized
            a, b = await beat("a", a.member_epoch), await beat("b", b.member_epoch)
            if service.assignment("g", "a") and service.assignment("g", "b"):
                break
            await asyncio.sleep(0.02)
        held = dict(service.assignment("g", "a") or {}), dict(service.assignment("g", "b") or {})
        assert held[0][topic.topic_id] | held[1][topic.topic_id] == {0, 1}
        assert service.is_member("g", "a")

        assert (await beat("a", -1)).member_epoch == -1
        assert removed == [("g", "a")] and not service.is_member("g", "a")

        # "b" stops heartbeating: fenced by session expiry, listeners told.
        for _ in range(100):
            if ("g", "b") in removed:
                break
            await asyncio.sleep(0.05)
        assert removed == [("g", "a"), ("g", "b")]

        # Topic deletion: a subscribed member loses the partitions.
        c = await beat("c", 0, ("t",))
        assert c.assignment and topic.topic_id in c.assignment
        broker.delete_topic("t")
        for _ in range(50):
            c = await beat("c", c.member_epoch)
            if c.assignment is not None:
                break
            await asyncio.sleep(0.02)
        assert c.assignment == {}
    finally:
        await broker.stop()


