"""ConsumerGroupHeartbeat (68) v0-1: join, stay in, or leave a consumer group (KIP-848).

The request is handed to ``broker.share_groups`` (``coordinator/group/service.py``), whose shard
applies the rules of ``coordinator/group/consumer/heartbeat.py``: member epochs, the server-side
target assignment and reconciliation with revocation before reassignment. Expected outcomes
(UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED,
INVALID_REGULAR_EXPRESSION, UNSUPPORTED_ASSIGNOR, INVALID_REQUEST, GROUP_ID_NOT_FOUND for a share
or classic group's id) are error codes in the response. v1 members name themselves (a UUID);
v0 members joining with an empty id are given one.

Authorization (``broker/authz.py``), as Kafka, before the group is touched: READ on the group,
else GROUP_AUTHORIZATION_FAILED; when the heartbeat carries topic names, DESCRIBE on each (asked
once), else TOPIC_AUTHORIZATION_FAILED. A regex only matches topics the principal may DESCRIBE
(asked quietly: filtering is not a refusal).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.wire_limits import YIELD_EVERY, breathe_now, denied_in_slices
from coordinator.group.consumer.heartbeat import (
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    partitions_of,
)
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ConsumerGroupHeartbeatRequest

API_KEY = 68
VERSIONS = (0, 1)


def _response(m: Any, resp: ConsumerHeartbeatResponse) -> Any:
    assignment = None
    if resp.assignment is not None:
        assignment = make(m.Assignment, topic_partitions=tuple(
            make(m.TopicPartitions, topic_id=tid, partitions=tuple(parts))
            for tid, parts in resp.assignment.items()))
    return make(m.ConsumerGroupHeartbeatResponse, throttle_time=NO_THROTTLE,
                error_code=resp.error_code,
                error_message=err_message(resp.error_code, resp.error_message),
                member_id=resp.member_id, member_epoch=resp.member_epoch,
                heartbeat_interval=timedelta(milliseconds=resp.heartbeat_interval_ms),
                assignment=assignment)


def _ms(td: Any) -> int:
    return round(td.total_seconds() * 1000)


async def _owned(topic_partitions: Any) -> dict[uuid.UUID, frozenset[int]]:
    """``partitions_of`` the owned partitions, ``YIELD_EVERY`` topics at a time with the loop
    served in between (30,000 topic ids held it for 40 ms, issue 25)."""
    items = [(tp.topic_id, tp.partitions) for tp in topic_partitions if tp.topic_id is not None]
    out: dict[uuid.UUID, frozenset[int]] = {}
    for i in range(0, len(items), YIELD_EVERY):
        if i:
            await breathe_now()
        for topic_id, parts in partitions_of(items[i:i + YIELD_EVERY]).items():
            out[topic_id] = out[topic_id] | parts if topic_id in out else parts
    return out


async def handle(ctx: RequestContext, req: ConsumerGroupHeartbeatRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    group = Resource(ResourceType.GROUP, req.group_id)
    if not ctx.authorized(Operation.READ, group):
        return _response(m, ConsumerHeartbeatResponse(
            ErrorCode.group_authorization_failed,
            refusal(ctx.principal, Operation.READ, group)))
    names = req.subscribed_topic_names
    if names:
        # Tens of thousands of names: asked a slice at a time, the loop served between.
        denied = await denied_in_slices(ctx, Operation.DESCRIBE, ResourceType.TOPIC, names)
        if denied:
            return _response(m, ConsumerHeartbeatResponse(
                ErrorCode.topic_authorization_failed,
                f"{ctx.principal} is not authorized to DESCRIBE subscribed topic(s) "
                f"{', '.join(sorted(denied))}; grant DESCRIBE (or READ) on them"))
    allowed = None
    if ctx.broker.authorizer.enforcing:
        def allowed(matched: frozenset[str]) -> frozenset[str]:
            return matched - ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, matched,
                                        audit=False)
    owned = None
    if req.topic_partitions is not None:
        owned = await _owned(req.topic_partitions)
    resp = await ctx.broker.share_groups.consumer_heartbeat(ConsumerHeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        instance_id=req.instance_id, rack_id=req.rack_id,
        rebalance_timeout_ms=_ms(req.rebalance_timeout),
        subscribed_topic_names=tuple(names) if names is not None else None,
        subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),  # v1+
        server_assignor=req.server_assignor, owned=owned,
        client_id=ctx.client_id or "", client_host=f"/{ctx.client_host}",
        version=ctx.api_version), allowed)
    return _response(m, resp)
