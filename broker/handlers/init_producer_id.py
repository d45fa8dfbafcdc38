"""InitProducerId (22) v0-5: producer ids for idempotent and transactional producers.

Without a transactional id: always a fresh producer id from the broker's own sequence with epoch 0,
whatever producer id and epoch the request names (Kafka ``handleInitProducerId``: an idempotent
producer that bumps after UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE_NUMBER gets a new id; the
broker never bumps an id it may not have issued, which could belong to another producer).
With one (KIP-98; ``coordinator/txn/service.py``): the transaction coordinator answers, as Kafka's
``handleInitProducerId``: a new id gets a producer id and epoch 0, a known one the same producer id
with the epoch bumped (a new producer id once the epoch is exhausted), which fences older producer
instances; an ongoing transaction is aborted first (CONCURRENT_TRANSACTIONS: the client retries);
``transaction.timeout.ms`` above ``transaction.max.timeout.ms`` gets INVALID_TRANSACTION_TIMEOUT.
A fenced producer gets PRODUCER_FENCED (v4+) or INVALID_PRODUCER_EPOCH (v0-3). A request with one
of producer id / epoch -1 and not the other is INVALID_REQUEST.

Authorization (``broker/authz.py``), as Kafka: a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer (KIP-679) needs IDEMPOTENT_WRITE
on the cluster (asked quietly) or WRITE on at least one topic, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation, Resource, ResourceType
from broker.context import RequestContext
from cluster.errors import ProducerIdsUnavailable
from broker.handlers._common import NO_THROTTLE
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import InitProducerIdRequest

API_KEY = 22
VERSIONS = (0, 5)


def _answer(m: Any, error: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
    return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=error,
                producer_id=pid, producer_epoch=epoch)


def handle(ctx: RequestContext, req: InitProducerIdRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if req.transactional_id is not None:
        if not ctx.authorized(Operation.WRITE,
                              Resource(ResourceType.TRANSACTIONAL_ID, req.transactional_id)):
            return _answer(m, ErrorCode.transactional_id_authorization_failed)
        return _transactional(ctx, m, req)
    if (not ctx.authorized(Operation.IDEMPOTENT_WRITE, CLUSTER, audit=False)
            and not ctx.authorize_by_resource_type(Operation.WRITE, ResourceType.TOPIC)):
        ctx.refused(Operation.IDEMPOTENT_WRITE, CLUSTER)
        return _answer(m, ErrorCode.cluster_authorization_failed)
    try:
        return _answer(m, ErrorCode.none, ctx.broker.next_producer_id(), 0)
    except ProducerIdsUnavailable:  # a cluster member waiting for its next block: retriable
        return _answer(m, ErrorCode.coordinator_load_in_progress)


async def _transactional(ctx: RequestContext, m: Any, req: InitProducerIdRequest) -> Any:
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if (pid == -1) != (epoch == -1):
        return _answer(m, ErrorCode.invalid_request)
    timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
    assert req.transactional_id is not None  # handle() sends only transactional requests here
    out = await ctx.broker.transactions.init_producer_id(
        req.transactional_id, timeout_ms, None if pid == -1 else (pid, epoch))
    error = out.error
    if error is ErrorCode.producer_fenced and ctx.api_version < 4:
        error = ErrorCode.invalid_producer_epoch
    return _answer(m, error, out.producer_id, out.producer_epoch)
