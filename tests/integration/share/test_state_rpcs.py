"""The five share-state RPCs (83-87) over a socket against a broker process.

They are inter-broker RPCs authorized as CLUSTER_ACTION: a plain client is refused with
CLUSTER_AUTHORIZATION_FAILED and a share group's progress is untouched. The other tests run on a
broker whose ``super.users`` lets the test client act as the cluster: Initialize -> Write -> Read
returns the batches; fencing (leader and state epochs), uninitialized and unknown keys; delete;
the summary (v0 and v1); replies grouped per topic in request order; and durability: state
written before a SIGKILL is read back after the restart.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.rawclient import RawClient, request
from tests.integration.share_helpers import poll_until, produce, set_group_configs, share_consumer

INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
FIND_COORDINATOR, DESCRIBE_OFFSETS = 10, 90
ZERO_UUID = uuid.UUID(int=0)
AS_CLUSTER = {"super.users": "User:ANONYMOUS"}


@pytest.fixture(scope="module")
def cluster_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker on which the test client may send the inter-broker RPCs (super.users)."""
    b = BrokerProcess(tmp_path_factory.mktemp("state-rpcs") / "data", AS_CLUSTER)
    b.start()
    yield b
    b.stop()


def create_topic(c: RawClient, name: str, partitions: int = 1) -> uuid.UUID:
    m = RawClient.request_module(19, 7)
    topic = m.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                             assignments=(), configs=())
    resp = c.call(19, 7, request(19, 7, topics=(topic,), timeout=timedelta(seconds=10),
                                 validate_only=False))
    (t,) = resp.topics
    assert t.error_code == ErrorCode.none, t
    assert isinstance(t.topic_id, uuid.UUID)
    return t.topic_id


def initialize(c: RawClient, group: str, topic_id: uuid.UUID | None,
               parts: dict[int, tuple[int, int]]) -> dict[int, ErrorCode]:
    """``parts``: partition -> (state epoch, start offset)."""
    m = RawClient.request_module(INITIALIZE, 0)
    body = m.InitializeShareGroupStateRequest(group_id=group, topics=(m.InitializeStateData(
        topic_id=topic_id, partitions=tuple(
            m.PartitionData(partition=p, state_epoch=se, start_offset=so)
            for p, (se, so) in parts.items())),))
    (t,) = c.call(INITIALIZE, 0, body).results
    return {p.partition: p.error_code for p in t.partitions}


def write(c: RawClient, group: str, topic_id: uuid.UUID, partition: int, *,
          start: int, batches: tuple[tuple[int, int, int, int], ...] = (), leader_epoch: int = 0,
          state_epoch: int = 0, dcc: int = -1, version: int = 1) -> ErrorCode:
    m = RawClient.request_module(WRITE, version)
    data = _make(m.PartitionData, partition=partition, state_epoch=state_epoch,
                 leader_epoch=leader_epoch, start_offset=start, delivery_complete_count=dcc,
                 state_batches=tuple(m.StateBatch(first_offset=f, last_offset=last,
                                                  delivery_state=s, delivery_count=n)
                                     for f, last, s, n in batches))
    body = m.WriteShareGroupStateRequest(group_id=group, topics=(m.WriteStateData(
        topic_id=topic_id, partitions=(data,)),))
    (t,) = c.call(WRITE, version, body).results
    (r,) = t.partitions
    return r.error_code


def read(c: RawClient, group: str, topic_id: uuid.UUID, partitions: dict[int, int]) -> dict[int, Any]:
    """``partitions``: partition -> leader epoch."""
    m = RawClient.request_module(READ, 0)
    body = m.ReadShareGroupStateRequest(group_id=group, topics=(m.ReadStateData(
        topic_id=topic_id, partitions=tuple(m.PartitionData(partition=p, leader_epoch=e)
                                            for p, e in partitions.items())),))
    (t,) = c.call(READ, 0, body).results
    assert t.topic_id == topic_id
    return {p.partition: p for p in t.partitions}


