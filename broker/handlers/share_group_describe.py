"""ShareGroupDescribe (77) v1: state, epochs, assignor and members of share groups.

Each group id is described on its own: an unknown id gets GROUP_ID_NOT_FOUND in its entry, with
state "Dead" (Kafka answers the same). Members list their subscription and current assignment,
with topic names taken from the current metadata (a deleted topic's partitions are left out).

Authorization (``broker/authz.py``), as Kafka: DESCRIBE on each group, else that group's entry is
GROUP_AUTHORIZATION_FAILED; AuthorizedOperations (when asked) is the bitfield of the group
operations the principal may perform. With an ACL authorizer, a group whose members are assigned
a topic the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without members
(each topic asked once per request, quietly), so a describe does not reveal topic names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import OPERATIONS_NOT_REQUESTED
from broker.context import RequestContext
from broker.handlers._common import err_message
from broker.handlers._group_describe import describe_groups
from coordinator.group.shard import DescribeResult
from coordinator.group.share.group import ShareGroupMember
from coordinator.group.topics_image import TopicsImage
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ShareGroupDescribeRequest

API_KEY = 77
VERSIONS = (1, 1)


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


def _assigned_topics(d: DescribeResult, topics: TopicsImage) -> set[str]:
    g = d.group
    if g is None:
        return set()
    return {info.name for member in g.members.values()
            for tid, ps in member.assigned_partitions.items()
            if ps and (info := topics.by_id(tid)) is not None}


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


def handle(ctx: RequestContext, req: ShareGroupDescribeRequest) -> Any:
    service = ctx.broker.share_groups
    topics = service.topics_image()

    def answer(m: Any, gid: str, d: DescribeResult, operations: Callable[[], int]) -> Any:
        ops = operations() if d.error_code == ErrorCode.none else OPERATIONS_NOT_REQUESTED
        return _group(m, gid, d, topics, ops)

    return describe_groups(ctx, API_KEY, "ShareGroupDescribeResponse", req.group_ids,
                           req.include_authorized_operations, service.describe,
                           lambda d: _assigned_topics(d, topics), answer)
