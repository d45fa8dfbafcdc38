"""OffsetDelete (47) v0: delete committed offsets of a classic group
(``coordinator/group/offsets.py``, allowed by ``classic.py``), as Kafka: a ``consumer`` group with
members refuses the partitions of topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC, read
from their subscription metadata) and deletes the rest; a partition that does not exist gets
UNKNOWN_TOPIC_OR_PARTITION; a group of another protocol type with
members gets NON_EMPTY_GROUP; an unknown group GROUP_ID_NOT_FOUND; the empty group id
INVALID_GROUP_ID.

Authorization (``broker/authz.py``), as Kafka: DELETE on the group (else top-level
GROUP_AUTHORIZATION_FAILED), then READ on each topic (else TOPIC_AUTHORIZATION_FAILED per
partition).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import YIELD_EVERY, denied_in_slices, in_slices
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import OffsetDeleteRequest

API_KEY = 47
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: OffsetDeleteRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorized(Operation.DELETE, Resource(ResourceType.GROUP, req.group_id)):
        return make(m.OffsetDeleteResponse, error_code=ErrorCode.group_authorization_failed,
                    throttle_time=NO_THROTTLE, topics=())
    if not req.group_id:  # as Kafka's GroupCoordinatorService
        return make(m.OffsetDeleteResponse, error_code=ErrorCode.invalid_group_id,
                    throttle_time=NO_THROTTLE, topics=())
    denied = await denied_in_slices(ctx, Operation.READ, ResourceType.TOPIC,
                                    (t.name for t in req.topics))
    codes: dict[tuple[str, int], ErrorCode] = {}
    asked = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    for i, (name, partition) in enumerate(asked):  # as KafkaApis: a partition not in the metadata
        if i and i % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        topic = ctx.broker.topics.get(name)
        if name not in denied and (topic is None or not 0 <= partition < topic.partitions):
            codes[(name, partition)] = ErrorCode.unknown_topic_or_partition
    allowed = tuple(k for k in asked if k[0] not in denied and k not in codes)
    top = ErrorCode.none
    if allowed:
        top, results = await ctx.broker.share_groups.delete_offsets(req.group_id, allowed)
        for i, (name, partition, code) in enumerate(results):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            codes[(name, partition)] = code
    if top != ErrorCode.none:
        return make(m.OffsetDeleteResponse, error_code=top, throttle_time=NO_THROTTLE,
                    topics=())
    by: dict[str, list[Any]] = {}
    for i, (name, partition) in enumerate(asked):
        if i and i % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        code = ErrorCode.topic_authorization_failed if name in denied else \
            codes.get((name, partition), ErrorCode.none)
        by.setdefault(name, []).append(make(m.OffsetDeleteResponsePartition,
                                            partition_index=partition, error_code=code))
    topics = await in_slices(by.items(), lambda kv: make(
        m.OffsetDeleteResponseTopic, name=kv[0], partitions=tuple(kv[1])))
    return make(m.OffsetDeleteResponse, error_code=ErrorCode.none, throttle_time=NO_THROTTLE,
                topics=tuple(topics))
