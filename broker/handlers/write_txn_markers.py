"""WriteTxnMarkers (27) v1-2: inter-broker, the coordinator's COMMIT/ABORT markers (KIP-98).

A single broker's coordinator writes its markers in process (``coordinator/txn/service.py``); in a
cluster the transaction coordinator sends this RPC to the leaders of the transaction's
partitions (``broker/txn_remote.py``). It is refused to clients: with CLUSTER_ACTION (or, when
an ACL authorizer is configured, ALTER on the cluster, as Kafka) it is served per partition:
``broker.log.txn_log.write_marker`` for data partitions (answered once the marker is fsynced),
``broker.share_groups.complete_transaction`` for ``__consumer_offsets`` partitions, each answering
its own code (NONE, UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR, NOT_COORDINATOR, ...). A
cluster member answers NOT_LEADER_OR_FOLLOWER for a data partition it
does not lead; the sender finds the leader again and retries.

Authorization (``broker/authz.py``): without it every partition gets CLUSTER_AUTHORIZATION_FAILED
and nothing is written. Deliberate difference: Kafka without an authorizer lets anyone send it;
Shoal keeps CLUSTER_ACTION (``super.users``) as for the share-state RPCs.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation
from broker.context import RequestContext
from broker.handlers._routing import leader_problem
from broker.wire_limits import YIELD_EVERY
from coordinator.txn.service import CONSUMER_OFFSETS_TOPIC
from protocol.codec import response_module

if TYPE_CHECKING:
    from broker.handlers._requests import WriteTxnMarkersRequest

API_KEY = 27
VERSIONS = (1, 2)


def _allowed(ctx: RequestContext) -> bool:
    if ctx.broker.authorizer.enforcing and ctx.authorized(Operation.ALTER, CLUSTER, audit=False):
        return True
    return ctx.authorized(Operation.CLUSTER_ACTION, CLUSTER)


async def _write(ctx: RequestContext, marker: Any, topic: str, partition: int) -> ErrorCode:
    broker = ctx.broker
    known = broker.topics.get(topic)
    if known is None or not 0 <= partition < known.partitions:
        return ErrorCode.unknown_topic_or_partition
    if topic == CONSUMER_OFFSETS_TOPIC:
        return await broker.share_groups.complete_transaction(
            partition, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
            marker.transaction_result)
    not_here = leader_problem(ctx, topic, partition)
    if not_here is not None:
        return not_here
    return await broker.txn_log.write_marker(topic, partition, marker.producer_id,
                                             marker.producer_epoch, marker.coordinator_epoch,
                                             marker.transaction_result)


async def handle(ctx: RequestContext, req: WriteTxnMarkersRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    allowed = _allowed(ctx)
    results = []
    step = 0
    for marker in req.markers:
        topics = []
        for t in marker.topics:
            parts = []
            for p in t.partition_indexes:
                step += 1
                if step % YIELD_EVERY == 0:  # tens of thousands: serve the loop between
                    await asyncio.sleep(0)
                error = (await _write(ctx, marker, t.name, int(p)) if allowed
                         else ErrorCode.cluster_authorization_failed)
                parts.append(m.WritableTxnMarkerPartitionResult(partition_index=p, error_code=error))
            topics.append(m.WritableTxnMarkerTopicResult(name=t.name, partitions=tuple(parts)))
        results.append(m.WritableTxnMarkerResult(producer_id=marker.producer_id,
                                                 topics=tuple(topics)))
    return m.WriteTxnMarkersResponse(markers=tuple(results))
