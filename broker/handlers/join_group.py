"""JoinGroup (11) v2-9: join a classic consumer group (``coordinator/group/classic/group.py``).

The answer waits until the rebalance completes (every member rejoined, or the rebalance
timeout); the leader gets every member's metadata for the chosen protocol, to run the client's
assignor. v4+ first answers a join with an empty member id with MEMBER_ID_REQUIRED and the id to
rejoin with (static members, with a group.instance.id, are admitted at once). A share group's id
gets INCONSISTENT_GROUP_PROTOCOL.

Authorization (``broker/authz.py``), as Kafka: READ on the group, else GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from coordinator.group.classic import group as cl
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import JoinGroupRequest

API_KEY = 11
VERSIONS = (2, 9)


def _ms(td: Any) -> int:
    return int(td.total_seconds() * 1000)


def _response(m: Any, version: int, res: cl.JoinResponse) -> Any:
    members = tuple(make(m.JoinGroupResponseMember, member_id=x.member_id,
                         group_instance_id=x.group_instance_id, metadata=x.metadata)
                    for x in res.members)
    name = res.protocol_name
    if name is None and version < 7:
        name = ""
    return make(m.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=res.error_code,
                generation_id=res.generation_id, protocol_type=res.protocol_type,
                protocol_name=name, leader=res.leader, skip_assignment=res.skip_assignment,
                member_id=res.member_id, members=members)


async def handle(ctx: RequestContext, req: JoinGroupRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorized(Operation.READ, Resource(ResourceType.GROUP, req.group_id)):
        return _response(m, ctx.api_version, cl.JoinResponse(
            ErrorCode.group_authorization_failed, member_id=req.member_id))
    session = _ms(req.session_timeout)
    rebalance = _ms(getattr(req, "rebalance_timeout", req.session_timeout))
    if rebalance < 0 or session < 0:
        return _response(m, ctx.api_version, cl.JoinResponse(
            ErrorCode.invalid_session_timeout, member_id=req.member_id))
    res = await ctx.broker.share_groups.join_group(cl.JoinRequest(
        group_id=req.group_id, member_id=req.member_id,
        group_instance_id=getattr(req, "group_instance_id", None),
        session_timeout_ms=session, rebalance_timeout_ms=rebalance,
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        require_known_member_id=ctx.api_version >= 4,
        skip_assignment_supported=ctx.api_version >= 9,
        client_id=ctx.client_id or "", client_host=f"/{ctx.client_host}"))
    return _response(m, ctx.api_version, res)
