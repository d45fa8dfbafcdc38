"""DescribeShareGroupOffsets (90) v0-1: share-partition start offsets, and (v1, KIP-1226) lag.

Per group: ``topics=None`` describes every partition whose share state the group initialized;
named topics describe exactly the partitions asked for. A partition never consumed has start
offset -1 and lag -1; an unknown topic or partition answers UNKNOWN_TOPIC_OR_PARTITION for it; an
unknown group is not an error (no topics, or start offset -1 per named partition), as Kafka
answers. The rules and the lag formula live in ``broker/share/admin.py``.

Authorization (``broker/authz.py``), as Kafka: DESCRIBE on each group, else that group is
GROUP_AUTHORIZATION_FAILED; named topics the principal may not DESCRIBE are answered
TOPIC_AUTHORIZATION_FAILED per partition (start offset -1, no topic id) and not looked up; a
describe of all topics leaves those topics out.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.share.admin import GroupOffsets, PartitionOffset, ShareAdmin, TopicOffsets
from broker.wire_limits import YIELD_EVERY, denied_in_slices, in_slices
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DescribeShareGroupOffsetsRequest

API_KEY = 90
VERSIONS = (0, 1)


def handle(ctx: RequestContext, req: DescribeShareGroupOffsetsRequest) -> Any:
    return _describe(ctx, req)


def _topic(m: Any, t: TopicOffsets) -> Any:
    return _topic_answer(m, t, tuple(_partition(m, p) for p in t.partitions))


def _partition(m: Any, p: PartitionOffset) -> Any:
    return make(m.DescribeShareGroupOffsetsResponsePartition,
                partition_index=p.partition, start_offset=p.start_offset,
                leader_epoch=p.leader_epoch, lag=p.lag, error_code=p.error,
                error_message=err_message(p.error, p.error_message))


def _topic_answer(m: Any, t: TopicOffsets, partitions: tuple[Any, ...]) -> Any:
    return make(m.DescribeShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                topic_id=t.topic_id, partitions=partitions)


async def _group_in_slices(m: Any, g: GroupOffsets) -> Any:
    """``_group`` of a group of many topics or partitions, YIELD_EVERY at a time."""
    if len(g.topics) + sum(len(t.partitions) for t in g.topics) <= YIELD_EVERY:
        return _group(m, g)
    topics = []
    work = 0  # topics and partitions answered since the loop was last served
    for t in g.topics:
        work += 1 + len(t.partitions)
        if work > YIELD_EVERY:
            await asyncio.sleep(0)
            work = 1 + len(t.partitions)
        if len(t.partitions) <= YIELD_EVERY:
            topics.append(_topic(m, t))
        else:  # one topic of tens of thousands of partitions
            rows = await in_slices(t.partitions, lambda p: _partition(m, p))
            topics.append(_topic_answer(m, t, tuple(rows)))
    return _answer(m, g, tuple(topics))


def _group(m: Any, g: GroupOffsets) -> Any:
    return _answer(m, g, tuple(_topic(m, t) for t in g.topics))


def _answer(m: Any, g: GroupOffsets, topics: tuple[Any, ...]) -> Any:
    return make(m.DescribeShareGroupOffsetsResponseGroup, group_id=g.group_id, topics=topics,
                error_code=g.error, error_message=err_message(g.error, g.error_message))


async def _describe(ctx: RequestContext, req: DescribeShareGroupOffsetsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    admin = ShareAdmin.of(ctx.broker)
    groups = []
    g: Any  # a DescribeShareGroupOffsetsRequestGroup of req's version (a loop over their union)
    for i, g in enumerate(req.groups):
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)  # many groups: serve the event loop between slices
        group = Resource(ResourceType.GROUP, g.group_id)
        if not ctx.authorized(Operation.DESCRIBE, group):
            groups.append(_group(m, GroupOffsets(
                g.group_id, error=ErrorCode.group_authorization_failed,
                error_message=refusal(ctx.principal, Operation.DESCRIBE, group))))
            continue
        if g.topics is None:
            found = await admin.describe_offsets(g.group_id, None)
            hidden = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC,
                                (t.topic_name for t in found.topics), audit=False)
            if hidden:
                found = GroupOffsets(found.group_id, tuple(
                    t for t in found.topics if t.topic_name not in hidden),
                    found.error, found.error_message)
            groups.append(await _group_in_slices(m, found))
            continue
        denied = await denied_in_slices(ctx, Operation.DESCRIBE, ResourceType.TOPIC,
                                        (t.topic_name for t in g.topics))
        requested = [(t.topic_name, tuple(t.partitions)) for t in g.topics
                     if t.topic_name not in denied]
        found = await admin.describe_offsets(g.group_id, requested)
        if denied and found.error == ErrorCode.none:
            refused = tuple(
                TopicOffsets(t.topic_name, None, tuple(
                    PartitionOffset(p, error=ErrorCode.topic_authorization_failed,
                                    error_message=refusal(ctx.principal, Operation.DESCRIBE,
                                                          Resource(ResourceType.TOPIC,
                                                                   t.topic_name)))
                    for p in t.partitions))
                for t in g.topics if t.topic_name in denied)
            found = GroupOffsets(found.group_id, found.topics + refused)
        groups.append(await _group_in_slices(m, found))
    return make(m.DescribeShareGroupOffsetsResponse, throttle_time=NO_THROTTLE,
                groups=tuple(groups))
