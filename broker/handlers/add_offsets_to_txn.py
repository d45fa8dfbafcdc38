"""AddOffsetsToTxn (25) v0-4: a consumer group's offsets join a producer's transaction (KIP-98).

The group's ``__consumer_offsets`` partition (Kafka's placement) is added to the transaction, so
EndTxn writes the marker that commits or drops the offsets TxnOffsetCommit wrote. Errors as
AddPartitionsToTxn's (``coordinator/txn/service.py``); PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before
v2.

Authorization (``broker/authz.py``), as Kafka: WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group (GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from protocol.codec import response_module

if TYPE_CHECKING:
    from broker.handlers._requests import AddOffsetsToTxnRequest

API_KEY = 25
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, req: AddOffsetsToTxnRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorized(Operation.WRITE,
                          Resource(ResourceType.TRANSACTIONAL_ID, req.transactional_id)):
        error = ErrorCode.transactional_id_authorization_failed
    elif not ctx.authorized(Operation.READ, Resource(ResourceType.GROUP, req.group_id)):
        error = ErrorCode.group_authorization_failed
    else:
        error = await ctx.broker.transactions.add_offsets(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id,
            ctx.broker.share_groups.num_partitions)
        if error is ErrorCode.producer_fenced and ctx.api_version < 2:
            error = ErrorCode.invalid_producer_epoch
    return m.AddOffsetsToTxnResponse(throttle_time=NO_THROTTLE, error_code=error)
