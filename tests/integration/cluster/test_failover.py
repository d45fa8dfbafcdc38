"""Failover with replication (issue 24): kill -9 of a leader, and nothing comes back only with it.

What a user would notice, with every topic (internal ones included) at three replicas:
- a share group in explicit mode keeps going through the kill -9 of the leader of its data
  partition, and, in another run, of the leader of its ``__share_group_state`` partition, with
  no broker restarted: every record is delivered until ACCEPTed, no record whose ACCEPT was
  confirmed is delivered again, delivery counts never decrease, and the consumers are never
  restarted;
- a consumer group keeps its committed offsets when its coordinator's broker is killed;
- a transaction whose coordinator's broker is killed before it commits is completed or aborted
  by the new coordinator, and a read_committed consumer sees each committed record once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from coordinator.share.service import partition_for as share_partition_for
from protocol import codec
from tests.integration.cluster.conftest import Cluster, Etcd
from tests.integration.cluster.net_cluster import wait_for
from tests.integration.rawclient import RawClient
from tests.integration.share_helpers import set_group_configs, share_consumer

T = 30
SHARE_STATE = "__share_group_state"



def _coordinator(bootstrap: str, key: str, key_type: int) -> int:
    """The node id FindCoordinator names (0 group, 1 transaction, 2 share)."""
    m = codec.request_module(10, 4)
    with RawClient(bootstrap) as c:
        deadline = time.monotonic() + T
        while True:
            resp = c.call(10, 4, m.FindCoordinatorRequest(key_type=key_type,
                                                          coordinator_keys=(key,)))
            (coord,) = resp.coordinators
            if coord.error_code == ErrorCode.none:
                return int(coord.node_id)
            assert time.monotonic() < deadline, coord
            time.sleep(0.2)


def _alive(cluster: Cluster) -> str:
    """One live broker's address (RawClient talks to a single broker)."""
    return next(b.bootstrap for b in cluster.brokers if b.alive())


def _leader(admin: AdminClient, topic: str, p: int) -> int:
    return admin.list_topics(topic, timeout=T).topics[topic].partitions[p].leader


def _isr(admin: AdminClient, topic: str, p: int) -> list[int]:
    return list(admin.list_topics(topic, timeout=T).topics[topic].partitions[p].isrs)


@pytest.fixture
def rf3_cluster(tmp_path: Path, etcd: Etcd) -> Iterator[Cluster]:
    c = Cluster(tmp_path, etcd, overrides={
        "offsets.topic.replication.factor": "3",
        "share.coordinator.state.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "default.replication.factor": "3",
        "group.share.min.record.lock.duration.ms": "1000",
    })
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.mark.parametrize("victim_role", ["data leader", "share-state leader"])
def test_share_group_continues_through_a_leader_kill_without_restart(
        rf3_cluster: Cluster, victim_role: str) -> None:
    cluster = rf3_cluster
    group = f"through-{victim_role.split()[0]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("work", 1, 3)])["work"].result(T)
    wait_for(lambda: len(_isr(admin, "work", 0)) == 3, T, "an ISR of three")
    set_group_configs(cluster.brokers[0].bootstrap, group, {
        "share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "3000"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5})
    sent = {f"w{i}".encode() for i in range(600)}
    for v in sorted(sent):
        p.produce("work", v, partition=0)
    assert p.flush(T) == 0

    consumers = [share_consumer(cluster.bootstrap, group, "work", explicit=True)
                 for _ in range(3)]
    confirmed: set[bytes] = set()
    redelivered_after_confirm: list[bytes] = []
    counts: dict[bytes, int] = {}
    decreased: list[tuple[bytes, int, int]] = []

    def round_of_polls() -> None:
        for c in consumers:
            batch = [m for m in c.poll(0.2) if m.error() is None]
            for m in batch:
                v = m.value()
                if v in confirmed:
                    redelivered_after_confirm.append(v)
                n = m.delivery_count()
                if n < counts.get(v, 0):
                    decreased.append((v, counts[v], n))
                counts[v] = max(counts.get(v, 0), n)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if not batch:
                continue
            try:
                results = c.commit_sync(10) or {}
            except KafkaException:
                continue  # the acknowledgements are retried or the records redelivered
            failed = {(tp.topic, tp.partition) for tp, err in results.items() if err is not None}
            confirmed.update(m.value() for m in batch
                             if (m.topic(), m.partition()) not in failed)

    try:
        deadline = time.monotonic() + 60
        while len(confirmed) < 150:
            assert time.monotonic() < deadline, f"only {len(confirmed)} confirmed before the kill"
            round_of_polls()
        if victim_role == "data leader":
            victim = _leader(admin, "work", 0)
        else:
            # The leader of the __share_group_state partition holding work-0's state (its share
            # coordinator), unless that is also the data leader (then the other run covers it).
            topic_id = admin.describe_topics(TopicCollection(["work"]))["work"].result(T).topic_id
            state_p = share_partition_for(f"{group}:{topic_id}:0", 6)
            victim = _leader(admin, SHARE_STATE, state_p)
        cluster.brokers[victim - 1].kill()
        deadline = time.monotonic() + 120
        while confirmed != sent:
            assert time.monotonic() < deadline, \
                f"{len(sent - confirmed)} records never confirmed after broker {victim} died"
            round_of_polls()
    finally:
        for c in consumers:
            c.close()
    assert redelivered_after_confirm == []
    assert decreased == []


def test_committed_offsets_survive_the_kill_of_the_group_coordinator(
        rf3_cluster: Cluster) -> None:
    cluster = rf3_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("ledger", 3, 3)])["ledger"].result(T)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(90):
        p.produce("ledger", f"l{i}".encode(), partition=i % 3)
    assert p.flush(T) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "bookkeepers",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["ledger"])
    got = 0
    deadline = time.monotonic() + 60
    while got < 60 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in c.committed(
        [TopicPartition("ledger", i) for i in range(3)], timeout=T)}
    c.close()
    assert sum(o for o in committed.values() if o >= 0) == got  # -1001: none committed
    coordinator = _coordinator(cluster.brokers[0].bootstrap, "bookkeepers", 0)
    cluster.brokers[coordinator - 1].kill()
    others = ",".join(b.bootstrap for b in cluster.brokers if b.alive())

    def read_back() -> dict[int, int] | None:
        c2 = Consumer({"bootstrap.servers": others, "group.id": "bookkeepers"})
        try:
            tps = c2.committed([TopicPartition("ledger", i) for i in range(3)], timeout=5)
            return {tp.partition: tp.offset for tp in tps}
        except KafkaException:
            return None
        finally:
            c2.close()

    assert wait_for(read_back, 60, "the new coordinator answering") == committed


