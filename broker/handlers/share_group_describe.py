"""ShareGroupDescribe (77) v1: state, epochs, assignor and members of share groups.

Each group id is described on its own: an unknown id gets GROUP_ID_NOT_FOUND in its entry, with
state "Dead" (Kafka answers the same). Members list their subscription and current assignment,
with topic names taken from the current metadata (a deleted topic's partitions are left out).
There are no ACLs, so when asked for authorized operations every group operation is reported.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from coordinator.group.assignor import TopicsImage
from coordinator.group.shard import DescribeResult
from coordinator.group.share_group import ShareGroupMember
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 77
VERSIONS = (1, 1)

# AclOperation ids that apply to a GROUP: READ 3, DELETE 6, DESCRIBE 8, DESCRIBE_CONFIGS 10,
# ALTER_CONFIGS 11.
ALL_GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))
OPERATIONS_NOT_REQUESTED = -2147483648


def _member(m: Any, member: ShareGroupMember, topics: TopicsImage) -> Any:
    parts = []
    for tid, ps in sorted(member.assigned_partitions.items()):
        info = topics.by_id(tid)
        if info is not None and ps:
            parts.append(make(m.TopicPartitions, topic_id=tid, topic_name=info.name,
                              partitions=tuple(sorted(ps))))
    return make(m.Member, member_id=member.member_id, rack_id=member.rack_id,
                member_epoch=member.member_epoch, client_id=member.client_id,
                client_host=member.client_host,
                subscribed_topic_names=tuple(member.subscribed_topic_names),
                assignment=make(m.Assignment, topic_partitions=tuple(parts)))


def _group(m: Any, group_id: str, d: DescribeResult, topics: TopicsImage, ops: int) -> Any:
    g = d.group
    members = () if g is None else tuple(
        _member(m, g.members[mid], topics) for mid in sorted(g.members))
    return make(m.DescribedGroup, error_code=d.error_code,
                error_message=err_message(d.error_code, d.error_message), group_id=group_id,
                group_state=d.state, group_epoch=g.group_epoch if g else 0,
                assignment_epoch=g.assignment_epoch if g else 0,
                assignor_name=d.assignor_name if g else "", members=members,
                authorized_operations=ops if d.error_code == ErrorCode.none
                else OPERATIONS_NOT_REQUESTED)


def handle(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    service = ctx.broker.share_groups
    topics = service.topics_image()
    ops = ALL_GROUP_OPERATIONS if req.include_authorized_operations else OPERATIONS_NOT_REQUESTED
    groups = tuple(_group(m, gid, d, topics, ops)
                   for gid, d in zip(req.group_ids, service.describe(req.group_ids), strict=True))
    return make(m.ShareGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=groups)
