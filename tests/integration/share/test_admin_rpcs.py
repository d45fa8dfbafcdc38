"""Share-group admin RPCs over the wire: DescribeGroups, DeleteGroups, DescribeShareGroupOffsets,
AlterShareGroupOffsets and DeleteShareGroupOffsets, with their results and error codes
(reference section 7, section 8 item 28), plus confluent-kafka's AdminClient.list_groups.

Requests are raw kio messages (RawClient) so every version and error path can be chosen; share
state is set either through WriteShareGroupState (exact lag arithmetic) or by a real
confluent_kafka.ShareConsumer (item 28: released records count as lag, rejected ones do not).
Every wait is a bounded poll.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, request, request_module
from tests.integration.share_helpers import poll_until, produce, set_group_configs, share_consumer

API_VERSIONS, METADATA, DESCRIBE_CONFIGS = 18, 3, 32
DESCRIBE_GROUPS, DELETE_GROUPS, HEARTBEAT, SHARE_DESCRIBE = 15, 42, 76, 77
WRITE_STATE = 85
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92
GROUP_RESOURCE, GROUP_CONFIG_SOURCE = 32, 8
ACKNOWLEDGED = 2

NOT_HOSTED = "This server does not host this topic-partition."


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of this module's own on which the test client may act as the cluster
    (super.users): ``write_state`` sets exact share state with WriteShareGroupState, an
    inter-broker RPC that plain clients are refused."""
    b = BrokerProcess(tmp_path_factory.mktemp("admin-rpcs") / "data",
                      {"super.users": "User:ANONYMOUS"})
    b.start()
    yield b
    b.stop()


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.bootstrap, client_id="admin-rpc-test") as c:
        yield c


