"""AlterShareGroupOffsets (91) v0: set the share-partition start offsets of an Empty group.

A group with members answers NON_EMPTY_GROUP (top level); an unknown group id is created as an
Empty share group. Per partition: an unknown topic or partition index is
UNKNOWN_TOPIC_OR_PARTITION, a start offset below -1 INVALID_REQUEST; otherwise the share state is
re-initialized at that offset (``broker/share_admin.py``) before the answer.
"""

from __future__ import annotations

from typing import Any

from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.share_admin import ShareAdmin
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 91
VERSIONS = (0, 0)


def handle(ctx: RequestContext, req: Any) -> Any:
    return _alter(ctx, req)


async def _alter(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    requested = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
                 for t in req.topics]
    res = await ShareAdmin.of(ctx.broker).alter_offsets(req.group_id, requested)
    return make(m.AlterShareGroupOffsetsResponse, throttle_time=NO_THROTTLE,
                error_code=res.error, error_message=err_message(res.error, res.error_message),
                responses=tuple(
                    make(m.AlterShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                         topic_id=t.topic_id, partitions=tuple(
                             make(m.AlterShareGroupOffsetsResponsePartition,
                                  partition_index=p.partition, error_code=p.error,
                                  error_message=err_message(p.error, p.error_message))
                             for p in t.partitions))
                    for t in res.topics))
