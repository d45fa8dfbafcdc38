"""ShareGroupHeartbeat (76) v1: join, stay in, or leave a share group (KIP-932).

The request is handed to ``broker.share_groups`` (``coordinator/group/service.py``), whose shard
applies the rules of reference section 5 (``coordinator/group/share/heartbeat.py``). Expected
outcomes (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST) are
error codes in the response. The assignment is null unless the shard sends one; the client host
is reported as Kafka reports it (``/127.0.0.1``). A member leaving (epoch -1) releases the records
it holds on this broker.

A subscription naming a topic that does not exist is served as in Kafka (nothing to assign
from it), but not silently: a warning names the group and the topic, once per group and topic
(``broker/missing_topics.py``); ``shoal share-groups --describe`` says it too.

Authorization (``broker/authz.py``), as Kafka, before the group is touched: READ on the group,
else GROUP_AUTHORIZATION_FAILED; when the heartbeat carries a subscription, DESCRIBE on every
subscribed topic (each asked once), else TOPIC_AUTHORIZATION_FAILED for the whole heartbeat.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.missing_topics import warn_missing_topics
from coordinator.group.share.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ShareGroupHeartbeatRequest

API_KEY = 76
VERSIONS = (1, 1)

def _response(m: Any, resp: HeartbeatResponse) -> Any:
    assignment = None
    if resp.assignment is not None:
        assignment = make(m.Assignment, topic_partitions=tuple(
            make(m.TopicPartitions, topic_id=tid, partitions=tuple(parts))
            for tid, parts in resp.assignment.items()))
    return make(m.ShareGroupHeartbeatResponse, throttle_time=NO_THROTTLE,
                error_code=resp.error_code,
                error_message=err_message(resp.error_code, resp.error_message),
                member_id=resp.member_id, member_epoch=resp.member_epoch,
                heartbeat_interval=timedelta(milliseconds=resp.heartbeat_interval_ms),
                assignment=assignment)


def _refused(m: Any, error: ErrorCode, message: str) -> Any:
    return make(m.ShareGroupHeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error,
                error_message=message, member_id=None, member_epoch=0,
                heartbeat_interval=timedelta(0), assignment=None)


async def handle(ctx: RequestContext, req: ShareGroupHeartbeatRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    names = req.subscribed_topic_names
    group = Resource(ResourceType.GROUP, req.group_id)
    if not ctx.authorized(Operation.READ, group):
        return _refused(m, ErrorCode.group_authorization_failed,
                        refusal(ctx.principal, Operation.READ, group))
    if names:
        denied = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, names)
        if denied:
            return _refused(m, ErrorCode.topic_authorization_failed,
                            f"{ctx.principal} is not authorized to DESCRIBE subscribed topic(s) "
                            f"{', '.join(sorted(denied))}; grant DESCRIBE (or READ) on them")
    resp = await ctx.broker.share_groups.heartbeat(HeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        rack_id=req.rack_id,
        subscribed_topic_names=tuple(names) if names is not None else None,
        client_id=ctx.client_id or "", client_host=f"/{ctx.client_host}"))
    if names and resp.error_code == ErrorCode.none:
        warn_missing_topics(ctx.broker, req.group_id, names, ctx.client_id)
    if req.member_epoch == -1 and resp.error_code == ErrorCode.none:
        # A member that leaves gives its acquired records back at once (session expiry does
        # not: as in Kafka, those wait for their acquisition locks to time out).
        ctx.broker.shares.release_member_in_group(req.group_id, req.member_id)
    return _response(m, resp)
