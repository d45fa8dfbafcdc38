"""kill -9 of one broker of three under share-group load (replication factor 1).

What a user would notice: the killed broker's partitions go offline while the others keep
delivering, and the consumers' share sessions with them hold (no ShareFetch or ShareAcknowledge
answered with a session error there); when it is started again from its own command line, its partitions, share state and
coordinators come back, every record is eventually ACCEPTed, and no record whose ACCEPT was
confirmed (commit_sync answered it) is ever delivered again.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from protocol import codec
from tests.integration.cluster.conftest import Cluster, Etcd
from tests.integration.rawclient import RawClient
from tests.integration.share_helpers import produce, set_group_configs, share_consumer

T = 30
GROUP = "survivors"


@pytest.fixture
def fast_locks_cluster(tmp_path: Path, etcd: Etcd) -> Iterator[Cluster]:
    c = Cluster(tmp_path, etcd, overrides={"group.share.min.record.lock.duration.ms": "1000"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _group_coordinator(bootstrap: str, group: str) -> int:
    m = codec.request_module(10, 4)
    with RawClient(bootstrap) as c:
        deadline = time.monotonic() + T
        while True:
            resp = c.call(10, 4, m.FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
            (coord,) = resp.coordinators
            if coord.error_code == ErrorCode.none:
                return int(coord.node_id)
            assert time.monotonic() < deadline, coord
            time.sleep(0.2)


SESSION_ERRORS = ("SHARE_SESSION_NOT_FOUND", "INVALID_SHARE_SESSION_EPOCH",
                  "SHARE_SESSION_LIMIT_REACHED")


def _session_errors(metrics_port: int) -> float:
    """ShareFetch/ShareAcknowledge requests a broker answered with a share-session error."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    total = 0.0
    for line in text.decode().splitlines():
        if line.startswith(("shoal_share_fetch_requests_failed_total{",
                            "shoal_share_acknowledge_requests_failed_total{")) and any(
                f'error="{e}"' in line for e in SESSION_ERRORS):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_kill_9_of_a_broker_under_share_load_loses_no_confirmed_acceptance(
        fast_locks_cluster: Cluster) -> None:
    cluster = fast_locks_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("jobs", 12, 1)])["jobs"].result(T)
    set_group_configs(cluster.brokers[0].bootstrap, GROUP, {"share.auto.offset.reset": "earliest",
                                                 "share.record.lock.duration.ms": "3000"})
    sent = set(produce(cluster.bootstrap, "jobs", 1200, partitions=12))
    coordinator = _group_coordinator(cluster.brokers[0].bootstrap, GROUP)
    victim = next(i for i in (3, 2, 1) if i != coordinator)

    confirmed: set[bytes] = set()
    redelivered_after_confirm: list[bytes] = []
    consumers = [share_consumer(cluster.brokers[i % 3].bootstrap, GROUP, "jobs", explicit=True)
                 for i in range(6)]

    def round_of_polls() -> int:
        """Every consumer polls once, ACCEPTs all it got and commits; returns confirmations."""
        before = len(confirmed)
        for c in consumers:
            batch = [m for m in c.poll(0.2) if m.error() is None]
            if not batch:
                continue
            for m in batch:
                if m.value() in confirmed:
                    redelivered_after_confirm.append(m.value())
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            results = c.commit_sync(10) or {}
            failed = {(tp.topic, tp.partition) for tp, err in results.items() if err is not None}
            confirmed.update(m.value() for m in batch
                             if (m.topic(), m.partition()) not in failed)
        return len(confirmed) - before

    try:
        deadline = time.monotonic() + 60
        while len(confirmed) < 400:
            assert time.monotonic() < deadline, f"only {len(confirmed)} confirmed before the kill"
            round_of_polls()

        survivors = [cluster.metrics_ports[i - 1] for i in (1, 2, 3) if i != victim]
        errors_before = [_session_errors(port) for port in survivors]
        cluster.brokers[victim - 1].kill()
        during = 0
        outage_end = time.monotonic() + 8
        while time.monotonic() < outage_end:
            during += round_of_polls()
        assert during > 0, "the surviving brokers delivered nothing while one was down"
        # The sessions the consumers hold with the surviving brokers were not disturbed.
        assert [_session_errors(port) for port in survivors] == errors_before

        cluster.brokers[victim - 1].start()
        deadline = time.monotonic() + 120
        while confirmed != sent:
            assert time.monotonic() < deadline, \
                f"{len(sent - confirmed)} records never confirmed after the restart"
            round_of_polls()
    finally:
        for c in consumers:
            c.close()
    assert redelivered_after_confirm == []
