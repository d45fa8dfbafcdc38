"""ConsumerGroupDescribe (69) v0-1: state, epochs, assignor and members of consumer groups.

Each id is described on its own. An unknown id, and the id of a share or classic group, gets
GROUP_ID_NOT_FOUND in its entry (as Kafka; librdkafka's ``describe_consumer_groups`` then asks
DescribeGroups for classic groups). Members list their instance and rack ids, subscription
(names and regex), current assignment and target assignment, with topic names from the current
metadata (a deleted topic's partitions are left out); v1 adds the member type (1: consumer,
0: a classic-protocol member of the group).

Authorization (``broker/authz.py``), as Kafka: DESCRIBE on each group, else that group's entry
is GROUP_AUTHORIZATION_FAILED; AuthorizedOperations (when asked) is the bitfield of the group
operations the principal may perform. With an ACL authorizer, a group whose members are assigned
a topic the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without members.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.context import RequestContext
from broker.handlers._common import err_message
from broker.handlers._group_describe import describe_groups, refused
from coordinator.group.consumer.group import ConsumerGroup, ConsumerGroupMember
from coordinator.group.shard import ConsumerDescribeResult
from coordinator.group.topics_image import TopicsImage
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ConsumerGroupDescribeRequest

API_KEY = 69
VERSIONS = (0, 1)

CONSUMER_MEMBER_TYPE = 1  # v1 MemberType: 1 = consumer protocol
CLASSIC_MEMBER_TYPE = 0  # 0 = a classic-protocol member of the consumer group (KIP-848 migration)


def _assignment(m: Any, parts: Mapping[Any, frozenset[int]], topics: TopicsImage) -> Any:
    out = []
    for tid, ps in sorted(parts.items(), key=lambda kv: kv[0].bytes):
        info = topics.by_id(tid)
        if info is not None and ps:
            out.append(make(m.TopicPartitions, topic_id=tid, topic_name=info.name,
                            partitions=tuple(sorted(ps))))
    return make(m.Assignment, topic_partitions=tuple(out))


def _member(m: Any, g: ConsumerGroup, member: ConsumerGroupMember, topics: TopicsImage,
            version: int) -> Any:
    fields: dict[str, Any] = dict(
        member_id=member.member_id, instance_id=member.instance_id, rack_id=member.rack_id,
        member_epoch=member.member_epoch, client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=tuple(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex,
        assignment=_assignment(m, member.assigned, topics),
        target_assignment=_assignment(m, g.target_assignment.get(member.member_id, {}), topics))
    if version >= 1:
        fields["member_type"] = (CLASSIC_MEMBER_TYPE if member.classic is not None
                                 else CONSUMER_MEMBER_TYPE)
    return make(m.Member, **fields)


def _assigned_topics(d: ConsumerDescribeResult, topics: TopicsImage) -> set[str]:
    g = d.group
    if g is None:
        return set()
    return {info.name for member in g.members.values()
            for tid, ps in member.assigned.items()
            if ps and (info := topics.by_id(tid)) is not None}


def handle(ctx: RequestContext, req: ConsumerGroupDescribeRequest) -> Any:
    service = ctx.broker.share_groups
    topics = service.topics_image()

    def answer(m: Any, gid: str, d: ConsumerDescribeResult,
               operations: Callable[[], int]) -> Any:
        g = d.group
        if g is None:
            return refused(m, gid, d.error_code, err_message(d.error_code, d.error_message))
        return make(
            m.DescribedGroup, error_code=ErrorCode.none, error_message=None, group_id=gid,
            group_state=g.state.value, group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch, assignor_name=d.assignor_name,
            members=tuple(_member(m, g, g.members[mid], topics, ctx.api_version)
                          for mid in sorted(g.members)),
            authorized_operations=operations())

    return describe_groups(ctx, API_KEY, "ConsumerGroupDescribeResponse", req.group_ids,
                           req.include_authorized_operations, service.describe_consumer,
                           lambda d: _assigned_topics(d, topics), answer)
