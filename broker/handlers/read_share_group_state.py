"""ReadShareGroupState (84) v0: a share-partition leader loads the state of its share-partitions.

Per partition: state epoch, start offset and state batches; reading an uninitialized key ->
INVALID_REQUEST; an older leader epoch -> FENCED_LEADER_EPOCH. A newer leader epoch is recorded
(one record), which fences the previous leader, so the answer waits until that is durable, and
in any case until every earlier write to the same coordinator partition is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.context import RequestContext
from broker.handlers._share_state import answer, message, results, service
from persister.api import ReadParams, ReadResult, SharePartitionKey
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ReadShareGroupStateRequest

API_KEY = 84
VERSIONS = (0, 0)


def handle(ctx: RequestContext, req: ReadShareGroupStateRequest) -> Any:
    return _read(ctx, req)


def _params(key: SharePartitionKey, p: Any) -> ReadParams:
    return ReadParams(key, p.leader_epoch)


async def _read(ctx: RequestContext, req: ReadShareGroupStateRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    replies = await answer(ctx, req, _params, service(ctx).read_state,
                           lambda code, text: ReadResult(code, error_message=text))

    def row(partition: int, r: Any) -> Any:
        return make(m.PartitionResult, partition=partition, error_code=r.error,
                    error_message=message(r.error, r.error_message),
                    state_epoch=r.state_epoch, start_offset=r.start_offset,
                    state_batches=tuple(
                        make(m.StateBatch, first_offset=b.first_offset, last_offset=b.last_offset,
                             delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                        for b in r.state_batches))

    def topic(topic_id: Any, rows: tuple[Any, ...]) -> Any:
        return make(m.ReadStateResult, topic_id=topic_id, partitions=rows)

    # Tens of thousands of entries do not hold the event loop (YIELD_EVERY at a time).
    return make(m.ReadShareGroupStateResponse, results=await results(replies, row, topic))
