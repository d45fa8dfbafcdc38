"""A cluster member's shutdown ends, whatever it waits on.

The case found by the chaos work: etcd and both followers are gone, so the in-sync replicas can
neither confirm the share coordinator's writes nor shrink. A member given SIGTERM then waited
on those writes for ever (54 minutes, until it was killed). Now a stopping member answers such
writes NOT_LEADER_OR_FOLLOWER once replication is closed, and ``shutdown.force.timeout.ms``
bounds whatever else a shutdown could wait on.
"""

from __future__ import annotations

import signal
import subprocess
import time
import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.integration.cluster.conftest import Cluster

TOPIC, GROUP, RECORDS = "orders", "workers", 600


@pytest.fixture
def cluster_overrides(request: pytest.FixtureRequest) -> dict[str, str]:
    """One share-state partition, so that the group's share coordinator is on a broker the
    test can pick; a test's ``indirect`` parameter adds more."""
    return {"share.coordinator.state.topic.num.partitions": "1",
            **getattr(request, "param", {})}


def _leader(admin: AdminClient, topic: str, partition: int) -> int:
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


def _isolate_coordinator_with_writes_pending(cluster: Cluster) -> int:
    """Produce, share-consume part of it, then stop etcd and kill -9 every broker but the one
    leading ``__share_group_state``, and acknowledge through it: its coordinator's writes now
    wait for replicas that are gone. Returns the index of that broker in ``cluster.brokers``."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 3, 3)]).values():
        f.result(30)
    reset = ConfigResource("group", GROUP, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([reset]).values():
        f.result(10)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(TOPIC, b"x" * 100, partition=i % 3)
    assert producer.flush(30) == 0
    consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    got, deadline = 0, time.monotonic() + 60
    while got < 60 and time.monotonic() < deadline:
        for m in consumer.poll(1.0) or []:
            if not m.error():
                got += 1
            consumer.acknowledge(m)
    assert got >= 60, "the share consumer read nothing before the failure"
    # The share coordinator exists now (the acknowledgements wrote state): find its broker.
    node = _leader(admin, "__share_group_state", 0)
    victim = next(i for i, b in enumerate(cluster.brokers) if i + 1 == node)
    cluster.etcd.stop()  # first: the ISRs can no longer shrink
    for i, b in enumerate(cluster.brokers):
        if i != victim:
            b.kill()
    # More acquisitions and acknowledgements: those for the victim's partitions reach its share
    # coordinator, whose writes the (gone) followers never confirm.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            for m in consumer.poll(0.5) or []:
                consumer.acknowledge(m)
        except Exception:  # noqa: BLE001 - partitions of the killed brokers answer errors
            pass
    return victim


def _sigterm_and_wait(cluster: Cluster, victim: int, bound_s: float) -> tuple[int, float, str]:
    b = cluster.brokers[victim]
    assert b.proc is not None and b.alive()
    t0 = time.monotonic()
    b.proc.send_signal(signal.SIGTERM)
    try:
        code = b.proc.wait(bound_s)
    except subprocess.TimeoutExpired:
        b.kill()
        pytest.fail(f"broker {victim + 1} still running {bound_s:.0f} s after SIGTERM:\n"
                    f"{b.logs()}")
    return code, time.monotonic() - t0, b.logs()


def test_a_member_cut_off_from_etcd_and_its_followers_still_stops(cluster: Cluster) -> None:
    victim = _isolate_coordinator_with_writes_pending(cluster)
    # shutdown.timeout.ms (5 s) for the requests in flight, then the coordinators' pending
    # writes fail at once: the process ends well before shutdown.force.timeout.ms (60 s).
    code, _took, logs = _sigterm_and_wait(cluster, victim, 40)
    assert code == 0, logs
    assert "Shoal broker stopped cleanly" in logs
    assert "shutdown did not finish" not in logs


@pytest.mark.parametrize("cluster_overrides", [{
    # In-flight requests may take 30 s, the whole shutdown only 1 s.
    "shutdown.timeout.ms": "30000", "shutdown.force.timeout.ms": "1000",
    "controlled.shutdown.enable": "false"}], indirect=True)
def test_a_shutdown_that_cannot_finish_ends_at_its_deadline(cluster: Cluster) -> None:
    victim = _isolate_coordinator_with_writes_pending(cluster)
    # An acks=all produce to the victim's partition waits for replicas that are gone: it is in
    # flight (up to the client's 30 s) when the signal comes.
    b = cluster.brokers[victim]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    partition = next(p for p, meta in admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
                     .partitions.items() if meta.leader == victim + 1)
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all",
                         "message.timeout.ms": 60000})
    producer.produce(TOPIC, b"late", partition=partition)
    producer.poll(2.0)
    code, _took, logs = _sigterm_and_wait(cluster, victim, 20)
    assert code == 1, logs
    assert ("shutdown did not finish within 1 s (shutdown.force.timeout.ms); it was still "
            "closing its listeners and waiting for in-flight requests") in logs
    assert "still waiting: Task-1: run_broker" in logs  # what it waited on, for the operator
    assert "stopped cleanly" not in logs
