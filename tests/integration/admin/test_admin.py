"""Admin RPCs through an unmodified Kafka admin client, plus raw kio requests for what it hides.

confluent-kafka's ``AdminClient`` drives CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, IncrementalAlterConfigs and DeleteRecords at the versions it negotiates (its
describe_cluster uses Metadata); raw requests (``rawclient``) cover DescribeCluster, legacy
AlterConfigs, the newest versions (topic ids, config types, documentation, endpoint types) and
combinations the client refuses to send. Every wait is bounded.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from kio.schema.errors import ErrorCode

from tests.integration.rawclient import RawClient, request

T = 10  # seconds: every future and request is bounded by this
OPTS: dict[str, Any] = {"request_timeout": T}

TOPIC, BROKER, CLIENT_METRICS = 2, 4, 16


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create(a: AdminClient, *topics: NewTopic, **kw: Any) -> None:
    for f in a.create_topics(list(topics), operation_timeout=T, **OPTS, **kw).values():
        f.result(timeout=T)


def failure(fut: Any) -> KafkaError:
    """The KafkaError a future fails with (the test fails if it succeeds)."""
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=T)
    err = ei.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def topic_configs(a: AdminClient, name: str) -> dict[str, ConfigEntry]:
    (f,) = a.describe_configs([ConfigResource("TOPIC", name)], **OPTS).values()
    return f.result(timeout=T)


def broker_configs(a: AdminClient, node: str = "1") -> dict[str, ConfigEntry]:
    (f,) = a.describe_configs([ConfigResource("BROKER", node)], **OPTS).values()
    return f.result(timeout=T)


def incremental(a: AdminClient, kind: str, name: str,
                *ops: tuple[str, str | None, AlterConfigOpType],
                validate_only: bool = False) -> Any:
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    (f,) = a.incremental_alter_configs([ConfigResource(kind, name, incremental_configs=entries)],
                                       validate_only=validate_only, **OPTS).values()
    return f


def partitions(a: AdminClient, name: str) -> int:
    md = a.list_topics(topic=name, timeout=T)
    return len(md.topics[name].partitions)


def earliest(a: AdminClient, name: str, p: int = 0) -> int:
    (f,) = a.list_offsets({TopicPartition(name, p): OffsetSpec.earliest()}, **OPTS).values()
    return int(f.result(timeout=T).offset)


def produce(bootstrap: str, name: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(name, f"v{i}".encode(), partition=0)
        p.flush(T)  # one batch per record, so offsets can land mid-segment and mid-batch alike
    assert p.flush(T) == 0


def src(e: ConfigEntry) -> int:
    return int(getattr(e.source, "value", e.source))


# -- topics ----------------------------------------------------------------------------------


def test_create_list_describe_and_delete_a_topic(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"adm-{unique}"
    create(a, NewTopic(name, 3, 1))
    assert partitions(a, name) == 3
    assert name in a.list_topics(timeout=T).topics
    for f in a.delete_topics([name], operation_timeout=T, **OPTS).values():
        f.result(timeout=T)
    assert name not in a.list_topics(timeout=T).topics
    again = a.delete_topics([name], operation_timeout=T, **OPTS)[name]
    assert failure(again).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_topic_errors(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"dup-{unique}"
    create(a, NewTopic(name, 1, 1))
    exists = a.create_topics([NewTopic(name, 1, 1)], **OPTS)[name]
    assert failure(exists).code() == KafkaError.TOPIC_ALREADY_EXISTS
    rf = f"rf-{unique}"
    err = failure(a.create_topics([NewTopic(rf, 1, 3)], **OPTS)[rf])
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
    bad = "bad name!"
    assert failure(a.create_topics([NewTopic(bad, 1, 1)], **OPTS)[bad]).code() == \
        KafkaError.TOPIC_EXCEPTION
    assert rf not in a.list_topics(timeout=T).topics


def test_create_with_configs_reads_them_back(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"cfg-{unique}"
    create(a, NewTopic(name, 1, 1, config={"retention.ms": "3600000", "segment.bytes": "1048576"}))
    cfg = topic_configs(a, name)
    assert cfg["retention.ms"].value == "3600000"
    assert src(cfg["retention.ms"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["segment.bytes"].value == "1048576"
    # Not overridden: the broker default, from its synonym.
    assert cfg["retention.bytes"].value == "-1"
    assert src(cfg["retention.bytes"]) == ConfigSource.DEFAULT_CONFIG.value
    assert not cfg["retention.ms"].is_read_only


def test_invalid_topic_configs_are_named_in_the_error(broker, unique) -> None:
    a = admin(broker.bootstrap)
    for config, culprit in (({"no.such.config": "1"}, "no.such.config"),
                            ({"retention.ms": "soon"}, "retention.ms"),
                            ({"segment.bytes": "10"}, "segment.bytes")):
        name = f"badcfg-{culprit.replace('.', '-')}-{unique}"[:200]
        err = failure(a.create_topics([NewTopic(name, 1, 1, config=config)], **OPTS)[name])
        assert err.code() == KafkaError.INVALID_CONFIG
        assert culprit in err.str()
        assert name not in a.list_topics(timeout=T).topics


def test_validate_only_creates_nothing(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"dry-{unique}"
    create(a, NewTopic(name, 2, 1), validate_only=True)
    assert name not in a.list_topics(timeout=T).topics


# -- configs ---------------------------------------------------------------------------------


def test_incremental_alter_topic_config_set_then_delete(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"alter-{unique}"
    create(a, NewTopic(name, 1, 1))
    incremental(a, "TOPIC", name,
                ("retention.ms", "123456", AlterConfigOpType.SET)).result(timeout=T)
    cfg = topic_configs(a, name)
    assert cfg["retention.ms"].value == "123456"
    assert src(cfg["retention.ms"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    incremental(a, "TOPIC", name,
                ("retention.ms", None, AlterConfigOpType.DELETE)).result(timeout=T)
    cfg = topic_configs(a, name)
    assert cfg["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert src(cfg["retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value


def test_incremental_alter_is_atomic_and_names_the_bad_config(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"atomic-{unique}"
    create(a, NewTopic(name, 1, 1))
    f = incremental(a, "TOPIC", name, ("retention.ms", "5000", AlterConfigOpType.SET),
                    ("not.a.config", "x", AlterConfigOpType.SET))
    err = failure(f)
    assert err.code() == KafkaError.INVALID_CONFIG and "not.a.config" in err.str()
    assert src(topic_configs(a, name)["retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value
    f = incremental(a, "TOPIC", name, ("retention.ms", "never", AlterConfigOpType.SET))
    err = failure(f)
    assert err.code() == KafkaError.INVALID_CONFIG and "retention.ms" in err.str()
    # validate_only checks without applying.
    incremental(a, "TOPIC", name, ("retention.ms", "5000", AlterConfigOpType.SET),
                validate_only=True).result(timeout=T)
    assert topic_configs(a, name)["retention.ms"].value != "5000"
    missing = f"missing-{unique}"
    f = incremental(a, "TOPIC", missing, ("retention.ms", "5000", AlterConfigOpType.SET))
    assert failure(f).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_configs_of_an_unknown_topic(broker, unique) -> None:
    a = admin(broker.bootstrap)
    (f,) = a.describe_configs([ConfigResource("TOPIC", f"nope-{unique}")], **OPTS).values()
    assert failure(f).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_broker_configs_alter_and_describe(fresh_broker) -> None:
    b = fresh_broker
    b.overrides["log.segment.bytes"] = "2097152"  # a static (startup) value
    b.start()
    a = admin(b.bootstrap)
    cfg = broker_configs(a)
    assert cfg["log.retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert src(cfg["log.retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value
    assert src(cfg["log.segment.bytes"]) == ConfigSource.STATIC_BROKER_CONFIG.value
    assert cfg["log.dirs"].is_read_only and not cfg["log.retention.ms"].is_read_only
    create(a, NewTopic("inherits", 1, 1))

    incremental(a, "BROKER", "1", ("log.retention.ms", "86400000", AlterConfigOpType.SET),
                ("log.segment.bytes", "4194304", AlterConfigOpType.SET)).result(timeout=T)
    cfg = broker_configs(a)
    assert cfg["log.retention.ms"].value == "86400000"
    assert src(cfg["log.retention.ms"]) == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    # A topic without an override follows the broker value and reports where it comes from.
    t = topic_configs(a, "inherits")["retention.ms"]
    assert t.value == "86400000" and src(t) == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    # DELETE falls back to the startup value, else the default.
    incremental(a, "BROKER", "1", ("log.retention.ms", None, AlterConfigOpType.DELETE),
                ("log.segment.bytes", None, AlterConfigOpType.DELETE)).result(timeout=T)
    cfg = broker_configs(a)
    assert src(cfg["log.retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value
    assert cfg["log.segment.bytes"].value == "2097152"
    assert src(cfg["log.segment.bytes"]) == ConfigSource.STATIC_BROKER_CONFIG.value

    err = failure(incremental(a, "BROKER", "1", ("log.dirs", "/elsewhere", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_CONFIG and "restart" in err.str()
    err = failure(incremental(a, "BROKER", "1", ("log.retention.ms", "0", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_CONFIG and "log.retention.ms" in err.str()
    err = failure(incremental(a, "BROKER", "1", ("no.such.broker.config", "1",
                                                 AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_CONFIG and "no.such.broker.config" in err.str()


# -- partitions and records ------------------------------------------------------------------


def test_create_partitions(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"grow-{unique}"
    create(a, NewTopic(name, 1, 1))
    (f,) = a.create_partitions([NewPartitions(name, 3)], validate_only=True, **OPTS).values()
    f.result(timeout=T)
    assert partitions(a, name) == 1
    (f,) = a.create_partitions([NewPartitions(name, 4)], **OPTS).values()
    f.result(timeout=T)
    assert partitions(a, name) == 4
    for count in (4, 2):
        (f,) = a.create_partitions([NewPartitions(name, count)], **OPTS).values()
        assert failure(f).code() == KafkaError.INVALID_PARTITIONS
    missing = f"missing-{unique}"
    (f,) = a.create_partitions([NewPartitions(missing, 2)], **OPTS).values()
    assert failure(f).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_records_moves_the_log_start(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"trim-{unique}"
    create(a, NewTopic(name, 1, 1))
    produce(broker.bootstrap, name, 10)
    assert earliest(a, name) == 0
    (f,) = a.delete_records([TopicPartition(name, 0, 4)], operation_timeout=T, **OPTS).values()
    assert f.result(timeout=T).low_watermark == 4
    assert earliest(a, name) == 4
    # Below the current start: nothing moves back.
    (f,) = a.delete_records([TopicPartition(name, 0, 2)], operation_timeout=T, **OPTS).values()
    assert f.result(timeout=T).low_watermark == 4
    (f,) = a.delete_records([TopicPartition(name, 0, 100)], operation_timeout=T, **OPTS).values()
    assert failure(f).code() == KafkaError.OFFSET_OUT_OF_RANGE
    # Raw: -1 means "up to the high watermark"; other negative offsets and unknown partitions
    # (which the client library refuses to send) are per-partition errors.
    with RawClient(broker.bootstrap) as c:
        resp = c.call(21, 2, request(21, 2, timeout=timedelta(seconds=T), topics=(
            *_delete_records_topic(name, ((0, -1), (0, -7), (1, 0))),
            *_delete_records_topic(f"missing-{unique}", ((0, 0),)))))
    hw, negative, no_partition = resp.topics[0].partitions
    assert (hw.error_code, hw.low_watermark) == (ErrorCode.none, 10)
    assert negative.error_code == ErrorCode.offset_out_of_range
    assert (no_partition.error_code, no_partition.low_watermark) == \
        (ErrorCode.unknown_topic_or_partition, -1)
    assert resp.topics[1].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    assert earliest(a, name) == 10


def _delete_records_topic(name: str, parts: tuple[tuple[int, int], ...]) -> tuple[Any]:
    m = RawClient.request_module(21, 2)
    return (m.DeleteRecordsTopic(name=name, partitions=tuple(
        m.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in parts)),)


# -- cluster ---------------------------------------------------------------------------------


def test_describe_cluster(broker) -> None:
    # librdkafka answers describe_cluster from a Metadata request; the DescribeCluster RPC
    # itself is exercised raw below, and both must agree.
    a = admin(broker.bootstrap)
    d = a.describe_cluster(**OPTS).result(timeout=T)
    assert d.cluster_id
    assert d.controller.id == 1
    (node,) = d.nodes
    assert (node.id, node.host, node.port) == (1, "127.0.0.1", broker.port)
    with RawClient(broker.bootstrap) as c:
        for v in (0, 1):
            r = c.call(60, v, request(60, v, include_cluster_authorized_operations=True,
                                      endpoint_type=1))
            assert (r.error_code, r.cluster_id, r.controller_id) == (ErrorCode.none,
                                                                     d.cluster_id, 1)
            assert [(x.broker_id, x.host, x.port) for x in r.brokers] == \
                [(1, "127.0.0.1", broker.port)]
            # No authorizer: every CLUSTER operation (CREATE 5, ALTER 7, DESCRIBE 8,
            # DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12) but CLUSTER_ACTION
            # (9, super.users only) is allowed.
            assert r.cluster_authorized_operations == sum(1 << op
                                                          for op in (5, 7, 8, 10, 11, 12))


# -- raw requests: newest versions and what the client cannot send ---------------------------


def _creatable(m: Any, name: str, partitions: int = 1, replication: int = 1,
               configs: dict[str, str | None] | None = None,
               assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()) -> Any:
    return m.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication,
        assignments=tuple(m.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
                          for p, b in assignments),
        configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()))


def _create_v7(c: RawClient, *topics: Any, validate_only: bool = False) -> dict[str, Any]:
    resp = c.call(19, 7, request(19, 7, topics=topics, timeout=timedelta(seconds=T),
                                 validate_only=validate_only))
    return {t.name: t for t in resp.topics}


def test_create_topics_v7_returns_id_counts_and_configs(broker, unique) -> None:
    m = RawClient.request_module(19, 7)
    name, dry, dup, dflt = (f"{p}-{unique}" for p in ("v7", "v7dry", "v7dup", "v7default"))
    with RawClient(broker.bootstrap) as c:
        got = _create_v7(c, _creatable(m, name, 2, configs={"retention.ms": "60000"}),
                         _creatable(m, dup), _creatable(m, dup), _creatable(m, dflt, -1, -1))
        t = got[name]
        assert t.error_code == ErrorCode.none
        assert isinstance(t.topic_id, uuid.UUID) and t.topic_id.int != 0
        assert (t.num_partitions, t.replication_factor) == (2, 1)
        cfg = {x.name: x for x in t.configs}
        assert cfg["retention.ms"].value == "60000" and cfg["retention.ms"].config_source == 1
        assert cfg["retention.bytes"].config_source == 5
        assert got[dup].error_code == ErrorCode.invalid_request
        assert (got[dflt].error_code, got[dflt].num_partitions) == (ErrorCode.none, 1)

        dry_run = _create_v7(c, _creatable(m, dry, 3), validate_only=True)[dry]
        assert (dry_run.error_code, dry_run.num_partitions) == (ErrorCode.none, 3)
        again = _create_v7(c, _creatable(m, dry, 3))[dry]
        assert again.error_code == ErrorCode.none  # the dry run created nothing

        bad = _create_v7(c, _creatable(m, f"nul-{unique}", configs={"retention.ms": None}),
                         _creatable(m, f"p0-{unique}", 0),
                         _creatable(m, f"rf0-{unique}", 1, 0))
        assert bad[f"nul-{unique}"].error_code == ErrorCode.invalid_config
        assert bad[f"p0-{unique}"].error_code == ErrorCode.invalid_partitions
        assert bad[f"rf0-{unique}"].error_code == ErrorCode.invalid_replication_factor
        assert bad[f"rf0-{unique}"].topic_id in (None, uuid.UUID(int=0))


def test_create_topics_manual_assignment(broker, unique) -> None:
    m = RawClient.request_module(19, 7)
    ok, elsewhere, both, gap = (f"{p}-{unique}" for p in ("asg", "asg-b2", "asg-both", "asg-gap"))
    with RawClient(broker.bootstrap) as c:
        got = _create_v7(c,
                         _creatable(m, ok, -1, -1, assignments=((0, (1,)), (1, (1,)))),
                         _creatable(m, elsewhere, -1, -1, assignments=((0, (2,)),)),
                         _creatable(m, both, 2, 1, assignments=((0, (1,)),)),
                         _creatable(m, gap, -1, -1, assignments=((1, (1,)),)))
    assert (got[ok].error_code, got[ok].num_partitions) == (ErrorCode.none, 2)
    assert got[elsewhere].error_code == ErrorCode.invalid_replica_assignment
    assert got[both].error_code == ErrorCode.invalid_request
    assert got[gap].error_code == ErrorCode.invalid_replica_assignment
    assert partitions(admin(broker.bootstrap), ok) == 2


def test_delete_topics_v6_by_id(broker, unique) -> None:
    m7 = RawClient.request_module(19, 7)
    m6 = RawClient.request_module(20, 6)
    by_id, by_name = f"del-id-{unique}", f"del-name-{unique}"
    with RawClient(broker.bootstrap) as c:
        created = _create_v7(c, _creatable(m7, by_id), _creatable(m7, by_name))
        tid = created[by_id].topic_id
        unknown = uuid.uuid4()
        resp = c.call(20, 6, request(20, 6, timeout=timedelta(seconds=T), topics=(
            m6.DeleteTopicState(name=None, topic_id=tid),
            m6.DeleteTopicState(name=by_name, topic_id=uuid.UUID(int=0)),
            m6.DeleteTopicState(name=None, topic_id=unknown),
            m6.DeleteTopicState(name="x", topic_id=uuid.uuid4()))))
    res = {(r.name, r.topic_id): r for r in resp.responses}
    assert res[(by_id, tid)].error_code == ErrorCode.none
    assert res[(by_name, created[by_name].topic_id)].error_code == ErrorCode.none
    assert res[(None, unknown)].error_code == ErrorCode.unknown_topic_id
    (both,) = [r for r in resp.responses if r.name == "x"]
    assert both.error_code == ErrorCode.invalid_request
    topics = admin(broker.bootstrap).list_topics(timeout=T).topics
    assert by_id not in topics and by_name not in topics


def test_describe_configs_v4_types_docs_synonyms_and_filters(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"dc4-{unique}"
    create(a, NewTopic(name, 1, 1, config={"retention.ms": "60000"}))
    m = RawClient.request_module(32, 4)

    def resource(kind: int, rname: str, keys: tuple[str, ...] | None = None) -> Any:
        return m.DescribeConfigsResource(resource_type=kind, resource_name=rname,
                                         configuration_keys=keys)

    with RawClient(broker.bootstrap) as c:
        resp = c.call(32, 4, request(32, 4, include_synonyms=True, include_documentation=True,
                                     resources=(
            resource(TOPIC, name, ("retention.ms", "cleanup.policy", "unknown.key")),
            resource(BROKER, ""), resource(BROKER, "1"), resource(BROKER, "7"),
            resource(CLIENT_METRICS, "x"))))
    topic, b_default, b_one, b_other, other_type = resp.results
    assert topic.error_code == ErrorCode.none
    cfg = {x.name: x for x in topic.configs}
    assert set(cfg) == {"retention.ms", "cleanup.policy"}
    r = cfg["retention.ms"]
    assert (r.value, r.config_source, r.config_type) == ("60000", 1, 5)  # TOPIC_CONFIG, LONG
    assert r.documentation
    # Highest precedence first: the override, then the broker synonym's default.
    assert [(s.name, s.source) for s in r.synonyms] == [("retention.ms", 1),
                                                        ("log.retention.ms", 5)]
    assert cfg["cleanup.policy"].config_type == 7  # LIST
    assert b_default.error_code == b_one.error_code == ErrorCode.none
    bcfg = {x.name: x for x in b_one.configs}
    assert bcfg["auto.create.topics.enable"].config_type == 1  # BOOLEAN
    assert bcfg["node.id"].read_only and bcfg["node.id"].value == "1"
    assert b_other.error_code == ErrorCode.invalid_request and "7" in b_other.error_message
    assert other_type.error_code == ErrorCode.invalid_request
    # Without the flags: no synonyms, no documentation.
    with RawClient(broker.bootstrap) as c:
        plain = c.call(32, 4, request(32, 4, include_synonyms=False, include_documentation=False,
                                      resources=(resource(TOPIC, name, ("retention.ms",)),)))
    (r,) = plain.results[0].configs
    assert r.synonyms == () and r.documentation is None


def test_incremental_alter_raw_cases(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"iac-{unique}"
    create(a, NewTopic(name, 1, 1))
    m = RawClient.request_module(44, 1)

    def res(kind: int, rname: str, *ops: tuple[str, int, str | None]) -> Any:
        return m.AlterConfigsResource(resource_type=kind, resource_name=rname, configs=tuple(
            m.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops))

    with RawClient(broker.bootstrap) as c:
        resp = c.call(44, 1, request(44, 1, validate_only=False, resources=(
            res(TOPIC, name, ("retention.ms", 2, "5")),                       # APPEND non-list
            res(BROKER, "1", ("log.retention.ms", 9, "5")),                  # unknown op
            res(BROKER, "9", ("log.retention.ms", 0, "5")),                  # other broker
            res(CLIENT_METRICS, "x", ("a", 0, "b")),                          # unsupported type
            res(BROKER, "", ("log.retention.ms", 0, None)),                   # null SET value
            res(TOPIC, f"missing-{unique}", ("retention.ms", 0, "1")),       # unknown topic
        )))
        append = c.call(44, 1, request(44, 1, validate_only=False, resources=(
            res(TOPIC, name, ("cleanup.policy", 2, "delete")),),))         # APPEND list: ok
        dup = c.call(44, 1, request(44, 1, validate_only=False, resources=(
            res(TOPIC, name, ("retention.ms", 0, "1000")),
            res(TOPIC, name, ("retention.ms", 0, "2000")))))
    codes = [r.error_code for r in resp.responses]
    assert codes == [ErrorCode.invalid_config, ErrorCode.invalid_request,
                     ErrorCode.invalid_request, ErrorCode.invalid_request,
                     ErrorCode.invalid_request, ErrorCode.unknown_topic_or_partition]
    assert append.responses[0].error_code == ErrorCode.none
    assert "retention.ms" in resp.responses[0].error_message
    assert [r.error_code for r in dup.responses] == [ErrorCode.invalid_request] * 2
    cfg = topic_configs(a, name)
    assert cfg["cleanup.policy"].value == "delete"
    assert src(cfg["retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value


def test_legacy_alter_configs_replaces_the_override_set(broker, unique) -> None:
    a = admin(broker.bootstrap)
    name = f"legacy-{unique}"
    create(a, NewTopic(name, 1, 1, config={"retention.ms": "60000", "segment.ms": "3600000"}))
    m = RawClient.request_module(33, 2)
    with RawClient(broker.bootstrap) as c:
        resp = c.call(33, 2, request(33, 2, validate_only=False, resources=(
            m.AlterConfigsResource(resource_type=TOPIC, resource_name=name, configs=(
                m.AlterableConfig(name="retention.bytes", value="1048576"),)),)))
    assert resp.responses[0].error_code == ErrorCode.none
    cfg = topic_configs(a, name)
    assert cfg["retention.bytes"].value == "1048576"
    assert src(cfg["retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value  # dropped
    assert src(cfg["segment.ms"]) == ConfigSource.DEFAULT_CONFIG.value


def test_describe_cluster_v2_endpoint_types(broker) -> None:
    with RawClient(broker.bootstrap) as c:
        ok = c.call(60, 2, request(60, 2, include_cluster_authorized_operations=False,
                                   endpoint_type=1, include_fenced_brokers=False))
        ctl = c.call(60, 2, request(60, 2, include_cluster_authorized_operations=False,
                                    endpoint_type=2, include_fenced_brokers=False))
        odd = c.call(60, 2, request(60, 2, include_cluster_authorized_operations=False,
                                    endpoint_type=9, include_fenced_brokers=False))
    assert ok.error_code == ErrorCode.none and ok.controller_id == 1
    (b,) = ok.brokers
    assert (b.broker_id, b.port, b.is_fenced) == (1, broker.port, False)
    assert ok.cluster_authorized_operations == -2147483648
    assert ctl.error_code == ErrorCode.mismatched_endpoint_type and ctl.brokers == ()
    assert odd.error_code == ErrorCode.unsupported_endpoint_type


def test_internal_topics_and_disabled_deletion(fresh_broker, unique) -> None:
    b = fresh_broker
    b.overrides["delete.topic.enable"] = "false"
    b.start()
    a = admin(b.bootstrap)
    name = f"keep-{unique}"
    create(a, NewTopic(name, 1, 1))
    err = failure(a.delete_topics([name], operation_timeout=T, **OPTS)[name])
    assert err.code() == KafkaError.TOPIC_DELETION_DISABLED
    assert name in a.list_topics(timeout=T).topics
    with RawClient(b.bootstrap) as c:
        # DeleteTopics v2 predates TOPIC_DELETION_DISABLED: Kafka answers INVALID_REQUEST.
        old = c.call(20, 2, request(20, 2, topic_names=(name,), timeout=timedelta(seconds=T)))
    assert old.responses[0].error_code == ErrorCode.invalid_request


def test_internal_topics_are_protected(fresh_broker) -> None:
    b = fresh_broker
    b.start()
    a = admin(b.bootstrap)
    internal = "__consumer_offsets"
    with RawClient(b.bootstrap) as c:
        m = RawClient.request_module(3, 12)

        def metadata() -> Any:
            return c.call(3, 12, request(3, 12, topics=(m.MetadataRequestTopic(
                name=internal, topic_id=uuid.UUID(int=0)),), allow_auto_topic_creation=True,
                include_topic_authorized_operations=False)).topics[0]

        # A single broker's group coordinator made it at start, with its own partition count
        # (a cluster makes it on first use: tests/integration/cluster/test_cluster_share_groups).
        md = metadata()
        assert md.error_code == ErrorCode.none and md.is_internal
        assert len(md.partitions) == 50  # offsets.topic.num.partitions, not num.partitions
        dr = c.call(21, 2, request(21, 2, timeout=timedelta(seconds=T),
                                   topics=_delete_records_topic(internal, ((0, 0),))))
        assert dr.topics[0].partitions[0].error_code == ErrorCode.invalid_topic_exception
        cp = c.call(37, 3, request(37, 3, timeout=timedelta(seconds=T), validate_only=False,
                                   topics=(RawClient.request_module(37, 3).CreatePartitionsTopic(
                                       name=internal, count=99, assignments=None),)))
        assert cp.results[0].error_code == ErrorCode.invalid_request
    err = failure(a.delete_topics([internal], operation_timeout=T, **OPTS)[internal])
    assert err.code() == KafkaError.TOPIC_DELETION_DISABLED
