"""DescribeGroups (15) v0-6: classic groups (state, protocol type and name, members with their
metadata and assignment bytes), and share and consumer-protocol (KIP-848) groups as below.

Consumer-protocol groups are answered like share groups: v6 GROUP_ID_NOT_FOUND "Group <id> is
not a classic group." (Kafka), v0-5 their state with protocol type ``consumer`` and no members
(Kafka: Dead); ConsumerGroupDescribe is the RPC that describes them.

Share groups have no classic protocol, members' metadata or assignment bytes. What Apache Kafka
4.3 answers, and what Shoal answers:

- v6 (KIP-1043 error reporting): a share group gets GROUP_ID_NOT_FOUND "Group <id> is not a
  classic group." with state Dead, as Kafka; an unknown id gets GROUP_ID_NOT_FOUND "Group <id> not
  found." with state Dead.
- v0-5: Kafka reports a share group as Dead with an empty protocol type (no error). Shoal answers
  the group's real state (Empty/Stable) and protocol type ``share`` with no members and no
  protocol data, so tools that list groups through DescribeGroups (librdkafka's ``list_groups``)
  show share groups with their type. An unknown id is Dead with no error, as Kafka.

An empty group id is INVALID_GROUP_ID. Authorization (``broker/authz.py``), as Kafka: DESCRIBE
on each group, else GROUP_AUTHORIZATION_FAILED (state Dead) for it; AuthorizedOperations (v3+,
when asked) is the bitfield of the group operations the principal may perform.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import OPERATIONS_NOT_REQUESTED, Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import YIELD_EVERY, in_slices
from coordinator.group.consumer.groups import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from coordinator.group.shard import PROTOCOL_TYPE
from coordinator.group.share.group import GroupState
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DescribeGroupsRequest

API_KEY = 15
VERSIONS = (0, 6)

REPORTS_ERRORS = 6  # first version that answers GROUP_ID_NOT_FOUND (KIP-1043)


def _describe(ctx: RequestContext, group_id: str, with_ops: bool) -> dict[str, Any]:
    dead: dict[str, Any] = dict(error_code=ErrorCode.none, error_message=None, group_id=group_id,
                                group_state=GroupState.DEAD.value, protocol_type="",
                                protocol_data="", members=(),
                                authorized_operations=OPERATIONS_NOT_REQUESTED)
    if not group_id:
        return {**dead, "error_code": ErrorCode.invalid_group_id,
                "error_message": "The group id must not be empty."}
    resource = Resource(ResourceType.GROUP, group_id)
    if not ctx.authorized(Operation.DESCRIBE, resource):
        return {**dead, "error_code": ErrorCode.group_authorization_failed,
                "error_message": refusal(ctx.principal, Operation.DESCRIBE, resource)}
    (found,) = ctx.broker.share_groups.describe([group_id])
    if found.error_code not in (ErrorCode.none, ErrorCode.group_id_not_found):
        # The group's coordinator partition is loading or not held here.
        return {**dead, "error_code": found.error_code, "error_message": found.error_message}
    group = found.group
    v6 = ctx.api_version >= REPORTS_ERRORS
    if group is None:
        (consumer,) = ctx.broker.share_groups.describe_consumer([group_id])
        if consumer.group is not None:
            if v6:
                return {**dead, "error_code": ErrorCode.group_id_not_found,
                        "error_message": f"Group {group_id} is not a classic group."}
            ops = ctx.authorized_operations(resource) if with_ops else OPERATIONS_NOT_REQUESTED
            return {**dead, "group_state": consumer.group.state.value,
                    "protocol_type": CONSUMER_PROTOCOL_TYPE, "authorized_operations": ops}
    classic = ctx.broker.share_groups.describe_classic(group_id) if group is None else None
    if classic is not None:
        ops = ctx.authorized_operations(resource) if with_ops else OPERATIONS_NOT_REQUESTED
        return {**dead, "group_state": classic.state, "protocol_type": classic.protocol_type,
                "protocol_data": classic.protocol, "authorized_operations": ops,
                "members": tuple(
                    {"member_id": x.member_id, "group_instance_id": x.group_instance_id,
                     "client_id": x.client_id, "client_host": x.client_host,
                     "member_metadata": x.metadata, "member_assignment": x.assignment}
                    for x in classic.members)}
    if group is None:
        if v6:
            return {**dead, "error_code": ErrorCode.group_id_not_found,
                    "error_message": f"Group {group_id} not found."}
        return dead
    if v6:
        return {**dead, "error_code": ErrorCode.group_id_not_found,
                "error_message": f"Group {group_id} is not a classic group."}
    ops = ctx.authorized_operations(resource) if with_ops else OPERATIONS_NOT_REQUESTED
    return {**dead, "group_state": group.state.value, "protocol_type": PROTOCOL_TYPE,
            "authorized_operations": ops}


def _members(m: Any, row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "members": tuple(make(m.DescribedGroupMember, **x) for x in row["members"])}


def handle(ctx: RequestContext, req: DescribeGroupsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    with_ops = bool(getattr(req, "include_authorized_operations", False))

    def one(gid: str) -> Any:
        return make(m.DescribedGroup, **_members(m, _describe(ctx, gid, with_ops)))

    if len(req.groups) > YIELD_EVERY:  # the event loop is served between slices
        return _in_slices(m, req.groups, one)
    return make(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE,
                groups=tuple(one(gid) for gid in req.groups))


async def _in_slices(m: Any, gids: Any, one: Any) -> Any:
    groups = await in_slices(gids, one)
    return make(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
