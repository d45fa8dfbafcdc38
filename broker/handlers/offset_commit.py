"""OffsetCommit (8) v2-9: commit a classic (or standalone) group's offsets to
``__consumer_offsets`` (``coordinator/group/classic.py``), answered once durable.

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

from typing import Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from coordinator.group import classic as cl
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 8
VERSIONS = (2, 9)


async def handle(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    codes: dict[tuple[str, int], ErrorCode] = {}
    order: list[tuple[str, int]] = []
    for t in req.topics:
        for p in t.partitions:
            order.append((t.name, p.partition_index))
    group = Resource(ResourceType.GROUP, req.group_id)
    if not ctx.authorized(Operation.READ, group):
        codes = {k: ErrorCode.group_authorization_failed for k in order}
    else:
        denied = ctx.denied(Operation.READ, ResourceType.TOPIC, {t.name for t in req.topics})
        parts: list[cl.OffsetCommitPartition] = []
        for t in req.topics:
            topic = ctx.broker.topics.get(t.name) if t.name not in denied else None
            for p in t.partitions:
                key = (t.name, p.partition_index)
                if t.name in denied:
                    codes[key] = ErrorCode.topic_authorization_failed
                elif topic is None or not 0 <= p.partition_index < topic.partitions:
                    codes[key] = ErrorCode.unknown_topic_or_partition
                else:
                    parts.append(cl.OffsetCommitPartition(
                        t.name, p.partition_index, p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
        if parts:
            res = await ctx.broker.share_groups.commit_offsets(
                req.group_id, req.member_id, req.generation_id_or_member_epoch,
                getattr(req, "group_instance_id", None), tuple(parts))
            for topic_name, partition, code in res.partitions:
                if code == ErrorCode.group_id_not_found and ctx.api_version < 9 and \
                        req.generation_id_or_member_epoch >= 0:
                    code = ErrorCode.illegal_generation  # Kafka's answer before v9
                codes[(topic_name, partition)] = code
    topics: dict[str, list[Any]] = {}
    for name, partition in order:
        topics.setdefault(name, []).append(make(
            m.OffsetCommitResponsePartition, partition_index=partition,
            error_code=codes.get((name, partition), ErrorCode.none)))
    return make(m.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.OffsetCommitResponseTopic, name=name, partitions=tuple(ps))
        for name, ps in topics.items()))
