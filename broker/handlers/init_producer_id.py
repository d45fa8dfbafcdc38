"""InitProducerId (22) v0-5: producer ids for idempotent producers.

Transactions are not supported yet: a request with a transactional id gets a clear error
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED is what Kafka clients surface most plainly as "you cannot
use transactions here"), described in the README.

Authorization (``broker/authz.py``), as Kafka since KIP-679: an idempotent producer needs
IDEMPOTENT_WRITE on the cluster (asked quietly) or WRITE on at least one topic (by resource
type: any ALLOW not cancelled by a DENY), else CLUSTER_AUTHORIZATION_FAILED. A transactional id
would need WRITE on it; transactions are refused before that question arises.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation, ResourceType
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
    if (not ctx.authorized(Operation.IDEMPOTENT_WRITE, CLUSTER, audit=False)
            and not ctx.authorize_by_resource_type(Operation.WRITE, ResourceType.TOPIC)):
        ctx.refused(Operation.IDEMPOTENT_WRITE, CLUSTER)
        return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed,
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
