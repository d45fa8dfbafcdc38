"""ReadShareGroupStateSummary (87) v0-1: start offset and epochs of share-partitions, without the
batches (DescribeShareGroupOffsets, lag).

Reads committed state and appends nothing; a key without state answers start offset -1 (not an
error). v1 adds DeliveryCompleteCount (KIP-1226).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.context import RequestContext
from broker.handlers._share_state import answer, message, results, service
from persister.api import ReadParams, SharePartitionKey, SummaryResult
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ReadShareGroupStateSummaryRequest

API_KEY = 87
VERSIONS = (0, 1)


def handle(ctx: RequestContext, req: ReadShareGroupStateSummaryRequest) -> Any:
    return _summary(ctx, req)


def _params(key: SharePartitionKey, p: Any) -> ReadParams:
    return ReadParams(key, p.leader_epoch)


async def _summary(ctx: RequestContext, req: ReadShareGroupStateSummaryRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    replies = await answer(ctx, req, _params, service(ctx).read_state_summary,
                           lambda code, text: SummaryResult(code, error_message=text))

    def row(partition: int, r: Any) -> Any:
        return make(m.PartitionResult, partition=partition, error_code=r.error,
                    error_message=message(r.error, r.error_message),
                    state_epoch=r.state_epoch, leader_epoch=r.leader_epoch,
                    start_offset=r.start_offset, delivery_complete_count=r.delivery_complete_count)

    def topic(topic_id: Any, rows: tuple[Any, ...]) -> Any:
        return make(m.ReadStateSummaryResult, topic_id=topic_id, partitions=rows)

    # Tens of thousands of entries do not hold the event loop (YIELD_EVERY at a time).
    return make(m.ReadShareGroupStateSummaryResponse, results=await results(replies, row, topic))
