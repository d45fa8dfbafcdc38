"""The controller side of replication on three real brokers and a real etcd: what an operator sees.

Replica placement and the ISR in Metadata and DescribeTopicPartitions; the controller electing a
new leader from the ISR (epoch + 1) when a leader is killed, and showing the dead broker as an
offline replica; a SIGTERM'd broker handing its leaderships over before it exits (controlled
shutdown); ElectLeaders; AlterPartitionReassignments / ListPartitionReassignments and
``shoal cluster decommission``; auto leader rebalance; unclean election, by topic config or on
request, when the only in-sync replica is dead.

A move onto a broker completes once the new replica has copied the log and joined the ISR; a
paused (SIGSTOP) broker cannot, which keeps a move in progress for as long as a test needs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.conftest import ROOT
from tests.integration.cluster.conftest import Cluster, Etcd
from tests.integration.rawclient import RawClient, request

T = 30


@dataclass(frozen=True)
class Part:
    leader: int
    epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


def metadata(bootstrap: str, topic: str) -> dict[int, Part]:
    m = RawClient.request_module(3, 12)
    with RawClient(bootstrap) as c:
        md = c.call(3, 12, request(3, 12, topics=(m.MetadataRequestTopic(
            name=topic, topic_id=uuid.UUID(int=0)),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
    [t] = md.topics
    assert t.error_code == ErrorCode.none, t
    return {int(p.partition_index): Part(int(p.leader_id), int(p.leader_epoch),
                                         tuple(map(int, p.replica_nodes)),
                                         tuple(map(int, p.isr_nodes)),
                                         tuple(map(int, p.offline_replicas)))
            for p in t.partitions}


def wait(condition: Any, what: str, timeout: float = T) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.2)


def create(bootstrap: str, name: str, partitions: int = -1, rf: int = -1,
           assignments: dict[int, list[int]] | None = None) -> Any:
    m = RawClient.request_module(19, 7)
    with RawClient(bootstrap) as c:
        resp = c.call(19, 7, request(19, 7, topics=(m.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=rf, configs=(),
            assignments=tuple(m.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b))
                              for p, b in (assignments or {}).items())),),
            timeout=timedelta(seconds=T), validate_only=False))
    return resp.topics[0]


def elect(bootstrap: str, election_type: int, topic: str, partitions: tuple[int, ...]
          ) -> list[tuple[int, ErrorCode]]:
    m = RawClient.request_module(43, 2)
    with RawClient(bootstrap) as c:
        resp = c.call(43, 2, request(43, 2, election_type=election_type,
                                     timeout=timedelta(seconds=T),
                                     topic_partitions=(m.TopicPartitions(
                                         topic=topic, partitions=partitions),)))
    assert resp.error_code == ErrorCode.none
    return [(int(p.partition_id), p.error_code)
            for r in resp.replica_election_results for p in r.partition_result]


def reassign(bootstrap: str, topic: str, moves: dict[int, tuple[int, ...] | None]
             ) -> list[tuple[int, ErrorCode, str | None]]:
    m = RawClient.request_module(45, 0)
    with RawClient(bootstrap) as c:
        resp = c.call(45, 0, request(45, 0, timeout=timedelta(seconds=T),
                                     topics=(m.ReassignableTopic(name=topic, partitions=tuple(
                                         m.ReassignablePartition(partition_index=p, replicas=r)
                                         for p, r in moves.items())),)))
    return [(int(p.partition_index), p.error_code, p.error_message)
            for p in resp.responses[0].partitions]


def ongoing(bootstrap: str) -> dict[tuple[str, int], tuple[tuple[int, ...], ...]]:
    with RawClient(bootstrap) as c:
        resp = c.call(46, 0, request(46, 0, timeout=timedelta(seconds=T), topics=None))
    assert resp.error_code == ErrorCode.none
    return {(t.name, int(p.partition_index)): (tuple(p.replicas), tuple(p.adding_replicas),
                                               tuple(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


def test_replicas_are_placed_and_a_killed_leader_is_replaced_from_the_isr(
        cluster: Cluster) -> None:
    boot = cluster.brokers[0].bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("triple", 6, 3)])["triple"].result(T)
    before = wait(lambda: (md := metadata(boot, "triple")) and len(md) == 6 and md,
                  "the topic appearing")
    for p in before.values():
        assert sorted(p.replicas) == [1, 2, 3] and p.isr == p.replicas
        assert p.leader == p.replicas[0] and p.offline == ()
    assert sorted(p.leader for p in before.values()) == [1, 1, 2, 2, 3, 3]
    # DescribeTopicPartitions tells the same.
    m = RawClient.request_module(75, 0)
    with RawClient(cluster.brokers[1].bootstrap) as c:
        dtp = c.call(75, 0, m.DescribeTopicPartitionsRequest(
            topics=(m.TopicRequest(name="triple"),), response_partition_limit=100, cursor=None))
    assert {int(p.partition_index): (int(p.leader_id), tuple(p.replica_nodes), tuple(p.isr_nodes))
            for p in dtp.topics[0].partitions} == {
        i: (p.leader, p.replicas, p.isr) for i, p in before.items()}

    too_many = create(boot, "quad", 1, 4)
    assert too_many.error_code == ErrorCode.invalid_replication_factor
    assert "3 available broker(s)" in too_many.error_message
    nowhere = create(boot, "nowhere", assignments={0: [1, 9]})
    assert nowhere.error_code == ErrorCode.invalid_replica_assignment
    assert "[9]" in nowhere.error_message and "not registered" in nowhere.error_message
    manual = create(boot, "manual", assignments={0: [3, 2], 1: [2, 1]})
    assert (manual.error_code, manual.num_partitions, manual.replication_factor) == (
        ErrorCode.none, 2, 2)
    assert {i: (p.leader, p.replicas) for i, p in metadata(boot, "manual").items()} == {
        0: (3, (3, 2)), 1: (2, (2, 1))}
    # New partitions keep the topic's replication factor; assignments must match it.
    cp = RawClient.request_module(37, 3)

    def grow(count: int, *assigned: tuple[int, ...]) -> Any:
        with RawClient(boot) as c:
            return c.call(37, 3, request(37, 3, topics=(cp.CreatePartitionsTopic(
                name="manual", count=count, assignments=tuple(
                    cp.CreatePartitionsAssignment(broker_ids=a) for a in assigned) or None),),
                timeout=timedelta(seconds=T), validate_only=False)).results[0]

    wrong = grow(3, (1,))
    assert wrong.error_code == ErrorCode.invalid_replica_assignment
    assert "replication factor is 2" in wrong.error_message
    assert grow(3, (1, 3)).error_code == ErrorCode.none
    assert grow(4).error_code == ErrorCode.none
    grown = wait(lambda: (md := metadata(boot, "manual")) and len(md) == 4 and md,
                 "the new partitions appearing")
    assert grown[2].replicas == (1, 3) and len(set(grown[3].replicas)) == 2

    cluster.brokers[0].kill()
    boot = cluster.brokers[1].bootstrap

    def moved() -> dict[int, Part] | None:
        md = metadata(boot, "triple")
        return md if all(1 not in p.isr and p.leader != -1 for p in md.values()) else None

    after = wait(moved, "the controller moving leaders off the killed broker")
    for i, p in after.items():
        old = before[i]
        assert p.offline == (1,) and p.replicas == old.replicas
        assert p.isr == tuple(r for r in old.isr if r != 1)
        if old.leader == 1:  # a new leader from the ISR, in replica order, one epoch up
            assert p.leader == old.isr[1] and p.epoch == old.epoch + 1
        else:
            assert (p.leader, p.epoch) == (old.leader, old.epoch)


def test_sigterm_moves_leaderships_away_before_the_broker_exits(cluster: Cluster) -> None:
    boot = cluster.brokers[0].bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    created = admin.create_topics([NewTopic("handover", 6, 3), NewTopic("single", 3, 1)])
    for f in created.values():
        f.result(T)
    before = wait(lambda: (md := metadata(boot, "handover")) and len(md) == 6 and md,
                  "the topic appearing")
    leaving = cluster.brokers[1]
    assert leaving.stop() == 0  # SIGTERM; exits on its own, without waiting out its bound
    log = leaving.log_path.read_text()
    assert "controlled shutdown: no leadership left that another in-sync replica could take" \
        in log
    after = metadata(boot, "handover")
    for i, p in after.items():
        old = before[i]
        assert 2 not in p.isr and p.leader != 2
        # Handed over once, while the broker was still up: one epoch more, not two.
        assert p.epoch == (old.epoch + 1 if old.leader == 2 else old.epoch)


def test_elect_leaders_reassignments_and_decommission(cluster: Cluster) -> None:
    boot = cluster.brokers[2].bootstrap
    topic = create(boot, "moves", assignments={0: [1, 2], 1: [2, 3], 2: [3, 1]})
    assert topic.error_code == ErrorCode.none
    wait(lambda: len(metadata(boot, "moves")) == 3, "the topic appearing")

    # A reorder completes at once (every target replica is in sync); the leader stays.
    assert reassign(boot, "moves", {0: (2, 1)}) == [(0, ErrorCode.none, None)]
    p0 = wait(lambda: (p := metadata(boot, "moves")[0]).replicas == (2, 1) and p,
              "the reorder completing")
    assert (p0.leader, p0.isr) == (1, (1, 2))
    # The preferred replica (now 2) is elected on request.
    assert elect(boot, 0, "moves", (0, 1, 9)) == [
        (0, ErrorCode.none), (1, ErrorCode.election_not_needed),
        (9, ErrorCode.unknown_topic_or_partition)]
    p0_after = metadata(boot, "moves")[0]
    assert (p0_after.leader, p0_after.epoch) == (2, p0.epoch + 1)
    assert elect(boot, 1, "moves", (0,)) == [(0, ErrorCode.election_not_needed)]
    # librdkafka's Admin API (kafka-leader-election's call) gets the same answers.
    admin = AdminClient({"bootstrap.servers": boot})
    answers = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("moves", 0),
                                                           TopicPartition("moves", 2)]).result(T)
    assert {tp.partition: (e.code() if e else None) for tp, e in answers.items()} == {
        0: KafkaError.ELECTION_NOT_NEEDED, 2: KafkaError.ELECTION_NOT_NEEDED}

    # A move onto a broker that must copy the data stays in progress until that broker is in
    # sync (broker 1 is paused: it cannot catch up), and can be cancelled.
    paused = cluster.brokers[0].proc
    assert paused is not None
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        assert reassign(boot, "moves", {1: (3, 1), 2: (3, 7)})[0][:2] == (1, ErrorCode.none)
        bad = reassign(boot, "moves", {2: (3, 7)})[0]
        assert bad[1] == ErrorCode.invalid_replica_assignment and "[7]" in (bad[2] or "")
        assert ongoing(boot) == {("moves", 1): ((3, 1, 2), (1,), (2,))}
        assert metadata(boot, "moves")[1].replicas == (3, 1, 2)
        assert reassign(boot, "moves", {1: None}) == [(1, ErrorCode.none, None)]
        assert ongoing(boot) == {}
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    assert sorted(metadata(boot, "moves")[1].replicas) == [2, 3]
    assert reassign(boot, "moves", {1: None})[0][1] == ErrorCode.no_reassignment_in_progress
    wait(lambda: 1 in metadata(boot, "moves")[0].isr, "broker 1 back in sync")

    # Decommission broker 3: every partition holding it gets a move to a broker without one.
    shoal = [sys.executable, "-m", "cli.main", "cluster", "decommission", "--bootstrap-server",
             boot, "--node", "3", "--output", "json"]
    dry = subprocess.run([*shoal, "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0, dry.stderr
    planned = {(r["topic"], r["partition"]): (r["replicas"], r["target"])
               for r in json.loads(dry.stdout)}
    # (cancelling kept the replicas in their order during the move, target first, as Kafka)
    assert planned[("moves", 1)] == ("3,2", "1,2") and planned[("moves", 2)] == ("3,1", "2,1")
    assert ongoing(boot) == {}  # a dry run changes nothing
    done = subprocess.run(shoal, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "decommission --status" in done.stdout
    # The new replicas copy the (empty) logs, join the ISR, and the moves complete: broker 3
    # holds no replica any more.
    wait(lambda: not ongoing(boot), "the decommission's moves completing")
    after = metadata(boot, "moves")
    assert all(3 not in p.replicas and 3 not in p.isr for p in after.values()), after
    assert sorted(after[1].replicas) == [1, 2] and sorted(after[2].replicas) == [1, 2]
    # Broker 3 deletes the replicas it no longer holds.
    gone = cluster.brokers[2].data_dir
    wait(lambda: not any((gone / f"moves-{p}").exists() for p in range(3)),
         "broker 3 deleting its moved replicas")
    status = subprocess.run([sys.executable, "-m", "cli.main", "cluster", "decommission",
                             "--bootstrap-server", boot, "--status", "--output", "json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == []


def test_auto_rebalance_moves_leadership_back_to_the_preferred_replica(
        tmp_path: Path, etcd: Etcd) -> None:
    c = Cluster(tmp_path, etcd, overrides={"leader.imbalance.check.interval.seconds": "1"})
    try:
        c.start()
        boot = c.brokers[0].bootstrap
        assert create(boot, "lean", assignments={0: [1, 2]}).error_code == ErrorCode.none
        wait(lambda: len(metadata(boot, "lean")) == 1, "the topic appearing")
        # Reordering makes broker 2 the preferred leader while broker 1 still leads.
        assert reassign(boot, "lean", {0: (2, 1)}) == [(0, ErrorCode.none, None)]
        p = wait(lambda: (x := metadata(boot, "lean")[0]).leader == 2 and x,
                 "the controller's rebalance electing the preferred replica")
        assert (p.replicas, p.isr) == ((2, 1), (1, 2))
    finally:
        c.stop()


def test_unclean_election_by_topic_config_or_on_request(cluster: Cluster) -> None:
    boot = cluster.brokers[2].bootstrap
    m = RawClient.request_module(19, 7)
    with RawClient(boot) as c:
        resp = c.call(19, 7, request(19, 7, topics=tuple(m.CreatableTopic(
            name=name, num_partitions=-1, replication_factor=-1,
            assignments=(m.CreatableReplicaAssignment(partition_index=0, broker_ids=(1, 2)),),
            configs=(m.CreatableTopicConfig(name="unclean.leader.election.enable", value=v),))
            for name, v in (("strict", "false"), ("loose", "true"))),
            timeout=timedelta(seconds=T), validate_only=False))
    assert [t.error_code for t in resp.topics] == [ErrorCode.none] * 2
    follower = cluster.brokers[1].proc
    assert follower is not None
    os.kill(follower.pid, signal.SIGSTOP)  # broker 2 falls out of both ISRs
    try:
        wait(lambda: all(metadata(boot, t)[0].isr == (1,) for t in ("strict", "loose")),
             "broker 2 leaving the ISRs")
        cluster.brokers[0].kill()  # the only in-sync replica dies
        wait(lambda: all(metadata(boot, t)[0].leader == -1 for t in ("strict", "loose")),
             "both partitions going offline")
    finally:
        os.kill(follower.pid, signal.SIGCONT)
    loose = wait(lambda: (p := metadata(boot, "loose")[0]).leader == 2 and p,
                 "the controller's unclean election on the topic that allows it")
    assert (loose.isr, loose.offline) == ((2,), (1,))
    strict = metadata(boot, "strict")[0]
    assert (strict.leader, strict.isr) == (-1, (1,))
    assert elect(boot, 0, "strict", (0,)) == [(0, ErrorCode.preferred_leader_not_available)]
    assert elect(boot, 1, "strict", (0,)) == [(0, ErrorCode.none)]
    strict_after = metadata(boot, "strict")[0]
    assert (strict_after.leader, strict_after.isr) == (2, (2,))
    assert strict_after.epoch == strict.epoch + 1
