"""kio's request types as the handlers receive them: for each handler, the union of the
request classes of every version it serves (its ``VERSIONS``).

Handlers import these under ``TYPE_CHECKING`` only: importing this module loads every version's
request module. Generated; tests/unit/broker/handlers/test_request_types.py checks it against the
handlers and rewrites it (``python -m tests.unit.broker.handlers.test_request_types``).
"""

from __future__ import annotations

from typing import TypeAlias

from kio.schema.add_offsets_to_txn.v0.request import AddOffsetsToTxnRequest as AddOffsetsToTxnRequestV0
from kio.schema.add_offsets_to_txn.v1.request import AddOffsetsToTxnRequest as AddOffsetsToTxnRequestV1
from kio.schema.add_offsets_to_txn.v2.request import AddOffsetsToTxnRequest as AddOffsetsToTxnRequestV2
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest as AddOffsetsToTxnRequestV3
from kio.schema.add_offsets_to_txn.v4.request import AddOffsetsToTxnRequest as AddOffsetsToTxnRequestV4
from kio.schema.add_partitions_to_txn.v0.request import AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV0
from kio.schema.add_partitions_to_txn.v1.request import AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV1
from kio.schema.add_partitions_to_txn.v2.request import AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV2
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV3
from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV4
from kio.schema.add_partitions_to_txn.v5.request import AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV5
from kio.schema.alter_configs.v0.request import AlterConfigsRequest as AlterConfigsRequestV0
from kio.schema.alter_configs.v1.request import AlterConfigsRequest as AlterConfigsRequestV1
from kio.schema.alter_configs.v2.request import AlterConfigsRequest as AlterConfigsRequestV2
from kio.schema.alter_partition_reassignments.v0.request import AlterPartitionReassignmentsRequest as AlterPartitionReassignmentsRequestV0
from kio.schema.alter_partition_reassignments.v1.request import AlterPartitionReassignmentsRequest as AlterPartitionReassignmentsRequestV1
from kio.schema.alter_share_group_offsets.v0.request import AlterShareGroupOffsetsRequest as AlterShareGroupOffsetsRequestV0
from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest as AlterUserScramCredentialsRequestV0
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v1.request import ApiVersionsRequest as ApiVersionsRequestV1
from kio.schema.api_versions.v2.request import ApiVersionsRequest as ApiVersionsRequestV2
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest as ConsumerGroupDescribeRequestV0
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest as ConsumerGroupDescribeRequestV1
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest as ConsumerGroupHeartbeatRequestV0
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest as ConsumerGroupHeartbeatRequestV1
from kio.schema.create_acls.v1.request import CreateAclsRequest as CreateAclsRequestV1
from kio.schema.create_acls.v2.request import CreateAclsRequest as CreateAclsRequestV2
from kio.schema.create_acls.v3.request import CreateAclsRequest as CreateAclsRequestV3
from kio.schema.create_partitions.v0.request import CreatePartitionsRequest as CreatePartitionsRequestV0
from kio.schema.create_partitions.v1.request import CreatePartitionsRequest as CreatePartitionsRequestV1
from kio.schema.create_partitions.v2.request import CreatePartitionsRequest as CreatePartitionsRequestV2
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest as CreatePartitionsRequestV3
from kio.schema.create_topics.v2.request import CreateTopicsRequest as CreateTopicsRequestV2
from kio.schema.create_topics.v3.request import CreateTopicsRequest as CreateTopicsRequestV3
from kio.schema.create_topics.v4.request import CreateTopicsRequest as CreateTopicsRequestV4
from kio.schema.create_topics.v5.request import CreateTopicsRequest as CreateTopicsRequestV5
from kio.schema.create_topics.v6.request import CreateTopicsRequest as CreateTopicsRequestV6
from kio.schema.create_topics.v7.request import CreateTopicsRequest as CreateTopicsRequestV7
from kio.schema.delete_acls.v1.request import DeleteAclsRequest as DeleteAclsRequestV1
from kio.schema.delete_acls.v2.request import DeleteAclsRequest as DeleteAclsRequestV2
from kio.schema.delete_acls.v3.request import DeleteAclsRequest as DeleteAclsRequestV3
from kio.schema.delete_groups.v0.request import DeleteGroupsRequest as DeleteGroupsRequestV0
from kio.schema.delete_groups.v1.request import DeleteGroupsRequest as DeleteGroupsRequestV1
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest as DeleteGroupsRequestV2
from kio.schema.delete_records.v0.request import DeleteRecordsRequest as DeleteRecordsRequestV0
from kio.schema.delete_records.v1.request import DeleteRecordsRequest as DeleteRecordsRequestV1
from kio.schema.delete_records.v2.request import DeleteRecordsRequest as DeleteRecordsRequestV2
from kio.schema.delete_share_group_offsets.v0.request import DeleteShareGroupOffsetsRequest as DeleteShareGroupOffsetsRequestV0
from kio.schema.delete_share_group_state.v0.request import DeleteShareGroupStateRequest as DeleteShareGroupStateRequestV0
from kio.schema.delete_topics.v1.request import DeleteTopicsRequest as DeleteTopicsRequestV1
from kio.schema.delete_topics.v2.request import DeleteTopicsRequest as DeleteTopicsRequestV2
from kio.schema.delete_topics.v3.request import DeleteTopicsRequest as DeleteTopicsRequestV3
from kio.schema.delete_topics.v4.request import DeleteTopicsRequest as DeleteTopicsRequestV4
from kio.schema.delete_topics.v5.request import DeleteTopicsRequest as DeleteTopicsRequestV5
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest as DeleteTopicsRequestV6
from kio.schema.describe_acls.v1.request import DescribeAclsRequest as DescribeAclsRequestV1
from kio.schema.describe_acls.v2.request import DescribeAclsRequest as DescribeAclsRequestV2
from kio.schema.describe_acls.v3.request import DescribeAclsRequest as DescribeAclsRequestV3
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest as DescribeClusterRequestV0
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest as DescribeClusterRequestV1
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest as DescribeClusterRequestV2
from kio.schema.describe_configs.v1.request import DescribeConfigsRequest as DescribeConfigsRequestV1
from kio.schema.describe_configs.v2.request import DescribeConfigsRequest as DescribeConfigsRequestV2
from kio.schema.describe_configs.v3.request import DescribeConfigsRequest as DescribeConfigsRequestV3
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest as DescribeConfigsRequestV4
from kio.schema.describe_groups.v0.request import DescribeGroupsRequest as DescribeGroupsRequestV0
from kio.schema.describe_groups.v1.request import DescribeGroupsRequest as DescribeGroupsRequestV1
from kio.schema.describe_groups.v2.request import DescribeGroupsRequest as DescribeGroupsRequestV2
from kio.schema.describe_groups.v3.request import DescribeGroupsRequest as DescribeGroupsRequestV3
from kio.schema.describe_groups.v4.request import DescribeGroupsRequest as DescribeGroupsRequestV4
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeGroupsRequestV5
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeGroupsRequestV6
from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest as DescribeLogDirsRequestV1
from kio.schema.describe_log_dirs.v2.request import DescribeLogDirsRequest as DescribeLogDirsRequestV2
from kio.schema.describe_log_dirs.v3.request import DescribeLogDirsRequest as DescribeLogDirsRequestV3
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest as DescribeLogDirsRequestV4
from kio.schema.describe_producers.v0.request import DescribeProducersRequest as DescribeProducersRequestV0
from kio.schema.describe_share_group_offsets.v0.request import DescribeShareGroupOffsetsRequest as DescribeShareGroupOffsetsRequestV0
from kio.schema.describe_share_group_offsets.v1.request import DescribeShareGroupOffsetsRequest as DescribeShareGroupOffsetsRequestV1
from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest as DescribeTopicPartitionsRequestV0
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest as DescribeTransactionsRequestV0
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest as DescribeUserScramCredentialsRequestV0
from kio.schema.elect_leaders.v0.request import ElectLeadersRequest as ElectLeadersRequestV0
from kio.schema.elect_leaders.v1.request import ElectLeadersRequest as ElectLeadersRequestV1
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest as ElectLeadersRequestV2
from kio.schema.end_txn.v0.request import EndTxnRequest as EndTxnRequestV0
from kio.schema.end_txn.v1.request import EndTxnRequest as EndTxnRequestV1
from kio.schema.end_txn.v2.request import EndTxnRequest as EndTxnRequestV2
from kio.schema.end_txn.v3.request import EndTxnRequest as EndTxnRequestV3
from kio.schema.end_txn.v4.request import EndTxnRequest as EndTxnRequestV4
from kio.schema.end_txn.v5.request import EndTxnRequest as EndTxnRequestV5
from kio.schema.fetch.v4.request import FetchRequest as FetchRequestV4
from kio.schema.fetch.v5.request import FetchRequest as FetchRequestV5
from kio.schema.fetch.v6.request import FetchRequest as FetchRequestV6
from kio.schema.fetch.v7.request import FetchRequest as FetchRequestV7
from kio.schema.fetch.v8.request import FetchRequest as FetchRequestV8
from kio.schema.fetch.v9.request import FetchRequest as FetchRequestV9
from kio.schema.fetch.v10.request import FetchRequest as FetchRequestV10
from kio.schema.fetch.v11.request import FetchRequest as FetchRequestV11
from kio.schema.fetch.v12.request import FetchRequest as FetchRequestV12
from kio.schema.fetch.v13.request import FetchRequest as FetchRequestV13
from kio.schema.fetch.v14.request import FetchRequest as FetchRequestV14
from kio.schema.fetch.v15.request import FetchRequest as FetchRequestV15
from kio.schema.fetch.v16.request import FetchRequest as FetchRequestV16
from kio.schema.fetch.v17.request import FetchRequest as FetchRequestV17
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as FindCoordinatorRequestV0
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest as FindCoordinatorRequestV1
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest as FindCoordinatorRequestV2
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindCoordinatorRequestV3
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorRequestV4
from kio.schema.find_coordinator.v5.request import FindCoordinatorRequest as FindCoordinatorRequestV5
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest as FindCoordinatorRequestV6
from kio.schema.heartbeat.v0.request import HeartbeatRequest as HeartbeatRequestV0
from kio.schema.heartbeat.v1.request import HeartbeatRequest as HeartbeatRequestV1
from kio.schema.heartbeat.v2.request import HeartbeatRequest as HeartbeatRequestV2
from kio.schema.heartbeat.v3.request import HeartbeatRequest as HeartbeatRequestV3
from kio.schema.heartbeat.v4.request import HeartbeatRequest as HeartbeatRequestV4
from kio.schema.incremental_alter_configs.v0.request import IncrementalAlterConfigsRequest as IncrementalAlterConfigsRequestV0
from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest as IncrementalAlterConfigsRequestV1
from kio.schema.init_producer_id.v0.request import InitProducerIdRequest as InitProducerIdRequestV0
from kio.schema.init_producer_id.v1.request import InitProducerIdRequest as InitProducerIdRequestV1
from kio.schema.init_producer_id.v2.request import InitProducerIdRequest as InitProducerIdRequestV2
from kio.schema.init_producer_id.v3.request import InitProducerIdRequest as InitProducerIdRequestV3
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest as InitProducerIdRequestV4
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest as InitProducerIdRequestV5
from kio.schema.initialize_share_group_state.v0.request import InitializeShareGroupStateRequest as InitializeShareGroupStateRequestV0
from kio.schema.join_group.v2.request import JoinGroupRequest as JoinGroupRequestV2
from kio.schema.join_group.v3.request import JoinGroupRequest as JoinGroupRequestV3
from kio.schema.join_group.v4.request import JoinGroupRequest as JoinGroupRequestV4
from kio.schema.join_group.v5.request import JoinGroupRequest as JoinGroupRequestV5
from kio.schema.join_group.v6.request import JoinGroupRequest as JoinGroupRequestV6
from kio.schema.join_group.v7.request import JoinGroupRequest as JoinGroupRequestV7
from kio.schema.join_group.v8.request import JoinGroupRequest as JoinGroupRequestV8
from kio.schema.join_group.v9.request import JoinGroupRequest as JoinGroupRequestV9
from kio.schema.leave_group.v0.request import LeaveGroupRequest as LeaveGroupRequestV0
from kio.schema.leave_group.v1.request import LeaveGroupRequest as LeaveGroupRequestV1
from kio.schema.leave_group.v2.request import LeaveGroupRequest as LeaveGroupRequestV2
from kio.schema.leave_group.v3.request import LeaveGroupRequest as LeaveGroupRequestV3
from kio.schema.leave_group.v4.request import LeaveGroupRequest as LeaveGroupRequestV4
from kio.schema.leave_group.v5.request import LeaveGroupRequest as LeaveGroupRequestV5
from kio.schema.list_config_resources.v0.request import ListConfigResourcesRequest as ListConfigResourcesRequestV0
from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest as ListConfigResourcesRequestV1
from kio.schema.list_groups.v0.request import ListGroupsRequest as ListGroupsRequestV0
from kio.schema.list_groups.v1.request import ListGroupsRequest as ListGroupsRequestV1
from kio.schema.list_groups.v2.request import ListGroupsRequest as ListGroupsRequestV2
from kio.schema.list_groups.v3.request import ListGroupsRequest as ListGroupsRequestV3
from kio.schema.list_groups.v4.request import ListGroupsRequest as ListGroupsRequestV4
from kio.schema.list_groups.v5.request import ListGroupsRequest as ListGroupsRequestV5
from kio.schema.list_offsets.v1.request import ListOffsetsRequest as ListOffsetsRequestV1
from kio.schema.list_offsets.v2.request import ListOffsetsRequest as ListOffsetsRequestV2
from kio.schema.list_offsets.v3.request import ListOffsetsRequest as ListOffsetsRequestV3
from kio.schema.list_offsets.v4.request import ListOffsetsRequest as ListOffsetsRequestV4
from kio.schema.list_offsets.v5.request import ListOffsetsRequest as ListOffsetsRequestV5
from kio.schema.list_offsets.v6.request import ListOffsetsRequest as ListOffsetsRequestV6
from kio.schema.list_offsets.v7.request import ListOffsetsRequest as ListOffsetsRequestV7
from kio.schema.list_offsets.v8.request import ListOffsetsRequest as ListOffsetsRequestV8
from kio.schema.list_offsets.v9.request import ListOffsetsRequest as ListOffsetsRequestV9
from kio.schema.list_offsets.v10.request import ListOffsetsRequest as ListOffsetsRequestV10
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest as ListPartitionReassignmentsRequestV0
from kio.schema.list_transactions.v0.request import ListTransactionsRequest as ListTransactionsRequestV0
from kio.schema.list_transactions.v1.request import ListTransactionsRequest as ListTransactionsRequestV1
from kio.schema.list_transactions.v2.request import ListTransactionsRequest as ListTransactionsRequestV2
from kio.schema.metadata.v0.request import MetadataRequest as MetadataRequestV0
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v2.request import MetadataRequest as MetadataRequestV2
from kio.schema.metadata.v3.request import MetadataRequest as MetadataRequestV3
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4
from kio.schema.metadata.v5.request import MetadataRequest as MetadataRequestV5
from kio.schema.metadata.v6.request import MetadataRequest as MetadataRequestV6
from kio.schema.metadata.v7.request import MetadataRequest as MetadataRequestV7
from kio.schema.metadata.v8.request import MetadataRequest as MetadataRequestV8
from kio.schema.metadata.v9.request import MetadataRequest as MetadataRequestV9
from kio.schema.metadata.v10.request import MetadataRequest as MetadataRequestV10
from kio.schema.metadata.v11.request import MetadataRequest as MetadataRequestV11
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.offset_commit.v2.request import OffsetCommitRequest as OffsetCommitRequestV2
from kio.schema.offset_commit.v3.request import OffsetCommitRequest as OffsetCommitRequestV3
from kio.schema.offset_commit.v4.request import OffsetCommitRequest as OffsetCommitRequestV4
from kio.schema.offset_commit.v5.request import OffsetCommitRequest as OffsetCommitRequestV5
from kio.schema.offset_commit.v6.request import OffsetCommitRequest as OffsetCommitRequestV6
from kio.schema.offset_commit.v7.request import OffsetCommitRequest as OffsetCommitRequestV7
from kio.schema.offset_commit.v8.request import OffsetCommitRequest as OffsetCommitRequestV8
from kio.schema.offset_commit.v9.request import OffsetCommitRequest as OffsetCommitRequestV9
from kio.schema.offset_commit.v10.request import OffsetCommitRequest as OffsetCommitRequestV10
from kio.schema.offset_delete.v0.request import OffsetDeleteRequest as OffsetDeleteRequestV0
from kio.schema.offset_fetch.v1.request import OffsetFetchRequest as OffsetFetchRequestV1
from kio.schema.offset_fetch.v2.request import OffsetFetchRequest as OffsetFetchRequestV2
from kio.schema.offset_fetch.v3.request import OffsetFetchRequest as OffsetFetchRequestV3
from kio.schema.offset_fetch.v4.request import OffsetFetchRequest as OffsetFetchRequestV4
from kio.schema.offset_fetch.v5.request import OffsetFetchRequest as OffsetFetchRequestV5
from kio.schema.offset_fetch.v6.request import OffsetFetchRequest as OffsetFetchRequestV6
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest as OffsetFetchRequestV7
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest as OffsetFetchRequestV8
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest as OffsetFetchRequestV9
from kio.schema.offset_fetch.v10.request import OffsetFetchRequest as OffsetFetchRequestV10
from kio.schema.offset_for_leader_epoch.v2.request import OffsetForLeaderEpochRequest as OffsetForLeaderEpochRequestV2
from kio.schema.offset_for_leader_epoch.v3.request import OffsetForLeaderEpochRequest as OffsetForLeaderEpochRequestV3
from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderEpochRequest as OffsetForLeaderEpochRequestV4
from kio.schema.produce.v3.request import ProduceRequest as ProduceRequestV3
from kio.schema.produce.v4.request import ProduceRequest as ProduceRequestV4
from kio.schema.produce.v5.request import ProduceRequest as ProduceRequestV5
from kio.schema.produce.v6.request import ProduceRequest as ProduceRequestV6
from kio.schema.produce.v7.request import ProduceRequest as ProduceRequestV7
from kio.schema.produce.v8.request import ProduceRequest as ProduceRequestV8
from kio.schema.produce.v9.request import ProduceRequest as ProduceRequestV9
from kio.schema.produce.v10.request import ProduceRequest as ProduceRequestV10
from kio.schema.produce.v11.request import ProduceRequest as ProduceRequestV11
from kio.schema.produce.v12.request import ProduceRequest as ProduceRequestV12
from kio.schema.read_share_group_state.v0.request import ReadShareGroupStateRequest as ReadShareGroupStateRequestV0
from kio.schema.read_share_group_state_summary.v0.request import ReadShareGroupStateSummaryRequest as ReadShareGroupStateSummaryRequestV0
from kio.schema.read_share_group_state_summary.v1.request import ReadShareGroupStateSummaryRequest as ReadShareGroupStateSummaryRequestV1
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest as SaslAuthenticateRequestV0
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest as SaslAuthenticateRequestV1
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest as SaslAuthenticateRequestV2
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeRequestV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as SaslHandshakeRequestV1
from kio.schema.share_acknowledge.v1.request import ShareAcknowledgeRequest as ShareAcknowledgeRequestV1
from kio.schema.share_acknowledge.v2.request import ShareAcknowledgeRequest as ShareAcknowledgeRequestV2
from kio.schema.share_fetch.v1.request import ShareFetchRequest as ShareFetchRequestV1
from kio.schema.share_fetch.v2.request import ShareFetchRequest as ShareFetchRequestV2
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest as ShareGroupDescribeRequestV1
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest as ShareGroupHeartbeatRequestV1
from kio.schema.sync_group.v0.request import SyncGroupRequest as SyncGroupRequestV0
from kio.schema.sync_group.v1.request import SyncGroupRequest as SyncGroupRequestV1
from kio.schema.sync_group.v2.request import SyncGroupRequest as SyncGroupRequestV2
from kio.schema.sync_group.v3.request import SyncGroupRequest as SyncGroupRequestV3
from kio.schema.sync_group.v4.request import SyncGroupRequest as SyncGroupRequestV4
from kio.schema.sync_group.v5.request import SyncGroupRequest as SyncGroupRequestV5
from kio.schema.txn_offset_commit.v0.request import TxnOffsetCommitRequest as TxnOffsetCommitRequestV0
from kio.schema.txn_offset_commit.v1.request import TxnOffsetCommitRequest as TxnOffsetCommitRequestV1
from kio.schema.txn_offset_commit.v2.request import TxnOffsetCommitRequest as TxnOffsetCommitRequestV2
from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequest as TxnOffsetCommitRequestV3
from kio.schema.txn_offset_commit.v4.request import TxnOffsetCommitRequest as TxnOffsetCommitRequestV4
from kio.schema.txn_offset_commit.v5.request import TxnOffsetCommitRequest as TxnOffsetCommitRequestV5
from kio.schema.write_share_group_state.v0.request import WriteShareGroupStateRequest as WriteShareGroupStateRequestV0
from kio.schema.write_share_group_state.v1.request import WriteShareGroupStateRequest as WriteShareGroupStateRequestV1
from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest as WriteTxnMarkersRequestV1
from kio.schema.write_txn_markers.v2.request import WriteTxnMarkersRequest as WriteTxnMarkersRequestV2

