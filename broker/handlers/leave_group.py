"""LeaveGroup (13) v0-5: members leave a classic group (v3+: a batch, by member id or
group.instance.id); the others rebalance (``coordinator/group/classic/group.py``).

Authorization (``broker/authz.py``), as Kafka: READ on the group, else GROUP_AUTHORIZATION_FAILED
(top level).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import in_slices
from coordinator.group.classic import group as cl
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import (
        LeaveGroupRequest,
        LeaveGroupRequestV0,
        LeaveGroupRequestV1,
        LeaveGroupRequestV2,
        LeaveGroupRequestV3,
        LeaveGroupRequestV4,
        LeaveGroupRequestV5,
    )

API_KEY = 13
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, req: LeaveGroupRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    batched = ctx.api_version >= 3
    if batched:
        # Tens of thousands of members: built and answered a slice at a time (issue 25).
        v3 = cast("LeaveGroupRequestV3 | LeaveGroupRequestV4 | LeaveGroupRequestV5", req)
        asked: Sequence[Any] = v3.members  # the MemberIdentity entries of req's version
        members = tuple(await in_slices(asked, lambda x: cl.LeaveMember(
            x.member_id, x.group_instance_id)))
    else:
        v0 = cast("LeaveGroupRequestV0 | LeaveGroupRequestV1 | LeaveGroupRequestV2", req)
        members = (cl.LeaveMember(v0.member_id, None),)
    if not ctx.authorized(Operation.READ, Resource(ResourceType.GROUP, req.group_id)):
        return make(m.LeaveGroupResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.group_authorization_failed, members=())
    if not members:
        return make(m.LeaveGroupResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.invalid_request, members=())
    if not req.group_id:  # as Kafka's GroupCoordinatorService
        return make(m.LeaveGroupResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.invalid_group_id, members=())
    res = await ctx.broker.share_groups.leave_group(req.group_id, members)
    if not batched:
        code = res.members[0][1] if res.members else res.error_code
        return make(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=code, members=())
    return make(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=res.error_code,
                members=tuple(await in_slices(res.members, lambda row: make(
                    m.MemberResponse, member_id=row[0].member_id,
                    group_instance_id=row[0].group_instance_id, error_code=row[1]))))
