"""AlterShareGroupOffsets (91) v0: set the share-partition start offsets of an Empty group.

A group with members answers NON_EMPTY_GROUP (top level); an unknown group id is created as an
Empty share group. Per partition: an unknown topic or partition index is
UNKNOWN_TOPIC_OR_PARTITION, a start offset below -1 INVALID_REQUEST; otherwise the share state is
re-initialized at that offset (``broker/share/admin.py``) before the answer.

Authorization (``broker/authz.py``), as Kafka: READ on the group, else a top-level
GROUP_AUTHORIZATION_FAILED; READ on each topic, else TOPIC_AUTHORIZATION_FAILED for each of its
partitions, which are left alone.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.wire_limits import YIELD_EVERY, denied_in_slices, in_slices
from broker.share.admin import AlterResult, PartitionResult, ShareAdmin, TopicAlterResult
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import AlterShareGroupOffsetsRequest

API_KEY = 91
VERSIONS = (0, 0)


def handle(ctx: RequestContext, req: AlterShareGroupOffsetsRequest) -> Any:
    return _alter(ctx, req)


async def _alter(ctx: RequestContext, req: AlterShareGroupOffsetsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    group = Resource(ResourceType.GROUP, req.group_id)
    if not ctx.authorized(Operation.READ, group):
        res = AlterResult(ErrorCode.group_authorization_failed,
                          refusal(ctx.principal, Operation.READ, group))
        return _response(m, res)
    denied = await denied_in_slices(ctx, Operation.READ, ResourceType.TOPIC,
                                    (t.topic_name for t in req.topics))
    requested = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
                 for t in req.topics if t.topic_name not in denied]
    res = AlterResult()
    if requested or not denied:
        res = await ShareAdmin.of(ctx.broker).alter_offsets(req.group_id, requested)
    if denied and res.error == ErrorCode.none:
        refused = tuple(
            TopicAlterResult(t.topic_name, None, tuple(
                PartitionResult(p.partition_index, ErrorCode.topic_authorization_failed,
                                refusal(ctx.principal, Operation.READ,
                                        Resource(ResourceType.TOPIC, t.topic_name)))
                for p in t.partitions))
            for t in req.topics if t.topic_name in denied)
        res = AlterResult(topics=refused + res.topics)
    if sum(len(t.partitions) for t in res.topics) > YIELD_EVERY:
        return await _response_in_slices(m, res)
    return _response(m, res)


def _partition(m: Any, p: PartitionResult) -> Any:
    return make(m.AlterShareGroupOffsetsResponsePartition, partition_index=p.partition,
                error_code=p.error, error_message=err_message(p.error, p.error_message))


def _topic(m: Any, t: TopicAlterResult, partitions: tuple[Any, ...]) -> Any:
    return make(m.AlterShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                topic_id=t.topic_id, partitions=partitions)


async def _response_in_slices(m: Any, res: AlterResult) -> Any:
    """A large answer built ``YIELD_EVERY`` partitions at a time, the loop served in between."""
    topics = []
    for t in res.topics:
        partitions = await in_slices(t.partitions, lambda p: _partition(m, p))
        topics.append(_topic(m, t, tuple(partitions)))
        if len(topics) % YIELD_EVERY == 0:
            await asyncio.sleep(0)
    return make(m.AlterShareGroupOffsetsResponse, throttle_time=NO_THROTTLE,
                error_code=res.error, error_message=err_message(res.error, res.error_message),
                responses=tuple(topics))


def _response(m: Any, res: AlterResult) -> Any:
    return make(m.AlterShareGroupOffsetsResponse, throttle_time=NO_THROTTLE,
                error_code=res.error, error_message=err_message(res.error, res.error_message),
                responses=tuple(_topic(m, t, tuple(_partition(m, p) for p in t.partitions))
                                for t in res.topics))
