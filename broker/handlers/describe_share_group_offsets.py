"""DescribeShareGroupOffsets (90) v0-1: share-partition start offsets, and (v1, KIP-1226) lag.

Per group: ``topics=None`` describes every partition whose share state the group initialized;
named topics describe exactly the partitions asked for. A partition never consumed has start
offset -1 and lag -1; an unknown topic or partition answers UNKNOWN_TOPIC_OR_PARTITION for it; an
unknown group is not an error (no topics, or start offset -1 per named partition), as Kafka
answers. The rules and the lag formula live in ``broker/share_admin.py``.
"""

from __future__ import annotations

from typing import Any

from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.share_admin import GroupOffsets, ShareAdmin
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 90
VERSIONS = (0, 1)


def handle(ctx: RequestContext, req: Any) -> Any:
    return _describe(ctx, req)


def _group(m: Any, g: GroupOffsets) -> Any:
    topics = tuple(
        make(m.DescribeShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
             topic_id=t.topic_id, partitions=tuple(
                 make(m.DescribeShareGroupOffsetsResponsePartition,
                      partition_index=p.partition, start_offset=p.start_offset,
                      leader_epoch=p.leader_epoch, lag=p.lag, error_code=p.error,
                      error_message=err_message(p.error, p.error_message))
                 for p in t.partitions))
        for t in g.topics)
    return make(m.DescribeShareGroupOffsetsResponseGroup, group_id=g.group_id, topics=topics,
                error_code=g.error, error_message=err_message(g.error, g.error_message))


async def _describe(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    admin = ShareAdmin.of(ctx.broker)
    groups = []
    for g in req.groups:
        requested = None if g.topics is None else [
            (t.topic_name, tuple(t.partitions)) for t in g.topics]
        groups.append(_group(m, await admin.describe_offsets(g.group_id, requested)))
    return make(m.DescribeShareGroupOffsetsResponse, throttle_time=NO_THROTTLE,
                groups=tuple(groups))