AddOffsetsToTxnRequest: TypeAlias = (
    AddOffsetsToTxnRequestV0
    | AddOffsetsToTxnRequestV1
    | AddOffsetsToTxnRequestV2
    | AddOffsetsToTxnRequestV3
    | AddOffsetsToTxnRequestV4
)
AddPartitionsToTxnRequest: TypeAlias = (
    AddPartitionsToTxnRequestV0
    | AddPartitionsToTxnRequestV1
    | AddPartitionsToTxnRequestV2
    | AddPartitionsToTxnRequestV3
    | AddPartitionsToTxnRequestV4
    | AddPartitionsToTxnRequestV5
)
AlterConfigsRequest: TypeAlias = (
    AlterConfigsRequestV0
    | AlterConfigsRequestV1
    | AlterConfigsRequestV2
)
AlterPartitionReassignmentsRequest: TypeAlias = (
    AlterPartitionReassignmentsRequestV0
    | AlterPartitionReassignmentsRequestV1
)
AlterShareGroupOffsetsRequest: TypeAlias = AlterShareGroupOffsetsRequestV0
AlterUserScramCredentialsRequest: TypeAlias = AlterUserScramCredentialsRequestV0
ApiVersionsRequest: TypeAlias = (
    ApiVersionsRequestV0
    | ApiVersionsRequestV1
    | ApiVersionsRequestV2
    | ApiVersionsRequestV3
    | ApiVersionsRequestV4
)
ConsumerGroupDescribeRequest: TypeAlias = (
    ConsumerGroupDescribeRequestV0
    | ConsumerGroupDescribeRequestV1
)
ConsumerGroupHeartbeatRequest: TypeAlias = (
    ConsumerGroupHeartbeatRequestV0
    | ConsumerGroupHeartbeatRequestV1
)
CreateAclsRequest: TypeAlias = (
    CreateAclsRequestV1
    | CreateAclsRequestV2
    | CreateAclsRequestV3
)
CreatePartitionsRequest: TypeAlias = (
    CreatePartitionsRequestV0
    | CreatePartitionsRequestV1
    | CreatePartitionsRequestV2
    | CreatePartitionsRequestV3
)
CreateTopicsRequest: TypeAlias = (
    CreateTopicsRequestV2
    | CreateTopicsRequestV3
    | CreateTopicsRequestV4
    | CreateTopicsRequestV5
    | CreateTopicsRequestV6
    | CreateTopicsRequestV7
)
DeleteAclsRequest: TypeAlias = (
    DeleteAclsRequestV1
    | DeleteAclsRequestV2
    | DeleteAclsRequestV3
)
DeleteGroupsRequest: TypeAlias = (
    DeleteGroupsRequestV0
    | DeleteGroupsRequestV1
    | DeleteGroupsRequestV2
)
DeleteRecordsRequest: TypeAlias = (
    DeleteRecordsRequestV0
    | DeleteRecordsRequestV1
    | DeleteRecordsRequestV2
)
DeleteShareGroupOffsetsRequest: TypeAlias = DeleteShareGroupOffsetsRequestV0
DeleteShareGroupStateRequest: TypeAlias = DeleteShareGroupStateRequestV0
DeleteTopicsRequest: TypeAlias = (
    DeleteTopicsRequestV1
    | DeleteTopicsRequestV2
    | DeleteTopicsRequestV3
    | DeleteTopicsRequestV4
    | DeleteTopicsRequestV5
    | DeleteTopicsRequestV6
)
DescribeAclsRequest: TypeAlias = (
    DescribeAclsRequestV1
    | DescribeAclsRequestV2
    | DescribeAclsRequestV3
)
DescribeClusterRequest: TypeAlias = (
    DescribeClusterRequestV0
    | DescribeClusterRequestV1
    | DescribeClusterRequestV2
)
DescribeConfigsRequest: TypeAlias = (
    DescribeConfigsRequestV1
    | DescribeConfigsRequestV2
    | DescribeConfigsRequestV3
    | DescribeConfigsRequestV4
)
DescribeGroupsRequest: TypeAlias = (
    DescribeGroupsRequestV0
    | DescribeGroupsRequestV1
    | DescribeGroupsRequestV2
    | DescribeGroupsRequestV3
    | DescribeGroupsRequestV4
    | DescribeGroupsRequestV5
    | DescribeGroupsRequestV6
)
DescribeLogDirsRequest: TypeAlias = (
    DescribeLogDirsRequestV1
    | DescribeLogDirsRequestV2
    | DescribeLogDirsRequestV3
    | DescribeLogDirsRequestV4
)
DescribeProducersRequest: TypeAlias = DescribeProducersRequestV0
DescribeShareGroupOffsetsRequest: TypeAlias = (
    DescribeShareGroupOffsetsRequestV0
    | DescribeShareGroupOffsetsRequestV1
)
DescribeTopicPartitionsRequest: TypeAlias = DescribeTopicPartitionsRequestV0
DescribeTransactionsRequest: TypeAlias = DescribeTransactionsRequestV0
DescribeUserScramCredentialsRequest: TypeAlias = DescribeUserScramCredentialsRequestV0
ElectLeadersRequest: TypeAlias = (
    ElectLeadersRequestV0
    | ElectLeadersRequestV1
    | ElectLeadersRequestV2
)
EndTxnRequest: TypeAlias = (
    EndTxnRequestV0
    | EndTxnRequestV1
    | EndTxnRequestV2
    | EndTxnRequestV3
    | EndTxnRequestV4
    | EndTxnRequestV5
)
FetchRequest: TypeAlias = (
    FetchRequestV4
    | FetchRequestV5
    | FetchRequestV6
    | FetchRequestV7
    | FetchRequestV8
    | FetchRequestV9
    | FetchRequestV10
    | FetchRequestV11
    | FetchRequestV12
    | FetchRequestV13
    | FetchRequestV14
    | FetchRequestV15
    | FetchRequestV16
    | FetchRequestV17
)
FindCoordinatorRequest: TypeAlias = (
    FindCoordinatorRequestV0
    | FindCoordinatorRequestV1
    | FindCoordinatorRequestV2
    | FindCoordinatorRequestV3
    | FindCoordinatorRequestV4
    | FindCoordinatorRequestV5
    | FindCoordinatorRequestV6
)
HeartbeatRequest: TypeAlias = (
    HeartbeatRequestV0
    | HeartbeatRequestV1
    | HeartbeatRequestV2
    | HeartbeatRequestV3
    | HeartbeatRequestV4
)
IncrementalAlterConfigsRequest: TypeAlias = (
    IncrementalAlterConfigsRequestV0
    | IncrementalAlterConfigsRequestV1
)
InitProducerIdRequest: TypeAlias = (
    InitProducerIdRequestV0
    | InitProducerIdRequestV1
    | InitProducerIdRequestV2
    | InitProducerIdRequestV3
    | InitProducerIdRequestV4
    | InitProducerIdRequestV5
)
InitializeShareGroupStateRequest: TypeAlias = InitializeShareGroupStateRequestV0
JoinGroupRequest: TypeAlias = (
    JoinGroupRequestV2
    | JoinGroupRequestV3
    | JoinGroupRequestV4
    | JoinGroupRequestV5
    | JoinGroupRequestV6
    | JoinGroupRequestV7
    | JoinGroupRequestV8
    | JoinGroupRequestV9
)
LeaveGroupRequest: TypeAlias = (
    LeaveGroupRequestV0
    | LeaveGroupRequestV1
    | LeaveGroupRequestV2
    | LeaveGroupRequestV3
    | LeaveGroupRequestV4
    | LeaveGroupRequestV5
)
ListConfigResourcesRequest: TypeAlias = (
    ListConfigResourcesRequestV0
    | ListConfigResourcesRequestV1
)
ListGroupsRequest: TypeAlias = (
    ListGroupsRequestV0
    | ListGroupsRequestV1
    | ListGroupsRequestV2
    | ListGroupsRequestV3
    | ListGroupsRequestV4
    | ListGroupsRequestV5
)
ListOffsetsRequest: TypeAlias = (
    ListOffsetsRequestV1
    | ListOffsetsRequestV2
    | ListOffsetsRequestV3
    | ListOffsetsRequestV4
    | ListOffsetsRequestV5
    | ListOffsetsRequestV6
    | ListOffsetsRequestV7
    | ListOffsetsRequestV8
    | ListOffsetsRequestV9
    | ListOffsetsRequestV10
)
ListPartitionReassignmentsRequest: TypeAlias = ListPartitionReassignmentsRequestV0
ListTransactionsRequest: TypeAlias = (
    ListTransactionsRequestV0
    | ListTransactionsRequestV1
    | ListTransactionsRequestV2
)
MetadataRequest: TypeAlias = (
    MetadataRequestV0
    | MetadataRequestV1
    | MetadataRequestV2
    | MetadataRequestV3
    | MetadataRequestV4
    | MetadataRequestV5
    | MetadataRequestV6
    | MetadataRequestV7
    | MetadataRequestV8
    | MetadataRequestV9
    | MetadataRequestV10
    | MetadataRequestV11
    | MetadataRequestV12
)
OffsetCommitRequest: TypeAlias = (
    OffsetCommitRequestV2
    | OffsetCommitRequestV3
    | OffsetCommitRequestV4
    | OffsetCommitRequestV5
    | OffsetCommitRequestV6
    | OffsetCommitRequestV7
    | OffsetCommitRequestV8
    | OffsetCommitRequestV9
    | OffsetCommitRequestV10
)
OffsetDeleteRequest: TypeAlias = OffsetDeleteRequestV0
OffsetFetchRequest: TypeAlias = (
    OffsetFetchRequestV1
    | OffsetFetchRequestV2
    | OffsetFetchRequestV3
    | OffsetFetchRequestV4
    | OffsetFetchRequestV5
    | OffsetFetchRequestV6
    | OffsetFetchRequestV7
    | OffsetFetchRequestV8
    | OffsetFetchRequestV9
    | OffsetFetchRequestV10
)
OffsetForLeaderEpochRequest: TypeAlias = (
    OffsetForLeaderEpochRequestV2
    | OffsetForLeaderEpochRequestV3
    | OffsetForLeaderEpochRequestV4
)
ProduceRequest: TypeAlias = (
    ProduceRequestV3
    | ProduceRequestV4
    | ProduceRequestV5
    | ProduceRequestV6
    | ProduceRequestV7
    | ProduceRequestV8
    | ProduceRequestV9
    | ProduceRequestV10
    | ProduceRequestV11
    | ProduceRequestV12
)
ReadShareGroupStateRequest: TypeAlias = ReadShareGroupStateRequestV0
ReadShareGroupStateSummaryRequest: TypeAlias = (
    ReadShareGroupStateSummaryRequestV0
    | ReadShareGroupStateSummaryRequestV1
)
SaslAuthenticateRequest: TypeAlias = (
    SaslAuthenticateRequestV0
    | SaslAuthenticateRequestV1
    | SaslAuthenticateRequestV2
)
SaslHandshakeRequest: TypeAlias = (
    SaslHandshakeRequestV0
    | SaslHandshakeRequestV1
)
ShareAcknowledgeRequest: TypeAlias = (
    ShareAcknowledgeRequestV1
    | ShareAcknowledgeRequestV2
)
ShareFetchRequest: TypeAlias = (
    ShareFetchRequestV1
    | ShareFetchRequestV2
)
ShareGroupDescribeRequest: TypeAlias = ShareGroupDescribeRequestV1
ShareGroupHeartbeatRequest: TypeAlias = ShareGroupHeartbeatRequestV1
SyncGroupRequest: TypeAlias = (
    SyncGroupRequestV0
    | SyncGroupRequestV1
    | SyncGroupRequestV2
    | SyncGroupRequestV3
    | SyncGroupRequestV4
    | SyncGroupRequestV5
)
TxnOffsetCommitRequest: TypeAlias = (
    TxnOffsetCommitRequestV0
    | TxnOffsetCommitRequestV1
    | TxnOffsetCommitRequestV2
    | TxnOffsetCommitRequestV3
    | TxnOffsetCommitRequestV4
    | TxnOffsetCommitRequestV5
)
WriteShareGroupStateRequest: TypeAlias = (
    WriteShareGroupStateRequestV0
    | WriteShareGroupStateRequestV1
)
WriteTxnMarkersRequest: TypeAlias = (
    WriteTxnMarkersRequestV1
    | WriteTxnMarkersRequestV2
)
