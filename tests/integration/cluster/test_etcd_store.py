"""Cluster metadata in a real etcd: cluster id, registration under leases, election, CAS topics."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from cluster.etcd_store import (
    ClusterIdMismatchError,
    ClusterStoreError,
    DuplicateNodeIdError,
    EtcdClusterStore,
    parse_endpoints,
)
from cluster.view import BrokerRegistration, Endpoint, PartitionAssignment, TopicRecord
from tests.conftest import free_port


def registration(node_id: int, rack: str | None = None) -> BrokerRegistration:
    return BrokerRegistration(
        node_id=node_id, rack=rack, incarnation=uuid.uuid4().hex,
        endpoints=(Endpoint("PLAINTEXT", "127.0.0.1", 9091 + node_id, "PLAINTEXT"),))


async def member(etcd, node_id: int | None = None, session_ms: int = 3000) -> EtcdClusterStore:
    store = EtcdClusterStore(parse_endpoints(etcd.endpoint), session_timeout_ms=session_ms,
                             heartbeat_interval_ms=500)
    await store.connect()
    await store.ensure_cluster_id("cluster-a")
    await store.start()
    if node_id is not None:
        await store.register(registration(node_id))
    return store


def stop_renewing(store: EtcdClusterStore) -> None:
    """As a kill -9 would: the lease renewals (a thread of their own) and the tasks stop, and
    nothing is revoked."""
    if store._keeper is not None:
        store._keeper.stop()
    for t in store._tasks:
        t.cancel()


async def test_brokers_see_each_other_and_a_closed_broker_leaves_at_once(etcd):
    one, two = await member(etcd, 1), await member(etcd, 2)
    try:
        await one.wait_for(lambda: set(one.view.brokers) == {1, 2}, 5)
        assert one.view.brokers[2].endpoint("PLAINTEXT").port == 9093
        started = time.monotonic()
        await two.close()
        await one.wait_for(lambda: set(one.view.brokers) == {1}, 5)
        # Revoked, not expired: well under the 3 s session timeout.
        assert time.monotonic() - started < 2
    finally:
        await one.close()
        await two.close()


async def test_a_broker_that_stops_renewing_leaves_within_its_session_timeout(etcd):
    watcher, dying = await member(etcd), await member(etcd, 7, session_ms=2000)
    try:
        await watcher.wait_for(lambda: 7 in watcher.view.brokers, 5)
        stop_renewing(dying)
        started = time.monotonic()
        await watcher.wait_for(lambda: 7 not in watcher.view.brokers, 10)
        assert time.monotonic() - started < 2 + 2.5
    finally:
        dying._lease = None
        await dying.close()
        await watcher.close()


async def test_a_broker_whose_event_loop_stalls_keeps_its_session(etcd):
    # The renewals run in a thread of their own: a loop blocked for longer than the session
    # timeout (a long synchronous step on a loaded machine) does not cost the broker its
    # registration, so its partitions do not move.
    busy = await member(etcd, 8, session_ms=2000)
    try:
        key = busy.keys.broker(8)
        before = await busy.client.get(key)
        time.sleep(3.5)  # the loop (and every task of this broker) is stuck
        after = await busy.client.get(key)
        assert after is not None and after.create_revision == before.create_revision
        assert busy.registration is not None and busy.session_ok
    finally:
        await busy.close()


async def test_a_broker_whose_event_loop_hangs_gives_its_session_up(etcd, monkeypatch):
    # A loop that does not turn for LOOP_STALL_LIMIT_S is hung: renewals stop, the lease
    # lapses and the other brokers see the broker leave (then it registers again once it
    # turns).
    monkeypatch.setattr("cluster.etcd_store.LOOP_STALL_LIMIT_S", 1.0)
    hung = await member(etcd, 9, session_ms=2000)
    try:
        key = hung.keys.broker(9)
        before = await hung.client.get(key)
        time.sleep(4.5)
        assert await hung.client.get(key) is None or (
            (await hung.client.get(key)).create_revision != before.create_revision)
        await hung.wait_for(lambda: 9 in hung.view.brokers and hung.registration is not None
                            and hung.view.brokers[9].incarnation
                            == hung.registration.incarnation, 10)
        again = await hung.client.get(key)
        assert again is not None and again.create_revision != before.create_revision
    finally:
        await hung.close()


async def test_a_duplicate_node_id_is_refused_while_the_first_broker_lives(etcd):
    first = await member(etcd, 3, session_ms=2000)
    second = await member(etcd)
    try:
        with pytest.raises(DuplicateNodeIdError, match="node id 3 is already registered"):
            await second.register(registration(3))
        # The first broker was not disturbed.
        assert first.view.brokers[3].incarnation == first.registration.incarnation
    finally:
        await first.close()
        await second.close()


async def test_a_restarted_broker_waits_out_its_own_stale_registration(etcd):
    old = await member(etcd, 4, session_ms=2000)
    stop_renewing(old)  # killed: the registration stays until its lease lapses
    old._lease = None
    await old.close()
    again = await member(etcd)
    try:
        await again.register(registration(4))
        await again.wait_for(
            lambda: again.view.brokers.get(4) is not None
            and again.view.brokers[4].incarnation == again.registration.incarnation, 5)
    finally:
        await again.close()


async def test_a_data_dir_of_another_cluster_is_refused(etcd):
    store = await member(etcd)
    other = EtcdClusterStore(parse_endpoints(etcd.endpoint))
    try:
        await other.connect()
        with pytest.raises(ClusterIdMismatchError, match="belongs to cluster cluster-b"):
            await other.ensure_cluster_id("cluster-b")
        assert await other.ensure_cluster_id("cluster-a") == "cluster-a"
    finally:
        await other.close()
        await store.close()


async def test_etcd_down_at_start_is_a_clear_error():
    store = EtcdClusterStore([("127.0.0.1", free_port())])
    started = time.monotonic()
    with pytest.raises(ClusterStoreError, match="cannot reach etcd at 127.0.0.1"):
        await store.connect()
    assert time.monotonic() - started < 8


async def test_one_controller_at_a_time_and_a_new_one_when_it_leaves(etcd):
    a, b = await member(etcd, 1), await member(etcd, 2)
    try:
        ta = asyncio.create_task(a.campaign())
        tb = asyncio.create_task(b.campaign())
        done, pending = await asyncio.wait({ta, tb}, timeout=5,
                                           return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1 and len(pending) == 1
        winner_task = done.pop()
        first = winner_task.result()
        winner, loser = (a, b) if winner_task is ta else (b, a)
        await loser.wait_for(lambda: loser.view.controller_id() == first.node_id, 5)
        await winner.close()
        second = await asyncio.wait_for(pending.pop(), 5)
        assert second.node_id == loser.registration.node_id
        assert second.epoch > first.epoch
    finally:
        await a.close()
        await b.close()


async def test_topic_changes_are_compare_and_swap_and_reach_every_broker(etcd):
    a, b = await member(etcd, 1), await member(etcd, 2)
    try:
        record = TopicRecord("orders", uuid.uuid4().hex,
                             (PartitionAssignment((1,), 1), PartitionAssignment((2,), 2)),
                             {"retention.ms": "1000"})
        rival = TopicRecord("orders", uuid.uuid4().hex, (PartitionAssignment((2,), 2),))
        results = await asyncio.gather(a.create_topic(record), b.create_topic(rival))
        assert sorted(results) == [False, True]
        await b.wait_for(lambda: "orders" in b.view.topics, 5)
        winner = b.view.topics["orders"]
        assert winner in (record, rival)

        revision = b.view.topic_revisions["orders"]
        grown = TopicRecord("orders", winner.topic_id,
                            winner.partitions + (PartitionAssignment((1,), 1),), winner.configs)
        assert await b.update_topic(grown, revision)
        # The same stale revision no longer matches.
        assert not await a.update_topic(winner, revision)
        await a.wait_for(lambda: a.view.topics.get("orders") == grown, 5)
        assert a.view.leader_of("orders", len(grown.partitions) - 1) == 1

        assert not await a.delete_topic("orders", revision)
        assert await a.delete_topic("orders", a.view.topic_revisions["orders"])
        await b.wait_for(lambda: "orders" not in b.view.topics, 5)
    finally:
        await a.close()
        await b.close()


async def test_a_partition_whose_broker_is_gone_has_no_leader(etcd):
    a, b = await member(etcd, 1), await member(etcd, 2)
    try:
        assert await a.create_topic(TopicRecord(
            "t", uuid.uuid4().hex, (PartitionAssignment((1,), 1), PartitionAssignment((2,), 2))))
        await a.wait_for(lambda: "t" in a.view.topics and 2 in a.view.brokers, 5)
        assert [a.view.leader_of("t", p) for p in (0, 1)] == [1, 2]
        await b.close()
        await a.wait_for(lambda: 2 not in a.view.brokers, 5)
        assert [a.view.leader_of("t", p) for p in (0, 1)] == [1, -1]
    finally:
        await a.close()
        await b.close()


async def test_unreadable_metadata_is_logged_and_skipped(etcd, caplog):
    a = await member(etcd)
    try:
        await a.client.put(a.keys.topic("bad"), b"{not json")
        assert await a.create_topic(TopicRecord("good", "id", (PartitionAssignment((1,), 1),)))
        await a.wait_for(lambda: "good" in a.view.topics, 5)
        assert "bad" not in a.view.topics
        assert "ignoring unreadable cluster metadata" in caplog.text
        assert "/shoal/topics/bad" in caplog.text
    finally:
        await a.close()


def test_endpoint_lists_parse_and_bad_ones_are_named():
    assert parse_endpoints("etcd://a:1,b:2") == [("a", 1), ("b", 2)]
    assert parse_endpoints("127.0.0.1:2379") == [("127.0.0.1", 2379)]
    with pytest.raises(ValueError, match="'a' is not host:port"):
        parse_endpoints("etcd://a")
    with pytest.raises(ValueError, match="no etcd endpoint"):
        parse_endpoints("etcd://")


async def test_the_controller_takes_a_dead_brokers_partitions_offline_and_back(etcd):
    from cluster.controller import run_controller

    ctl, other = await member(etcd, 1), await member(etcd, 2, session_ms=2000)
    task = asyncio.create_task(run_controller(ctl))
    try:
        assert await ctl.create_topic(TopicRecord(
            "t", "id", (PartitionAssignment((1,), 1, 0, (1,)), PartitionAssignment((2,), 2, 0, (2,)))))
        await ctl.wait_for(lambda: ctl.view.controller_id() == 1 and "t" in ctl.view.topics, 5)
        stop_renewing(other)  # killed
        other._lease = None
        await ctl.wait_for(lambda: ctl.view.topics["t"].partitions[1].leader == -1, 10)
        assert ctl.view.topics["t"].partitions[1].leader_epoch == 1
        assert ctl.view.topics["t"].partitions[0] == PartitionAssignment((1,), 1, 0, (1,))

        await other.close()
        again = await member(etcd, 2)
        try:
            await ctl.wait_for(lambda: ctl.view.topics["t"].partitions[1].leader == 2, 10)
            assert ctl.view.topics["t"].partitions[1].leader_epoch == 2
        finally:
            await again.close()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await ctl.close()
        await other.close()


async def test_id_blocks_never_overlap_between_brokers(etcd):
    a, b = await member(etcd), await member(etcd)
    try:
        starts = await asyncio.gather(*(s.allocate_block("producer_ids", 1000)
                                        for s in (a, b) for _ in range(10)))
    finally:
        await a.close()
        await b.close()
    assert sorted(starts) == [i * 1000 for i in range(20)]


async def test_the_view_survives_an_etcd_restart_and_catches_up(etcd):
    a = await member(etcd, 1, session_ms=20000)
    b = await member(etcd)
    try:
        record = TopicRecord("before", uuid.uuid4().hex, (PartitionAssignment((1,), 1),))
        assert await b.create_topic(record)
        await a.wait_for(lambda: "before" in a.view.topics, 10)
        etcd.stop()
        await asyncio.sleep(1.5)
        assert "before" in a.view.topics  # still serving from what it knew
        etcd.start()
        after = TopicRecord("after", uuid.uuid4().hex, (PartitionAssignment((1,), 1),))
        deadline = time.monotonic() + 20
        while True:  # b's own client reconnects on a later call
            try:
                assert await b.create_topic(after)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        await a.wait_for(lambda: "after" in a.view.topics, 20)
        assert 1 in a.view.brokers  # the registration outlived the outage (20 s session)
    finally:
        await a.close()
        await b.close()


async def test_brokers_starting_together_on_an_empty_etcd_agree_on_the_first_id(etcd):
    stores = [EtcdClusterStore(parse_endpoints(etcd.endpoint)) for _ in range(4)]
    try:
        for s in stores:
            await s.connect()
        ids = await asyncio.gather(*(s.ensure_cluster_id(f"fresh-{i}", adopt=True)
                                     for i, s in enumerate(stores)))
    finally:
        for s in stores:
            await s.close()
    assert len(set(ids)) == 1 and ids[0].startswith("fresh-")


async def test_security_writes_are_one_transaction_seen_by_every_broker(etcd):
    """ACL and SCRAM writes: any size up to MAX_TXN_OPS is one all-or-nothing transaction
    (nested past etcd's per-level op limit) whose revision the other broker's view reaches with
    every key in it; deleting keys that are gone changes nothing; the first broker's feature
    levels are the cluster's."""
    from cluster.errors import TooManyChangesError
    from cluster.etcd_store import MAX_TXN_OPS, TXN_CHUNK
    from cluster.view import ScramRecord
    from protocol.acl_types import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    one, two = await member(etcd), await member(etcd)
    try:
        acls = [AclBinding(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL, "User:a", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)
                for i in range(3 * TXN_CHUNK + 7)]
        revision, changed = await one.put_acls(acls, [])
        assert changed
        await two.wait_for(lambda: two.view.revision >= revision, 5)
        assert sorted(two.view.acls.values()) == sorted(acls)
        revision, changed = await one.put_acls(acls[:1], acls[1:])
        await two.wait_for(lambda: two.view.revision >= revision, 5)
        assert list(two.view.acls.values()) == acls[:1]
        assert (await one.put_acls([], acls[5:9]))[1] is False  # gone already

        cred = ScramRecord(b"s" * 12, b"k" * 32, b"v" * 32, 4096)
        revision, _ = await one.put_scram([("alice", "SCRAM-SHA-256", cred)], [])
        await two.wait_for(lambda: two.view.revision >= revision, 5)
        assert two.view.scram == {"alice": {"SCRAM-SHA-256": cred}}
        with pytest.raises(TooManyChangesError, match=f"at most {MAX_TXN_OPS}"):
            await one.put_acls(acls * 10, [])
        assert len(two.view.acls) == 1  # nothing of the refused change

        assert await one.ensure_features({"share.version": 1}) == {"share.version": 1}
        assert await two.ensure_features({"share.version": 2}) == {"share.version": 1}
        await two.wait_for(lambda: two.view.features == {"share.version": 1}, 5)
    finally:
        await one.close()
        await two.close()
