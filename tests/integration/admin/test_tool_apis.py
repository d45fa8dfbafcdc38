"""The APIs Kafka's command-line tools need (issue 25, section 4) over a real socket:
ListConfigResources (``kafka-configs --describe --entity-type groups``), DescribeProducers
(``kafka-transactions describe-producers`` / ``find-hanging`` / ``abort``), DescribeLogDirs
(``kafka-log-dirs``) and DescribeTopicPartitions (``kafka-topics --describe`` on Kafka 4.x).

Producers are confluent-kafka's (idempotent and transactional); the requests are raw kio ones so
every field the tools print is checked. Apache Kafka's Java ``Admin`` reads the same through
tests/integration/java.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.rawclient import RawClient, request

T = 10


def _create(bootstrap: str, name: str, partitions: int) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, partitions, 1)], request_timeout=T)[name].result(T)


def _advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    with RawClient(bootstrap) as c:
        resp = c.call(18, 3, request(18, 3, client_software_name="t",
                                     client_software_version="1"))
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


def test_the_tool_apis_are_advertised_at_kafka_4_1s_versions(broker) -> None:
    got = _advertised(broker.bootstrap)
    assert got[74] == (0, 1)   # ListConfigResources (v0: ListClientMetricsResources)
    assert got[61] == (0, 0)   # DescribeProducers
    assert got[35] == (1, 4)   # DescribeLogDirs (v0 removed in Kafka 4.0)
    assert got[75] == (0, 0)   # DescribeTopicPartitions


def test_list_config_resources_lists_groups_with_configs_and_topics(broker, unique) -> None:
    topic, group = f"{unique}-t", f"{unique}-g"
    _create(broker.bootstrap, topic, 1)
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource("GROUP", group, incremental_configs=[ConfigEntry(
        "share.record.lock.duration.ms", "20000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res], request_timeout=T)[res].result(T)
    with RawClient(broker.bootstrap) as c:
        groups = c.call(74, 1, request(74, 1, resource_types=(32,)))
        everything = c.call(74, 1, request(74, 1, resource_types=()))
        bad = c.call(74, 1, request(74, 1, resource_types=(1,)))
        v0 = c.call(74, 0, request(74, 0))
    assert groups.error_code == ErrorCode.none
    assert (group, 32) in {(r.resource_name, r.resource_type) for r in groups.config_resources}
    assert {r.resource_type for r in groups.config_resources} == {32}
    listed = {(r.resource_name, r.resource_type) for r in everything.config_resources}
    assert {(group, 32), (topic, 2), ("1", 4), ("1", 8)} <= listed
    assert bad.error_code == ErrorCode.unsupported_version and not bad.config_resources
    assert v0.error_code == ErrorCode.none and v0.config_resources == ()  # no client metrics


def test_describe_producers_shows_idempotent_and_open_transactions(broker, unique) -> None:
    topic = f"{unique}-p"
    _create(broker.bootstrap, topic, 2)
    idem = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(3):
        idem.produce(topic, value=b"x%d" % i, partition=0)
    assert idem.flush(T) == 0
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{unique}-tx"})
    txn.init_transactions(T)
    idem.produce(topic, value=b"y", partition=1)
    assert idem.flush(T) == 0
    txn.begin_transaction()
    txn.produce(topic, value=b"open", partition=1)
    assert txn.flush(T) == 0  # left open: what find-hanging and abort look for
    with RawClient(broker.bootstrap) as c:
        resp = c.call(61, 0, request(61, 0, topics=(
            RawClient.request_module(61, 0).TopicRequest(name=topic, partition_indexes=(0, 1, 7)),
            RawClient.request_module(61, 0).TopicRequest(name=f"{unique}-missing", partition_indexes=(0,)),
            RawClient.request_module(61, 0).TopicRequest(name="bad name!", partition_indexes=(0,)))))
        end = c.call(2, 1, request(2, 1, replica_id=-1, isolation_level=0, topics=(
            RawClient.request_module(2, 1).ListOffsetsTopic(name=topic, partitions=(
                RawClient.request_module(2, 1).ListOffsetsPartition(partition_index=1, timestamp=-1),)),)))
    txn.abort_transaction(T)
    p0, p1, p7 = resp.topics[0].partitions
    assert p0.error_code == ErrorCode.none and len(p0.active_producers) == 1
    s = p0.active_producers[0]
    assert s.producer_id >= 0 and s.producer_epoch == 0 and s.last_sequence == 2
    assert s.last_timestamp > 0 and s.current_txn_start_offset == -1
    assert s.coordinator_epoch == -1
    by_pid = {s.producer_id: s for s in p1.active_producers}
    assert len(by_pid) == 2
    txn_state = next(s for s in p1.active_producers if s.current_txn_start_offset >= 0)
    # Offset 0 is the idempotent batch; the open transaction starts at 1, below the log end.
    assert txn_state.current_txn_start_offset == 1
    assert end.topics[0].partitions[0].offset == 2
    assert p7.error_code == ErrorCode.unknown_topic_or_partition
    assert resp.topics[1].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    assert resp.topics[2].partitions[0].error_code == ErrorCode.invalid_topic_exception


def test_describe_log_dirs_gives_sizes_lag_and_the_directory(broker, unique) -> None:
    topic = f"{unique}-l"
    _create(broker.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(10):
        p.produce(topic, value=b"v" * 100, partition=0)
    assert p.flush(T) == 0
    with RawClient(broker.bootstrap) as c:
        some = c.call(35, 4, request(35, 4, topics=(RawClient.request_module(35, 4).DescribableLogDirTopic(
            topic=topic, partitions=(0, 1, 9)),)))
        every = c.call(35, 1, request(35, 1, topics=None))
    assert some.error_code == ErrorCode.none and len(some.results) == 1
    r = some.results[0]
    assert r.error_code == ErrorCode.none
    assert r.log_dir == str(broker.data_dir.resolve())
    assert r.total_bytes > 0 and 0 <= r.usable_bytes <= r.total_bytes
    (t,) = r.topics
    sizes = {x.partition_index: x for x in t.partitions}
    assert set(sizes) == {0, 1}  # partition 9 does not exist: left out
    assert sizes[0].partition_size > 1000 and sizes[1].partition_size == 0
    assert all(x.offset_lag == 0 and not x.is_future_key for x in t.partitions)
    names = {x.name for x in every.results[0].topics}
    assert topic in names


def _dtp(c: RawClient, names: tuple[str, ...], limit: int, cursor: tuple[str, int] | None
         ) -> Any:
    m = RawClient.request_module(75, 0)
    return c.call(75, 0, m.DescribeTopicPartitionsRequest(
        topics=tuple(m.TopicRequest(name=n) for n in names), response_partition_limit=limit,
        cursor=None if cursor is None else m.Cursor(topic_name=cursor[0],
                                                    partition_index=cursor[1])))


def test_describe_topic_partitions_pages_with_its_cursor(broker, unique) -> None:
    a, b = f"{unique}-a", f"{unique}-b"
    _create(broker.bootstrap, a, 3)
    _create(broker.bootstrap, b, 2)
    with RawClient(broker.bootstrap) as c:
        first = _dtp(c, (b, a, f"{unique}-zz"), 2, None)
        second = _dtp(c, (b, a, f"{unique}-zz"), 2, ("%s" % a, 2))
        third = _dtp(c, (b, a, f"{unique}-zz"), 2,
                     (second.next_cursor.topic_name, second.next_cursor.partition_index))
        bad = _dtp(c, (a,), 10, (b, 0))
        whole = _dtp(c, (), 2000, None)
    assert [t.name for t in first.topics] == [a]
    assert [p.partition_index for p in first.topics[0].partitions] == [0, 1]
    assert first.topics[0].partitions[0].leader_id == 1
    assert first.topics[0].partitions[0].isr_nodes == (1,)
    # Empty, not null: Kafka's Admin reads the ELR lists without a null check.
    assert first.topics[0].partitions[0].eligible_leader_replicas == ()
    assert first.topics[0].partitions[0].last_known_elr == ()
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == (a, 2)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in second.topics] == [
        (a, [2]), (b, [0])]
    assert (second.next_cursor.topic_name, second.next_cursor.partition_index) == (b, 1)
    assert [(t.name, t.error_code) for t in third.topics] == [
        (b, ErrorCode.none), (f"{unique}-zz", ErrorCode.unknown_topic_or_partition)]
    assert third.next_cursor is None
    assert [t.error_code for t in bad.topics] == [ErrorCode.invalid_request]
    listed = {t.name: t for t in whole.topics}
    assert listed[a].topic_id is not None and len(listed[a].partitions) == 3
    assert not listed[a].is_internal


def test_describe_topic_partitions_limit_is_capped_by_the_broker(broker, unique) -> None:
    a = f"{unique}-big"
    _create(broker.bootstrap, a, 3)
    with RawClient(broker.bootstrap) as c:
        zero = _dtp(c, (a,), 0, None)
    assert [t.error_code for t in zero.topics] == [ErrorCode.invalid_request]


def test_metadata_and_describe_topic_partitions_agree(broker, unique) -> None:
    a = f"{unique}-m"
    _create(broker.bootstrap, a, 2)
    with RawClient(broker.bootstrap) as c:
        md = c.call(3, 12, request(3, 12, topics=(RawClient.request_module(3, 12).MetadataRequestTopic(
            name=a, topic_id=None),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        dtp = _dtp(c, (a,), 100, None)
    fields = ("partition_index", "leader_id", "leader_epoch", "replica_nodes", "isr_nodes")
    assert ([tuple(getattr(p, f) for f in fields) for p in md.topics[0].partitions]
            == [tuple(getattr(p, f) for f in fields) for p in dtp.topics[0].partitions])
    assert md.topics[0].topic_id == dtp.topics[0].topic_id

