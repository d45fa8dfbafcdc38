"""Every API authorizes as Apache Kafka does (broker/authz.py has the table), with ACLs on
User:ANONYMOUS (connections are not authenticated on this listener, so that is every client).

One module-scoped broker runs the StandardAuthorizer. It is set up as a super user, then
restarted without super users, so that ANONYMOUS holds only the bootstrap ACLs: ALTER on the
cluster (to manage ACLs from the tests), a DENY of DESCRIBE on the cluster (so ALTER's implied
DESCRIBE does not open ListGroups, DescribeAcls or the cluster bitfield), and CREATE on topics
prefixed ``made-``. Each test grants what it needs on its own topics and groups.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from broker.handlers import ALL_HANDLERS
from tests.conftest import BrokerProcess, free_port
from tests.integration.share_helpers import share_consumer
from tests.unit.batches import make_batch

from tests.integration.rawclient import RawClient, request, request_module

pytestmark = pytest.mark.timeout(120)

T = 10
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
TOPIC = "exists-1"  # exists; ANONYMOUS has no ACL on it
GROUP = "g-none"  # ANONYMOUS has no ACL on it
HIDDEN_GROUP = "hidden-group"  # exists; ANONYMOUS may not describe it
TAF, GAF, CAF = (ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
                 ErrorCode.cluster_authorization_failed)
NO_AUTHORIZATION = {17, 18, 36}  # SaslHandshake, ApiVersions, SaslAuthenticate


class Env:
    def __init__(self, broker: BrokerProcess, topic_id: uuid.UUID, metrics_port: int) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.topic_id = topic_id
        self.metrics_port = metrics_port
        self.admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def grant(self, rtype: ResourceType, name: str, op: AclOperation,
              pattern: ResourcePatternType = LITERAL, permission: AclPermissionType = ALLOW
              ) -> AclBinding:
        binding = AclBinding(rtype, name, pattern, ANON, "*", op, permission)
        for f in self.admin.create_acls([binding], request_timeout=T).values():
            assert f.result(timeout=T) is None
        return binding

    def revoke(self, b: AclBinding) -> None:
        flt = AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                               b.operation, b.permission_type)
        for f in self.admin.delete_acls([flt], request_timeout=T).values():
            assert len(f.result(timeout=T)) == 1

    def create_topic(self, name: str, partitions: int = 1) -> None:
        self.grant(ResourceType.TOPIC, name, AclOperation.CREATE)
        fs = self.admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=T)
        fs[name].result(timeout=T)

    def produce(self, topic: str, count: int) -> None:
        self.grant(ResourceType.TOPIC, topic, AclOperation.WRITE)
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(count):
            p.produce(topic, f"v{i}".encode())
        assert p.flush(30) == 0

    def raw(self, api: int, version: int, **fields: Any) -> Any:
        with RawClient(self.bootstrap) as c:
            return c.call(api, version, request(api, version, **fields))

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as r:
            return r.read().decode()


def _heartbeat(c: RawClient, group: str, topic: str) -> None:
    hb = request_module(76, 1)
    resp = c.call(76, 1, hb.ShareGroupHeartbeatRequest(
        group_id=group, member_id=uuid.uuid4().hex, member_epoch=0, rack_id=None,
        subscribed_topic_names=(topic,)))
    assert resp.error_code == ErrorCode.none, resp


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    metrics_port = free_port()
    b = BrokerProcess(Path(tmp_path_factory.mktemp("authz")) / "data", overrides={
        "authorizer.class.name": STANDARD, "super.users": ANON,
        "metrics.listen": f"127.0.0.1:{metrics_port}"})
    b.start()
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    boot = [AclBinding(ResourceType.BROKER, "kafka-cluster", LITERAL, ANON, "*",
                       AclOperation.ALTER, ALLOW),
            AclBinding(ResourceType.BROKER, "kafka-cluster", LITERAL, ANON, "*",
                       AclOperation.DESCRIBE, DENY),
            AclBinding(ResourceType.TOPIC, "made-", PREFIXED, ANON, "*",
                       AclOperation.CREATE, ALLOW)]
    for f in a.create_acls(boot, request_timeout=T).values():
        assert f.result(timeout=T) is None
    a.create_topics([NewTopic(TOPIC, 1, 1), NewTopic("hidden-topic", 1, 1)],
                    operation_timeout=T)[TOPIC].result(timeout=T)
    with RawClient(b.bootstrap) as c:
        m = request_module(3, 12)
        meta = c.call(3, 12, m.MetadataRequest(
            topics=(m.MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        topic_id = meta.topics[0].topic_id
        _heartbeat(c, HIDDEN_GROUP, "hidden-topic")
        hidden_txn = c.call(22, 4, request(22, 4, transactional_id="tx-hidden",
                                           transaction_timeout=timedelta(seconds=60)))
        assert hidden_txn.error_code == ErrorCode.none, hidden_txn
    b.stop()
    del b.overrides["super.users"]
    b.start()
    yield Env(b, topic_id, metrics_port)
    b.stop()


# -- the table: each API refused to a principal without ACLs on the resources ---------------


def _one(resp: Any, *path: str) -> Any:
    """Follow single-element lists: _one(resp, "responses", "partition_responses")."""
    for name in path:
        items = getattr(resp, name)
        assert len(items) == 1, (name, items)
        resp = items[0]
    return resp


def _codes(resp: Any, *path: str) -> list[int]:
    out: list[Any] = [resp]
    for name in path:
        out = [x for o in out for x in getattr(o, name)]
    return [int(x.error_code) for x in out]


def _partition_codes(resp: Any) -> list[int]:
    return [int(p.partition_error_code) for t in resp.results_by_topic_v3_and_below
            for p in t.results_by_partition]


Case = tuple[str, int, int, Callable[[Env], dict[str, Any]], Callable[[Env, Any], None]]


def _topic_state(cls: str, env: Env, **partition: Any) -> dict[str, Any]:
    m = request_module({"Initialize": 83, "Read": 84, "Write": 85, "Delete": 86,
                        "Summary": 87}[cls], 0)
    data = next(getattr(m, n) for n in ("InitializeStateData", "ReadStateData",
                                        "WriteStateData", "DeleteStateData",
                                        "ReadStateSummaryData") if hasattr(m, n))
    return dict(group_id=GROUP, topics=(data(topic_id=env.topic_id, partitions=(
        m.PartitionData(partition=0, **partition),)),))


CASES: list[Case] = [
    ("produce", 0, 9, lambda e: dict(
        transactional_id=None, acks=-1, timeout=timedelta(seconds=T), topic_data=(
            request_module(0, 9).TopicProduceData(name=TOPIC, partition_data=(
                request_module(0, 9).PartitionProduceData(
                    index=0, records=make_batch([(None, b"x")])),)),)),
     lambda e, r: _codes(r, "responses", "partition_responses") == [TAF] or pytest.fail(r)),
    # A transactional id needs TRANSACTIONAL_ID WRITE first; refused, every partition says so
    # (before the topic check, as Kafka refuses the whole request).
    ("produce_transactional", 0, 9, lambda e: dict(
        transactional_id="tx-none", acks=-1, timeout=timedelta(seconds=T), topic_data=(
            request_module(0, 9).TopicProduceData(name=TOPIC, partition_data=(
                request_module(0, 9).PartitionProduceData(
                    index=0, records=make_batch([(None, b"x")], attributes=0x10,
                                                producer_id=1, producer_epoch=0,
                                                base_sequence=0)),)),)),
     lambda e, r: _codes(r, "responses", "partition_responses") == [
         ErrorCode.transactional_id_authorization_failed] or pytest.fail(r)),
    ("fetch", 1, 12, lambda e: dict(
        replica_id=-1, max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, topics=(
            request_module(1, 12).FetchTopic(topic=TOPIC, partitions=(
                request_module(1, 12).FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=0,
                    last_fetched_epoch=-1, log_start_offset=-1,
                    partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id=""),
     lambda e, r: _codes(r, "responses", "partitions") == [TAF] or pytest.fail(r)),
    ("list_offsets", 2, 7, lambda e: dict(replica_id=-1, isolation_level=0, topics=(
        request_module(2, 7).ListOffsetsTopic(name=TOPIC, partitions=(
            request_module(2, 7).ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)),
     lambda e, r: _codes(r, "topics", "partitions") == [TAF] or pytest.fail(r)),
    ("metadata_named", 3, 12, lambda e: dict(
        topics=(request_module(3, 12).MetadataRequestTopic(topic_id=None, name=TOPIC),
                request_module(3, 12).MetadataRequestTopic(topic_id=e.topic_id, name=None),
                request_module(3, 12).MetadataRequestTopic(topic_id=None, name="made-auto")),
        allow_auto_topic_creation=True, include_topic_authorized_operations=True),
     lambda e, r: [(t.error_code, t.name, t.partitions) for t in r.topics] == [
         (TAF, TOPIC, ()), (TAF, None, ()), (TAF, "made-auto", ())] or pytest.fail(r)),
    ("metadata_all", 3, 12, lambda e: dict(topics=None, allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False),
     lambda e, r: TOPIC not in {t.name for t in r.topics} or pytest.fail(r)),
    ("offset_commit", 8, 9, lambda e: dict(
        group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(request_module(8, 9).OffsetCommitRequestTopic(name=TOPIC, partitions=(
            request_module(8, 9).OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                committed_metadata=""),)),)),
     lambda e, r: _codes(r, "topics", "partitions") == [GAF] or pytest.fail(r)),
    ("offset_fetch", 9, 9, lambda e: dict(groups=(request_module(9, 9).OffsetFetchRequestGroup(
        group_id=GROUP, topics=None),), require_stable=False),
     lambda e, r: _codes(r, "groups") == [GAF] or pytest.fail(r)),
    ("join_group", 11, 9, lambda e: dict(
        group_id=GROUP, session_timeout=timedelta(seconds=10),
        rebalance_timeout=timedelta(seconds=10), member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=(request_module(11, 9).JoinGroupRequestProtocol(
            name="range", metadata=b""),), reason=None),
     lambda e, r: r.error_code == GAF or pytest.fail(r)),
    ("heartbeat", 12, 4, lambda e: dict(group_id=GROUP, generation_id=1, member_id="m",
                                         group_instance_id=None),
     lambda e, r: r.error_code == GAF or pytest.fail(r)),
    ("leave_group", 13, 5, lambda e: dict(group_id=GROUP, members=(
        request_module(13, 5).MemberIdentity(member_id="m", group_instance_id=None,
                                             reason=None),)),
     lambda e, r: r.error_code == GAF or pytest.fail(r)),
    ("sync_group", 14, 5, lambda e: dict(
        group_id=GROUP, generation_id=1, member_id="m", group_instance_id=None,
        protocol_type="consumer", protocol_name="range", assignments=()),
     lambda e, r: r.error_code == GAF or pytest.fail(r)),
    ("offset_delete", 47, 0, lambda e: dict(group_id=GROUP, topics=(
        request_module(47, 0).OffsetDeleteRequestTopic(name=TOPIC, partitions=(
            request_module(47, 0).OffsetDeleteRequestPartition(partition_index=0),)),)),
     lambda e, r: r.error_code == GAF or pytest.fail(r)),
    ("find_coordinator", 10, 6, lambda e: dict(key_type=0, coordinator_keys=(GROUP,)),
     lambda e, r: _codes(r, "coordinators") == [GAF] or pytest.fail(r)),
    ("find_coordinator_txn", 10, 6, lambda e: dict(key_type=1, coordinator_keys=("tx",)),
     lambda e, r: _codes(r, "coordinators") == [
         ErrorCode.transactional_id_authorization_failed] or pytest.fail(r)),
    ("find_coordinator_share", 10, 6, lambda e: dict(
        key_type=2, coordinator_keys=(f"{GROUP}:{e.topic_id}:0",)),
     lambda e, r: _codes(r, "coordinators") == [CAF] or pytest.fail(r)),
    ("describe_groups", 15, 5, lambda e: dict(groups=(GROUP,),
                                               include_authorized_operations=True),
     lambda e, r: _codes(r, "groups") == [GAF] or pytest.fail(r)),
    ("list_groups", 16, 5, lambda e: dict(states_filter=(), types_filter=()),
     lambda e, r: (r.error_code == 0 and HIDDEN_GROUP not in {g.group_id for g in r.groups})
     or pytest.fail(r)),
    ("api_versions", 18, 3, lambda e: dict(client_software_name="t",
                                           client_software_version="1"),
     lambda e, r: r.error_code == 0 or pytest.fail(r)),
    ("create_topics", 19, 7, lambda e: dict(topics=(request_module(19, 7).CreatableTopic(
        name="other-1", num_partitions=1, replication_factor=1, assignments=(), configs=()),),
        timeout=timedelta(seconds=T), validate_only=False),
     lambda e, r: _codes(r, "topics") == [TAF] or pytest.fail(r)),
    ("delete_topics", 20, 6, lambda e: dict(topics=(
        request_module(20, 6).DeleteTopicState(name=TOPIC, topic_id=uuid.UUID(int=0)),
        request_module(20, 6).DeleteTopicState(name="no-such", topic_id=uuid.UUID(int=0)),
        request_module(20, 6).DeleteTopicState(name=None, topic_id=e.topic_id)),
        timeout=timedelta(seconds=T)),
     lambda e, r: sorted((d.error_code, d.name or "") for d in r.responses) == [
         (TAF, ""), (TAF, TOPIC), (TAF, "no-such")] or pytest.fail(r)),
    ("delete_records", 21, 2, lambda e: dict(topics=(request_module(21, 2).DeleteRecordsTopic(
        name=TOPIC, partitions=(request_module(21, 2).DeleteRecordsPartition(
            partition_index=0, offset=-1),)),), timeout=timedelta(seconds=T)),
     lambda e, r: _codes(r, "topics", "partitions") == [TAF] or pytest.fail(r)),
    ("init_producer_id", 22, 5, lambda e: dict(
        transactional_id=None, transaction_timeout=timedelta(seconds=60), producer_id=-1,
        producer_epoch=-1),
     lambda e, r: r.error_code == CAF or pytest.fail(str(r))),
    ("init_producer_id_txn", 22, 5, lambda e: dict(
        transactional_id="tx", transaction_timeout=timedelta(seconds=60), producer_id=-1,
        producer_epoch=-1),
     lambda e, r: r.error_code == ErrorCode.transactional_id_authorization_failed
     or pytest.fail(r)),
    ("add_partitions_to_txn", 24, 3, lambda e: dict(
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0, v3_and_below_topics=(
            request_module(24, 3).AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),)),
     lambda e, r: _partition_codes(r) == [ErrorCode.transactional_id_authorization_failed]
     or pytest.fail(r)),
    ("add_partitions_to_txn_v4", 24, 5, lambda e: dict(transactions=(
        request_module(24, 5).AddPartitionsToTxnTransaction(
            transactional_id="tx", producer_id=1, producer_epoch=0, verify_only=True,
            topics=(request_module(24, 5).AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),)),
    )),
     lambda e, r: r.error_code == CAF or pytest.fail(str(r))),
    ("add_offsets_to_txn", 25, 4, lambda e: dict(transactional_id="tx", producer_id=1,
                                                  producer_epoch=0, group_id=GROUP),
     lambda e, r: r.error_code == ErrorCode.transactional_id_authorization_failed
     or pytest.fail(r)),
    ("end_txn", 26, 4, lambda e: dict(transactional_id="tx", producer_id=1, producer_epoch=0,
                                      committed=True),
     lambda e, r: r.error_code == ErrorCode.transactional_id_authorization_failed
     or pytest.fail(r)),
    # CLUSTER ALTER is granted, which lets WriteTxnMarkers through as in Kafka (the admin
    # client's abortTransaction, kafka-transactions.sh abort): it is not refused.
    ("write_txn_markers", 27, 1, lambda e: dict(markers=(request_module(27, 1).WritableTxnMarker(
        producer_id=1, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=(request_module(27, 1).WritableTxnMarkerTopic(name=TOPIC,
                                                             partition_indexes=(0,)),)),)),
     lambda e, r: CAF not in [p.error_code for m in r.markers for t in m.topics
                              for p in t.partitions] or pytest.fail(r)),
    # The tool APIs (issue 25): DESCRIBE on the cluster (denied here) for kafka-log-dirs,
    # DESCRIBE_CONFIGS on the cluster (ALTER does not imply it) for ListConfigResources, READ on
    # the topic for DescribeProducers, DESCRIBE on the topic for DescribeTopicPartitions (a named
    # topic refused with the zero id; the all-topics listing leaves it out).
    ("describe_log_dirs", 35, 4, lambda e: dict(topics=None),
     lambda e, r: (r.error_code, r.results) == (CAF, ()) or pytest.fail(r)),
    ("offset_for_leader_epoch", 23, 4, lambda e: dict(replica_id=-1, topics=(
        request_module(23, 4).OffsetForLeaderTopic(topic=TOPIC, partitions=(
            request_module(23, 4).OffsetForLeaderPartition(
                partition=0, current_leader_epoch=-1, leader_epoch=0),)),)),
     lambda e, r: _codes(r, "topics", "partitions") == [TAF] or pytest.fail(r)),
    ("offset_for_leader_epoch_as_follower", 23, 4, lambda e: dict(replica_id=2, topics=(
        request_module(23, 4).OffsetForLeaderTopic(topic=TOPIC, partitions=(
            request_module(23, 4).OffsetForLeaderPartition(
                partition=0, current_leader_epoch=-1, leader_epoch=0),)),)),
     lambda e, r: _codes(r, "topics", "partitions") == [CAF] or pytest.fail(r)),
    ("elect_leaders", 43, 2, lambda e: dict(election_type=0, topic_partitions=(
        request_module(43, 2).TopicPartitions(topic=TOPIC, partitions=(0,)),),
        timeout=timedelta(seconds=T)),
     # ALTER on the cluster is one of ANONYMOUS's bootstrap ACLs: authorized, nothing to elect.
     lambda e, r: (r.error_code, _codes(r, "replica_election_results", "partition_result"))
     == (0, [ErrorCode.election_not_needed]) or pytest.fail(str(r))),
    ("alter_partition_reassignments", 45, 0, lambda e: dict(
        timeout=timedelta(seconds=T), topics=(request_module(45, 0).ReassignableTopic(
            name=TOPIC, partitions=(request_module(45, 0).ReassignablePartition(
                partition_index=0, replicas=(1,)),)),)),
     # Authorized by the same ALTER ACL; moving onto the replica it has is a no-op.
     lambda e, r: (r.error_code, _codes(r, "responses", "partitions")) == (0, [0])
     or pytest.fail(str(r))),
    ("list_partition_reassignments", 46, 0, lambda e: dict(
        timeout=timedelta(seconds=T), topics=None),
     lambda e, r: (r.error_code, r.topics) == (CAF, ()) or pytest.fail(r)),
    ("describe_producers", 61, 0, lambda e: dict(topics=(request_module(61, 0).TopicRequest(
        name=TOPIC, partition_indexes=(0,)),)),
     lambda e, r: _codes(r, "topics", "partitions") == [TAF] or pytest.fail(r)),
    ("list_config_resources", 74, 1, lambda e: dict(resource_types=()),
     lambda e, r: (r.error_code, r.config_resources) == (CAF, ()) or pytest.fail(r)),
    ("describe_topic_partitions", 75, 0, lambda e: dict(topics=(
        request_module(75, 0).TopicRequest(name=TOPIC),), response_partition_limit=10),
     lambda e, r: ([(t.error_code, t.name, t.topic_id) for t in r.topics]
                   == [(TAF, TOPIC, None)]) or pytest.fail(r)),  # the zero id decodes as None
    ("describe_topic_partitions_all", 75, 0, lambda e: dict(topics=(),
                                                              response_partition_limit=10),
     lambda e, r: (TOPIC not in {t.name for t in r.topics} and r.next_cursor is None)
     or pytest.fail(r)),
    ("describe_transactions", 65, 0, lambda e: dict(transactional_ids=("tx",)),
     lambda e, r: _codes(r, "transaction_states") == [
         ErrorCode.transactional_id_authorization_failed] or pytest.fail(r)),
    ("list_transactions", 66, 1, lambda e: dict(state_filters=(), producer_id_filters=(),
                                                duration_filter=-1),
     lambda e, r: (r.error_code, "tx-hidden" in {t.transactional_id
                                                 for t in r.transaction_states}) == (0, False)
     or pytest.fail(r)),
    ("txn_offset_commit", 28, 3, lambda e: dict(
        transactional_id="tx", group_id=GROUP, producer_id=1, producer_epoch=0,
        generation_id=-1, member_id="", group_instance_id=None, topics=(
            request_module(28, 3).TxnOffsetCommitRequestTopic(name=TOPIC, partitions=(
                request_module(28, 3).TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                    committed_metadata=""),)),)),
     lambda e, r: _codes(r, "topics", "partitions") == [
         ErrorCode.transactional_id_authorization_failed] or pytest.fail(r)),
    ("describe_acls", 29, 3, lambda e: dict(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1),
     lambda e, r: r.error_code == CAF or pytest.fail(str(r))),
    # CLUSTER ALTER is granted (the tests manage ACLs with it), so these are allowed.
    ("create_acls", 30, 3, lambda e: dict(creations=(request_module(30, 3).AclCreation(
        resource_type=2, resource_name="zz", resource_pattern_type=3,
        principal="User:nobody", host="*", operation=3, permission_type=3),)),
     lambda e, r: _codes(r, "results") == [0] or pytest.fail(r)),
    ("delete_acls", 31, 3, lambda e: dict(filters=(request_module(31, 3).DeleteAclsFilter(
        resource_type_filter=2, resource_name_filter="zz", pattern_type_filter=3,
        principal_filter="User:nobody", host_filter=None, operation=1,
        permission_type=1),)),
     lambda e, r: _codes(r, "filter_results") == [0] or pytest.fail(r)),
    ("describe_configs", 32, 4, lambda e: dict(resources=tuple(
        request_module(32, 4).DescribeConfigsResource(
            resource_type=t, resource_name=n, configuration_keys=None)
        for t, n in ((2, TOPIC), (4, ""), (32, GROUP))),
        include_synonyms=False, include_documentation=False),
     lambda e, r: _codes(r, "results") == [TAF, CAF, GAF] or pytest.fail(r)),
    ("alter_configs", 33, 2, lambda e: dict(resources=tuple(
        request_module(33, 2).AlterConfigsResource(resource_type=t, resource_name=n,
                                                   configs=())
        for t, n in ((2, TOPIC), (4, ""))), validate_only=True),
     lambda e, r: _codes(r, "responses") == [TAF, CAF] or pytest.fail(r)),
    ("create_partitions", 37, 3, lambda e: dict(topics=(
        request_module(37, 3).CreatePartitionsTopic(name=TOPIC, count=2, assignments=None),),
        timeout=timedelta(seconds=T), validate_only=True),
     lambda e, r: _codes(r, "results") == [TAF] or pytest.fail(r)),
    ("delete_groups", 42, 2, lambda e: dict(groups_names=(GROUP,)),
     lambda e, r: _codes(r, "results") == [GAF] or pytest.fail(r)),
    ("incremental_alter_configs", 44, 1, lambda e: dict(resources=tuple(
        request_module(44, 1).AlterConfigsResource(resource_type=t, resource_name=n,
                                                   configs=())
        for t, n in ((2, TOPIC), (4, ""), (32, GROUP))), validate_only=True),
     lambda e, r: _codes(r, "responses") == [TAF, CAF, GAF] or pytest.fail(r)),
    ("describe_scram", 50, 0, lambda e: dict(users=None),
     lambda e, r: _codes(r, "results") == [CAF] or pytest.fail(r)),
    ("alter_scram", 51, 0, lambda e: dict(deletions=(
        request_module(51, 0).ScramCredentialDeletion(name="nobody", mechanism=1),),
        upsertions=()),
     lambda e, r: _codes(r, "results") == [ErrorCode.resource_not_found] or pytest.fail(r)),
    ("describe_cluster", 60, 1, lambda e: dict(include_cluster_authorized_operations=True,
                                               endpoint_type=1),
     lambda e, r: (r.error_code, r.cluster_authorized_operations) == (0, 0) or pytest.fail(r)),
    ("consumer_group_heartbeat", 68, 1, lambda e: dict(
        group_id=GROUP, member_id=uuid.uuid4().hex, member_epoch=0,
        rebalance_timeout=timedelta(seconds=30), subscribed_topic_names=(TOPIC,),
        topic_partitions=()),
     lambda e, r: r.error_code == GAF or pytest.fail(r)),
    ("consumer_group_describe", 69, 1, lambda e: dict(group_ids=(GROUP,),
                                                      include_authorized_operations=True),
     lambda e, r: _codes(r, "groups") == [GAF] or pytest.fail(r)),
    ("share_group_heartbeat", 76, 1, lambda e: dict(
        group_id=GROUP, member_id=uuid.uuid4().hex, member_epoch=0, rack_id=None,
        subscribed_topic_names=(TOPIC,)),
     lambda e, r: r.error_code == GAF or pytest.fail(r)),
    ("share_group_describe", 77, 1, lambda e: dict(group_ids=(GROUP,),
                                                   include_authorized_operations=True),
     lambda e, r: _codes(r, "groups") == [GAF] or pytest.fail(r)),
    ("share_fetch", 78, 1, lambda e: dict(
        group_id=GROUP, member_id=uuid.uuid4().hex, share_session_epoch=0,
        max_wait=timedelta(0), min_bytes=0, max_bytes=1 << 20, max_records=10, batch_size=10,
        topics=(request_module(78, 1).FetchTopic(topic_id=e.topic_id, partitions=(
            request_module(78, 1).FetchPartition(partition_index=0,
                                                 acknowledgement_batches=()),)),),
        forgotten_topics_data=()),
     lambda e, r: (r.error_code, r.responses) == (GAF, ()) or pytest.fail(r)),
    ("share_acknowledge", 79, 1, lambda e: dict(
        group_id=GROUP, member_id=uuid.uuid4().hex, share_session_epoch=1, topics=()),
     lambda e, r: r.error_code == GAF or pytest.fail(r)),
    ("initialize_share_group_state", 83, 0,
     lambda e: _topic_state("Initialize", e, state_epoch=0, start_offset=0),
     lambda e, r: _codes(r, "results", "partitions") == [CAF] or pytest.fail(r)),
    ("read_share_group_state", 84, 0, lambda e: _topic_state("Read", e, leader_epoch=0),
     lambda e, r: _codes(r, "results", "partitions") == [CAF] or pytest.fail(r)),
    ("write_share_group_state", 85, 0, lambda e: _topic_state(
        "Write", e, state_epoch=0, leader_epoch=0, start_offset=0, state_batches=()),
     lambda e, r: _codes(r, "results", "partitions") == [CAF] or pytest.fail(r)),
    ("delete_share_group_state", 86, 0, lambda e: _topic_state("Delete", e),
     lambda e, r: _codes(r, "results", "partitions") == [CAF] or pytest.fail(r)),
    ("read_share_group_state_summary", 87, 0,
     lambda e: _topic_state("Summary", e, leader_epoch=0),
     lambda e, r: _codes(r, "results", "partitions") == [CAF] or pytest.fail(r)),
    ("describe_share_group_offsets", 90, 1, lambda e: dict(groups=(
        request_module(90, 1).DescribeShareGroupOffsetsRequestGroup(group_id=GROUP,
                                                                     topics=None),)),
     lambda e, r: _codes(r, "groups") == [GAF] or pytest.fail(r)),
    ("alter_share_group_offsets", 91, 0, lambda e: dict(group_id=GROUP, topics=(
        request_module(91, 0).AlterShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=(
            request_module(91, 0).AlterShareGroupOffsetsRequestPartition(
                partition_index=0, start_offset=0),)),)),
     lambda e, r: (r.error_code, r.responses) == (GAF, ()) or pytest.fail(r)),
    ("delete_share_group_offsets", 92, 0, lambda e: dict(group_id=GROUP, topics=(
        request_module(92, 0).DeleteShareGroupOffsetsRequestTopic(topic_name=TOPIC),)),
     lambda e, r: (r.error_code, r.responses) == (GAF, ()) or pytest.fail(r)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_refused_without_acls(env: Env, case: Case) -> None:
    _, api, version, body, check = case
    check(env, env.raw(api, version, **body(env)))


def test_the_table_covers_every_handler() -> None:
    served = {int(h.API_KEY) for h in ALL_HANDLERS}
    covered = {c[1] for c in CASES}
    assert served - covered <= NO_AUTHORIZATION, sorted(served - covered - NO_AUTHORIZATION)


def test_transaction_checks_behind_an_allowed_transactional_id(env: Env) -> None:
    """With WRITE on the transactional id: TAF for a topic without WRITE (the other partitions
    OPERATION_NOT_ATTEMPTED, nothing added), GAF for AddOffsetsToTxn without READ on the group,
    and ListTransactions shows the id (WRITE implies DESCRIBE) but not the hidden one."""
    txn = "tx-allowed"
    env.grant(ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE)
    env.create_topic("txn-writable")
    writable = env.grant(ResourceType.TOPIC, "txn-writable", AclOperation.WRITE)
    try:
        _transaction_checks(env, txn)
    finally:
        env.revoke(writable)  # WRITE implies DESCRIBE: later regex tests must not see the topic


def _transaction_checks(env: Env, txn: str) -> None:
    init = env.raw(22, 4, transactional_id=txn, transaction_timeout=timedelta(seconds=60))
    assert init.error_code == ErrorCode.none, init
    m = request_module(24, 3)
    added = env.raw(24, 3, v3_and_below_transactional_id=txn,
                    v3_and_below_producer_id=init.producer_id, v3_and_below_producer_epoch=0,
                    v3_and_below_topics=(m.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),
                                         m.AddPartitionsToTxnTopic(name="txn-writable",
                                                                   partitions=(0,))))
    assert {(t.name, p.partition_error_code) for t in added.results_by_topic_v3_and_below
            for p in t.results_by_partition} == {
        (TOPIC, TAF), ("txn-writable", ErrorCode.operation_not_attempted)}
    offsets = env.raw(25, 3, transactional_id=txn, producer_id=init.producer_id,
                      producer_epoch=0, group_id=GROUP)
    assert offsets.error_code == GAF
    listed = env.raw(66, 0, state_filters=(), producer_id_filters=())
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
        (txn, "Empty")]


def test_topic_checks_behind_an_allowed_group(env: Env) -> None:
    """With READ/DESCRIBE/DELETE on the group, the topic-level checks answer per topic."""
    group = "g-topics"
    for op in (AclOperation.READ, AclOperation.DELETE):
        env.grant(ResourceType.GROUP, group, op)
    hb = env.raw(76, 1, group_id=group, member_id=uuid.uuid4().hex, member_epoch=0,
                 rack_id=None, subscribed_topic_names=(TOPIC,))
    assert hb.error_code == TAF and TOPIC in hb.error_message
    m78 = request_module(78, 1)
    sf = env.raw(78, 1, group_id=group, member_id=uuid.uuid4().hex, share_session_epoch=0,
                 max_wait=timedelta(0), min_bytes=0, max_bytes=1 << 20, max_records=10,
                 batch_size=10, topics=(m78.FetchTopic(topic_id=env.topic_id, partitions=(
                     m78.FetchPartition(partition_index=0, acknowledgement_batches=()),)),),
                 forgotten_topics_data=())
    assert sf.error_code == 0 and _codes(sf, "responses", "partitions") == [TAF]
    m90 = request_module(90, 1)
    d = env.raw(90, 1, groups=(m90.DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=(m90.DescribeShareGroupOffsetsRequestTopic(
            topic_name=TOPIC, partitions=(0,)),)),))
    assert _codes(d, "groups", "topics", "partitions") == [TAF]
    m91 = request_module(91, 0)
    a = env.raw(91, 0, group_id=group, topics=(m91.AlterShareGroupOffsetsRequestTopic(
        topic_name=TOPIC, partitions=(m91.AlterShareGroupOffsetsRequestPartition(
            partition_index=0, start_offset=0),)),))
    assert a.error_code == 0 and _codes(a, "responses", "partitions") == [TAF]
    m8 = request_module(8, 9)
    oc = env.raw(8, 9, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                 group_instance_id=None, topics=(m8.OffsetCommitRequestTopic(
                     name=TOPIC, partitions=(m8.OffsetCommitRequestPartition(
                         partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                         committed_metadata=""),)),))
    assert _codes(oc, "topics", "partitions") == [TAF]
    m9 = request_module(9, 9)
    of = env.raw(9, 9, groups=(m9.OffsetFetchRequestGroup(group_id=group, topics=(
        m9.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),)),),
        require_stable=False)
    assert _codes(of, "groups") == [0] and _codes(of, "groups", "topics", "partitions") == [TAF]
    m47 = request_module(47, 0)
    od = env.raw(47, 0, group_id=group, topics=(m47.OffsetDeleteRequestTopic(
        name=TOPIC, partitions=(m47.OffsetDeleteRequestPartition(partition_index=0),)),))
    assert od.error_code == 0 and _codes(od, "topics", "partitions") == [TAF]
    # ConsumerGroupHeartbeat (KIP-848): named topics need DESCRIBE; a regex quietly matches
    # only the topics the principal may DESCRIBE (here none), so it is assigned nothing.
    join: dict[str, Any] = dict(group_id=group + "-cg", member_epoch=0,
                                rebalance_timeout=timedelta(seconds=30), topic_partitions=())
    env.grant(ResourceType.GROUP, group + "-cg", AclOperation.READ)
    named = env.raw(68, 1, member_id=uuid.uuid4().hex, subscribed_topic_names=(TOPIC,), **join)
    assert named.error_code == TAF and TOPIC in named.error_message
    rx = env.raw(68, 1, member_id=uuid.uuid4().hex, subscribed_topic_regex=".*", **join)
    assert rx.error_code == 0 and rx.assignment is not None, rx
    assert rx.assignment.topic_partitions == ()


# -- real clients ----------------------------------------------------------------------------


def _first_error(consumer: Any, seconds: float = 15.0) -> int | None:
    """The first error code a ShareConsumer reports, polling up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            for msg in consumer.poll(0.2):
                if msg.error() is not None:
                    return int(msg.error().code())
        except KafkaException as exc:
            return int(exc.args[0].code())
    return None


