"""A partition leader cut off from the network while producers write to it with acks=all.

Each of etcd and the three brokers runs in its own network namespace (net_cluster.py); the cut
is real: the leader's link to the bridge goes down, so it reaches neither etcd nor the other
brokers nor the test, and nothing reaches it. One producer runs next to the leader, on its side
of the cut; another runs outside and knows only the other two brokers.

What a user would notice:
- the isolated broker's registration lapses and the controller takes its partition over: the
  partition goes offline (replication factor 1) or moves to another replica (3), and clients
  outside are told so by the brokers they can reach;
- after the cut heals the broker registers again and serves; the outside producer's records,
  held while the partition had no leader, go through;
- no acknowledged record of either producer is lost, and no record is in the log twice.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import ROOT
from tests.integration.cluster.net_cluster import NetCluster, wait_for
from tests.integration.cluster.probe import metadata

TOPIC = "orders"
T = 30  # generous liveness deadline for each step

REPLICATION = [1, 3]


def _start_producer(cluster: NetCluster, where: int | None, bootstrap: str, prefix: str,
                    out: Path) -> subprocess.Popen[bytes]:
    out.touch()
    with open(out.with_suffix(".err"), "wb") as err:  # the child keeps its own descriptor
        return cluster.popen(where, [sys.executable, "-m",
                                     "tests.integration.cluster.acked_producer",
                                     bootstrap, TOPIC, "0", prefix, str(out)],
                             cwd=ROOT, stderr=err)


def _acked(out: Path) -> list[str]:
    return [line for line in out.read_text().splitlines() if line]


def _read_partition(bootstrap: str) -> list[str]:
    """Every record of TOPIC-0, from the start to the end it has now."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "partition-reader",
                  "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=T)
        c.assign([TopicPartition(TOPIC, 0, low)])
        got: list[str] = []
        wait_for(lambda: _poll_into(c, got) >= high, T,
                 f"{TOPIC}-0 not readable up to its end {high}")
        return got
    finally:
        c.close()


def _poll_into(c: Consumer, got: list[str]) -> int:
    """Poll once into ``got``; returns the next offset to read."""
    for m in c.consume(500, 0.5):
        assert m.error() is None, m.error()
        got.append(m.value().decode())
    (pos,) = c.position([TopicPartition(TOPIC, 0)])
    return max(pos.offset, 0)


@pytest.mark.parametrize("rf", REPLICATION)
def test_isolated_leader_is_replaced_and_rejoins_with_nothing_acknowledged_lost(
        net_cluster: NetCluster, tmp_path: Path, rf: int) -> None:
    cluster = net_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, rf)])[TOPIC].result(T)
    seen = wait_for(lambda: (s := metadata(cluster.brokers[0].bootstrap, [TOPIC]))
                    and s.leaders.get((TOPIC, 0), -1) >= 0 and s, T,
                    f"{TOPIC}-0 got no leader after creation")
    leader = seen.leaders[(TOPIC, 0)]
    others = [b for b in cluster.brokers if b.node_id != leader]
    outside = ",".join(b.bootstrap for b in others)

    inside_out, outside_out = tmp_path / "inside.acked", tmp_path / "outside.acked"
    inside = _start_producer(cluster, leader, cluster.broker(leader).bootstrap, "in", inside_out)
    far = _start_producer(cluster, None, outside, "out", outside_out)
    try:
        wait_for(lambda: len(_acked(inside_out)) >= 30 and len(_acked(outside_out)) >= 30, T,
                 "the producers got no acknowledgements before the cut")

        cluster.isolate(leader)

        def taken_over() -> bool:
            s = metadata(others[0].bootstrap, [TOPIC])
            if s is None or leader in s.brokers:
                return False
            new = s.leaders[(TOPIC, 0)]
            return new == -1 if rf == 1 else new not in (-1, leader)

        wait_for(taken_over, T, f"the controller did not take {TOPIC}-0 from isolated broker "
                 f"{leader} (its registration should lapse after the session timeout)")
        held = len(_acked(outside_out))
        if rf == 1:
            # Offline: the brokers outside still know the cluster; the outside producer waits.
            s = metadata(others[1].bootstrap, [TOPIC])
            assert s is not None and s.leaders[(TOPIC, 0)] == -1, s
        else:
            # The producer's requests in flight to the isolated leader go unanswered until its
            # request.timeout.ms (30 s, librdkafka's default) before it looks for the new one.
            wait_for(lambda: len(_acked(outside_out)) > held, 3 * T,
                     f"the outside producer got nothing acknowledged by {TOPIC}-0's new leader")

        cluster.heal(leader)

        def rejoined() -> bool:
            s = metadata(others[0].bootstrap, [TOPIC])
            mine = metadata(cluster.broker(leader).bootstrap, [TOPIC])
            return (s is not None and mine is not None and leader in s.brokers
                    and s.leaders[(TOPIC, 0)] != -1 and mine.brokers == s.brokers
                    and mine.leaders == s.leaders)

        wait_for(rejoined, T, f"broker {leader} did not register again with a current view "
                 "after the cut healed")
        at_heal = len(_acked(inside_out)), len(_acked(outside_out))
        wait_for(lambda: len(_acked(inside_out)) > at_heal[0]
                 and len(_acked(outside_out)) > max(at_heal[1], held), T,
                 "the producers got no acknowledgements after the cut healed")
    finally:
        for p in (inside, far):
            p.send_signal(signal.SIGTERM)
        for p in (inside, far):
            try:
                p.wait(45)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    acked = _acked(inside_out) + _acked(outside_out)
    log = _read_partition(cluster.bootstrap)
    assert len(acked) == len(set(acked)), "a value was acknowledged twice"
    lost = [v for v in acked if v not in set(log)]
    assert lost == [], f"{len(lost)} acknowledged records are not in the log, e.g. {lost[:5]}"
    twice = sorted(v for v, n in Counter(log).items() if n > 1)
    assert twice == [], f"records in the log twice: {twice[:5]}"
