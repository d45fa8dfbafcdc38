"""InitializeShareGroupState (83) v0: the group coordinator asks the share coordinator to create
(or reset, for AlterShareGroupOffsets) the state of share-partitions at a start offset.

Per partition: a new ShareSnapshot with no batches; fenced only on state epoch
(FENCED_STATE_EPOCH); unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION. The answer waits
until the snapshot is durable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.context import RequestContext
from broker.handlers._share_state import answer, message, results, service
from persister.api import InitializeParams, SharePartitionKey, WriteResult
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import InitializeShareGroupStateRequest

API_KEY = 83
VERSIONS = (0, 0)


def handle(ctx: RequestContext, req: InitializeShareGroupStateRequest) -> Any:
    return _initialize(ctx, req)


def _params(key: SharePartitionKey, p: Any) -> InitializeParams:
    return InitializeParams(key, p.state_epoch, p.start_offset)


async def _initialize(ctx: RequestContext, req: InitializeShareGroupStateRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    replies = await answer(ctx, req, _params, service(ctx).initialize_state,
                           lambda code, text: WriteResult(code, text))

    def row(partition: int, r: Any) -> Any:
        return make(m.PartitionResult, partition=partition, error_code=r.error,
                    error_message=message(r.error, r.error_message))

    def topic(topic_id: Any, rows: tuple[Any, ...]) -> Any:
        return make(m.InitializeStateResult, topic_id=topic_id, partitions=rows)

    # Tens of thousands of entries do not hold the event loop (YIELD_EVERY at a time).
    return make(m.InitializeShareGroupStateResponse, results=await results(replies, row, topic))
