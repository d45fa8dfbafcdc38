"""A rolling switch of a group's clients between ``group.protocol=classic`` and ``consumer``
with real confluent-kafka consumers (issue 25 section 4, ``group.consumer.migration.policy``).

One instance at a time is restarted with the other protocol while records keep coming. Each
consumer commits every record it processes synchronously, and a record counts as processed
only once its commit succeeded: across the whole switch every record is processed, and none
twice (the committed offsets never go back and never skip). The group is upgraded to a consumer
group when the first consumer-protocol instance joins (classic instances go on through
JoinGroup/SyncGroup/Heartbeat), and downgraded to a classic group when the last one leaves.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.share_helpers import produce

PARTITIONS = 4
FAST = {"group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.heartbeat.interval.ms": "500",
        "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    b = BrokerProcess(tmp_path_factory.mktemp("migration") / "data", overrides=FAST)
    b.start()
    yield b
    b.stop()


def consumer(bootstrap: str, group: str, protocol: str) -> Consumer:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                            "group.protocol": protocol, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    return Consumer(conf)


class Fleet:
    """The group's instances, polled in turn; ``done`` counts each committed record."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.members: dict[str, Consumer] = {}
        self.done: Counter[bytes] = Counter()
        self.by_member: Counter[str] = Counter()  # committed records per instance name

    def start(self, name: str, protocol: str) -> None:
        c = consumer(self.bootstrap, self.group, protocol)
        c.subscribe([self.topic])
        self.members[name] = c

    def stop(self, name: str) -> None:
        self.members.pop(name).close()  # leaves the group

    def run(self, seconds: float, until: int | None = None) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until is not None and len(self.done) >= until:
                return
            for name, c in list(self.members.items()):
                msg = c.poll(0.05)
                if msg is None or msg.error():
                    continue
                try:
                    c.commit(message=msg, asynchronous=False)
                except KafkaException:
                    # Not committed (a rebalance moved the member's epoch or the partition): an
                    # at-least-once consumer processes it again, here or at its next owner.
                    try:
                        c.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
                    except KafkaException:
                        pass  # no longer ours: its next owner starts at the committed offset
                    continue
                value = msg.value()
                assert value is not None
                self.done[value] += 1
                self.by_member[name] += 1

    def close(self) -> None:
        for name in list(self.members):
            self.stop(name)


