"""Share groups on a 3-broker cluster, with unmodified confluent-kafka ShareConsumers.

A share-partition's leader is the broker leading the topic-partition; it keeps the share state
with the share coordinator on whichever broker leads the key's ``__share_group_state``
partition, over the share-state RPCs; the group coordinator sits on the leader of the group's
``__consumer_offsets`` partition. A user sees one thing: every record delivered and
acknowledged exactly once, wherever those pieces live.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import AcknowledgeType
from kio.schema.errors import ErrorCode
from confluent_kafka.admin import AdminClient, NewTopic

from client.blocking import open_connection
from coordinator.group.placement import partition_for_group
from coordinator.share.service import partition_for_key
from persister.api import SharePartitionKey
from protocol import codec
from tests.conftest import ROOT
from tests.integration.cluster.conftest import Cluster, Etcd
from tests.integration.share_helpers import (
    poll_until,
    produce,
    set_group_configs,
    share_consumer,
)

T = 30
GROUP_KEY = 0  # FindCoordinator key type


def _ask(bootstrap: str, api_key: int, version: int, body: object) -> object:
    host, _, port = bootstrap.rpartition(":")
    with open_connection(host, int(port), 5, "test-cluster-share") as conn:
        return conn.call(api_key, version, body)


def _coordinators(bootstrap: str, key_type: int, keys: list[str]) -> dict[str, int]:
    """FindCoordinator v6 for ``keys`` (as a client asks it): key -> node id."""
    m = codec.request_module(10, 6)
    resp = _ask(bootstrap, 10, 6, m.FindCoordinatorRequest(key_type=key_type,
                                                           coordinator_keys=tuple(keys)))
    found = {c.key: int(c.node_id) for c in resp.coordinators  # type: ignore[attr-defined]
             if not c.error_code}
    assert len(found) == len(keys), resp
    return found


def _topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    m = codec.request_module(3, 12)
    resp = _ask(bootstrap, 3, 12, m.MetadataRequest(
        topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    (t,) = resp.topics  # type: ignore[attr-defined]
    assert isinstance(t.topic_id, uuid.UUID)
    return t.topic_id


def _leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    return {p: m.leader for p, m in admin.list_topics(topic, timeout=T)
            .topics[topic].partitions.items()}


def _exists(admin: AdminClient, topic: str) -> bool:
    """``topic`` exists and every partition of it has a leader."""
    got = admin.list_topics(topic, timeout=T).topics.get(topic)
    return (got is not None and got.error is None and bool(got.partitions)
            and all(m.leader >= 0 for m in got.partitions.values()))


def _group_placed_apart(admin: AdminClient, cluster: Cluster, topic: str,
                        leaders: dict[int, int]) -> str:
    """A share group id whose group coordinator and some share-partition's share coordinator
    sit on brokers other than that partition's leader.

    Where they sit follows from hashes of the group id (Kafka's rules: ``partition_for_group``,
    ``partition_for_key``); with consecutive partitions hashing to consecutive state partitions,
    a given name can put every share coordinator on its partition's own broker. So a first
    share group makes the internal topics, and the name is chosen from where their partitions
    lead."""
    # Asking for it by name (librdkafka allows auto-creation) does not make it an ordinary
    # topic of num.partitions: the share coordinator creates it, with its own count.
    asked = admin.list_topics("__share_group_state", timeout=T).topics.get("__share_group_state")
    assert asked is None or asked.error is not None, asked
    warm = share_consumer(cluster.bootstrap, "warm-up", topic, explicit=True)
    try:
        deadline = time.monotonic() + T
        while not (_exists(admin, "__share_group_state")
                   and _exists(admin, "__consumer_offsets")):
            assert time.monotonic() < deadline, "no __share_group_state after a share group joined"
            warm.poll(0.2)
    finally:
        warm.close()
    tid = _topic_id(cluster.brokers[0].bootstrap, topic)
    state, offsets = _leaders(admin, "__share_group_state"), _leaders(admin, "__consumer_offsets")
    assert len(state) == 6  # share.coordinator.state.topic.num.partitions of this cluster
    for i in range(500):
        group = f"workers-{i}"
        coordinator = offsets[partition_for_group(group, len(offsets))]
        if any(state[partition_for_key(SharePartitionKey(group, tid, p), len(state))]
               != leaders[p] != coordinator for p in leaders):
            return group
    raise AssertionError(f"no group id of 500 is placed apart: {state}, {offsets}, {leaders}")


def test_six_share_consumers_read_a_twelve_partition_topic_exactly_once(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("work", 12, 1)])["work"].result(T)
    leaders = _leaders(admin, "work")
    assert Counter(leaders.values()) == {1: 4, 2: 4, 3: 4}
    group = _group_placed_apart(admin, cluster, "work", leaders)
    consumers = [share_consumer(cluster.brokers[i % 3].bootstrap, group, "work",
                                explicit=True) for i in range(6)]
    # The members join first: the share-partitions start at the end of the (empty) log, as
    # share.auto.offset.reset=latest says, so everything produced next is delivered.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for c in consumers:
            assert not list(c.poll(0.1))
    sent = produce(cluster.bootstrap, "work", 1200, partitions=12)
    seen: Counter[bytes] = Counter()
    by_member: Counter[int] = Counter()

    def on_message(i: int, msg) -> None:  # type: ignore[no-untyped-def]
        seen[msg.value()] += 1
        by_member[i] += 1
        consumers[i].acknowledge(msg, AcknowledgeType.ACCEPT)

    try:
        poll_until(consumers, lambda: len(seen) == len(sent), timeout=90, on_message=on_message)
        for c in consumers:  # the last acknowledgements go out with these polls
            c.poll(0.5)
    finally:
        for c in consumers:
            c.close()
    assert set(seen) == set(sent)
    assert all(n == 1 for n in seen.values()), [v for v, n in seen.items() if n > 1][:5]
    assert len(by_member) >= 3  # the work was shared

    # The share state partitions and the group's coordinator live on several brokers.
    state = admin.list_topics("__share_group_state", timeout=T).topics["__share_group_state"]
    assert len({p.leader for p in state.partitions.values()}) >= 2
    # The group coordinator and a share-partition's share coordinator sit on brokers other than
    # its leader: the state went over the share-state RPCs, and the share-group heartbeat's
    # initialisation over the group coordinator's client.
    tid = _topic_id(cluster.brokers[0].bootstrap, "work")
    (group_coordinator,) = _coordinators(cluster.brokers[1].bootstrap, GROUP_KEY,
                                         [group]).values()
    # FindCoordinator(SHARE) is an inter-broker call (CLUSTER_ACTION): the share coordinator of
    # a key is the leader of its __share_group_state partition.
    n_state = len(state.partitions)
    share_coordinators = {p: state.partitions[partition_for_key(
        SharePartitionKey(group, tid, p), n_state)].leader for p in range(12)}
    remote = [p for p in range(12)
              if share_coordinators[p] != leaders[p] != group_coordinator]
    assert remote, (leaders, share_coordinators, group_coordinator)

    # Nothing is left to deliver: a new member of the group gets no record again.
    late = share_consumer(cluster.bootstrap, group, "work", explicit=True)
    try:
        again = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            again += [m for m in late.poll(0.3) if m.error() is None]
    finally:
        late.close()
    assert again == []


def test_a_group_config_set_through_one_broker_applies_on_every_broker(cluster: Cluster) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("backlog", 6, 1)])["backlog"].result(T)
    sent = produce(cluster.bootstrap, "backlog", 300, partitions=6)  # before anyone joins
    set_group_configs(cluster.brokers[0].bootstrap, "late-joiners",
                      {"share.auto.offset.reset": "earliest"})
    for b in cluster.brokers:  # every broker describes the same value
        one = AdminClient({"bootstrap.servers": b.bootstrap})
        res = ConfigResource(ResourceType.GROUP, "late-joiners")
        entries = one.describe_configs([res])[res].result(T)
        assert entries["share.auto.offset.reset"].value == "earliest"
    # The group's coordinator, wherever it is, starts the share-partitions at the earliest
    # offset, so the backlog is delivered.
    consumers = [share_consumer(cluster.brokers[i].bootstrap, "late-joiners", "backlog")
                 for i in range(3)]
    seen: Counter[bytes] = Counter()
    try:
        poll_until(consumers, lambda: len(seen) == len(sent), timeout=60,
                   on_message=lambda _i, m: seen.update([m.value()]))
    finally:
        for c in consumers:
            c.close()
    assert set(seen) == set(sent)


def test_kip951_share_fetch_at_the_wrong_broker_names_the_leader_and_its_endpoint(
        cluster: Cluster) -> None:
    """KIP-951 for share groups: a ShareFetch for a partition another broker leads answers
    NOT_LEADER_OR_FOLLOWER with that leader's id, epoch and endpoint, so the consumer moves."""
    from tests.integration.rawclient import RawClient
    from tests.integration.share.test_protocol import Member, topic_id

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("elsewhere", 3, 1)])["elsewhere"].result(T)
    leaders = {p: m.leader for p, m in admin.list_topics("elsewhere", timeout=T)
               .topics["elsewhere"].partitions.items()}
    wrong = next(i for i in (1, 2, 3) if i != leaders[0])
    bootstrap = cluster.brokers[wrong - 1].bootstrap
    with RawClient(bootstrap) as c:
        tid = topic_id(c, "elsewhere")
    member = Member(bootstrap, "kip951", "m1", tid)
    try:
        resp = member.fetch(partitions=(0,), max_wait_ms=100)
    finally:
        member.c.close()
    (topic,) = resp.responses
    (part,) = topic.partitions
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert part.current_leader.leader_id == leaders[0]
    right = cluster.brokers[leaders[0] - 1]
    assert [(e.node_id, e.host, e.port) for e in resp.node_endpoints] == [
        (leaders[0], "127.0.0.1", right.port)]


