"""InitializeShareGroupState (83) v0: the group coordinator asks the share coordinator to create
(or reset, for AlterShareGroupOffsets) the state of share-partitions at a start offset.

Per partition: a new ShareSnapshot with no batches; fenced only on state epoch
(FENCED_STATE_EPOCH); unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION. The answer waits
until the snapshot is durable.
"""

from __future__ import annotations

from typing import Any

from broker.context import RequestContext
from broker.wire_limits import in_slices
from broker.handlers._share_state import answer, message, service
from persister.api import InitializeParams, SharePartitionKey, WriteResult
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 83
VERSIONS = (0, 0)


def handle(ctx: RequestContext, req: Any) -> Any:
    return _initialize(ctx, req)


def _params(key: SharePartitionKey, p: Any) -> InitializeParams:
    return InitializeParams(key, p.state_epoch, p.start_offset)


async def _initialize(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    replies = await answer(ctx, req, _params, service(ctx).initialize_state,
                           lambda code, text: WriteResult(code, text))

    def result(reply: Any) -> Any:
        topic_id, rows = reply
        return make(m.InitializeStateResult, topic_id=topic_id, partitions=tuple(
            make(m.PartitionResult, partition=partition, error_code=r.error,
                 error_message=message(r.error, r.error_message))
            for partition, r in rows))

    # A slice at a time: tens of thousands of entries do not hold the event loop.
    return make(m.InitializeShareGroupStateResponse, results=tuple(await in_slices(replies, result)))
