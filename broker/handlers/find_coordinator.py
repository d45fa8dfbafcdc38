"""FindCoordinator (10) v0-6: this broker coordinates every group, transaction and share key.

Key types: 0 GROUP, 1 TRANSACTION, 2 SHARE (v6, key ``group:topicId:partition``). v4+ batches keys.
Authorization (broker/authz.py), per key as Kafka: a GROUP key needs DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED), a TRANSACTION key DESCRIBE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED). SHARE keys are looked up by share-partition leaders only,
so they need CLUSTER_ACTION on the cluster; others get CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

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
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 10
VERSIONS = (0, 6)

KEY_TYPES = {0: "group", 1: "transaction", 2: "share"}


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


def handle(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    node = ctx.broker.node_id
    host, port = ctx.advertised
    key_type = getattr(req, "key_type", 0)
    if ctx.api_version >= 4:
        coords = []
        for key in req.coordinator_keys:
            err, msg = _check(ctx, key_type, key)
            ok = err == ErrorCode.none
            coords.append(m.Coordinator(key=key, node_id=node if ok else -1, host=host if ok else "",
                                        port=port if ok else -1, error_code=err, error_message=msg))
        return m.FindCoordinatorResponse(throttle_time=NO_THROTTLE, coordinators=tuple(coords))
    err, msg = _check(ctx, key_type, req.key)
    ok = err == ErrorCode.none
    return make(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=err,
                error_message=msg, node_id=node if ok else -1, host=host if ok else "",
                port=port if ok else -1)