def batches(r: Any) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in r.state_batches]


def summary(c: RawClient, group: str, topic_id: uuid.UUID, partition: int, version: int = 1) -> Any:
    m = RawClient.request_module(SUMMARY, version)
    body = m.ReadShareGroupStateSummaryRequest(group_id=group, topics=(m.ReadStateSummaryData(
        topic_id=topic_id, partitions=(m.PartitionData(partition=partition, leader_epoch=0),)),))
    (t,) = c.call(SUMMARY, version, body).results
    (r,) = t.partitions
    return r


def delete(c: RawClient, group: str, topic_id: uuid.UUID,
           partitions: tuple[int, ...]) -> dict[int, ErrorCode]:
    m = RawClient.request_module(DELETE, 0)
    body = m.DeleteShareGroupStateRequest(group_id=group, topics=(m.DeleteStateData(
        topic_id=topic_id, partitions=tuple(m.PartitionData(partition=p) for p in partitions)),))
    (t,) = c.call(DELETE, 0, body).results
    return {p.partition: p.error_code for p in t.partitions}


def _make(cls: type, **fields: Any) -> Any:
    from protocol.messages import make

    return make(cls, **fields)


# ----------------------------------------------------------------------------------------------


def test_initialize_write_read_roundtrip(cluster_broker, unique) -> None:
    with RawClient(cluster_broker.bootstrap) as c:
        tid = create_topic(c, unique, partitions=2)
        assert initialize(c, unique, tid, {0: (0, 10), 1: (0, -1)}) == {0: ErrorCode.none, 1: ErrorCode.none}
        got = read(c, unique, tid, {0: 0, 1: 0})
        assert (got[0].error_code, got[0].start_offset, batches(got[0])) == (ErrorCode.none, 10, [])
        assert (got[1].error_code, got[1].start_offset) == (ErrorCode.none, -1)

        assert write(c, unique, tid, 0, start=10, batches=((10, 14, 2, 1), (15, 19, 0, 1)),
                     dcc=5) == ErrorCode.none
        assert write(c, unique, tid, 0, start=15, batches=((15, 16, 4, 2),), version=0) == ErrorCode.none
        got = read(c, unique, tid, {0: 0})
        assert got[0].error_code == ErrorCode.none
        assert got[0].state_epoch == 0 and got[0].start_offset == 15
        assert batches(got[0]) == [(15, 16, 4, 2), (17, 19, 0, 1)]

        s1 = summary(c, unique, tid, 0, version=1)
        assert (s1.error_code, s1.start_offset, s1.leader_epoch, s1.state_epoch) == (ErrorCode.none, 15, 0, 0)
        assert s1.delivery_complete_count == -1  # the v0 write said "unknown"
        s0 = summary(c, unique, tid, 1, version=0)
        assert (s0.error_code, s0.start_offset) == (ErrorCode.none, -1)