def group_type(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(timeout=10).valid
    return {g.group_id: g.type for g in listed}.get(group)


def wait_type(bootstrap: str, group: str, want: Any, fleet: Fleet, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while group_type(bootstrap, group) != want:
        assert time.monotonic() < deadline, f"group {group} is not of type {want}"
        fleet.run(0.5)


def test_rolling_switch_classic_to_consumer_and_back_loses_and_repeats_nothing(
        broker: Any) -> None:
    b, topic, group = broker.bootstrap, "migration-roll", "migration-roll-g"
    create_topic(b, topic, partitions=PARTITIONS)
    sent = produce(b, topic, 200, PARTITIONS, prefix="a")
    fleet = Fleet(b, group, topic)
    try:
        fleet.start("one", "classic")
        fleet.start("two", "classic")
        fleet.run(20, until=100)
        assert group_type(b, group) == ConsumerGroupType.CLASSIC
        # Upgrade, one instance at a time: the first consumer-protocol instance converts the
        # group; the remaining classic instance keeps consuming inside the consumer group.
        fleet.stop("one")
        fleet.start("one", "consumer")
        sent += produce(b, topic, 200, PARTITIONS, prefix="b")
        wait_type(b, group, ConsumerGroupType.CONSUMER, fleet)
        fleet.by_member.clear()
        sent += produce(b, topic, 200, PARTITIONS, prefix="m")
        fleet.run(30, until=len(sent))
        # Mixed: the classic instance took part in the consumer group beside the new one.
        assert fleet.by_member["one"] and fleet.by_member["two"], fleet.by_member
        fleet.stop("two")
        fleet.start("two", "consumer")
        sent += produce(b, topic, 200, PARTITIONS, prefix="c")
        fleet.run(40, until=len(sent))
        assert group_type(b, group) == ConsumerGroupType.CONSUMER
        # Downgrade: back to classic one instance at a time; when the last consumer-protocol
        # instance leaves, the group becomes a classic group again.
        fleet.stop("one")
        fleet.start("one", "classic")
        sent += produce(b, topic, 200, PARTITIONS, prefix="d")
        fleet.run(30, until=len(sent))
        fleet.by_member.clear()
        sent += produce(b, topic, 200, PARTITIONS, prefix="n")
        fleet.run(30, until=len(sent))
        assert fleet.by_member["one"] and fleet.by_member["two"], fleet.by_member
        assert group_type(b, group) == ConsumerGroupType.CONSUMER
        fleet.stop("two")
        wait_type(b, group, ConsumerGroupType.CLASSIC, fleet)
        fleet.start("two", "classic")
        sent += produce(b, topic, 200, PARTITIONS, prefix="e")
        fleet.run(60, until=len(sent))
    finally:
        fleet.close()
    missing = set(sent) - set(fleet.done)
    twice = {v: n for v, n in fleet.done.items() if n > 1}
    assert not missing, f"{len(missing)} records never committed, e.g. {sorted(missing)[:5]}"
    assert not twice, f"records committed twice: {sorted(twice.items())[:5]}"
    assert set(fleet.done) == set(sent)
    # The operator is told of both conversions.
    logs = broker.logs()
    assert f"classic group {group} was upgraded to a consumer group" in logs
    assert f"consumer group {group} was downgraded to a classic group" in logs


def test_disabled_policy_refuses_the_upgrade(tmp_path_factory: pytest.TempPathFactory) -> None:
    b = BrokerProcess(tmp_path_factory.mktemp("migration-off") / "data",
                      overrides={**FAST, "group.consumer.migration.policy": "disabled"})
    b.start()
    try:
        topic, group = "migration-off", "migration-off-g"
        create_topic(b.bootstrap, topic, partitions=2)
        sent = produce(b.bootstrap, topic, 20, 2)
        fleet = Fleet(b.bootstrap, group, topic)
        try:
            fleet.start("old", "classic")
            fleet.run(20, until=len(sent))
            new = consumer(b.bootstrap, group, "consumer")
            new.subscribe([topic])
            error = None
            deadline = time.monotonic() + 15
            while error is None and time.monotonic() < deadline:
                fleet.run(0.2)
                try:
                    msg = new.poll(0.2)
                    if msg is not None and msg.error():
                        error = msg.error()
                except KafkaException as exc:
                    error = exc.args[0]
            new.close()
            # GROUP_ID_NOT_FOUND, fatal for the consumer-protocol client (as with Kafka).
            assert error is not None and "group id does not exist" in error.str(), error
            assert group_type(b.bootstrap, group) == ConsumerGroupType.CLASSIC
        finally:
            fleet.close()
    finally:
        b.stop()


def test_the_conversions_survive_a_broker_kill(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The upgrade and the downgrade are records on __consumer_offsets: after a SIGKILL the
    broker replays them into the same group (the mixed consumer group with its classic member,
    then the classic group), and its instances carry on where they committed."""
    b = BrokerProcess(tmp_path_factory.mktemp("migration-kill") / "data", overrides=FAST)
    b.start()
    try:
        topic, group = "migration-kill", "migration-kill-g"
        create_topic(b.bootstrap, topic, partitions=PARTITIONS)
        sent = produce(b.bootstrap, topic, 100, PARTITIONS, prefix="a")
        fleet = Fleet(b.bootstrap, group, topic)
        try:
            fleet.start("old", "classic")
            fleet.run(20, until=50)
            fleet.start("new", "consumer")
            wait_type(b.bootstrap, group, ConsumerGroupType.CONSUMER, fleet)
            fleet.run(20, until=len(sent))
            b.kill()
            b.start()
            assert group_type(b.bootstrap, group) == ConsumerGroupType.CONSUMER
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
            assert desc.type == ConsumerGroupType.CONSUMER and len(desc.members) == 2
            sent += produce(b.bootstrap, topic, 100, PARTITIONS, prefix="b")
            fleet.run(40, until=len(sent))
            fleet.stop("new")  # the last consumer-protocol member: back to a classic group
            wait_type(b.bootstrap, group, ConsumerGroupType.CLASSIC, fleet)
            # Killed before the classic rebalance the downgrade starts can complete: after the
            # reload, "old" still rejoins and takes every partition.
            b.kill()
            b.start()
            assert group_type(b.bootstrap, group) == ConsumerGroupType.CLASSIC
            sent += produce(b.bootstrap, topic, 100, PARTITIONS, prefix="c")
            fleet.run(40, until=len(sent))
        finally:
            fleet.close()
        assert set(fleet.done) == set(sent)
        assert not [v for v, n in fleet.done.items() if n > 1]
    finally:
        b.stop()
