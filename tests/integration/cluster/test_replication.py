"""Replication (issue 24) on a real etcd and three broker processes.

What a user would notice:
- a topic with replication factor 3 survives the kill -9 of its leader: every record whose
  acks=all produce was acknowledged is read back from the new leader, once;
- a follower that stops fetching leaves the ISR (and acks=all goes on without it), and joins it
  again once it has caught up;
- below ``min.insync.replicas`` an acks=all produce is refused with NOT_ENOUGH_REPLICAS;
- a leader's tail that no follower got (written with acks=1 just before it died) is truncated
  away when it comes back as a follower, so every replica ends with the same log.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from storage.log_config import LogConfig
from storage.segment_log import PartitionLog
from tests.integration.cluster.conftest import Cluster, Etcd
from tests.integration.cluster.net_cluster import wait_for

T = 30


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _partition(admin: AdminClient, topic: str, p: int = 0) -> tuple[int, list[int], list[int]]:
    md = admin.list_topics(topic, timeout=T)
    part = md.topics[topic].partitions[p]
    return part.leader, list(part.replicas), list(part.isrs)



def _produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all",
             timeout: float = 60) -> set[bytes]:
    """Produce ``values``; returns those whose delivery was acknowledged."""
    acked: set[bytes] = set()

    def done(err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked.add(msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                  "enable.idempotence": acks == "all", "message.timeout.ms": int(timeout * 1000),
                  "batch.num.messages": 200})
    for v in values:
        while True:
            try:
                p.produce(topic, v, partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(timeout + 5)
    return acked


def _read_all(bootstrap: str, topic: str, n: int, timeout: float = 60) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            got.append(m.value())
        # Anything more would be a duplicate: look a little longer.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            m = c.poll(0.3)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


@pytest.fixture
def cluster_overrides() -> dict[str, str]:
    return {"replica.lag.time.max.ms": "3000", "default.replication.factor": "3"}


def test_acknowledged_records_survive_the_kill_9_of_the_leader(cluster: Cluster) -> None:
    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("safe", 1, 3)])["safe"].result(T)
    leader, replicas, isr = wait_for(lambda: (x := _partition(admin, "safe")) and len(x[2]) == 3
                                  and x, T, "an ISR of three")
    assert sorted(replicas) == [1, 2, 3]
    values = [f"r{i}".encode() for i in range(3000)]
    acked = _produce(cluster.bootstrap, "safe", values)
    assert acked == set(values)
    cluster.brokers[leader - 1].kill()
    others = ",".join(b.bootstrap for b in cluster.brokers if b.alive())
    survivor_admin = _admin(others)
    new_leader = wait_for(lambda: (x := _partition(survivor_admin, "safe")[0]) not in (leader, -1)
                       and x, T, "a new leader from the ISR")
    assert new_leader in replicas
    # The survivors keep taking acks=all writes (two in-sync replicas).
    more = [f"s{i}".encode() for i in range(500)]
    assert _produce(others, "safe", more) == set(more)
    got = _read_all(others, "safe", len(values) + len(more))
    assert sorted(got) == sorted(values + more), "acknowledged records lost or duplicated"


def test_a_stopped_follower_leaves_the_isr_and_rejoins_after_catching_up(
        cluster: Cluster) -> None:
    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("lag", 1, 3)])["lag"].result(T)
    leader, replicas, _ = wait_for(lambda: (x := _partition(admin, "lag")) and len(x[2]) == 3
                                and x, T, "an ISR of three")
    follower = next(r for r in replicas if r != leader)
    proc = cluster.brokers[follower - 1].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        leader_admin = _admin(cluster.brokers[leader - 1].bootstrap)
        first = [f"a{i}".encode() for i in range(200)]
        # acks=all goes on once the stopped follower is out of the ISR (lag 3 s, or its etcd
        # session lapsing, whichever comes first).
        assert _produce(cluster.brokers[leader - 1].bootstrap, "lag", first) == set(first)
        wait_for(lambda: follower not in _partition(leader_admin, "lag")[2], T,
              f"broker {follower} leaving the ISR")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    wait_for(lambda: sorted(_partition(leader_admin, "lag")[2]) == sorted(replicas), 60,
          f"broker {follower} rejoining the ISR")


def test_below_min_insync_replicas_acks_all_is_refused(cluster: Cluster) -> None:
    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("strict", 1, 3, config={"min.insync.replicas": "3"})]
                        )["strict"].result(T)
    leader, replicas, _ = wait_for(lambda: (x := _partition(admin, "strict")) and len(x[2]) == 3
                                and x, T, "an ISR of three")
    victim = next(r for r in replicas if r != leader)
    cluster.brokers[victim - 1].kill()
    leader_bootstrap = cluster.brokers[leader - 1].bootstrap
    leader_admin = _admin(leader_bootstrap)
    wait_for(lambda: victim not in _partition(leader_admin, "strict")[2], T,
          f"broker {victim} leaving the ISR")
    p = Producer({"bootstrap.servers": leader_bootstrap, "acks": "all",
                  "message.timeout.ms": 3000, "retries": 0})
    errors: list[KafkaError] = []
    p.produce("strict", b"x", partition=0,
              on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT), errors
    # acks=1 still works: only acks=all asks for the in-sync replicas.
    assert _produce(leader_bootstrap, "strict", [b"one"], acks="1") == {b"one"}


def _log_records(data_dir: Path, topic: str) -> list[tuple[int, bytes]]:
    """(offset, batches) of a stopped broker's partition 0, read from its files: replicas hold
    the leader's batches byte for byte, leader epochs included."""
    lg = PartitionLog.open(data_dir / f"{topic}-0", LogConfig(), int(time.time() * 1000))
    try:
        out = []
        offset = lg.log_start_offset
        while offset < lg.log_end_offset:
            read = lg.read(offset, 1 << 20)
            if not read.data:
                break
            out.append((offset, bytes(read.data)))
            offset = read.next_offset
        return out
    finally:
        lg.close()