def test_fencing_and_request_errors(cluster_broker, unique) -> None:
    with RawClient(cluster_broker.bootstrap) as c:
        tid = create_topic(c, unique)
        assert write(c, unique, tid, 0, start=0) == ErrorCode.invalid_request  # not initialized
        assert read(c, unique, tid, {0: 0})[0].error_code == ErrorCode.invalid_request
        assert initialize(c, unique, tid, {0: (3, 0)}) == {0: ErrorCode.none}
        # A lower state epoch is fenced for initialize and write.
        assert initialize(c, unique, tid, {0: (2, 0)}) == {0: ErrorCode.fenced_state_epoch}
        assert write(c, unique, tid, 0, start=0, state_epoch=2) == ErrorCode.fenced_state_epoch
        # A new leader reads with epoch 5: the old leader (epoch 4) is fenced from then on.
        assert read(c, unique, tid, {0: 5})[0].error_code == ErrorCode.none
        stale = write(c, unique, tid, 0, start=1, leader_epoch=4, state_epoch=3)
        assert stale == ErrorCode.fenced_leader_epoch
        assert read(c, unique, tid, {0: 4})[0].error_code == ErrorCode.fenced_leader_epoch
        assert write(c, unique, tid, 0, start=1, leader_epoch=5, state_epoch=3) == ErrorCode.none
        assert summary(c, unique, tid, 0).leader_epoch == 5
        # Unknown topic id or partition, a zero topic id, an empty group id.
        assert initialize(c, unique, uuid.uuid4(), {0: (0, 0)}) == {0: ErrorCode.unknown_topic_or_partition}
        assert initialize(c, unique, tid, {7: (0, 0)}) == {7: ErrorCode.unknown_topic_or_partition}
        assert initialize(c, unique, ZERO_UUID, {0: (0, 0)}) == {0: ErrorCode.invalid_request}
        assert initialize(c, "", tid, {0: (0, 0)}) == {0: ErrorCode.invalid_request}
        assert initialize(c, unique, tid, {-1: (0, 0)}) == {-1: ErrorCode.invalid_request}


def test_delete_then_summary_and_read(cluster_broker, unique) -> None:
    with RawClient(cluster_broker.bootstrap) as c:
        tid = create_topic(c, unique, partitions=3)
        assert initialize(c, unique, tid, {0: (0, 0), 1: (0, 0)}) == {0: ErrorCode.none, 1: ErrorCode.none}
        assert write(c, unique, tid, 1, start=3, batches=((3, 3, 2, 1),)) == ErrorCode.none
        # Deleting a key without state (partition 2) is not an error.
        assert delete(c, unique, tid, (1, 2)) == {1: ErrorCode.none, 2: ErrorCode.none}
        got = read(c, unique, tid, {0: 0, 1: 0})
        assert got[0].error_code == ErrorCode.none
        assert got[1].error_code == ErrorCode.invalid_request
        assert summary(c, unique, tid, 1).start_offset == -1
        # Re-initializing after a delete starts afresh.
        assert initialize(c, unique, tid, {1: (0, 7)}) == {1: ErrorCode.none}
        assert read(c, unique, tid, {1: 0})[1].start_offset == 7


def test_many_keys_in_one_request_keep_their_order(cluster_broker, unique) -> None:
    """Keys of one request land on many coordinator partitions; replies come back in order."""
    with RawClient(cluster_broker.bootstrap) as c:
        tid = create_topic(c, unique, partitions=40)
        order = list(reversed(range(40)))
        codes = initialize(c, unique, tid, {p: (0, p * 100) for p in order})
        assert list(codes) == order and set(codes.values()) == {ErrorCode.none}
        got = read(c, unique, tid, {p: 0 for p in order})
        assert list(got) == order
        assert [got[p].start_offset for p in order] == [p * 100 for p in order]


def test_state_survives_kill_and_restart(fresh_broker, unique) -> None:
    b = fresh_broker
    b.overrides.update(AS_CLUSTER)
    b.start()
    expected: dict[int, tuple[int, list[tuple[int, int, int, int]]]] = {}
    with RawClient(b.bootstrap) as c:
        tid = create_topic(c, unique, partitions=8)
        assert set(initialize(c, unique, tid, {p: (1, 0) for p in range(8)}).values()) == {ErrorCode.none}
        for p in range(8):
            for i in range(p + 3):  # a few updates each, more than one record per key
                assert write(c, unique, tid, p, start=i, batches=((i, i + 1, 2, 1),),
                             state_epoch=1, leader_epoch=1) == ErrorCode.none
            expected[p] = (p + 2, [(p + 2, p + 3, 2, 1)])
        assert initialize(c, unique, tid, {0: (2, 50)}) == {0: ErrorCode.none}
        expected[0] = (50, [])
        assert delete(c, unique, tid, (7,)) == {7: ErrorCode.none}
    b.kill()  # SIGKILL: nothing close() would do has happened
    b.start()
    with RawClient(b.bootstrap) as c:
        got = read(c, unique, tid, {p: 1 for p in range(8)})
        assert got[7].error_code == ErrorCode.invalid_request
        for p in range(7):
            assert got[p].error_code == ErrorCode.none, (p, got[p])
            assert (got[p].start_offset, batches(got[p])) == expected[p], p
        assert got[0].state_epoch == 2
        # Fencing survived too: leader epoch 1 was recorded, 0 is now stale.
        stale = write(c, unique, tid, 1, start=9, leader_epoch=0, state_epoch=1)
        assert stale == ErrorCode.fenced_leader_epoch


