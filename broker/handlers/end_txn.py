"""EndTxn (26) v0-5: commit or abort a producer's transaction (KIP-98).

Answered once PrepareCommit/PrepareAbort is durable in ``__transaction_state``; the markers
follow (``coordinator/txn/service.py``). A retry after completion answers NONE; a commit of an aborted
transaction (or the reverse) and an EndTxn without a transaction get INVALID_TXN_STATE; one while
the markers are written CONCURRENT_TRANSACTIONS; a fenced epoch PRODUCER_FENCED
(INVALID_PRODUCER_EPOCH before v2); an unknown id or another producer id
INVALID_PRODUCER_ID_MAPPING.

v5 is transaction version 2 (KIP-890 part 2; the ``transaction.version`` feature at level 2 is
advertised, ``broker/handlers/api_versions.py``): every EndTxn bumps the producer epoch and the
answer carries the producer id and epoch of the producer's next transaction; an abort without a
transaction is allowed; a retry from the epoch before the bump is answered NONE
(``TxnShard.end_txn_v2``).

Authorization (``broker/authz.py``), as Kafka: WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import EndTxnRequest

API_KEY = 26
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, req: EndTxnRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorized(Operation.WRITE,
                          Resource(ResourceType.TRANSACTIONAL_ID, req.transactional_id)):
        return make(m.EndTxnResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.transactional_id_authorization_failed)
    out = await ctx.broker.transactions.end_txn(req.transactional_id, req.producer_id,
                                                req.producer_epoch, req.committed,
                                                tv2=ctx.api_version >= 5)
    error = out.error
    if error is ErrorCode.producer_fenced and ctx.api_version < 2:
        error = ErrorCode.invalid_producer_epoch
    return make(m.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=error,
                producer_id=out.producer_id, producer_epoch=out.producer_epoch)
