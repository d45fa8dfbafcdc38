"""OffsetCommit (8) v2-10: commit a classic, consumer-protocol (KIP-848) or standalone group's
offsets to ``__consumer_offsets`` (``coordinator/group/offsets.py``), answered once durable.
v10 names topics by id (UNKNOWN_TOPIC_ID for an unknown one).

A consumer-protocol group validates member id and member epoch as Kafka's
``ConsumerGroup.validateOffsetCommit``: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH, UNSUPPORTED_VERSION
below v9; a commit with epoch -1 is allowed while the group has no members.

Validation as Kafka's (``ClassicGroup.validateOffsetCommit``): a commit with generation -1 is a
simple commit, allowed while the group is Empty (to an unknown group it makes a simple group; the
empty group id is allowed, as Kafka keeps it for old clients); otherwise the member, then its
generation must match (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION), then
REBALANCE_IN_PROGRESS while the group completes a rebalance; a generation to an unknown group
gets GROUP_ID_NOT_FOUND (v9+) or ILLEGAL_GENERATION (v2-8). Metadata longer than
offset.metadata.max.bytes gets OFFSET_METADATA_TOO_LARGE for its partition; unknown
topics/partitions UNKNOWN_TOPIC_OR_PARTITION.
A share group's id gets GROUP_ID_NOT_FOUND.

Authorization (``broker/authz.py``), as Kafka: READ on the group (else GROUP_AUTHORIZATION_FAILED
for every partition), then READ on each topic (else TOPIC_AUTHORIZATION_FAILED for its
partitions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.wire_limits import breathe, in_slices
from broker.handlers._common import NO_THROTTLE
from coordinator.group import offsets as off
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import OffsetCommitRequest

API_KEY = 8
VERSIONS = (2, 10)
TOPIC_IDS = 10  # v10 names topics by id (KIP-848); an unknown id answers UNKNOWN_TOPIC_ID


async def handle(ctx: RequestContext, req: OffsetCommitRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    by_id = ctx.api_version >= TOPIC_IDS
    codes: dict[tuple[Any, int], ErrorCode] = {}
    order: list[tuple[Any, int]] = []
    names: dict[Any, str | None] = {}  # request key (name, or id in v10) -> topic name
    t: Any  # the OffsetCommitRequestTopic of req's version (enumerate over their union)
    for i, t in enumerate(req.topics):
        await breathe(i)  # tens of thousands of topics: serve the event loop meanwhile
        key = t.topic_id if by_id else t.name
        if by_id:
            found = ctx.broker.topics.by_id(t.topic_id)
            names[key] = found.name if found is not None else None
        else:
            names[key] = t.name
        order.extend((key, p.partition_index) for p in t.partitions)
    group = Resource(ResourceType.GROUP, req.group_id)
    if not ctx.authorized(Operation.READ, group):
        codes = {k: ErrorCode.group_authorization_failed for k in order}
    else:
        denied = ctx.denied(Operation.READ, ResourceType.TOPIC,
                            {n for n in names.values() if n is not None})
        parts: list[off.OffsetCommitPartition] = []
        back: dict[tuple[str, int], tuple[Any, int]] = {}
        done = 0  # the loop is served every slice of partitions, across topics (issue 25)
        for t in req.topics:
            key = t.topic_id if by_id else t.name
            name = names[key]
            topic = ctx.broker.topics.get(name) if name is not None and name not in denied \
                else None
            for p in t.partitions:
                done += 1
                await breathe(done)
                k = (key, p.partition_index)
                if name is None:
                    codes[k] = ErrorCode.unknown_topic_id
                elif name in denied:
                    codes[k] = ErrorCode.topic_authorization_failed
                elif topic is None or not 0 <= p.partition_index < topic.partitions:
                    codes[k] = ErrorCode.unknown_topic_or_partition
                else:
                    back[(name, p.partition_index)] = k
                    parts.append(off.OffsetCommitPartition(
                        name, p.partition_index, p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
        if parts:
            res = await ctx.broker.share_groups.commit_offsets(
                req.group_id, req.member_id, req.generation_id_or_member_epoch,
                getattr(req, "group_instance_id", None), tuple(parts), ctx.api_version)
            for topic_name, partition, code in res.partitions:
                if code == ErrorCode.group_id_not_found and ctx.api_version < 9 and \
                        req.generation_id_or_member_epoch >= 0:
                    code = ErrorCode.illegal_generation  # Kafka's answer before v9
                codes[back[(topic_name, partition)]] = code
    topics: dict[Any, list[Any]] = {}
    for i, (key, partition) in enumerate(order):
        await breathe(i)
        topics.setdefault(key, []).append(make(
            m.OffsetCommitResponsePartition, partition_index=partition,
            error_code=codes.get((key, partition), ErrorCode.none)))
    answers = await in_slices(topics.items(), lambda kv: make(
        m.OffsetCommitResponseTopic, **({"topic_id": kv[0]} if by_id else {"name": kv[0]}),
        partitions=tuple(kv[1])))
    return make(m.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(answers))
