"""DescribeTransactions (65) v0: the state of transactional ids (KIP-664, ``kafka-transactions.sh
describe``).

Per id, from the committed state (``coordinator/txn/service.py``): producer id and epoch, state name,
timeout, start time (-1 if none) and partitions; TRANSACTIONAL_ID_NOT_FOUND for an unknown id,
INVALID_REQUEST for an empty one, COORDINATOR_LOAD_IN_PROGRESS while its partition loads.

Deliberate difference: where Kafka sends start time -1 (an id that never started a transaction,
and error entries) Shoal sends 0. kio, which the project's own clients, tools and wire fuzzer
decode with, refuses negative timestamps; a Java client shows 0 instead of "none" for such an id.

Authorization (``broker/authz.py``), as Kafka: DESCRIBE on each transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED for that id); partitions of topics the principal may not
DESCRIBE are left out.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import YIELD_EVERY, in_slices
from coordinator.txn.metadata import TxnMetadata
from protocol.codec import response_module

if TYPE_CHECKING:
    from broker.handlers._requests import DescribeTransactionsRequest

API_KEY = 65
VERSIONS = (0, 0)


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _state(m: Any, ctx: RequestContext, txn_id: str) -> Any:
    out: TxnMetadata | ErrorCode
    if not ctx.authorized(Operation.DESCRIBE, Resource(ResourceType.TRANSACTIONAL_ID, txn_id)):
        out = ErrorCode.transactional_id_authorization_failed
    else:
        out = ctx.broker.transactions.describe(txn_id)
    if isinstance(out, ErrorCode):
        return m.TransactionState(error_code=out, transactional_id=txn_id, transaction_state="",
                                  transaction_timeout=datetime.timedelta(0),
                                  transaction_start_time=_time(0), producer_id=-1,
                                  producer_epoch=-1, topics=())
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(out.partitions):
        by_topic.setdefault(topic, []).append(partition)
    hidden = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, by_topic, audit=False)
    topics = tuple(m.TopicData(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
                   if t not in hidden)
    return m.TransactionState(
        error_code=ErrorCode.none, transactional_id=txn_id,
        transaction_state=out.state.kafka_name,
        transaction_timeout=datetime.timedelta(milliseconds=out.timeout_ms),
        transaction_start_time=_time(max(out.start_ms, 0)), producer_id=out.producer_id,
        producer_epoch=out.producer_epoch, topics=topics)


def handle(ctx: RequestContext, req: DescribeTransactionsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if len(req.transactional_ids) > YIELD_EVERY:
        return _in_slices(m, ctx, req)
    return m.DescribeTransactionsResponse(
        throttle_time=NO_THROTTLE,
        transaction_states=tuple(_state(m, ctx, t) for t in req.transactional_ids))


async def _in_slices(m: Any, ctx: RequestContext, req: DescribeTransactionsRequest) -> Any:
    """Many ids: described a slice at a time, the event loop served in between (issue 25)."""
    states = await in_slices(req.transactional_ids, lambda t: _state(m, ctx, t))
    return m.DescribeTransactionsResponse(throttle_time=NO_THROTTLE,
                                          transaction_states=tuple(states))