def _consume(consumer: Any, want: int, seconds: float = 20.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while len(got) < want:
        assert time.monotonic() < deadline, f"got {len(got)} of {want}"
        for msg in consumer.poll(0.2):
            if msg.error() is None:
                got.append(msg.value())
    return got


def _set_earliest(env: Env, group: str) -> None:
    binding = env.grant(ResourceType.GROUP, group, AclOperation.ALTER_CONFIGS)
    m = request_module(44, 1)
    resp = env.raw(44, 1, resources=(m.AlterConfigsResource(
        resource_type=32, resource_name=group, configs=(m.AlterableConfig(
            name="share.auto.offset.reset", config_operation=0, value="earliest"),)),),
        validate_only=False)
    assert _codes(resp, "responses") == [0], resp
    env.revoke(binding)


def test_share_consumer_needs_group_read_then_topic_read(env: Env) -> None:
    topic, group = "made-sc-topic", "sc-group"
    env.create_topic(topic)
    env.produce(topic, 5)
    _set_earliest(env, group)
    c = share_consumer(env.bootstrap, group, topic)
    try:
        assert _first_error(c) == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()
    env.grant(ResourceType.GROUP, group, AclOperation.READ)
    c = share_consumer(env.bootstrap, group, topic)
    try:
        assert _first_error(c) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()
    env.grant(ResourceType.TOPIC, topic, AclOperation.READ)  # READ implies DESCRIBE
    c = share_consumer(env.bootstrap, group, topic)
    try:
        assert sorted(_consume(c, 5)) == sorted(f"v{i}".encode() for i in range(5))
    finally:
        c.close()


def test_prefixed_acls_apply_and_deny_wins(env: Env) -> None:
    env.create_topic("made-pfx-a")
    env.create_topic("made-pfx-b")
    env.produce("made-pfx-a", 3)
    env.produce("made-pfx-b", 3)
    env.grant(ResourceType.GROUP, "pfx-", AclOperation.READ, PREFIXED)
    env.grant(ResourceType.TOPIC, "made-pfx-", AclOperation.READ, PREFIXED)
    env.grant(ResourceType.TOPIC, "made-pfx-b", AclOperation.READ, permission=DENY)
    for group in ("pfx-a", "pfx-b"):
        _set_earliest(env, group)
    c = share_consumer(env.bootstrap, "pfx-a", "made-pfx-a")
    try:
        assert len(_consume(c, 3)) == 3
    finally:
        c.close()
    # READ on b is denied; its DESCRIBE (implied by the prefixed ALLOW) is not, so the group
    # joins and every fetch of b is TOPIC_AUTHORIZATION_FAILED.
    c = share_consumer(env.bootstrap, "pfx-b", "made-pfx-b")
    try:
        assert _first_error(c) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()


def test_a_null_group_id_is_refused_before_authorization(env: Env) -> None:
    """A ShareFetch or ShareAcknowledge with a null GroupId is INVALID_REQUEST, checked before the
    group is authorized (matching a null id against a PREFIXED GROUP ACL used to raise and drop
    the connection); the connection keeps serving."""
    env.grant(ResourceType.GROUP, "nullg-", AclOperation.READ, PREFIXED)
    with RawClient(env.bootstrap) as c:
        for version in (1, 2):
            fetched = c.call(78, version, request(
                78, version, group_id=None, member_id=uuid.uuid4().hex, share_session_epoch=0,
                max_wait=timedelta(0), min_bytes=0, max_bytes=1 << 20, max_records=10,
                batch_size=10, topics=(), forgotten_topics_data=()))
            assert (fetched.error_code, fetched.error_message) == (
                ErrorCode.invalid_request, "GroupId must be set")
            acked = c.call(79, version, request(
                79, version, group_id=None, member_id=uuid.uuid4().hex, share_session_epoch=1,
                topics=()))
            assert (acked.error_code, acked.error_message) == (
                ErrorCode.invalid_request, "GroupId must be set")
        versions = c.call(18, 3, request(18, 3, client_software_name="t",
                                         client_software_version="1"))
        assert versions.error_code == ErrorCode.none


def test_produce_is_refused_per_partition(env: Env) -> None:
    env.create_topic("made-p-ok")
    env.create_topic("made-p-no")
    env.grant(ResourceType.TOPIC, "made-p-ok", AclOperation.WRITE)
    m = request_module(0, 9)
    resp = env.raw(0, 9, transactional_id=None, acks=-1, timeout=timedelta(seconds=T),
                   topic_data=tuple(m.TopicProduceData(name=n, partition_data=(
                       m.PartitionProduceData(index=0, records=make_batch([(None, b"x")])),))
                       for n in ("made-p-ok", "made-p-no")))
    codes = {t.name: [p.error_code for p in t.partition_responses] for t in resp.responses}
    assert codes == {"made-p-ok": [0], "made-p-no": [TAF]}
    (no,) = [t for t in resp.responses if t.name == "made-p-no"]
    assert "WRITE" in no.partition_responses[0].error_message
    # and through a real producer (librdkafka's own Metadata + Produce)
    env.produce("made-p-no", 2)


def test_metadata_hides_topics_until_describe_is_granted(env: Env) -> None:
    env.create_topic("made-meta")

    def listed() -> set[str]:
        return {t.name for t in env.raw(3, 12, topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=True).topics}

    assert "made-meta" not in listed()
    env.grant(ResourceType.TOPIC, "made-meta", AclOperation.DESCRIBE)
    assert "made-meta" in listed()
    (t,) = [t for t in env.raw(3, 12, topics=None, allow_auto_topic_creation=False,
                               include_topic_authorized_operations=True).topics
            if t.name == "made-meta"]
    assert t.topic_authorized_operations == (1 << 8) | (1 << 5)  # DESCRIBE, CREATE


def test_admin_client_refusals(env: Env) -> None:
    fs = env.admin.create_topics([NewTopic("other-admin", 1, 1)], operation_timeout=T)
    with pytest.raises(KafkaException) as ei:
        fs["other-admin"].result(timeout=T)
    assert ei.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    env.create_topic("made-admin")
    with pytest.raises(KafkaException) as ei:
        env.admin.delete_topics(["made-admin"], operation_timeout=T)["made-admin"].result(T)
    assert ei.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    res = ConfigResource("topic", "made-admin")
    with pytest.raises(KafkaException) as ei:
        env.admin.describe_configs([res], request_timeout=T)[res].result(timeout=T)
    assert ei.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    env.grant(ResourceType.TOPIC, "made-admin", AclOperation.DESCRIBE_CONFIGS)
    configs = env.admin.describe_configs([res], request_timeout=T)[res].result(timeout=T)
    assert "retention.ms" in configs
    env.grant(ResourceType.TOPIC, "made-admin", AclOperation.DELETE)
    env.admin.delete_topics(["made-admin"], operation_timeout=T)["made-admin"].result(T)


def test_list_groups_shows_only_describable_groups(env: Env) -> None:
    env.create_topic("made-lg")
    env.grant(ResourceType.TOPIC, "made-lg", AclOperation.DESCRIBE)
    read = env.grant(ResourceType.GROUP, "lg-group", AclOperation.READ)
    with RawClient(env.bootstrap) as c:
        _heartbeat(c, "lg-group", "made-lg")
    env.revoke(read)

    def listed() -> set[str]:
        return {g.group_id for g in env.raw(16, 5, states_filter=(), types_filter=()).groups}

    assert "lg-group" not in listed()
    env.grant(ResourceType.GROUP, "lg-group", AclOperation.DESCRIBE)
    assert "lg-group" in listed()
    assert HIDDEN_GROUP not in listed()


def test_refusals_are_counted_and_logged(env: Env) -> None:
    env.raw(42, 2, groups_names=("counted-group",))
    text = env.metrics()
    line = [x for x in text.splitlines()
            if x.startswith('shoal_authorization_denied_total{operation="DELETE",'
                            'resource_type="GROUP"}')]
    assert line and int(line[0].rsplit(" ", 1)[1]) >= 1
    deadline = time.monotonic() + 5
    while "may not DELETE GROUP 'counted-group'" not in env.broker.logs():
        assert time.monotonic() < deadline, env.broker.logs()
        time.sleep(0.05)
