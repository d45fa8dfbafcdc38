"""Transactions on a 3-broker cluster, with unmodified confluent-kafka clients.

The transactional id's coordinator (leader of its ``__transaction_state`` partition), the
group's coordinator (leader of its ``__consumer_offsets`` partition) and the leaders of the
input and output partitions sit on different brokers, so every hop of a transaction crosses the
wire: AddPartitionsToTxn verification from the partition leaders to the transaction
coordinator, WriteTxnMarkers from it to the data partitions' leaders and to the group
coordinator. A user sees exactly-once output, aborted data invisible and a zombie fenced.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.group.placement import partition_for_group
from tests.integration.cluster.conftest import Cluster
from tests.integration.share_helpers import produce

pytestmark = pytest.mark.timeout(240)

T = 30
N = 120
IN, OUT = "ctp-in", "ctp-out"


def _leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    deadline = time.monotonic() + T
    while True:
        md = admin.list_topics(topic, timeout=T).topics[topic]
        leaders = {p: m.leader for p, m in md.partitions.items()}
        if md.error is None and leaders and all(x >= 0 for x in leaders.values()):
            return leaders
        assert time.monotonic() < deadline, f"{topic} has no leaders: {md.error} {leaders}"
        time.sleep(0.3)


def _pick(prefix: str, leaders: dict[int, int], node: int) -> str:
    """An id whose internal partition (Kafka's hash rule) is led by ``node``."""
    for i in range(10_000):
        name = f"{prefix}-{i}"
        if leaders[partition_for_group(name, len(leaders))] == node:
            return name
    raise AssertionError(f"no {prefix} id lands on broker {node}")


def _producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 60_000, "linger.ms": 5})
    p.init_transactions(T)
    return p


def _read_committed(bootstrap: str, topic: str, expect: int, group: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(100, 0.5)
            out += [m.value() for m in msgs if m.error() is None]
            if len(out) >= expect:
                # Keep reading a little: anything beyond ``expect`` is a duplicate or leak.
                quiet_until = quiet_until or time.monotonic() + 3
                if time.monotonic() > quiet_until:
                    break
    finally:
        c.close()
    return out


def test_consume_transform_produce_exactly_once_across_brokers(cluster: Cluster) -> None:
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(IN, 6, 1), NewTopic(OUT, 6, 1)]).values():
        f.result(T)
    assert set(_leaders(admin, IN).values()) == {1, 2, 3}
    assert set(_leaders(admin, OUT).values()) == {1, 2, 3}
    # The internal topics appear on first FindCoordinator.
    _producer(bootstrap, "warm-up").flush(1)
    admin.describe_consumer_groups(["warm-up"])["warm-up"].result(T)
    txn_id = _pick("ctp-tx", _leaders(admin, "__transaction_state"), 2)
    group = _pick("ctp-group", _leaders(admin, "__consumer_offsets"), 1)

    sent = produce(bootstrap, IN, N, partitions=6, prefix="in")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([IN])
    producer = _producer(bootstrap, txn_id)
    done = 0
    deadline = time.monotonic() + 120
    try:
        while done < N:
            assert time.monotonic() < deadline, f"only {done} of {N} records transformed"
            msgs = [m for m in consumer.consume(40, 1.0) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(OUT, b"out:" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), T)
            producer.commit_transaction(T)
            done += len(msgs)
        committed = consumer.committed([TopicPartition(IN, p) for p in range(6)], T)
    finally:
        consumer.close()
    # The offsets committed in the transactions reached the group coordinator (broker 1).
    assert sum(tp.offset for tp in committed) == N

    # An aborted transaction on every output partition stays invisible.
    producer.begin_transaction()
    for p in range(6):
        producer.produce(OUT, b"aborted", partition=p)
    producer.flush(T)
    producer.abort_transaction(T)

    # A new producer with the same transactional id fences the old one (a zombie).
    successor = _producer(bootstrap, txn_id)
    with pytest.raises(KafkaException):
        producer.begin_transaction()
        producer.produce(OUT, b"zombie", partition=0)
        producer.commit_transaction(T)
    successor.begin_transaction()
    successor.produce(OUT, b"last", partition=3)
    successor.commit_transaction(T)

    out = _read_committed(bootstrap, OUT, N + 1, "ctp-check")
    counts = Counter(out)
    assert counts[b"last"] == 1
    assert b"aborted" not in counts and b"zombie" not in counts
    del counts[b"last"]
    assert set(counts) == {b"out:" + v for v in sent}
    assert all(n == 1 for n in counts.values()), [v for v, n in counts.items() if n > 1][:5]