def test_each_broker_exports_its_cluster_figures(cluster: Cluster) -> None:
    import urllib.request

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("figures", 6, 1)])["figures"].result(T)
    sent = produce(cluster.bootstrap, "figures", 60, partitions=6)
    consumers = [share_consumer(b.bootstrap, "figures-group", "figures", explicit=True)
                 for b in cluster.brokers]
    got: list[bytes] = []

    def accept(i: int, m) -> None:  # type: ignore[no-untyped-def]
        got.append(m.value())
        consumers[i].acknowledge(m, AcknowledgeType.ACCEPT)

    try:
        set_group_configs(cluster.brokers[0].bootstrap, "figures-group",
                          {"share.auto.offset.reset": "earliest"})
        poll_until(consumers, lambda: len(got) >= len(sent), timeout=60, on_message=accept)
        for c in consumers:
            c.commit_sync(10)
    finally:
        for c in consumers:
            c.close()

    def scrape(port: int) -> dict[str, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        out: dict[str, float] = {}
        for line in text.decode().splitlines():
            if line.startswith("shoal_cluster_") or line.startswith("shoal_inter_broker_"):
                name, value = line.rsplit(" ", 1)
                out[name] = out.get(name, 0) + float(value)
        return out

    md = admin.list_topics(timeout=T)
    internal = sum(len(admin.list_topics(t, timeout=T).topics[t].partitions)
                   for t in ("__consumer_offsets", "__share_group_state"))

    def settled() -> list[dict[str, float]] | None:
        """The three brokers' figures once they agree (each reads its own view of etcd)."""
        figures = [scrape(p) for p in cluster.metrics_ports]
        ok = (all(f["shoal_cluster_member"] == 1 for f in figures)
              and all(f["shoal_cluster_etcd_session_up"] == 1 for f in figures)
              and all(f["shoal_cluster_live_brokers"] == 3 for f in figures)
              and sum(f["shoal_cluster_controller"] for f in figures) == 1
              and all(f["shoal_cluster_offline_partitions"] == 0 for f in figures)
              # Every partition (the topic's and the internal ones) led by exactly one broker.
              and sum(f["shoal_cluster_partitions_led"] for f in figures)
              == len(md.topics["figures"].partitions) + internal
              # Share state went to the share coordinators over the wire: the keys of a state
              # partition the caller leads stay in process, but the group coordinator
              # (initialize) and the partitions' leaders (read, write), spread over three
              # brokers, cannot all lead their keys' state partitions. A consumer closed with
              # acknowledgements still to send sends them as it closes, which on a loaded
              # machine may land after the first scrape.
              and sum(v for f in figures for k, v in f.items()
                      if k.startswith("shoal_inter_broker_requests_total{")) > 0)
        return figures if ok else None

    deadline = time.monotonic() + 30
    while settled() is None:
        assert time.monotonic() < deadline, [scrape(p) for p in cluster.metrics_ports]
        time.sleep(0.5)


def _shoal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_share_group_offsets_reset_and_describe_through_any_broker(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("replay", 3, 1)])["replay"].result(T)
    sent = produce(cluster.bootstrap, "replay", 90, partitions=3)
    set_group_configs(cluster.brokers[0].bootstrap, "replayers",
                      {"share.auto.offset.reset": "earliest"})
    c = share_consumer(cluster.bootstrap, "replayers", "replay")
    got: list[bytes] = []
    try:
        poll_until([c], lambda: len(got) >= len(sent), timeout=60,
                   on_message=lambda _i, m: got.append(m.value()))
        c.commit_sync(10)
    finally:
        c.close()
    # Through the broker that is neither's coordinator as much as any: every broker answers.
    for b in cluster.brokers:
        out = _shoal("share-groups", "--bootstrap-server", b.bootstrap, "--describe",
                     "--group", "replayers", "--offsets", "--output", "json")
        assert out.returncode == 0, out.stderr
        assert "replay" in out.stdout
    out = _shoal("share-groups", "--bootstrap-server", cluster.brokers[2].bootstrap,
                 "--reset-offsets", "--group", "replayers", "--topic", "replay", "--to-earliest",
                 "--execute")
    assert out.returncode == 0, out.stderr + out.stdout
    again: list[bytes] = []
    c = share_consumer(cluster.brokers[1].bootstrap, "replayers", "replay")
    try:
        poll_until([c], lambda: len(again) >= len(sent), timeout=60,
                   on_message=lambda _i, m: again.append(m.value()))
    finally:
        c.close()
    assert sorted(again) == sorted(sent)


