"""Group administration on a 3-broker cluster whose groups live on different brokers.

Kafka's admin clients list groups by asking every broker (each answers ListGroups with the
groups it coordinates); describing goes to the group's coordinator, which reads share-partition
start offsets from the share coordinator wherever it is and the log end offsets (for the lag)
from the partitions' leaders. A user sees every group listed and the right lag through any
broker, with confluent-kafka and with the ``shoal`` CLI.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.group.placement import partition_for_group
from protocol import codec
from tests.integration.admin.test_cli import Cli
from tests.integration.cluster.conftest import Cluster
from tests.integration.rawclient import RawClient
from tests.integration.share_helpers import (
    poll_until,
    produce,
    set_group_configs,
    share_consumer,
)

pytestmark = pytest.mark.timeout(240)

T = 30
TOPIC = "spread"


def _pick(prefix: str, leaders: dict[int, int], node: int) -> str:
    for i in range(10_000):
        name = f"{prefix}-{i}"
        if leaders[partition_for_group(name, len(leaders))] == node:
            return name
    raise AssertionError(f"no {prefix} id lands on broker {node}")


def _offsets_leaders(admin: AdminClient) -> dict[int, int]:
    admin.describe_consumer_groups(["warm-up"])["warm-up"].result(T)  # creates the topic
    deadline = time.monotonic() + T
    while True:
        md = admin.list_topics("__consumer_offsets", timeout=T).topics["__consumer_offsets"]
        leaders = {p: m.leader for p, m in md.partitions.items()}
        if md.error is None and leaders and min(leaders.values()) >= 0:
            return leaders
        assert time.monotonic() < deadline
        time.sleep(0.3)


def _listed_by(bootstrap: str) -> set[str]:
    m = codec.request_module(16, 5)
    with RawClient(bootstrap) as c:
        resp = c.call(16, 5, m.ListGroupsRequest(states_filter=(), types_filter=()))
    assert resp.error_code == 0
    return {g.group_id for g in resp.groups}


def test_groups_on_three_brokers_are_listed_and_described_through_any_broker(
        cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(T)
    topic_leaders = {p: m.leader for p, m in admin.list_topics(TOPIC, timeout=T)
                     .topics[TOPIC].partitions.items()}
    assert set(topic_leaders.values()) == {1, 2, 3}
    leaders = _offsets_leaders(admin)
    consumer_groups = {node: _pick("classic", leaders, node) for node in (1, 2, 3)}
    share_groups = {node: _pick("share", leaders, node) for node in (1, 2, 3)}

    sent = produce(cluster.bootstrap, TOPIC, 90, partitions=3)
    for node, group in consumer_groups.items():  # committed offsets make a (classic) group
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
        c.commit(offsets=[TopicPartition(TOPIC, p, 10 * node) for p in range(3)],
                 asynchronous=False)
        c.close()
    for group in share_groups.values():
        set_group_configs(cluster.brokers[0].bootstrap, group,
                          {"share.auto.offset.reset": "earliest"})
    described = share_groups[1]
    consumer = share_consumer(cluster.bootstrap, described, TOPIC, explicit=True)
    others = [share_consumer(cluster.bootstrap, g, TOPIC) for g in
              (share_groups[2], share_groups[3])]
    seen: Counter[bytes] = Counter()
    by_consumer: Counter[int] = Counter()

    def on_message(i: int, msg) -> None:  # type: ignore[no-untyped-def]
        by_consumer[i] += 1
        if i == 0:
            seen[msg.value()] += 1
            consumer.acknowledge(msg, AcknowledgeType.ACCEPT)

    try:
        # Until every group exists (a delivery means its member joined) and ``described`` got
        # everything.
        poll_until([consumer, *others],
                   lambda: len(seen) == len(sent) and len(by_consumer) == 3, timeout=60,
                   on_message=on_message)
        consumer.poll(0.5)  # the last acknowledgements
    finally:
        for c in [consumer, *others]:
            c.close()
    produce(cluster.bootstrap, TOPIC, 15, partitions=3, prefix="late")  # 5 more each

    # Each broker answers ListGroups with its own groups only...
    everything = set(consumer_groups.values()) | set(share_groups.values())
    for node in (1, 2, 3):
        mine = _listed_by(cluster.brokers[node - 1].bootstrap) & everything
        assert mine == {consumer_groups[node], share_groups[node]}
    # ...and confluent-kafka's admin client (list_consumer_groups, and the older list_groups),
    # asking them all, sees every group.
    listed = admin.list_consumer_groups().result(T)
    assert set(consumer_groups.values()) <= {g.group_id for g in listed.valid}
    with pytest.deprecated_call():  # still used by older applications
        old_api = {g.id: g.broker.id for g in admin.list_groups(timeout=T)}
    for node, group in consumer_groups.items():
        assert old_api[group] == node  # listed by the broker that coordinates it

    # The shoal CLI through any one broker lists and describes groups wherever they live.
    for b in cluster.brokers:
        cli = Cli(b.bootstrap)
        assert set(cli.ok("share-groups", "--list").split()) >= set(share_groups.values())
        assert set(cli.ok("consumer-groups", "--list").split()) >= \
            set(consumer_groups.values())
    cli = Cli(cluster.brokers[2].bootstrap)  # not the coordinator of ``described``
    want = [{"group": described, "topic": TOPIC, "partition": p, "start_offset": 30, "lag": 5}
            for p in range(3)]
    deadline = time.monotonic() + 20
    while True:
        rows = [{k: r[k] for k in ("group", "topic", "partition", "start_offset", "lag")}
                for r in json.loads(cli.ok("share-groups", "--describe", "--group", described,
                                           "--output", "json"))]
        if rows == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert rows == want  # lag from the leaders of partitions on the other brokers
    out = cli.ok("consumer-groups", "--describe", "--group", consumer_groups[3])
    assert out.count(TOPIC) == 3 and " 30 " in out
