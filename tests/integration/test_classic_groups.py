"""Classic consumer groups with real clients (issue 14, first increment).

confluent-kafka ``Consumer`` (group.protocol=classic) and aiokafka ``AIOKafkaConsumer`` join,
get disjoint assignments covering every partition, rebalance when a member leaves, commit, and
resume at the committed offsets after a SIGKILL; share and classic groups coexist on one topic.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
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


def wait_assigned(consumers: list[Consumer], partitions: int, timeout: float = 30.0
                  ) -> list[set[int]]:
    """Poll until the assignments are disjoint and cover ``partitions``."""
    deadline = time.monotonic() + timeout
    while True:
        for c in consumers:
            c.poll(0.05)
        sets = [{tp.partition for tp in c.assignment()} for c in consumers]
        union = set().union(*sets)
        if union == set(range(partitions)) and sum(map(len, sets)) == partitions \
                and all(sets):
            return sets
        assert time.monotonic() < deadline, f"assignments never settled: {sets}"


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