def _start_offset(c: RawClient, group: str, topic: str) -> int:
    m = RawClient.request_module(DESCRIBE_OFFSETS, 1)
    resp = c.call(DESCRIBE_OFFSETS, 1, m.DescribeShareGroupOffsetsRequest(groups=(
        m.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=(
            m.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(0,)),)),)))
    (p,) = resp.groups[0].topics[0].partitions
    assert p.error_code == ErrorCode.none, p
    return int(p.start_offset)


def _consume(bootstrap: str, group: str, topic: str, want: int) -> list[bytes]:
    """Receive ``want`` records, ACCEPT them and commit (each answered after its state write)."""
    c = share_consumer(bootstrap, group, topic, explicit=True)
    got: list[Any] = []
    try:
        poll_until([c], lambda: len(got) >= want, on_message=lambda _i, msg: got.append(msg))
        for msg in got:
            c.acknowledge(msg, AcknowledgeType.ACCEPT)
        c.commit_sync(15)
    finally:
        c.close()
    return [msg.value() for msg in got]


def test_clients_are_refused_the_share_state_rpcs_and_progress_is_untouched(broker, unique) -> None:
    """A plain client (the shared broker has no super.users) may neither fence the broker's own
    share-partition (a read with leader epoch 1000), nor reset, overwrite or delete its state."""
    with RawClient(broker.bootstrap) as c:
        tid = create_topic(c, unique)
    set_group_configs(broker.bootstrap, unique, {"share.auto.offset.reset": "earliest"})
    produce(broker.bootstrap, unique, 10)
    assert len(_consume(broker.bootstrap, unique, unique, 10)) == 10
    refused = ErrorCode.cluster_authorization_failed
    with RawClient(broker.bootstrap) as c:
        assert _start_offset(c, unique, unique) == 10
        assert initialize(c, unique, tid, {0: (1000, 0)}) == {0: refused}
        assert read(c, unique, tid, {0: 1000})[0].error_code == refused
        assert write(c, unique, tid, 0, start=0, batches=((0, 9, 0, 1),), leader_epoch=1000,
                     state_epoch=1000) == refused
        assert delete(c, unique, tid, (0,)) == {0: refused}
        assert summary(c, unique, tid, 0).error_code == refused
        # Even an invalid request is refused first: nothing about the state leaks.
        assert initialize(c, "", tid, {0: (0, 0)}) == {0: refused}
        # FindCoordinator for a SHARE key is a share-partition leader's lookup, not a client's.
        m = RawClient.request_module(FIND_COORDINATOR, 6)
        resp = c.call(FIND_COORDINATOR, 6, m.FindCoordinatorRequest(
            key_type=2, coordinator_keys=(f"{unique}:{tid}:0",)))
        assert resp.coordinators[0].error_code == refused
        assert _start_offset(c, unique, unique) == 10
    # The broker's own share-partition is not fenced: it still delivers and records progress.
    produce(broker.bootstrap, unique, 5, prefix="late")
    assert sorted(_consume(broker.bootstrap, unique, unique, 5)) == [b"late%d" % i for i in range(5)]
    with RawClient(broker.bootstrap) as c:
        assert _start_offset(c, unique, unique) == 15
