"""A share-partition whose share-state coordinator is away, on a real 3-broker cluster.

What a user would notice: while the broker leading the group's ``__share_group_state`` partition
is down (the state topic at one replica, so nothing takes over), a share consumer of a
partition whose leader must read that state gets no records and **no error**: both Kafka
clients raise an unexpected ShareFetch partition error to the application, which ended the
chaos soak's readers. Once the coordinator is back, the records are delivered, and none that
was ACCEPTed before is delivered again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.share.service import coordinator_key, partition_for
from protocol import codec
from tests.integration.cluster.conftest import Cluster, Etcd
from tests.integration.cluster.net_cluster import wait_for
from tests.integration.cluster.probe import metadata
from tests.integration.rawclient import RawClient
from tests.integration.share_helpers import set_group_configs, share_consumer

T = 60
TOPIC = "jobs"
PARTITIONS = 3
STATE_TOPIC = "__share_group_state"
STATE_PARTITIONS = 6  # the cluster fixture's share.coordinator.state.topic.num.partitions


@pytest.fixture
def away_cluster(tmp_path: Path, etcd: Etcd) -> Iterator[Cluster]:
    # One replica of the share state, and a 5 s deadline for inter-broker calls: the outage
    # below outlasts the persister's retries, as a long one would.
    c = Cluster(tmp_path, etcd, overrides={
        "share.coordinator.state.topic.replication.factor": "1",
        "request.timeout.ms": "5000"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _topic_id(bootstrap: str) -> uuid.UUID:
    m = codec.request_module(3, 12)
    with RawClient(bootstrap) as c:
        resp = c.call(3, 12, m.MetadataRequest(
            topics=(m.MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return resp.topics[0].topic_id


def _state_leader(bootstrap: str, key: str) -> int:
    """The broker leading the ``__share_group_state`` partition of share-partition ``key``
    (FindCoordinator's SHARE keys are an inter-broker RPC, refused to a client)."""
    p = partition_for(key, STATE_PARTITIONS)
    seen = wait_for(lambda: (s := metadata(bootstrap, [STATE_TOPIC])) is not None
                    and s.leaders.get((STATE_TOPIC, p), -1) > 0 and s, T,
                    f"a leader of {STATE_TOPIC}-{p}")
    return int(seen.leaders[(STATE_TOPIC, p)])


def _produce_to(bootstrap: str, partition: int, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        p.produce(TOPIC, v, partition=partition)
    assert p.flush(30) == 0


def _poll(consumer: object, seconds: float, accept: bool = True) -> list[bytes]:
    """What ``consumer`` receives within ``seconds``, ACCEPTed and committed; any error the
    client raises or returns fails the test."""
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = consumer.poll(0.3)  # type: ignore[attr-defined]
        for msg in batch:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
            if accept:
                consumer.acknowledge(msg, AcknowledgeType.ACCEPT)  # type: ignore[attr-defined]
        if batch and accept:
            results = consumer.commit_sync(10) or {}  # type: ignore[attr-defined]
            assert all(err is None for err in results.values()), results
    return got


def test_a_share_partition_whose_state_coordinator_is_down_waits_without_an_error(
        away_cluster: Cluster) -> None:
    cluster = away_cluster
    boot = cluster.brokers[0].bootstrap
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(T)
    seen = wait_for(lambda: (s := metadata(boot, [TOPIC])) is not None
                    and all(s.leaders.get((TOPIC, p), -1) > 0 for p in range(PARTITIONS))
                    and s, T, "the topic's leaders")
    tid = _topic_id(boot)
    warm_up = share_consumer(cluster.bootstrap, "warm-up", TOPIC)  # creates the state topic
    try:
        wait_for(lambda: warm_up.poll(0.2) is not None
                 and (s := metadata(boot, [STATE_TOPIC])) is not None
                 and all(s.leaders.get((STATE_TOPIC, p), -1) > 0
                         for p in range(STATE_PARTITIONS)), T, f"{STATE_TOPIC} with leaders")
    finally:
        warm_up.close()
    # A group and a partition whose share state lives on another broker than its leader.
    group, partition, leader, coordinator = next(
        (g, p, seen.leaders[(TOPIC, p)], c) for g in (f"away-{i}" for i in range(50))
        for p in range(PARTITIONS)
        if (c := _state_leader(boot, coordinator_key(g, tid, p))) != seen.leaders[(TOPIC, p)])
    set_group_configs(boot, group, {"share.auto.offset.reset": "earliest"})
    before = [f"before-{i}".encode() for i in range(10)]
    _produce_to(cluster.bootstrap, partition, before)

    first = share_consumer(cluster.bootstrap, group, TOPIC, explicit=True)
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + T
        while set(got) != set(before):
            assert time.monotonic() < deadline, f"only {len(got)} of 10 delivered at first"
            got += _poll(first, 1)
    finally:
        first.close()

    # The state's coordinator goes down; the partition's leader restarts, so it must read the
    # state again to serve the partition.
    cluster.brokers[coordinator - 1].kill()
    cluster.brokers[leader - 1].kill()
    cluster.brokers[leader - 1].start()
    wait_for(lambda: (s := metadata(cluster.brokers[leader - 1].bootstrap, [TOPIC])) is not None
             and s.leaders.get((TOPIC, partition)) == leader, T,
             f"broker {leader} leading {TOPIC}-{partition} again")
    after = [f"after-{i}".encode() for i in range(10)]
    _produce_to(cluster.brokers[leader - 1].bootstrap, partition, after)

    second = share_consumer(cluster.brokers[leader - 1].bootstrap, group, TOPIC, explicit=True)
    try:
        # Longer than the persister's 5 s deadline: its failure is not the client's error.
        assert _poll(second, 12) == []
        cluster.brokers[coordinator - 1].start()
        got = []
        deadline = time.monotonic() + T
        while set(got) != set(after):
            assert time.monotonic() < deadline, \
                f"{len(set(after) - set(got))} records not delivered after the coordinator came back"
            got += _poll(second, 1)
        assert not set(got) & set(before), "records ACCEPTed before the outage came back"
    finally:
        second.close()
