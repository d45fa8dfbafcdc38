"""Dead-letter topics (KIP-1191) on a 3-broker cluster: a share-partition leader writes rejected
records to the DLQ partition wherever it is led, as a Produce to that broker over the
inter-broker listener. A user sees each rejected record once on the DLQ topic, with its
context headers, and never delivered again."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.cluster.conftest import Cluster
from tests.integration.share.test_dead_letter import consume, headers, produce_keyed, read_dlq
from tests.integration.share_helpers import set_group_configs, share_consumer

pytestmark = pytest.mark.timeout(180)

T = 30


def test_rejected_records_land_on_a_dlq_partition_led_by_another_broker(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([
        NewTopic("orders", 3, 1),
        NewTopic("dlq.orders", 1, 1, config={"errors.deadletterqueue.group.enable": "true"})])
    for f in futures.values():
        f.result(T)
    md = admin.list_topics(timeout=T)
    source_leaders = {p.leader for p in md.topics["orders"].partitions.values()}
    dlq_leader = md.topics["dlq.orders"].partitions[0].leader
    assert source_leaders == {1, 2, 3}  # two of them are not the DLQ partition's leader
    set_group_configs(cluster.brokers[0].bootstrap, "orders-app", {
        "share.auto.offset.reset": "earliest",
        "errors.deadletterqueue.topic.name": "dlq.orders"})
    produce_keyed(cluster.bootstrap, "orders", 30)  # spread over the 3 partitions by key

    c = share_consumer(cluster.bootstrap, "orders-app", "orders", explicit=True)
    try:
        rejected = {f"v{i}".encode() for i in range(0, 30, 3)}
        consume(c, lambda v, _n: AcknowledgeType.REJECT if v in rejected
                else AcknowledgeType.ACCEPT, 30, timeout=60)
    finally:
        c.close()
    got = read_dlq(cluster.bootstrap, "dlq.orders", 0, len(rejected), timeout=30)
    assert len(got) == len(rejected), [headers(m) for m in got]
    by_source = {(headers(m)["__dlq.errors.partition"], headers(m)["__dlq.errors.offset"])
                 for m in got}
    assert len(by_source) == len(rejected)  # each once
    assert all(headers(m)["__dlq.errors.topic"] == "orders" for m in got)
    partitions = {headers(m)["__dlq.errors.partition"] for m in got}
    remote = {str(p) for p, info in md.topics["orders"].partitions.items()
              if info.leader != dlq_leader}
    assert partitions & remote, (partitions, remote, dlq_leader)

    # Nothing rejected comes back to the group.
    late = share_consumer(cluster.bootstrap, "orders-app", "orders", explicit=True)
    try:
        again = []
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            again += [m for m in late.poll(0.3) if m.error() is None]
    finally:
        late.close()
    assert again == []
