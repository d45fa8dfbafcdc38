"""TxnOffsetCommit (28) over the wire against a real broker, inside real transactions
(InitProducerId, AddOffsetsToTxn, EndTxn): the member and generation checks of v3+ for classic
and KIP-848 groups, the v0 form aiokafka sends, unknown topics, a group whose offsets partition
was not added to the transaction, offsets pending (OffsetFetch with RequireStable answers
UNSTABLE_OFFSET_COMMIT, without it the old offset) until EndTxn commits or aborts them, pending
offsets surviving a SIGKILL of the broker, and authorization with ACLs (WRITE on the
transactional id, READ on the group, READ per topic)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from coordinator.group.placement import partition_for_group
from protocol.messages import make
from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic

from tests.integration.rawclient import RawClient, request, request_module
from tests.integration.groups.test_classic_bad_input import join_new, sync

pytestmark = pytest.mark.timeout(90)

TOPIC = "txoc"
NONE = ErrorCode.none
FAST = {"group.initial.rebalance.delay.ms": "0"}
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions (default)


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txoc") / "data", overrides=FAST)
    b.start()
    create_topic(b.bootstrap, TOPIC, partitions=2)
    yield b
    b.stop()


def txn_commit(c: RawClient, group: str, *, version: int = 3, member: str = "",
               generation: int = -1, instance: str | None = None, pid: int = 1000,
               epoch: int = 0, txn_id: str = "tx", topics: tuple[tuple[str, int, int], ...] = (
                   (TOPIC, 0, 7),)) -> list[tuple[str, int, ErrorCode]]:
    """TxnOffsetCommit of (topic, partition, offset)s; the (topic, partition, error) answers."""
    m = request_module(28, version)
    by_topic: dict[str, list[Any]] = {}
    for t, p, o in topics:
        by_topic.setdefault(t, []).append(make(
            m.TxnOffsetCommitRequestPartition, partition_index=p, committed_offset=o, committed_leader_epoch=-1,
            committed_metadata="m"))
    resp = c.call(28, version, request(
        28, version, transactional_id=txn_id, group_id=group, producer_id=pid,
        producer_epoch=epoch, generation_id=generation, member_id=member,
        group_instance_id=instance, topics=tuple(
            m.TxnOffsetCommitRequestTopic(name=t, partitions=tuple(ps))
            for t, ps in by_topic.items())))
    return [(t.name, p.partition_index, p.error_code) for t in resp.topics for p in t.partitions]


def begin(c: RawClient, txn_id: str, *groups: str) -> tuple[int, int]:
    """InitProducerId for ``txn_id``, then AddOffsetsToTxn for each group: (pid, epoch)."""
    init = c.call(22, 4, request(22, 4, transactional_id=txn_id,
                                 transaction_timeout=timedelta(seconds=60), producer_id=-1,
                                 producer_epoch=-1))
    assert init.error_code == NONE, init
    for g in groups:
        added = c.call(25, 3, request(25, 3, transactional_id=txn_id, producer_id=init.producer_id,
                                      producer_epoch=init.producer_epoch, group_id=g))
        assert added.error_code == NONE, added
    return init.producer_id, init.producer_epoch


def end(c: RawClient, txn_id: str, pid: int, epoch: int, commit: bool) -> None:
    resp = c.call(26, 3, request(26, 3, transactional_id=txn_id, producer_id=pid,
                                 producer_epoch=epoch, committed=commit))
    assert resp.error_code == NONE, resp


def wait_stable(c: RawClient, group: str, timeout: float = 10.0
                ) -> list[tuple[int, int, ErrorCode]]:
    """OffsetFetch with RequireStable until no partition is unstable (the markers are written
    after EndTxn answers)."""
    deadline = time.monotonic() + timeout
    while True:
        got = fetch(c, group, stable=True)
        if all(e != ErrorCode.unstable_offset_commit for _, _, e in got) or \
                time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def fetch(c: RawClient, group: str, stable: bool, partitions: tuple[int, ...] = (0,)
          ) -> list[tuple[int, int, ErrorCode]]:
    m = request_module(9, 7)
    resp = c.call(9, 7, request(9, 7, group_id=group, require_stable=stable, topics=(
        m.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=partitions),)))
    assert resp.error_code == NONE, resp
    return [(p.partition_index, p.committed_offset, p.error_code)
            for p in resp.topics[0].partitions]


def plain_commit(c: RawClient, group: str, offset: int) -> None:
    m = request_module(8, 8)
    resp = c.call(8, 8, request(
        8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=(m.OffsetCommitRequestTopic(name=TOPIC, partitions=(
            m.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                           committed_leader_epoch=-1,
                                           committed_metadata=None),)),)))
    assert resp.topics[0].partitions[0].error_code == NONE


def test_classic_group_member_checks_and_pending_offsets(txn_broker: BrokerProcess) -> None:
    group = "txoc-classic"
    with RawClient(txn_broker.bootstrap) as c:
        plain_commit(c, group, 3)
        joined = join_new(c, group)
        assert joined.error_code == NONE, joined
        member, gen = joined.member_id, joined.generation_id
        assert sync(c, group, member, gen, ((member, b"A"),)).error_code == NONE
        pid, epoch = begin(c, "tx-classic", group, "txoc-nobody")
        kw: dict[str, Any] = dict(pid=pid, epoch=epoch, txn_id="tx-classic")
        assert txn_commit(c, group, member="stranger", generation=gen, **kw) == [
            (TOPIC, 0, ErrorCode.unknown_member_id)]
        assert txn_commit(c, group, member=member, generation=gen + 5, **kw) == [
            (TOPIC, 0, ErrorCode.illegal_generation)]
        assert txn_commit(c, "txoc-nobody", generation=2, **kw) == [
            (TOPIC, 0, ErrorCode.illegal_generation)]
        assert txn_commit(c, group, topics=((TOPIC, 0, 9), (TOPIC, 7, 9), ("txoc-none", 0, 9)),
                          member=member, generation=gen, **kw) == [
            (TOPIC, 0, NONE), (TOPIC, 7, ErrorCode.unknown_topic_or_partition),
            ("txoc-none", 0, ErrorCode.unknown_topic_or_partition)]
        # Pending until the transaction ends: read_committed consumers are told to retry.
        assert fetch(c, group, stable=True) == [(0, -1, ErrorCode.unstable_offset_commit)]
        assert fetch(c, group, stable=False) == [(0, 3, NONE)]
        # DeleteGroups refuses a group with pending transactional offsets.
        assert c.call(13, 5, request(13, 5, group_id=group, members=(
            request_module(13, 5).MemberIdentity(member_id=member, group_instance_id=None,
                                                 reason=None),))).error_code == NONE
        deleted = c.call(42, 2, request(42, 2, groups_names=(group,)))
        assert deleted.results[0].error_code == ErrorCode.non_empty_group
        # A group whose offsets partition is not in the transaction is refused.
        added = {partition_for_group(g, OFFSETS_PARTITIONS) for g in (group, "txoc-nobody")}
        other = next(f"txoc-not-added-{i}" for i in range(1000)
                     if partition_for_group(f"txoc-not-added-{i}", OFFSETS_PARTITIONS) not in added)
        assert txn_commit(c, other, **kw)[0][2] == ErrorCode.transaction_abortable
        # EndTxn commits them: the offset becomes the group's committed offset.
        end(c, "tx-classic", pid, epoch, commit=True)
        assert wait_stable(c, group) == [(0, 9, NONE)]
        # A re-initialized producer fences the old epoch; an aborted transaction drops them.
        pid2, epoch2 = begin(c, "tx-classic", group)
        assert txn_commit(c, group, **kw)[0][2] in (ErrorCode.producer_fenced,
                                                   ErrorCode.invalid_producer_epoch)
        assert txn_commit(c, group, pid=pid2, epoch=epoch2, txn_id="tx-classic",
                          topics=((TOPIC, 0, 50),)) == [(TOPIC, 0, NONE)]
        end(c, "tx-classic", pid2, epoch2, commit=False)
        assert wait_stable(c, group) == [(0, 9, NONE)]
        deleted = c.call(42, 2, request(42, 2, groups_names=(group,)))
        assert deleted.results[0].error_code == NONE


def test_v0_without_member_fields_and_pending_offsets_survive_a_kill(tmp_path: Path) -> None:
    """The v0 form (aiokafka): no member id or generation. The pending offset is durable: after
    kill -9 and a restart it is still pending (not committed, not lost)."""
    b = BrokerProcess(tmp_path / "data", overrides=FAST)
    b.start()
    try:
        create_topic(b.bootstrap, TOPIC, partitions=1)
        with RawClient(b.bootstrap) as c:
            plain_commit(c, "txoc-v0", 2)
            pid, epoch = begin(c, "tx-v0", "txoc-v0")
            assert txn_commit(c, "txoc-v0", version=0, topics=((TOPIC, 0, 11),), pid=pid,
                              epoch=epoch, txn_id="tx-v0") == [(TOPIC, 0, NONE)]
            assert fetch(c, "txoc-v0", stable=True) == [(0, -1, ErrorCode.unstable_offset_commit)]
        b.kill()
        b.start()
        with RawClient(b.bootstrap) as c:
            assert fetch(c, "txoc-v0", stable=True) == [(0, -1, ErrorCode.unstable_offset_commit)]
            assert fetch(c, "txoc-v0", stable=False) == [(0, 2, NONE)]
            listed = c.call(16, 4, request(16, 4, states_filter=()))
            assert "txoc-v0" in {g.group_id for g in listed.groups}
            # The restarted transaction coordinator finishes the transaction.
            end(c, "tx-v0", pid, epoch, commit=True)
            assert wait_stable(c, "txoc-v0") == [(0, 11, NONE)]
    finally:
        b.stop()


def test_consumer_group_member_epoch_checks(txn_broker: BrokerProcess) -> None:
    group = "txoc-848"
    with RawClient(txn_broker.bootstrap) as c:
        hb = c.call(68, 1, request(68, 1, group_id=group, member_id=uuid.uuid4().hex,
                                   member_epoch=0, rebalance_timeout=timedelta(seconds=30),
                                   subscribed_topic_names=(TOPIC,), topic_partitions=()))
        assert hb.error_code == NONE, hb
        member, epoch = hb.member_id, hb.member_epoch
        pid, pepoch = begin(c, "tx-848", group)
        kw: dict[str, Any] = dict(pid=pid, epoch=pepoch, txn_id="tx-848")
        assert txn_commit(c, group, version=4, member=member, generation=epoch + 3, **kw) == [
            (TOPIC, 0, ErrorCode.illegal_generation)]
        assert txn_commit(c, group, version=4, member="nobody", generation=epoch, **kw) == [
            (TOPIC, 0, ErrorCode.unknown_member_id)]
        assert txn_commit(c, group, version=4, **kw) == [(TOPIC, 0, ErrorCode.unknown_member_id)]
        assert txn_commit(c, group, version=5, member=member, generation=epoch, **kw) == [
            (TOPIC, 0, NONE)]
        assert fetch(c, group, stable=True) == [(0, -1, ErrorCode.unstable_offset_commit)]


# -- authorization ----------------------------------------------------------------------------

ANON = "User:ANONYMOUS"
LITERAL = ResourcePatternType.LITERAL


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """StandardAuthorizer; ANONYMOUS may WRITE transactional id ``tx-ok``, READ group ``g-ok``
    and READ topic ``t-ok`` (``t-denied`` exists but is not readable)."""
    b = BrokerProcess(tmp_path_factory.mktemp("txoc-acl") / "data", overrides={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": ANON})
    b.start()
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic("t-ok", 1, 1), NewTopic("t-denied", 1, 1)],
                    operation_timeout=10)["t-ok"].result(timeout=10)
    acls = [AclBinding(ResourceType.TRANSACTIONAL_ID, "tx-ok", LITERAL, ANON, "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TRANSACTIONAL_ID, "tx-ok", LITERAL, ANON, "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.GROUP, "g-ok", LITERAL, ANON, "*", AclOperation.READ,
                       AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "t-ok", LITERAL, ANON, "*", AclOperation.READ,
                       AclPermissionType.ALLOW)]
    for f in a.create_acls(acls, request_timeout=10).values():
        assert f.result(timeout=10) is None
    b.stop()
    del b.overrides["super.users"]
    b.start()
    yield b
    b.stop()


def test_authorization(acl_broker: BrokerProcess) -> None:
    both = (("t-ok", 0, 1), ("t-denied", 0, 1))
    with RawClient(acl_broker.bootstrap) as c:
        txn_auth = ErrorCode.transactional_id_authorization_failed
        assert txn_commit(c, "g-ok", txn_id="tx-no", topics=both) == [
            ("t-ok", 0, txn_auth), ("t-denied", 0, txn_auth)]
        gaf = ErrorCode.group_authorization_failed
        assert txn_commit(c, "g-no", txn_id="tx-ok", topics=both) == [
            ("t-ok", 0, gaf), ("t-denied", 0, gaf)]
        pid, epoch = begin(c, "tx-ok", "g-ok")
        assert txn_commit(c, "g-ok", txn_id="tx-ok", topics=both, pid=pid, epoch=epoch) == [
            ("t-ok", 0, NONE), ("t-denied", 0, ErrorCode.topic_authorization_failed)]


def test_aiokafka_sends_offsets_to_its_transaction(txn_broker: BrokerProcess) -> None:
    """aiokafka 0.14 (TxnOffsetCommit v0): offsets sent in a committed transaction become the
    group's; in an aborted one they do not."""
    import asyncio

    from aiokafka import AIOKafkaProducer, TopicPartition

    group = "txoc-aio"

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="tx-aio")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(TOPIC, b"x", partition=1)
                await p.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 17}, group)
            await p.begin_transaction()
            await p.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 99}, group)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    with RawClient(txn_broker.bootstrap) as c:
        assert wait_stable(c, group) == [(0, 17, NONE)]
