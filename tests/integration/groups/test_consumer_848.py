"""Consumer groups on the KIP-848 consumer protocol with real clients (issue 14).

confluent-kafka ``Consumer`` with ``group.protocol=consumer`` (ConsumerGroupHeartbeat, server-side
assignors): three members split a six-partition topic into disjoint assignments covering it; a
member that leaves hands its partitions over; committed offsets survive a SIGKILL of the broker
and the group resumes there; a regex subscription follows topics created later. Raw requests
check that hostile regexes are answered at once with the right error while the broker keeps
serving, and that one group id has one type (share vs consumer).
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic, wait_assigned
from tests.integration.rawclient import RawClient, request, request_module
from tests.integration.share_helpers import produce, share_consumer


# Members are told to heartbeat every 500 ms (Kafka's default is 5 s), so hand-overs that wait
# for a revocation take a fraction of a second.
FAST = {"group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def fast_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    b = BrokerProcess(tmp_path_factory.mktemp("kip848") / "data", overrides=FAST)
    b.start()
    yield b
    b.stop()


def consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    # librdkafka refuses session.timeout.ms / heartbeat.interval.ms with group.protocol=consumer:
    # the broker decides them.
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000}
    conf.update(extra)
    return Consumer(conf)



def test_three_members_split_six_partitions_and_a_leaver_hands_over(fast_broker: Any) -> None:
    topic, group = "kip848-six", "kip848-six-g"
    create_topic(fast_broker.bootstrap, topic, partitions=6)
    cs = [consumer(fast_broker.bootstrap, group) for _ in range(3)]
    try:
        for c in cs:
            c.subscribe([topic])
        sets = wait_assigned(cs, 6, balanced=True)
        assert all(len(s) == 2 for s in sets), sets
        cs[2].close()
        cs = cs[:2]
        sets = wait_assigned(cs, 6, balanced=True)
        assert sorted(map(len, sets)) == [3, 3], sets
    finally:
        for c in cs:
            c.close()


def _consume(c: Consumer, want: int, timeout: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        assert time.monotonic() < deadline, f"got {len(got)} of {want}"
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    return got


def test_commit_kill_restart_resumes_at_committed_offsets(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=FAST)
    b.start()
    try:
        topic, group = "kip848-restart", "kip848-restart-g"
        create_topic(b.bootstrap, topic, partitions=2)
        values = produce(b.bootstrap, topic, 40, partitions=2)
        c = consumer(b.bootstrap, group)
        c.subscribe([topic])
        seen = _consume(c, 20, 30)
        c.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)}
        assert sum(max(o, 0) for o in committed.values()) == len(seen)
        c.close()
        b.kill()
        b.start()
        c2 = consumer(b.bootstrap, group)
        c2.subscribe([topic])
        rest = _consume(c2, len(values) - len(seen), 40)
        assert sorted(seen + rest) == sorted(values)  # nothing skipped, nothing twice
        c2.close()
    finally:
        b.stop()


@pytest.mark.parametrize("settling_ms", [500, 0])
def test_a_second_member_gets_its_half_within_the_settling_interval(tmp_path: Path,
                                                                    settling_ms: int) -> None:
    """Kafka's 5 s heartbeat interval (the default here): the first member only learns that it
    must give up half its partitions from its next heartbeat answer. Shoal's settling interval
    (500 ms while the group settles) makes that a fraction of a second; with it off (0) the
    hand-over waits out the regular interval, as on Kafka."""
    b = BrokerProcess(tmp_path / "data", overrides={
        "group.consumer.settling.heartbeat.interval.ms": str(settling_ms)})
    b.start()
    cs: list[Consumer] = []
    try:
        topic, group = "kip848-settle", "kip848-settle-g"
        create_topic(b.bootstrap, topic, partitions=4)
        cs.append(consumer(b.bootstrap, group))
        cs[0].subscribe([topic])
        wait_assigned(cs, 4)
        cs.append(consumer(b.bootstrap, group))
        started = time.monotonic()
        cs[1].subscribe([topic])
        sets = wait_assigned(cs, 4, timeout=30, balanced=True)
        took = time.monotonic() - started
        assert sorted(map(len, sets)) == [2, 2], sets
        if settling_ms:
            assert took < 3.5, f"hand-over took {took:.1f} s"
        else:
            assert took > 3.5, f"hand-over took only {took:.1f} s with the settling interval off"
    finally:
        for c in cs:
            c.close()
        b.stop()


def test_regex_subscription_includes_topics_created_later(fast_broker: Any) -> None:
    b = fast_broker.bootstrap
    create_topic(b, "rxp-one", partitions=2)
    create_topic(b, "other-rx", partitions=1)
    first = produce(b, "rxp-one", 4, partitions=2, prefix="one")
    produce(b, "other-rx", 3, prefix="other")
    c = consumer(b, "kip848-regex-g")
    try:
        c.subscribe(["^rxp.*"])
        assert sorted(_consume(c, 4, 30)) == sorted(first)
        assert {tp.topic for tp in c.assignment()} == {"rxp-one"}
        create_topic(b, "rxp-two", partitions=1)
        values = produce(b, "rxp-two", 3, prefix="two")
        later = _consume(c, 3, 40)
        assert sorted(later) == sorted(values)
        assert {tp.topic for tp in c.assignment()} == {"rxp-one", "rxp-two"}
    finally:
        c.close()


def _heartbeat(raw: RawClient, group: str, **fields: Any) -> Any:
    body: dict[str, Any] = dict(group_id=group, member_id=uuid.uuid4().hex, member_epoch=0,
                                rebalance_timeout=timedelta(seconds=30), topic_partitions=())
    body.update(fields)
    return raw.call(68, 1, request(68, 1, **body))


def test_hostile_and_invalid_regexes_are_answered_and_the_broker_keeps_serving(
        fast_broker: Any) -> None:
    b = fast_broker.bootstrap
    create_topic(b, "a" * 60, partitions=1)
    create_topic(b, "rx-control", partitions=1)
    with RawClient(b) as raw:
        start = time.monotonic()
        hostile = _heartbeat(raw, "rx-hostile", subscribed_topic_regex="(a+)+$")
        assert time.monotonic() - start < 2.0
        assert hostile.error_code == ErrorCode.none  # RE2: linear, matches the long topic
        nested = _heartbeat(raw, "rx-hostile2", subscribed_topic_regex="((a*)*)*b" * 30)
        assert nested.error_code == ErrorCode.none, nested
        bad = _heartbeat(raw, "rx-bad", subscribed_topic_regex="(unclosed")
        assert bad.error_code == ErrorCode.invalid_regular_expression
        assert "(unclosed" in bad.error_message
        backref = _heartbeat(raw, "rx-bad", subscribed_topic_regex="(a)\\1")
        assert backref.error_code == ErrorCode.invalid_regular_expression
        huge = _heartbeat(raw, "rx-bad", subscribed_topic_regex="a" * 10_000)
        assert huge.error_code == ErrorCode.invalid_regular_expression
        assert "limit" in huge.error_message
    # A control producer and consumer still work.
    values = produce(b, "rx-control", 5)
    c = consumer(b, "rx-control-g")
    try:
        c.subscribe(["rx-control"])
        assert sorted(_consume(c, 5, 30)) == sorted(values)
    finally:
        c.close()


def test_one_group_id_one_type_and_the_admin_rpcs(fast_broker: Any) -> None:
    b = fast_broker.bootstrap
    topic = "kip848-types"
    create_topic(b, topic, partitions=2)
    c = consumer(b, "cg-typed")
    c.subscribe([topic])
    wait_assigned([c], 2)
    s = share_consumer(b, "sg-typed", topic)
    bad_share = share_consumer(b, "cg-typed", topic)
    try:
        s.poll(1.0)  # the share group exists now
        # A share consumer using the consumer group's id gets GROUP_ID_NOT_FOUND.
        code = None
        deadline = time.monotonic() + 15
        while code is None and time.monotonic() < deadline:
            try:
                for msg in bad_share.poll(0.2):
                    if msg.error() is not None:
                        code = msg.error().code()
            except KafkaException as exc:
                code = exc.args[0].code()
        assert code == KafkaError.GROUP_ID_NOT_FOUND, code
        with RawClient(b) as raw:
            # ...and the reverse: a consumer heartbeat with the share group's id.
            r = _heartbeat(raw, "sg-typed", subscribed_topic_names=(topic,))
            assert r.error_code == ErrorCode.group_id_not_found
            assert "not a consumer group" in r.error_message
            # JoinGroup on the consumer group's id: a classic member of protocol type consumer
            # is taken in (Kafka's mixed groups; its member id first), another protocol type
            # gets INCONSISTENT_GROUP_PROTOCOL.
            m11 = request_module(11, 9)
            for protocol_type, code in (("consumer", ErrorCode.member_id_required),
                                        ("connect", ErrorCode.inconsistent_group_protocol)):
                join = raw.call(11, 9, request(
                    11, 9, group_id="cg-typed", session_timeout=timedelta(seconds=10),
                    rebalance_timeout=timedelta(seconds=10), member_id="",
                    group_instance_id=None, protocol_type=protocol_type,
                    protocols=(m11.JoinGroupRequestProtocol(name="range", metadata=b""),),
                    reason=None))
                assert join.error_code == code, protocol_type
            # ListGroups v5 lists it as a consumer group; filters apply.
            listed = raw.call(16, 5, request(16, 5, states_filter=(), types_filter=()))
            kinds = {g.group_id: (g.group_type, g.protocol_type, g.group_state)
                     for g in listed.groups}
            assert kinds["cg-typed"] == ("consumer", "consumer", "Stable")
            assert kinds["sg-typed"][0] == "share"
            only = raw.call(16, 5, request(16, 5, states_filter=("stable",),
                                           types_filter=("Consumer",)))
            ids = {g.group_id for g in only.groups}
            assert "cg-typed" in ids and "sg-typed" not in ids
            assert {(g.group_type, g.group_state) for g in only.groups} == {("consumer", "Stable")}
            # ConsumerGroupDescribe: the group; the share group's id GROUP_ID_NOT_FOUND.
            d = raw.call(69, 1, request(69, 1, group_ids=("cg-typed", "sg-typed", "nope"),
                                        include_authorized_operations=False))
            cg, sg, nope = d.groups
            assert (cg.error_code, cg.group_state, cg.assignor_name) == (0, "Stable", "uniform")
            assert len(cg.members) == 1 and cg.members[0].member_type == 1
            assert sorted(cg.members[0].assignment.topic_partitions[0].partitions) == [0, 1]
            assert sg.error_code == nope.error_code == ErrorCode.group_id_not_found
            # DescribeGroups v6: "not a classic group"; DeleteGroups: NON_EMPTY_GROUP.
            (dg,) = raw.call(15, 6, request(15, 6, groups=("cg-typed",),
                                            include_authorized_operations=False)).groups
            assert dg.error_code == ErrorCode.group_id_not_found
            deleted = raw.call(42, 2, request(42, 2, groups_names=("cg-typed",)))
            assert deleted.results[0].error_code == ErrorCode.non_empty_group
        # AdminClient: listed and described as a consumer-protocol group.
        admin = AdminClient({"bootstrap.servers": b})
        groups = admin.list_consumer_groups().result().valid
        assert ("cg-typed", ConsumerGroupType.CONSUMER) in {(g.group_id, g.type) for g in groups}
        desc = admin.describe_consumer_groups(["cg-typed"])["cg-typed"].result(timeout=10)
        assert desc.type == ConsumerGroupType.CONSUMER and len(desc.members) == 1
        assert {tp.partition for tp in desc.members[0].assignment.topic_partitions} == {0, 1}
        c.close()
        with RawClient(b) as raw:
            deadline = time.monotonic() + 10
            while True:  # the leave is durable before close returns; be lenient anyway
                deleted = raw.call(42, 2, request(42, 2, groups_names=("cg-typed",)))
                if deleted.results[0].error_code == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert deleted.results[0].error_code == 0
    finally:
        s.close()
        bad_share.close()


def _describe(b: str, group: str) -> Any:
    with RawClient(b) as raw:
        (g,) = raw.call(69, 1, request(69, 1, group_ids=(group,),
                                       include_authorized_operations=False)).groups
    return g


def test_static_member_restart_gets_its_partitions_back_without_a_rebalance(
        fast_broker: Any) -> None:
    b = fast_broker.bootstrap
    topic, group = "kip848-static", "kip848-static-g"
    create_topic(b, topic, partitions=4)
    other = consumer(b, group)
    static = consumer(b, group, **{"group.instance.id": "instance-1"})
    try:
        other.subscribe([topic])
        static.subscribe([topic])
        sets = wait_assigned([other, static], 4, balanced=True)
        epoch = _describe(b, group).group_epoch
        static.close()  # a static member leaves with epoch -2: it keeps its partitions
        g = _describe(b, group)
        assert g.group_epoch == epoch and len(g.members) == 2, g
        again = consumer(b, group, **{"group.instance.id": "instance-1"})
        static = again
        again.subscribe([topic])
        assert wait_assigned([other, again], 4, balanced=True) == sets
        g = _describe(b, group)
        assert g.group_epoch == epoch, "the restart caused a rebalance"
        assert {m.instance_id for m in g.members} == {None, "instance-1"}
    finally:
        other.close()
        static.close()


def test_raw_commits_and_fetches_are_checked_against_member_epochs(fast_broker: Any) -> None:
    """OffsetCommit/OffsetFetch v10 (topic ids) from a consumer-protocol member: its epoch must
    be current (STALE_MEMBER_EPOCH), an unknown member is refused, an unknown topic id answers
    UNKNOWN_TOPIC_ID."""
    b = fast_broker.bootstrap
    topic = "kip848-commits"
    create_topic(b, topic, partitions=1)
    member = uuid.uuid4().hex
    with RawClient(b) as raw:
        meta = raw.call(3, 12, request(3, 12, topics=(request_module(3, 12).MetadataRequestTopic(
            topic_id=None, name=topic),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        tid = meta.topics[0].topic_id
        joined = _heartbeat(raw, "kip848-commits-g", member_id=member,
                            subscribed_topic_names=(topic,))
        assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
        m8 = request_module(8, 10)

        def commit(epoch: int, who: str, topic_id: uuid.UUID = tid) -> Any:
            resp = raw.call(8, 10, request(
                8, 10, group_id="kip848-commits-g", generation_id_or_member_epoch=epoch,
                member_id=who, group_instance_id=None, topics=(m8.OffsetCommitRequestTopic(
                    topic_id=topic_id, partitions=(m8.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                        committed_metadata="m"),)),)))
            return resp.topics[0].partitions[0].error_code

        assert commit(5, member) == ErrorCode.stale_member_epoch
        assert commit(1, "someone-else") == ErrorCode.unknown_member_id
        assert commit(1, member, uuid.uuid4()) == ErrorCode.unknown_topic_id
        assert commit(1, member) == ErrorCode.none
        m9 = request_module(9, 10)

        def fetch(who: str | None, epoch: int) -> Any:
            (g,) = raw.call(9, 10, request(9, 10, groups=(m9.OffsetFetchRequestGroup(
                group_id="kip848-commits-g", member_id=who, member_epoch=epoch,
                topics=(m9.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=(0,)),)),),
                require_stable=False)).groups
            return g

        ok = fetch(member, 1)
        assert ok.error_code == 0 and ok.topics[0].topic_id == tid
        assert ok.topics[0].partitions[0].committed_offset == 42
        assert fetch(None, -1).topics[0].partitions[0].committed_offset == 42  # admin
        assert fetch(member, 3).error_code == ErrorCode.stale_member_epoch
        assert fetch("nobody", 1).error_code == ErrorCode.unknown_member_id
