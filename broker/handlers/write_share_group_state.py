"""WriteShareGroupState (85) v0-1: a share-partition leader persists its start offset and state
batches (the acknowledgement path).

Per partition: a ShareUpdate (or a ShareSnapshot every N updates); write of an uninitialized key
-> INVALID_REQUEST; an older leader epoch -> FENCED_LEADER_EPOCH; an older state epoch ->
FENCED_STATE_EPOCH. v1 adds DeliveryCompleteCount (KIP-1226); v0 writes -1 ("unknown"). The answer
waits until the record is durable; concurrent writes share appends and fsyncs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.context import RequestContext
from broker.handlers._share_state import answer, message, results, service
from persister.api import PersisterStateBatch, SharePartitionKey, WriteParams, WriteResult
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import WriteShareGroupStateRequest

API_KEY = 85
VERSIONS = (0, 1)

UNKNOWN_DELIVERY_COMPLETE_COUNT = -1


def handle(ctx: RequestContext, req: WriteShareGroupStateRequest) -> Any:
    return _write(ctx, req)


def _params(key: SharePartitionKey, p: Any) -> WriteParams:
    return WriteParams(
        key,
        state_epoch=p.state_epoch,
        leader_epoch=p.leader_epoch,
        start_offset=p.start_offset,
        delivery_complete_count=getattr(p, "delivery_complete_count", UNKNOWN_DELIVERY_COMPLETE_COUNT),
        state_batches=tuple(
            PersisterStateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in p.state_batches
        ),
    )


async def _write(ctx: RequestContext, req: WriteShareGroupStateRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    replies = await answer(ctx, req, _params, service(ctx).write_state,
                           lambda code, text: WriteResult(code, text))

    def row(partition: int, r: Any) -> Any:
        return make(m.PartitionResult, partition=partition, error_code=r.error,
                    error_message=message(r.error, r.error_message))

    def topic(topic_id: Any, rows: tuple[Any, ...]) -> Any:
        return make(m.WriteStateResult, topic_id=topic_id, partitions=rows)

    # Tens of thousands of entries do not hold the event loop (YIELD_EVERY at a time).
    return make(m.WriteShareGroupStateResponse, results=await results(replies, row, topic))
