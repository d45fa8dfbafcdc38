"""Three real brokers on a real etcd, used through unmodified Kafka clients (confluent-kafka).

What a user of a Kafka cluster would notice: every broker lists the same live brokers and
controller; a topic's partitions spread over the brokers; clients produce and consume through
any bootstrap broker; a broker killed with kill -9 takes only its own partitions offline
(LEADER_NOT_AVAILABLE in Metadata, NOT_LEADER_OR_FOLLOWER to a Fetch, as Kafka with replication
factor 1) while the others keep serving; when it
comes back its data and committed offsets are there; and a broker that would split the cluster
(a duplicate node id, another cluster's data) or cannot reach etcd is refused with a message.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from kio.schema.errors import ErrorCode

from protocol import codec
from protocol.messages import make
from tests.conftest import ROOT, BrokerProcess, free_port
from tests.integration.cluster.conftest import CLUSTER_OVERRIDES, Cluster, Etcd
from tests.integration.rawclient import RawClient, request, request_module

T = 30


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    md = admin.list_topics(topic, timeout=T)
    return {p: md.topics[topic].partitions[p].leader for p in md.topics[topic].partitions}


def _fetch(bootstrap: str, topic: str, partition: int) -> Any:
    """One Fetch v16 of ``topic``-``partition`` from offset 0, asked of the broker at
    ``bootstrap`` over the wire; its response."""
    meta = codec.request_module(3, 12)
    with RawClient(bootstrap) as c:
        topic_id = c.call(3, 12, meta.MetadataRequest(
            topics=(meta.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)).topics[0].topic_id
        m = codec.request_module(1, 16)
        return c.call(1, 16, make(
            m.FetchRequest, replica_id=-1, max_wait=timedelta(0), min_bytes=0,
            max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(m.FetchTopic(topic_id=topic_id, partitions=(make(
                m.FetchPartition, partition=partition, current_leader_epoch=-1,
                fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=(), rack_id=""))


def _wait(condition, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.2)


def _consume_all(bootstrap: str, topic: str, group: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def test_every_broker_describes_the_same_cluster_and_partitions_spread(cluster: Cluster) -> None:
    for b in cluster.brokers:
        md = _admin(b.bootstrap).list_topics(timeout=T)
        assert sorted(md.brokers) == [1, 2, 3]
        assert {md.brokers[i].port for i in md.brokers} == {x.port for x in cluster.brokers}
        assert md.controller_id in (1, 2, 3)
    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("spread", 12, 1)])["spread"].result(T)
    leaders = _leaders(_admin(cluster.brokers[2].bootstrap), "spread")
    assert Counter(leaders.values()) == {1: 4, 2: 4, 3: 4}
    # Every broker answers the same placement.
    assert all(_leaders(_admin(b.bootstrap), "spread") == leaders for b in cluster.brokers)
    # The topic's logs exist only where its partitions were placed.
    for b in cluster.brokers:
        node = cluster.brokers.index(b) + 1
        mine = {p for p, leader in leaders.items() if leader == node}
        assert {int(d.name.rsplit("-", 1)[1]) for d in b.data_dir.glob("spread-*")} == mine
    # More partitions go on the brokers with fewer.
    admin.create_partitions([NewPartitions("spread", 15)])["spread"].result(T)
    def grown_to_15() -> dict[int, int] | None:
        x = _leaders(admin, "spread")
        return x if len(x) == 15 else None

    grown = _wait(grown_to_15, T, "the new partitions appearing")
    assert Counter(grown.values()) == {1: 5, 2: 5, 3: 5}
    admin.delete_topics(["spread"], operation_timeout=T)["spread"].result(T)
    for b in cluster.brokers:
        _wait(lambda b=b: "spread" not in _admin(b.bootstrap).list_topics(timeout=T).topics, T,
              "the deletion reaching every broker")
        _wait(lambda b=b: not list(b.data_dir.glob("spread-*")), T, "the logs being deleted")


def test_produce_and_consume_through_any_broker_with_coordinators_spread(cluster: Cluster) -> None:
    admin = _admin(cluster.brokers[0].bootstrap)
    admin.create_topics([NewTopic("orders", 12, 1)])["orders"].result(T)
    # A bootstrap list of one broker is enough: clients find each partition's leader.
    p = Producer({"bootstrap.servers": cluster.brokers[1].bootstrap, "acks": "all",
                  "enable.idempotence": True})
    for i in range(1200):
        p.produce("orders", key=str(i).encode(), value=str(i).encode())
    assert p.flush(T) == 0
    got = _consume_all(cluster.brokers[2].bootstrap, "orders", "orders-readers", 1200)
    assert sorted(got, key=int) == [str(i).encode() for i in range(1200)]
    # __consumer_offsets was created on first use, spread over the three brokers.
    offsets = _leaders(admin, "__consumer_offsets")
    assert set(offsets.values()) == {1, 2, 3}


def test_a_killed_broker_takes_only_its_partitions_offline_and_returns_with_its_data(
        cluster: Cluster) -> None:
    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("durable", 6, 1)])["durable"].result(T)
    leaders = _leaders(admin, "durable")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(600):
        p.produce("durable", value=str(i).encode(), partition=i % 6)
    assert p.flush(T) == 0
    assert len(_consume_all(cluster.bootstrap, "durable", "before", 600)) == 600

    victim = cluster.brokers[2]
    victim.kill()
    survivors = _admin(cluster.brokers[0].bootstrap)
    def without_3():  # type: ignore[no-untyped-def]
        m = survivors.list_topics("durable", timeout=T)
        return m if 3 not in m.brokers else None

    md = _wait(without_3, 20, "broker 3 leaving Metadata")
    for pid, part in md.topics["durable"].partitions.items():
        if leaders[pid] == 3:
            assert part.leader == -1 and part.error.code() == KafkaError.LEADER_NOT_AVAILABLE
        else:
            assert part.leader == leaders[pid] and part.error is None
    # The other brokers' partitions keep taking writes.
    failed: list[int] = []
    p2 = Producer({"bootstrap.servers": cluster.brokers[0].bootstrap, "acks": "all",
                   "message.timeout.ms": 4000})
    for pid in range(6):
        p2.produce("durable", value=b"during", partition=pid,
                   on_delivery=lambda e, m: failed.append(m.partition()) if e else None)
    p2.flush(T)
    assert sorted(failed) == sorted(pid for pid, leader in leaders.items() if leader == 3)
    # Asked directly, a broker answers a Fetch of an offline partition as Kafka does:
    # NOT_LEADER_OR_FOLLOWER, on which clients refresh their metadata. LEADER_NOT_AVAILABLE is
    # Metadata's word; both Kafka clients raise it to the application from a (Share)Fetch.
    offline = next(pid for pid, leader in leaders.items() if leader == 3)
    part = _fetch(cluster.brokers[0].bootstrap, "durable", offline).responses[0].partitions[0]
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert part.current_leader.leader_id == -1

    victim.start()
    _wait(lambda: _leaders(admin, "durable") == leaders, 30, "broker 3 leading again")
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "before"})
    try:
        committed = c.committed([TopicPartition("durable", pid) for pid in range(6)], timeout=T)
        assert [tp.offset for tp in committed] == [100] * 6
        ends = [c.get_watermark_offsets(TopicPartition("durable", pid), timeout=T)[1]
                for pid in range(6)]
    finally:
        c.close()
    assert ends == [100 if leaders[pid] == 3 else 101 for pid in range(6)]


def test_a_new_controller_takes_over_and_topic_creation_works_again(cluster: Cluster) -> None:
    admin = _admin(cluster.bootstrap)
    controller = admin.list_topics(timeout=T).controller_id
    cluster.brokers[controller - 1].kill()
    others = [b for i, b in enumerate(cluster.brokers) if i != controller - 1]
    other_admin = _admin(others[0].bootstrap)
    _wait(lambda: other_admin.list_topics(timeout=T).controller_id not in (controller, -1), 20,
          "a new controller")
    other_admin.create_topics([NewTopic("after-failover", 4, 1)])["after-failover"].result(T)
    leaders = _leaders(other_admin, "after-failover")
    assert set(leaders.values()) <= {int(b.extra_args[-1]) for b in others}


def _run_broker(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker.main", "broker", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_a_duplicate_node_id_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    out = _run_broker(["--cluster", cluster.etcd.endpoint, "--node-id", "2", "--listen",
                       f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "dup"),
                       *sum((["-o", f"{k}={v}"] for k, v in CLUSTER_OVERRIDES.items()), [])])
    assert out.returncode == 1
    assert "node id 2 is already registered by a live broker" in out.stderr


def test_another_clusters_data_directory_is_refused(etcd: Etcd, tmp_path: Path) -> None:
    alone = BrokerProcess(tmp_path / "alone" / "data")  # a single broker: its own cluster id
    alone.data_dir.parent.mkdir(parents=True)
    alone.start()
    alone.stop()
    member = Cluster(tmp_path / "c", etcd, n=1)
    member.start()
    try:
        out = _run_broker(["--cluster", etcd.endpoint, "--node-id", "7", "--listen",
                           f"127.0.0.1:{free_port()}", "--data-dir", str(alone.data_dir)])
    finally:
        member.stop()
    assert out.returncode == 1
    assert "belongs to cluster" in out.stderr and "etcd" in out.stderr


def test_unreachable_etcd_is_a_clear_start_failure(tmp_path: Path) -> None:
    out = _run_broker(["--cluster", f"etcd://127.0.0.1:{free_port()}", "--node-id", "1",
                       "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "d")])
    assert out.returncode == 1
    assert "cannot reach etcd" in out.stderr


def test_brokers_keep_serving_while_etcd_is_away_and_metadata_changes_wait_for_it(
        cluster: Cluster) -> None:
    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("steady", 3, 1)])["steady"].result(T)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        p.produce("steady", value=str(i).encode(), partition=i % 3)
    assert p.flush(T) == 0
    # The group's coordinator exists before etcd goes (__consumer_offsets is created on first
    # use, which needs etcd, as Kafka's needs its controller).
    assert len(_consume_all(cluster.bootstrap, "steady", "while-away", 30)) == 30

    cluster.etcd.stop()
    try:
        for i in range(30, 60):
            p.produce("steady", value=str(i).encode(), partition=i % 3)
        assert p.flush(T) == 0
        got = _consume_all(cluster.bootstrap, "steady", "while-away", 30)
        assert sorted(int(v) for v in got) == list(range(30, 60))
        refused = admin.create_topics([NewTopic("while-away", 1, 1)], request_timeout=25)
        error = refused["while-away"].exception(T)
        assert error is not None and error.args[0].code() == KafkaError.REQUEST_TIMED_OUT
        assert "etcd" in error.args[0].str()
    finally:
        cluster.etcd.start()
    _wait(lambda: _try_create(admin, "after-etcd"), 30, "topic creation working again")
    assert sorted(_admin(cluster.bootstrap).list_topics(timeout=T).brokers) == [1, 2, 3]


def _try_create(admin: AdminClient, name: str) -> bool:
    try:
        admin.create_topics([NewTopic(name, 1, 1)], request_timeout=10)[name].result(15)
        return True
    except Exception as e:
        return "already exists" in str(e)


def test_topic_configs_changed_through_one_broker_apply_on_every_broker(cluster: Cluster) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = _admin(cluster.brokers[0].bootstrap)
    admin.create_topics([NewTopic("tuned", 3, 1, config={"retention.ms": "600000"})])[
        "tuned"].result(T)
    res = ConfigResource("topic", "tuned", incremental_configs=[
        ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(T)
    for b in cluster.brokers:
        one = _admin(b.bootstrap)
        entries = one.describe_configs([ConfigResource("topic", "tuned")])[
            ConfigResource("topic", "tuned")].result(T)
        assert (entries["retention.ms"].value, entries["cleanup.policy"].value) == \
            ("120000", "compact")
    # The broker leading a partition runs its log with the new settings: the config is back in
    # etcd's record and in each broker's registry (a restart keeps it).
    victim = cluster.brokers[1]
    victim.stop()
    victim.start()
    again = _admin(victim.bootstrap)
    entries = again.describe_configs([ConfigResource("topic", "tuned")])[
        ConfigResource("topic", "tuned")].result(T)
    assert entries["retention.ms"].value == "120000"


def test_kip951_fetch_at_the_wrong_broker_names_the_leader_and_its_endpoint(
        cluster: Cluster) -> None:
    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("moved", 3, 1)])["moved"].result(T)
    leaders = _leaders(admin, "moved")
    wrong = next(i for i in (1, 2, 3) if i != leaders[0])
    resp = _fetch(cluster.brokers[wrong - 1].bootstrap, "moved", 0)
    part = resp.responses[0].partitions[0]
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert part.current_leader.leader_id == leaders[0]
    right = cluster.brokers[leaders[0] - 1]
    assert [(e.node_id, e.port) for e in resp.node_endpoints] == [(leaders[0], right.port)]


def test_topics_are_created_and_deleted_through_every_broker(cluster: Cluster) -> None:
    """CreateTopics and DeleteTopics sent to each broker itself (not only the controller, where
    client libraries route them) succeed, and every broker then answers the same."""
    m7 = request_module(19, 7)
    m6 = request_module(20, 6)
    names = {b.bootstrap: f"via-{i}" for i, b in enumerate(cluster.brokers, start=1)}
    for b in cluster.brokers:
        with RawClient(b.bootstrap) as c:
            resp = c.call(19, 7, request(19, 7, topics=(m7.CreatableTopic(
                name=names[b.bootstrap], num_partitions=3, replication_factor=1, assignments=(),
                configs=()),), timeout=timedelta(seconds=T), validate_only=False))
        assert [(t.name, t.error_code) for t in resp.topics] == [(names[b.bootstrap], 0)]
    for b in cluster.brokers:
        listed = _admin(b.bootstrap).list_topics(timeout=T).topics
        assert all(len(listed[n].partitions) == 3 for n in names.values())
    # Each broker deletes the topic the next one created.
    for b, other in zip(cluster.brokers, cluster.brokers[1:] + cluster.brokers[:1], strict=True):
        with RawClient(b.bootstrap) as c:
            resp = c.call(20, 6, request(20, 6, timeout=timedelta(seconds=T), topics=(
                m6.DeleteTopicState(name=names[other.bootstrap], topic_id=uuid.UUID(int=0)),)))
        assert [(r.name, r.error_code) for r in resp.responses] == [(names[other.bootstrap], 0)]
    for b in cluster.brokers:
        _wait(lambda b=b: not set(names.values()) & set(
            _admin(b.bootstrap).list_topics(timeout=T).topics), T, "the deletions everywhere")
