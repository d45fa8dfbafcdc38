"""Heartbeat (12) v0-4: a classic group member stays in its group (``coordinator/group/
classic.py``): UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID, or
REBALANCE_IN_PROGRESS (rejoin) as Kafka answers.

Authorization (``broker/authz.py``), as Kafka: READ on the group, else GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import HeartbeatRequest

API_KEY = 12
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, req: HeartbeatRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorized(Operation.READ, Resource(ResourceType.GROUP, req.group_id)):
        error = ErrorCode.group_authorization_failed
    elif not req.group_id:  # as Kafka's GroupCoordinatorService
        error = ErrorCode.invalid_group_id
    else:
        error = await ctx.broker.share_groups.classic_heartbeat(
            req.group_id, req.member_id, req.generation_id,
            getattr(req, "group_instance_id", None))
    return make(m.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error)