def test_share_state_writes_reach_the_followers_without_waiting_out_their_fetch(
        tmp_path: Path, etcd: Etcd) -> None:
    """The share coordinator's writes to ``__share_group_state`` (3 replicas) are answered once
    the in-sync followers have them. The followers' fetches parked at the leader wake on the
    write, as on a produce: with replica.fetch.wait.max.ms at 25 s, explicit acknowledgements
    still commit inside commit_sync's 8 s (waiting the fetches out would exceed it)."""
    cluster = Cluster(tmp_path, etcd, overrides={"replica.fetch.wait.max.ms": "25000"})
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("slow-followers", 1, 1)])["slow-followers"].result(T)
        set_group_configs(cluster.brokers[0].bootstrap, "patient",
                          {"share.auto.offset.reset": "earliest"})
        sent = produce(cluster.bootstrap, "slow-followers", 20)
        c = share_consumer(cluster.bootstrap, "patient", "slow-followers", explicit=True)
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < len(sent):
                assert time.monotonic() < deadline, f"only {len(got)} records delivered"
                batch = [m for m in c.poll(0.5) if m.error() is None]
                for m in batch:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    got.append(m.value())
                if batch:
                    results = c.commit_sync(8) or {}
                    assert all(err is None for err in results.values()), results
        finally:
            c.close()
        assert sorted(got) == sorted(sent)
        parts = admin.list_topics("__share_group_state", timeout=T).topics[
            "__share_group_state"].partitions.values()
        assert parts and all(len(p.replicas) == 3 for p in parts)
    finally:
        cluster.stop()
