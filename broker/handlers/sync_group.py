"""SyncGroup (14) v0-5: the leader hands the classic group's assignment out; every member gets
its own (``coordinator/group/classic/group.py``). A follower's answer waits for the leader's; the
assignment is written to ``__consumer_offsets`` (GroupMetadata) before anyone is answered. A
GroupMetadata record over ``message.max.bytes`` is not written: every member gets
UNKNOWN_SERVER_ERROR (as Kafka) and rejoins, and the broker logs why.

Authorization (``broker/authz.py``), as Kafka: READ on the group, else GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from coordinator.group.classic import group as cl
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import SyncGroupRequest

log = logging.getLogger("shoal.groups")

API_KEY = 14
VERSIONS = (0, 5)

# Longest a follower waits for the leader's SyncGroup (the sync timer answers sooner).
SYNC_WAIT_MS = 300_000


def _response(m: Any, res: cl.SyncResponse) -> Any:
    return make(m.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=res.error_code,
                protocol_type=res.protocol_type, protocol_name=res.protocol_name,
                assignment=res.assignment)


async def handle(ctx: RequestContext, req: SyncGroupRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorized(Operation.READ, Resource(ResourceType.GROUP, req.group_id)):
        return _response(m, cl.SyncResponse(ErrorCode.group_authorization_failed))
    if not req.group_id:  # as Kafka's GroupCoordinatorService
        return _response(m, cl.SyncResponse(ErrorCode.invalid_group_id))
    res = await ctx.broker.share_groups.sync_group(cl.SyncRequest(
        group_id=req.group_id, member_id=req.member_id, generation_id=req.generation_id,
        group_instance_id=getattr(req, "group_instance_id", None),
        protocol_type=getattr(req, "protocol_type", None),
        protocol_name=getattr(req, "protocol_name", None),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments)),
        SYNC_WAIT_MS)
    if res.detail:
        log.warning("SyncGroup from member %s answered %s: %s", req.member_id[:200],
                    res.error_code.name, res.detail)
    return _response(m, res)
