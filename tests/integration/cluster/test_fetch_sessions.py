"""Follower fetch sessions (KIP-227) at a leader on a real three-broker cluster.

A follower's fetch in a session names only what changed and is answered with only what
changed; that is what keeps a follower round short when a broker follows hundreds of quiet
internal partitions. Here a client logged in as the inter-broker super user fetches as replica
99 (no replica of the topic, so its fetches do not count as a follower's progress):

- a full fetch (session 0, epoch 0) opens a session and is answered with every partition;
- an incremental fetch with nothing new is answered with no partition at all;
Two partitions led by one broker are used.

- a record appended to one partition is answered for that partition alone, to a fetch that
  names none;
- a replayed epoch gets INVALID_FETCH_SESSION_EPOCH, an unknown session
  FETCH_SESSION_ID_NOT_FOUND, and a session forgets the partitions the follower drops;
- a consumer login (no CLUSTER_ACTION) gets no session: every partition is refused.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from client.pool import ConnectionPool
from client.security import SecuritySettings
from protocol.codec import request_module
from protocol.messages import make
from tests.integration.cluster.conftest import Cluster
from tests.integration.cluster.net_cluster import wait_for

FETCH = 1
OBSERVER = 99
T = 30


def _internal_port(cluster: Cluster, node_id: int) -> int:
    listeners = cluster.brokers[node_id - 1].overrides["listeners"]
    internal = [x for x in listeners.split(",") if x.startswith("INTERNAL://")][0]
    return int(internal.rsplit(":", 1)[1])


def _produce(bootstrap: str, topic: str, partition: int, value: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    p.produce(topic, value, partition=partition,
              on_delivery=lambda err, _msg: errors.append(err))
    p.flush(T)
    assert errors == [None]


def _fetch(session_id: int, epoch: int, offsets: dict[int, int], topic: str,
           forgotten: tuple[int, ...] = (), wait_ms: int = 0) -> Any:
    def build(version: int) -> Any:
        m = request_module(FETCH, version)
        parts = tuple(make(m.FetchPartition, partition=p, current_leader_epoch=-1,
                           fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
                           partition_max_bytes=1 << 20) for p, o in offsets.items())
        return make(m.FetchRequest, replica_id=OBSERVER, max_wait=datetime.timedelta(
            milliseconds=wait_ms), min_bytes=1, max_bytes=10 << 20, isolation_level=0,
            session_id=session_id, session_epoch=epoch,
            topics=(make(m.FetchTopic, topic=topic, partitions=parts),) if parts else (),
            forgotten_topics_data=(make(m.ForgottenTopic, topic=topic,
                                        partitions=forgotten),) if forgotten else (),
            rack_id="")
    return build


def _answered(resp: Any) -> dict[int, tuple[int, int]]:
    """{partition: (error code, record bytes)} of a Fetch response."""
    return {p.partition_index: (int(p.error_code), len(p.records or b""))
            for t in resp.responses for p in t.partitions}


async def test_a_follower_fetch_session_answers_only_what_changed(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"sessions-{time.monotonic_ns()}"
    admin.create_topics([NewTopic(topic, 4, 3)])[topic].result(T)
    # Four partitions on three brokers: one broker leads at least two of them.
    leaders = wait_for(lambda: (ps := admin.list_topics(topic, timeout=T).topics[topic]
                                .partitions) and all(p.leader > 0 for p in ps.values())
                       and {n: p.leader for n, p in ps.items()}, T, "leaders")
    leader = max(set(leaders.values()), key=list(leaders.values()).count)
    a, b = sorted(n for n, lead in leaders.items() if lead == leader)[:2]
    _produce(cluster.bootstrap, topic, a, b"a")
    _produce(cluster.bootstrap, topic, b, b"b")

    port = _internal_port(cluster, leader)
    pool = ConnectionPool("session-test", SecuritySettings(
        protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="broker",
        sasl_password="broker-secret"))
    try:
        async def call(build: Any) -> Any:
            return (await pool.request(leader, "127.0.0.1", port, FETCH, 12, 12, build, T))[1]

        full = await call(_fetch(0, 0, {a: 0, b: 0}, topic))
        assert full.error_code == ErrorCode.none and full.session_id != 0
        assert {p: e for p, (e, _) in _answered(full).items()} == {a: 0, b: 0}
        assert all(n > 0 for _, n in _answered(full).values())
        sid = full.session_id

        quiet = await call(_fetch(sid, 1, {a: 1, b: 1}, topic))
        assert quiet.error_code == ErrorCode.none and quiet.session_id == sid
        assert _answered(quiet) == {}

        _produce(cluster.bootstrap, topic, b, b"c")
        one = await call(_fetch(sid, 2, {}, topic, wait_ms=5000))
        assert set(_answered(one)) == {b} and _answered(one)[b][1] > 0

        replayed = await call(_fetch(sid, 2, {}, topic))
        assert replayed.error_code == ErrorCode.invalid_fetch_session_epoch
        unknown = await call(_fetch(sid + 1, 1, {}, topic))
        assert unknown.error_code == ErrorCode.fetch_session_id_not_found

        # The session survived the refused fetches (their epochs were wrong, not its own).
        # Forget partition a; a record there is not answered, one on partition b is.
        dropped = await call(_fetch(sid, 3, {b: 2}, topic, forgotten=(a,)))
        assert dropped.error_code == ErrorCode.none and _answered(dropped) == {}
        _produce(cluster.bootstrap, topic, a, b"d")
        _produce(cluster.bootstrap, topic, b, b"e")
        after = await call(_fetch(sid, 4, {}, topic, wait_ms=5000))
        assert set(_answered(after)) == {b}
    finally:
        await pool.close()

    anonymous = ConnectionPool("session-test-anonymous")
    try:
        client_port = cluster.brokers[leader - 1].port
        _v, refused = await anonymous.request(leader, "127.0.0.1", client_port, FETCH, 12, 12,
                                              _fetch(0, 0, {a: 0, b: 0}, topic), T)
        assert refused.session_id == 0
        assert _answered(refused) == {a: (ErrorCode.topic_authorization_failed, 0),
                                      b: (ErrorCode.topic_authorization_failed, 0)}
    finally:
        await anonymous.close()
