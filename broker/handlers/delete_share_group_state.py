"""DeleteShareGroupState (86) v0: drop the state of share-partitions (DeleteGroups,
DeleteShareGroupOffsets).

Per partition: a tombstone if the key has state, nothing otherwise (still success). The answer
waits until the tombstone is durable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.context import RequestContext
from broker.handlers._share_state import answer, message, results, service
from persister.api import DeleteParams, SharePartitionKey, WriteResult
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DeleteShareGroupStateRequest

API_KEY = 86
VERSIONS = (0, 0)


def handle(ctx: RequestContext, req: DeleteShareGroupStateRequest) -> Any:
    return _delete(ctx, req)


def _params(key: SharePartitionKey, _p: Any) -> DeleteParams:
    return DeleteParams(key)


async def _delete(ctx: RequestContext, req: DeleteShareGroupStateRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    replies = await answer(ctx, req, _params, service(ctx).delete_state,
                           lambda code, text: WriteResult(code, text))

    def row(partition: int, r: Any) -> Any:
        return make(m.PartitionResult, partition=partition, error_code=r.error,
                    error_message=message(r.error, r.error_message))

    def topic(topic_id: Any, rows: tuple[Any, ...]) -> Any:
        return make(m.DeleteStateResult, topic_id=topic_id, partitions=rows)

    # Tens of thousands of entries do not hold the event loop (YIELD_EVERY at a time).
    return make(m.DeleteShareGroupStateResponse, results=await results(replies, row, topic))