def topic_id(c: RawClient, name: str) -> uuid.UUID:
    m = request_module(METADATA, 12)
    resp = c.call(METADATA, 12, m.MetadataRequest(
        topics=(m.MetadataRequestTopic(name=name, topic_id=None),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    (t,) = resp.topics
    assert t.error_code == ErrorCode.none
    return t.topic_id


def join(c: RawClient, group: str, topics: tuple[str, ...]) -> str:
    """A member joins (and gets its partitions initialized); returns the member id."""
    member = str(uuid.uuid4())
    resp = c.call(HEARTBEAT, 1, request(HEARTBEAT, 1, group_id=group, member_id=member,
                                        member_epoch=0, rack_id=None,
                                        subscribed_topic_names=topics))
    assert resp.error_code == ErrorCode.none, resp
    return member


def leave(c: RawClient, group: str, member: str) -> None:
    resp = c.call(HEARTBEAT, 1, request(HEARTBEAT, 1, group_id=group, member_id=member,
                                        member_epoch=-1, rack_id=None,
                                        subscribed_topic_names=None))
    assert resp.error_code == ErrorCode.none, resp


def group_state(c: RawClient, group: str) -> str:
    resp = c.call(SHARE_DESCRIBE, 1, request(SHARE_DESCRIBE, 1, group_ids=(group,),
                                             include_authorized_operations=False))
    state: str = resp.groups[0].group_state
    return state


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def describe_offsets(c: RawClient, group: str, topics: dict[str, tuple[int, ...]] | None = None,
                     version: int = 1) -> Any:
    m = request_module(DESCRIBE_OFFSETS, version)
    req_topics = None if topics is None else tuple(
        m.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
        for t, ps in topics.items())
    resp = c.call(DESCRIBE_OFFSETS, version, m.DescribeShareGroupOffsetsRequest(
        groups=(m.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=req_topics),)))
    (g,) = resp.groups
    return g


def offsets(g: Any) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (start offset, lag, error code) of a described group."""
    return {(t.topic_name, p.partition_index): (p.start_offset, getattr(p, "lag", None),
                                                p.error_code)
            for t in g.topics for p in t.partitions}


def alter(c: RawClient, group: str, topics: dict[str, dict[int, int]]) -> Any:
    m = request_module(ALTER_OFFSETS, 0)
    return c.call(ALTER_OFFSETS, 0, m.AlterShareGroupOffsetsRequest(group_id=group, topics=tuple(
        m.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(
            m.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
            for p, o in parts.items()))
        for t, parts in topics.items())))


def alter_codes(resp: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.topic_name, p.partition_index): p.error_code
            for t in resp.responses for p in t.partitions}


def delete_offsets(c: RawClient, group: str, *topics: str) -> Any:
    m = request_module(DELETE_OFFSETS, 0)
    return c.call(DELETE_OFFSETS, 0, m.DeleteShareGroupOffsetsRequest(
        group_id=group, topics=tuple(m.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                     for t in topics)))


def delete_groups(c: RawClient, *groups: str, version: int = 2) -> dict[str, ErrorCode]:
    resp = c.call(DELETE_GROUPS, version, request(DELETE_GROUPS, version, groups_names=groups))
    return {r.group_id: r.error_code for r in resp.results}


def write_state(c: RawClient, group: str, tid: uuid.UUID, partition: int, start: int,
                complete: int, batches: tuple[tuple[int, int, int, int], ...]) -> None:
    """WriteShareGroupState v1 (no epoch fencing: -1) for one share-partition."""
    m = request_module(WRITE_STATE, 1)
    resp = c.call(WRITE_STATE, 1, m.WriteShareGroupStateRequest(group_id=group, topics=(
        m.WriteStateData(topic_id=tid, partitions=(m.PartitionData(
            partition=partition, state_epoch=-1, leader_epoch=-1, start_offset=start,
            delivery_complete_count=complete, state_batches=tuple(
                m.StateBatch(first_offset=a, last_offset=b, delivery_state=s, delivery_count=n)
                for a, b, s, n in batches)),)),)))
    assert resp.results[0].partitions[0].error_code == ErrorCode.none, resp


# --------------------------------------------------------------------------- ApiVersions


def test_api_versions_advertise_the_admin_rpcs(raw: RawClient) -> None:
    resp = raw.call(API_VERSIONS, 3, request(API_VERSIONS, 3, client_software_name="t",
                                             client_software_version="1"))
    served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert served[DESCRIBE_GROUPS] == (0, 6)
    assert served[DELETE_GROUPS] == (0, 2)
    assert served[DESCRIBE_OFFSETS] == (0, 1)
    assert served[ALTER_OFFSETS] == (0, 0)
    assert served[DELETE_OFFSETS] == (0, 0)


# --------------------------------------------------------------------------- DescribeGroups


def test_describe_groups_answers_share_groups(raw: RawClient, broker: BrokerProcess,
                                              unique: str) -> None:
    create_topic(broker.bootstrap, unique)
    join(raw, unique, (unique,))
    missing = unique + "-missing"
    for version in range(0, 6):
        resp = raw.call(DESCRIBE_GROUPS, version, request(
            DESCRIBE_GROUPS, version, groups=(unique, missing), include_authorized_operations=True))
        share, absent = resp.groups
        assert (share.error_code, share.group_state, share.protocol_type, share.members) == \
            (ErrorCode.none, "Stable", "share", ()), version
        assert share.protocol_data == ""
        assert (absent.error_code, absent.group_state, absent.protocol_type) == \
            (ErrorCode.none, "Dead", ""), version
    # v6 reports errors, as Kafka 4.3 does: a share group is not a classic group.
    resp = raw.call(DESCRIBE_GROUPS, 6, request(DESCRIBE_GROUPS, 6, groups=(unique, missing, ""),
                                                include_authorized_operations=False))
    share, absent, empty = resp.groups
    assert (share.error_code, share.error_message, share.group_state) == \
        (ErrorCode.group_id_not_found, f"Group {unique} is not a classic group.", "Dead")
    assert (absent.error_code, absent.error_message, absent.group_state) == \
        (ErrorCode.group_id_not_found, f"Group {missing} not found.", "Dead")
    assert empty.error_code == ErrorCode.invalid_group_id


def test_admin_client_list_groups_shows_share_groups(broker: BrokerProcess, unique: str) -> None:
    create_topic(broker.bootstrap, unique)
    with RawClient(broker.bootstrap) as c:
        member = join(c, unique, (unique,))
        empty = unique + "-empty"
        leave(c, empty, join(c, empty, (unique,)))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        with pytest.warns(DeprecationWarning):  # list_groups is deprecated in confluent-kafka
            listed = {g.id: g for g in admin.list_groups(timeout=10)}
        leave(c, unique, member)
    assert (listed[unique].protocol_type, listed[unique].state, listed[unique].error) == \
        ("share", "Stable", None)
    assert (listed[empty].protocol_type, listed[empty].state) == ("share", "Empty")
    # librdkafka's list_consumer_groups keeps only protocol types "" and "consumer" (it has no
    # share group type yet), so share groups are not among its results: a client limitation.
    result = admin.list_consumer_groups().result(10)
    assert unique not in {g.group_id for g in result.valid}


# --------------------------------------------------------------------------- offsets


def test_describe_offsets_of_unknown_groups_topics_and_partitions(
        raw: RawClient, broker: BrokerProcess, unique: str) -> None:
    create_topic(broker.bootstrap, unique, partitions=2)
    nobody = unique + "-nobody"
    # An unknown group is no error (Kafka 4.3): no topics, or start offset -1 per named partition.
    g = describe_offsets(raw, nobody)
    assert (g.error_code, g.topics) == (ErrorCode.none, ())
    g = describe_offsets(raw, nobody, {unique: (0, 1, 7), "no-such-topic": (0,)})
    assert g.error_code == ErrorCode.none
    assert offsets(g) == {
        (unique, 0): (-1, -1, ErrorCode.none), (unique, 1): (-1, -1, ErrorCode.none),
        (unique, 7): (-1, -1, ErrorCode.unknown_topic_or_partition),
        ("no-such-topic", 0): (-1, -1, ErrorCode.unknown_topic_or_partition)}
    # A joined member's partitions are initialized but never consumed: start offset -1, lag -1.
    member = join(raw, unique, (unique,))
    wait_until(lambda: len(describe_offsets(raw, unique).topics) == 1)
    assert offsets(describe_offsets(raw, unique)) == {
        (unique, 0): (-1, -1, ErrorCode.none), (unique, 1): (-1, -1, ErrorCode.none)}
    v0 = describe_offsets(raw, unique, version=0)
    assert offsets(v0) == {(unique, 0): (-1, None, ErrorCode.none),
                           (unique, 1): (-1, None, ErrorCode.none)}
    assert describe_offsets(raw, "").error_code == ErrorCode.invalid_group_id
    leave(raw, unique, member)


def test_lag_is_log_end_minus_start_minus_completed(raw: RawClient, broker: BrokerProcess,
                                                    unique: str) -> None:
    create_topic(broker.bootstrap, unique)
    produce(broker.bootstrap, unique, 10)
    member = join(raw, unique, (unique,))
    wait_until(lambda: len(describe_offsets(raw, unique).topics) == 1)
    tid = topic_id(raw, unique)
    # SPSO 3; offsets 5-6 acknowledged (complete) past it: lag = 10 - 3 - 2 = 5.
    write_state(raw, unique, tid, 0, start=3, complete=2, batches=((5, 6, ACKNOWLEDGED, 1),))
    g = describe_offsets(raw, unique)
    (t,) = g.topics
    (p,) = t.partitions
    assert (t.topic_name, t.topic_id) == (unique, tid)
    assert (p.partition_index, p.start_offset, p.lag, p.error_code) == (0, 3, 5, ErrorCode.none)
    (p0,) = describe_offsets(raw, unique, version=0).topics[0].partitions
    assert p0.start_offset == 3 and not hasattr(p0, "lag")
    leave(raw, unique, member)


def test_lag_counts_released_records_but_not_rejected_ones(broker: BrokerProcess,
                                                           unique: str) -> None:
    """Reference item 28: ACCEPT 0-5, RELEASE 6-7, REJECT 8-9 of 10 -> SPSO 6, lag 2."""
    create_topic(broker.bootstrap, unique)
    set_group_configs(broker.bootstrap, unique, {"share.auto.offset.reset": "earliest"})
    produce(broker.bootstrap, unique, 10)
    consumer = share_consumer(broker.bootstrap, unique, unique, explicit=True)
    got: list[Any] = []
    try:
        poll_until([consumer], lambda: len(got) >= 10, on_message=lambda _i, m: got.append(m))
        for m in got:
            kind = AcknowledgeType.ACCEPT if m.offset() < 6 else \
                AcknowledgeType.RELEASE if m.offset() < 8 else AcknowledgeType.REJECT
            consumer.acknowledge(m, kind)
        consumer.commit_sync(15)
        with RawClient(broker.bootstrap) as c:
            assert offsets(describe_offsets(c, unique)) == {(unique, 0): (6, 2, ErrorCode.none)}
    finally:
        consumer.close()


def test_alter_offsets(raw: RawClient, broker: BrokerProcess, unique: str) -> None:
    create_topic(broker.bootstrap, unique, partitions=2)
    produce(broker.bootstrap, unique, 20, partitions=2)  # 10 per partition
    busy = unique + "-busy"
    member = join(raw, busy, (unique,))
    resp = alter(raw, busy, {unique: {0: 0}})
    assert (resp.error_code, resp.error_message, resp.responses) == \
        (ErrorCode.non_empty_group, "The group is not empty.", ())
    leave(raw, busy, member)

    # An unknown group is created, Empty, with the offsets it can have; the rest are errors.
    resp = alter(raw, unique, {unique: {0: 4, 1: 0, 5: 0, 1000: -7}, "no-such-topic": {0: 0}})
    assert resp.error_code == ErrorCode.none
    assert alter_codes(resp) == {
        (unique, 0): ErrorCode.none, (unique, 1): ErrorCode.none,
        (unique, 5): ErrorCode.unknown_topic_or_partition,
        (unique, 1000): ErrorCode.unknown_topic_or_partition,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    (missing,) = [t for t in resp.responses if t.topic_name == "no-such-topic"]
    assert missing.partitions[0].error_message == NOT_HOSTED
    assert group_state(raw, unique) == "Empty"
    assert offsets(describe_offsets(raw, unique)) == {
        (unique, 0): (4, 6, ErrorCode.none), (unique, 1): (0, 10, ErrorCode.none)}

    # Altering again moves the start offset back and forth; -1 means "never consumed".
    resp = alter(raw, unique, {unique: {0: 9, 1: -1}})
    assert set(alter_codes(resp).values()) == {ErrorCode.none}
    assert offsets(describe_offsets(raw, unique)) == {
        (unique, 0): (9, 1, ErrorCode.none), (unique, 1): (-1, -1, ErrorCode.none)}
    bad = alter(raw, unique, {unique: {0: -2}})
    assert alter_codes(bad) == {(unique, 0): ErrorCode.invalid_request}
    assert alter(raw, "", {unique: {0: 0}}).error_code == ErrorCode.invalid_group_id


def test_delete_offsets(raw: RawClient, broker: BrokerProcess, unique: str) -> None:
    create_topic(broker.bootstrap, unique)
    other = unique + "-other"
    create_topic(broker.bootstrap, other)
    assert delete_offsets(raw, unique + "-nobody", unique).error_code == \
        ErrorCode.group_id_not_found

    busy = unique + "-busy"
    member = join(raw, busy, (unique,))
    resp = delete_offsets(raw, busy, unique)
    assert (resp.error_code, resp.error_message) == (ErrorCode.non_empty_group,
                                                     "The group is not empty.")
    leave(raw, busy, member)

    assert alter(raw, unique, {unique: {0: 0}}).error_code == ErrorCode.none
    resp = delete_offsets(raw, unique, unique, "no-such-topic", other, unique)
    assert resp.error_code == ErrorCode.none
    results = [(t.topic_name, t.error_code, t.error_message) for t in resp.responses]
    assert results == [
        (unique, ErrorCode.none, None),
        ("no-such-topic", ErrorCode.unknown_topic_or_partition, NOT_HOSTED),
        (other, ErrorCode.unknown_topic_or_partition,
         "There is no offset information to delete.")]
    assert resp.responses[0].topic_id == topic_id(raw, unique)
    # The state is gone and the group forgot the topic; the group itself stays.
    assert describe_offsets(raw, unique).topics == ()
    assert offsets(describe_offsets(raw, unique, {unique: (0,)})) == \
        {(unique, 0): (-1, -1, ErrorCode.none)}
    assert group_state(raw, unique) == "Empty"
    again = delete_offsets(raw, unique, unique)
    assert again.responses[0].error_code == ErrorCode.unknown_topic_or_partition


def test_delete_groups(raw: RawClient, broker: BrokerProcess, unique: str) -> None:
    create_topic(broker.bootstrap, unique)
    produce(broker.bootstrap, unique, 5)
    set_group_configs(broker.bootstrap, unique, {"share.auto.offset.reset": "earliest"})
    member = join(raw, unique, (unique,))
    assert alter(raw, unique, {unique: {0: 2}}).error_code == ErrorCode.non_empty_group
    for version in (0, 1, 2):
        assert delete_groups(raw, unique, unique + "-missing", version=version) == {
            unique: ErrorCode.non_empty_group,
            unique + "-missing": ErrorCode.group_id_not_found}
    leave(raw, unique, member)
    wait_until(lambda: group_state(raw, unique) == "Empty")
    assert alter(raw, unique, {unique: {0: 2}}).error_code == ErrorCode.none
    assert offsets(describe_offsets(raw, unique, {unique: (0,)})) == \
        {(unique, 0): (2, 3, ErrorCode.none)}

    assert delete_groups(raw, unique, "") == {unique: ErrorCode.none,
                                               "": ErrorCode.invalid_group_id}
    assert group_state(raw, unique) == "Dead"  # ShareGroupDescribe: GROUP_ID_NOT_FOUND
    # Its share state and its group configs went with it.
    assert offsets(describe_offsets(raw, unique, {unique: (0,)})) == \
        {(unique, 0): (-1, -1, ErrorCode.none)}
    m = request_module(DESCRIBE_CONFIGS, 4)
    resp = raw.call(DESCRIBE_CONFIGS, 4, m.DescribeConfigsRequest(resources=(
        m.DescribeConfigsResource(resource_type=GROUP_RESOURCE, resource_name=unique,
                                  configuration_keys=None),),
        include_synonyms=False, include_documentation=False))
    assert [c.name for c in resp.results[0].configs
            if c.config_source == GROUP_CONFIG_SOURCE] == []
    assert delete_groups(raw, unique) == {unique: ErrorCode.group_id_not_found}