def test_a_transaction_survives_the_kill_of_its_coordinator(rf3_cluster: Cluster) -> None:
    cluster = rf3_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("books", 2, 3)])["books"].result(T)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "clerk",
                  "transaction.timeout.ms": 20000})
    p.init_transactions(T)
    p.begin_transaction()
    for i in range(50):
        p.produce("books", f"first{i}".encode(), partition=i % 2)
    p.commit_transaction(T)
    coordinator = _coordinator(cluster.brokers[0].bootstrap, "clerk", 1)
    p.begin_transaction()
    for i in range(50):
        p.produce("books", f"second{i}".encode(), partition=i % 2)
    p.flush(T)
    cluster.brokers[coordinator - 1].kill()
    # The producer finds the new coordinator; the transaction commits (or, if the coordinator's
    # failover aborted it, the abort is reported and nothing of it is visible).
    committed_second = True
    try:
        p.commit_transaction(60)
    except KafkaException as e:
        committed_second = False
        assert e.args[0].txn_requires_abort() or e.args[0].retriable(), e
    others = ",".join(b.bootstrap for b in cluster.brokers if b.alive())
    c = Consumer({"bootstrap.servers": others, "group.id": "auditor",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.subscribe(["books"])
    want = {f"first{i}".encode() for i in range(50)}
    if committed_second:
        want |= {f"second{i}".encode() for i in range(50)}
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(want) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    end = time.monotonic() + 3
    while time.monotonic() < end:
        m = c.poll(0.3)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert sorted(got) == sorted(want)


def test_exactly_once_across_the_kill_of_its_coordinators(rf3_cluster: Cluster) -> None:
    """The consume-transform-produce loop of tests/integration/txn/test_exactly_once.py on three
    brokers at RF 3: the transaction coordinator's broker is killed mid-transaction (after the
    output records were produced), and later the group coordinator's (after the offsets were
    sent); each is started again afterwards. The output holds every input once."""
    import threading

    from tests.integration.txn import test_exactly_once as eos

    cluster = rf3_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name in (eos.INPUT, eos.OUTPUT):
        admin.create_topics([NewTopic(name, eos.PARTITIONS, 3)])[name].result(T)
    ends = eos.produce_input(cluster.bootstrap)
    kills: list[tuple[str, int, int]] = []
    restarts: list[threading.Thread] = []

    def kill(node: int) -> None:
        cluster.brokers[node - 1].kill()
        t = threading.Thread(target=lambda: (time.sleep(5), cluster.brokers[node - 1].start()))
        t.start()
        restarts.append(t)

    def hook(stage: str, n: int) -> None:
        if (stage, n) == ("produced", 3):
            node = _coordinator(_alive(cluster), eos.TXN_ID, 1)
            kills.append((stage, n, node))
            kill(node)
        if (stage, n) == ("offsets-sent", 7):
            for t in restarts:
                t.join(60)
            node = _coordinator(_alive(cluster), eos.GROUP, 0)
            kills.append((stage, n, node))
            kill(node)

    app = eos.App(cluster.bootstrap, ends, hook)
    app.start()
    assert app.done.wait(110), "the application hung"
    for t in restarts:
        t.join(60)
    if app.error is not None:
        raise app.error
    assert [k[:2] for k in kills] == [("produced", 3), ("offsets-sent", 7)], kills
    out = eos.read_committed_output(cluster.bootstrap)
    expected = sorted(eos.transform(f"v{i}".encode()) for i in range(eos.N))
    assert len(out) == len(set(out)), f"{len(out) - len(set(out))} duplicate(s)"
    assert sorted(out) == expected, f"{len(set(expected) - set(out))} missing"