@pytest.fixture
def slow_session_cluster(tmp_path: Path, etcd: Etcd) -> Iterator[Cluster]:
    c = Cluster(tmp_path, etcd, overrides={"replica.lag.time.max.ms": "60000",
                                           "broker.session.timeout.ms": "6000"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_a_returning_leader_truncates_the_tail_no_follower_got(
        slow_session_cluster: Cluster) -> None:
    cluster = slow_session_cluster
    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("diverge", 1, 3)])["diverge"].result(T)
    leader, replicas, _ = wait_for(lambda: (x := _partition(admin, "diverge")) and len(x[2]) == 3
                                and x, T, "an ISR of three")
    base = [f"b{i}".encode() for i in range(100)]
    assert _produce(cluster.bootstrap, "diverge", base) == set(base)
    followers = [r for r in replicas if r != leader]
    procs = [cluster.brokers[f - 1].proc for f in followers]
    for proc in procs:
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)
    # A follower's fetch that was parked at the leader is answered (into the stopped process's
    # socket) within replica.fetch.wait.max.ms; after that no fetch of theirs is pending, so
    # what the leader appends now reaches nobody.
    time.sleep(1.5)
    try:
        # acks=1: the leader alone has these; then it dies before anyone copies them.
        lost = [f"lost{i}".encode() for i in range(20)]
        assert _produce(cluster.brokers[leader - 1].bootstrap, "diverge", lost,
                        acks="1") == set(lost)
        cluster.brokers[leader - 1].kill()
    finally:
        for proc in procs:
            os.kill(proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
    others = ",".join(b.bootstrap for b in cluster.brokers if b.alive())
    other_admin = _admin(others)
    wait_for(lambda: _partition(other_admin, "diverge")[0] in followers, 60,
          "a follower taking over")
    after = [f"a{i}".encode() for i in range(100)]
    assert _produce(others, "diverge", after) == set(after)
    cluster.brokers[leader - 1].start()
    wait_for(lambda: sorted(_partition(other_admin, "diverge")[2]) == sorted(replicas), 60,
          f"broker {leader} back in the ISR")
    got = _read_all(cluster.bootstrap, "diverge", len(base) + len(after))
    assert sorted(got) == sorted(base + after)
    cluster.stop()
    logs = [_log_records(b.data_dir, "diverge") for b in cluster.brokers]
    assert logs[0] == logs[1] == logs[2], "the replicas' logs differ"


def test_a_replica_fetch_without_cluster_action_is_refused(cluster: Cluster) -> None:
    """A client claiming to be a follower on the PLAINTEXT listener (no super user) gets
    TOPIC_AUTHORIZATION_FAILED and no records."""
    import datetime

    from kio.schema.errors import ErrorCode

    from protocol import codec
    from tests.integration.rawclient import RawClient

    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("guarded", 1, 3)])["guarded"].result(T)
    leader, _, _ = wait_for(lambda: (x := _partition(admin, "guarded")) and len(x[2]) == 3 and x,
                         T, "an ISR of three")
    _produce(cluster.bootstrap, "guarded", [b"secret"])
    m = codec.request_module(1, 12)
    with RawClient(cluster.brokers[leader - 1].bootstrap) as c:
        resp = c.call(1, 12, m.FetchRequest(
            replica_id=2, max_wait=datetime.timedelta(milliseconds=10), min_bytes=1,
            max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(m.FetchTopic(topic="guarded", partitions=(m.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=(), rack_id=""))
    (part,) = resp.responses[0].partitions
    assert part.error_code == ErrorCode.topic_authorization_failed
    assert not part.records


def test_records_deleted_at_the_leader_stay_deleted_after_a_failover(cluster: Cluster) -> None:
    from confluent_kafka import TopicPartition

    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic("trimmed", 1, 3)])["trimmed"].result(T)
    leader, _, _ = wait_for(lambda: (x := _partition(admin, "trimmed")) and len(x[2]) == 3 and x,
                         T, "an ISR of three")
    values = [f"t{i}".encode() for i in range(100)]
    assert _produce(cluster.bootstrap, "trimmed", values) == set(values)
    (res,) = admin.delete_records([TopicPartition("trimmed", 0, 60)]).values()
    assert res.result(T).low_watermark == 60
    # The followers learn the new log start from their next fetch.
    time.sleep(2)
    cluster.brokers[leader - 1].kill()
    others = ",".join(b.bootstrap for b in cluster.brokers if b.alive())
    other_admin = _admin(others)
    wait_for(lambda: _partition(other_admin, "trimmed")[0] not in (leader, -1), T,
          "a new leader")
    c = Consumer({"bootstrap.servers": others, "group.id": "trim-check"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=T)
    finally:
        c.close()
    assert (low, high) == (60, 100)
