"""FindCoordinator (10) v0-6: who coordinates a group, transaction or share key.

A single broker coordinates every key. In a cluster the coordinator is the leader of the key's
partition of the internal topic (``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``), partitioned by Kafka's rule (Java string hash); no live leader
answers COORDINATOR_NOT_AVAILABLE, so the client retries.

Key types: 0 GROUP, 1 TRANSACTION, 2 SHARE (v6, key ``group:topicId:partition``). v4+ batches keys.
Authorization (broker/authz.py), per key as Kafka: a GROUP key needs DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED), a TRANSACTION key DESCRIBE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED). SHARE keys are looked up by share-partition leaders only,
so they need CLUSTER_ACTION on the cluster; others get CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from kio.schema.errors import ErrorCode

from broker.authz import (
    CLUSTER,
    Operation,
    Resource,
    ResourceType,
    cluster_action_refusal,
    refusal,
)
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers._routing import current_leader
from coordinator.group.placement import partition_for_group
from coordinator.share.service import partition_for as share_partition_for
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import (
        FindCoordinatorRequest,
        FindCoordinatorRequestV0,
        FindCoordinatorRequestV1,
        FindCoordinatorRequestV2,
        FindCoordinatorRequestV3,
        FindCoordinatorRequestV4,
        FindCoordinatorRequestV5,
        FindCoordinatorRequestV6,
    )

API_KEY = 10
VERSIONS = (0, 6)

KEY_TYPES = {0: "group", 1: "transaction", 2: "share"}
INTERNAL_TOPIC = {0: "__consumer_offsets", 1: "__transaction_state", 2: "__share_group_state"}


def _check(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, str | None]:
    if key_type == 0 and not ctx.authorized(Operation.DESCRIBE, Resource(ResourceType.GROUP, key)):
        return ErrorCode.group_authorization_failed, refusal(
            ctx.principal, Operation.DESCRIBE, Resource(ResourceType.GROUP, key))
    if key_type == 1 and not ctx.authorized(
            Operation.DESCRIBE, Resource(ResourceType.TRANSACTIONAL_ID, key)):
        return ErrorCode.transactional_id_authorization_failed, refusal(
            ctx.principal, Operation.DESCRIBE, Resource(ResourceType.TRANSACTIONAL_ID, key))
    if key_type == 2 and not ctx.authorized(Operation.CLUSTER_ACTION, CLUSTER):
        return ErrorCode.cluster_authorization_failed, cluster_action_refusal(ctx.principal)
    if key_type not in KEY_TYPES:
        return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
    if key_type == 2 and key.count(":") < 2:
        return ErrorCode.invalid_request, (f"share coordinator key {key!r} must be "
                                           "'group:topicId:partition'")
    if key_type == 0 and not key:
        return ErrorCode.invalid_request, "group id must not be empty"
    return ErrorCode.none, None


def _locate(ctx: RequestContext, key_type: int,
            key: str) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) of ``key``'s coordinator: this broker alone, or in
    a cluster the leader of the key's internal partition (COORDINATOR_NOT_AVAILABLE while that
    partition has no live leader, or the internal topic does not exist yet)."""
    err, msg = _check(ctx, key_type, key)
    if err != ErrorCode.none:
        return err, msg, -1, "", -1
    broker = ctx.broker
    if not broker.cluster.clustered:
        host, port = ctx.advertised
        return ErrorCode.none, None, broker.node_id, host, port
    topic_name = INTERNAL_TOPIC[key_type]
    topic = broker.topics.get(topic_name)
    if topic is not None:
        p = (share_partition_for(key, topic.partitions) if key_type == 2
             else partition_for_group(key, topic.partitions))
        leader, _epoch, node = current_leader(ctx, topic_name, p)
        if node is not None:
            return ErrorCode.none, None, leader, node.host, node.port
    elif broker.member is not None:
        broker.member.request_internal_topic(topic_name)  # first use: create it
    return (ErrorCode.coordinator_not_available,
            f"the {KEY_TYPES[key_type]} coordinator for {key!r} is not available: its "
            f"partition of {topic_name} has no live leader; retry", -1, "", -1)


def handle(ctx: RequestContext, req: FindCoordinatorRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    key_type = getattr(req, "key_type", 0)
    if ctx.api_version >= 4:
        coords = []
        batched = cast("FindCoordinatorRequestV4 | FindCoordinatorRequestV5 "
                       "| FindCoordinatorRequestV6", req)
        for key in batched.coordinator_keys:
            err, msg, node, host, port = _locate(ctx, key_type, key)
            coords.append(m.Coordinator(key=key, node_id=node, host=host, port=port,
                                        error_code=err, error_message=msg))
        return m.FindCoordinatorResponse(throttle_time=NO_THROTTLE, coordinators=tuple(coords))
    single = cast("FindCoordinatorRequestV0 | FindCoordinatorRequestV1 | FindCoordinatorRequestV2 "
                  "| FindCoordinatorRequestV3", req)
    err, msg, node, host, port = _locate(ctx, key_type, single.key)
    return make(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=err,
                error_message=msg, node_id=node, host=host, port=port)