def _read_partition(bootstrap: str, topic: str, partition: int, want: set[bytes],
                    timeout: float = 60) -> list[bytes]:
    """read_committed values of one partition, from the start, until ``want`` are all seen."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while not want <= set(got) and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(50, 0.3) if m.error() is None]
    finally:
        c.close()
    return got


def test_a_killed_leader_delays_only_its_own_markers(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("span", 3, 1)])["span"].result(T)
    by_leader = {leader: p for p, leader in _leaders(admin, "span").items()}
    assert set(by_leader) == {1, 2, 3}
    _producer(cluster.bootstrap, "warm-up").flush(1)
    txn_leaders = _leaders(admin, "__transaction_state")
    spanning = _pick("span-a", txn_leaders, 2)
    other = _pick("span-b", txn_leaders, 1)

    a = _producer(cluster.bootstrap, spanning)
    a.begin_transaction()
    a.produce("span", b"a-on-3", partition=by_leader[3])
    a.produce("span", b"a-on-1", partition=by_leader[1])
    assert a.flush(T) == 0
    victim = cluster.brokers[2]
    victim.kill()
    # The coordinator (broker 2) answers once the PrepareCommit record is durable; the marker
    # for broker 3's partition waits for it to come back.
    a.commit_transaction(T)
    assert b"a-on-1" in _read_partition(cluster.bootstrap, "span", by_leader[1], {b"a-on-1"})

    # Transactions that do not touch broker 3 go on meanwhile.
    b = _producer(cluster.bootstrap, other)
    for i in range(3):
        b.begin_transaction()
        b.produce("span", f"b{i}".encode(), partition=by_leader[1])
        b.produce("span", f"b{i}".encode(), partition=by_leader[2])
        b.commit_transaction(T)
    assert {b"b0", b"b1", b"b2"} <= set(_read_partition(
        cluster.bootstrap, "span", by_leader[2], {b"b0", b"b1", b"b2"}))

    victim.start()  # same data and node id: its partition and the pending marker come back
    got = _read_partition(cluster.bootstrap, "span", by_leader[3], {b"a-on-3"})
    assert got.count(b"a-on-3") == 1
    # The spanning producer's next transaction works (no marker is left pending).
    a.begin_transaction()
    a.produce("span", b"a-again", partition=by_leader[3])
    a.commit_transaction(T)
    assert _read_partition(cluster.bootstrap, "span", by_leader[3],
                           {b"a-on-3", b"a-again"}) == [b"a-on-3", b"a-again"]


def test_transaction_version_2_adds_partitions_at_a_coordinator_on_another_broker(
        cluster: Cluster) -> None:
    """Kafka 4.x producers (transaction version 2) send no AddPartitionsToTxn: the partition
    leader (Produce v12) and the group coordinator (TxnOffsetCommit v5) add the partitions at
    the transaction coordinator themselves, here over the wire."""
    from tests.integration.rawclient import RawClient, request
    from tests.integration.txn.test_transaction_v2 import end5, produce12
    from tests.integration.txn.test_transactions import describe, init_pid, wait_state

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("tv2", 3, 1)])["tv2"].result(T)
    by_leader = {leader: p for p, leader in _leaders(admin, "tv2").items()}
    _producer(cluster.bootstrap, "warm-up").flush(1)
    admin.describe_consumer_groups(["warm-up"])["warm-up"].result(T)
    txn = _pick("tv2-tx", _leaders(admin, "__transaction_state"), 1)
    group = _pick("tv2-group", _leaders(admin, "__consumer_offsets"), 2)
    offsets_p = partition_for_group(group, 6)
    coordinator, leader3, group_coordinator = (cluster.brokers[i].bootstrap for i in (0, 2, 1))

    with RawClient(coordinator) as c, RawClient(leader3) as data, \
            RawClient(group_coordinator) as g:
        init = init_pid(c, txn, version=5)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        got = produce12(data, txn, "tv2", by_leader[3], pid, epoch, 0, b"v2-record")
        assert got.error_code == 0, got
        m = g.request_module(28, 5)
        commit = g.call(28, 5, request(
            28, 5, transactional_id=txn, group_id=group, producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None, topics=(
                m.TxnOffsetCommitRequestTopic(name="tv2", partitions=(
                    m.TxnOffsetCommitRequestPartition(partition_index=by_leader[3],
                                                      committed_offset=1,
                                                      committed_leader_epoch=-1,
                                                      committed_metadata=""),)),)))
        assert commit.topics[0].partitions[0].error_code == 0
        state = describe(c, txn)
        assert {(t.topic, p) for t in state.topics for p in t.partitions} == {
            ("tv2", by_leader[3]), ("__consumer_offsets", offsets_p)}
        assert end5(c, txn, pid, epoch, True)[0] == 0
        assert wait_state(c, txn, "CompleteCommit").transaction_state == "CompleteCommit"
    assert _read_partition(cluster.bootstrap, "tv2", by_leader[3], {b"v2-record"}) == \
        [b"v2-record"]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        (tp,) = consumer.committed([TopicPartition("tv2", by_leader[3])], T)
    finally:
        consumer.close()
    assert tp.offset == 1
