"""AddPartitionsToTxn (24) v0-5: partitions join a producer's transaction (KIP-98, KIP-890).

v0-3 (clients): one transaction. v4-5 (KIP-890, broker to coordinator): batches of transactions,
each either added or, with ``verify_only``, checked (per partition NONE or
TRANSACTION_ABORTABLE when not in the transaction, as Kafka's verification). A v4+ addition
comes from a partition leader or group coordinator on another broker adding partitions for a
transaction-version-2 producer (Produce v12, TxnOffsetCommit v5; ``broker/txn_remote.py``), so
it is added as transaction version 2, as Kafka does.

Coordinator errors (``coordinator/txn/service.py``) apply to every partition of the transaction:
INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2),
CONCURRENT_TRANSACTIONS while the previous transaction's markers are written, NOT_COORDINATOR /
COORDINATOR_LOAD_IN_PROGRESS, INVALID_REQUEST for an empty transactional id.

Authorization (``broker/authz.py``), as Kafka's ``handleAddPartitionsToTxnRequest``: v0-3 need
WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition) and WRITE
on each topic; internal topics are never writable this way. If any partition is refused
(TOPIC_AUTHORIZATION_FAILED) or unknown (UNKNOWN_TOPIC_OR_PARTITION) nothing is added and the
other partitions get OPERATION_NOT_ATTEMPTED. v4+ need CLUSTER_ACTION on the cluster
(CLUSTER_AUTHORIZATION_FAILED, top level).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.log.topics import INTERNAL_TOPICS
from broker.wire_limits import YIELD_EVERY, denied_in_slices
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnRequestV0,
        AddPartitionsToTxnRequestV1,
        AddPartitionsToTxnRequestV2,
        AddPartitionsToTxnRequestV3,
        AddPartitionsToTxnRequestV4,
        AddPartitionsToTxnRequestV5,
    )

API_KEY = 24
VERSIONS = (0, 5)

Parts = list[tuple[str, int]]


def _parts(topics: Any) -> Parts:
    return [(t.name, int(p)) for t in topics for p in t.partitions]


async def _results(m: Any, parts: Parts,
                   errors: dict[tuple[str, int], ErrorCode] | ErrorCode) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for i, tp in enumerate(dict.fromkeys(parts)):
        if i and i % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        err = errors if isinstance(errors, ErrorCode) else errors[tp]
        by_topic.setdefault(tp[0], []).append(
            m.AddPartitionsToTxnPartitionResult(partition_index=tp[1], partition_error_code=err))
    return tuple(m.AddPartitionsToTxnTopicResult(name=name, results_by_partition=tuple(rs))
                 for name, rs in by_topic.items())


async def _precheck(ctx: RequestContext, parts: Parts,
                    client: bool) -> dict[tuple[str, int], ErrorCode] | None:
    """Per-partition refusals (TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION, the rest
    OPERATION_NOT_ATTEMPTED), or None when every partition may be added."""
    refused: frozenset[str] = frozenset()
    if client:
        names = {t for t, _ in parts}
        refused = await denied_in_slices(ctx, Operation.WRITE, ResourceType.TOPIC,
                                         [n for n in names if n not in INTERNAL_TOPICS])
        refused |= {n for n in names if n in INTERNAL_TOPICS}
    errors: dict[tuple[str, int], ErrorCode] = {}
    failed = False
    for i, tp in enumerate(parts):
        if i and i % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        topic = ctx.broker.topics.get(tp[0])
        if tp[0] in refused:
            errors[tp], failed = ErrorCode.topic_authorization_failed, True
        elif topic is None or not 0 <= tp[1] < topic.partitions:
            errors[tp], failed = ErrorCode.unknown_topic_or_partition, True
        else:
            errors[tp] = ErrorCode.operation_not_attempted
    return errors if failed else None


async def _one(ctx: RequestContext, txn_id: str, pid: int, epoch: int, parts: Parts,
               verify_only: bool, client: bool) -> dict[tuple[str, int], ErrorCode] | ErrorCode:
    if client and not ctx.authorized(Operation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, txn_id)):
        return ErrorCode.transactional_id_authorization_failed
    pre = await _precheck(ctx, parts, client)
    if pre is not None:
        return pre
    txns = ctx.broker.transactions
    if verify_only:
        verified: dict[tuple[str, int], ErrorCode] = {}
        for i, tp in enumerate(parts):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            verified[tp] = txns.verify_partition(txn_id, pid, epoch, tp[0], tp[1])
        return verified
    error = await txns.add_partitions(txn_id, pid, epoch, parts,
                                      client_tv=None if client else 2)
    if error is ErrorCode.producer_fenced and ctx.api_version < 2:
        error = ErrorCode.invalid_producer_epoch
    return error


async def handle(ctx: RequestContext, req: AddPartitionsToTxnRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if ctx.api_version < 4:
        old = cast("AddPartitionsToTxnRequestV0 | AddPartitionsToTxnRequestV1 "
                   "| AddPartitionsToTxnRequestV2 | AddPartitionsToTxnRequestV3", req)
        parts = _parts(old.v3_and_below_topics)
        out = await _one(ctx, old.v3_and_below_transactional_id, old.v3_and_below_producer_id,
                         old.v3_and_below_producer_epoch, parts, False, True)
        return make(m.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                    results_by_topic_v3_and_below=await _results(m, parts, out))
    if not ctx.authorized(Operation.CLUSTER_ACTION, CLUSTER):
        return m.AddPartitionsToTxnResponse(throttle_time=NO_THROTTLE,
                                            error_code=ErrorCode.cluster_authorization_failed,
                                            results_by_transaction=())
    results = []
    batched = cast("AddPartitionsToTxnRequestV4 | AddPartitionsToTxnRequestV5", req)
    txn: Any  # the AddPartitionsToTxnTransaction of req's version (enumerate over their union)
    for i, txn in enumerate(batched.transactions):
        if i and i % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        parts = _parts(txn.topics)
        out = await _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, parts,
                         txn.verify_only, False)
        results.append(m.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                                  topic_results=await _results(m, parts, out)))
    return m.AddPartitionsToTxnResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                                        results_by_transaction=tuple(results))
