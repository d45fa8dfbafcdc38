"""InitProducerId (22) v0-5: producer ids for idempotent producers.

Transactions are not supported yet: a request with a transactional id gets a clear error
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED is what Kafka clients surface most plainly as "you cannot
use transactions here"), described in the README.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 22
VERSIONS = (0, 5)


def handle(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if req.transactional_id:
        return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.transactional_id_authorization_failed,
                    producer_id=-1, producer_epoch=-1)
    existing = getattr(req, "producer_id", -1)
    if existing >= 0:
        # An idempotent producer bumping its epoch after UNKNOWN_PRODUCER_ID/OUT_OF_ORDER (KIP-360).
        epoch = getattr(req, "producer_epoch", -1) + 1
        if epoch < 32767:
            return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.none, producer_id=existing, producer_epoch=epoch)
    pid = ctx.broker.next_producer_id()
    return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                producer_id=pid, producer_epoch=0)
