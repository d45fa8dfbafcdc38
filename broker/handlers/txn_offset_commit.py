"""TxnOffsetCommit (28) v0-5: a transactional producer commits a consumer group's offsets inside
its transaction (``send_offsets_to_transaction``). aiokafka 0.14 sends v0, librdkafka (2.x) up to
v3; v3+ carry the consumer's member id, generation (member epoch for KIP-848 groups) and group
instance id.

The offsets go to the group's ``__consumer_offsets`` partition as a transactional batch of the
producer and stay pending until the transaction coordinator writes the producer's COMMIT or ABORT
marker there (``GroupCoordinatorService.complete_transaction``); only then do they become committed
(``coordinator/group/txn_offsets.py``). Validation as Kafka's ``validateTransactionalOffsetCommit``
(see ``GroupCoordinatorShard.txn_commit_offsets``): INVALID_GROUP_ID, ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, COORDINATOR_NOT_AVAILABLE, INVALID_PRODUCER_EPOCH;
a share group's id GROUP_ID_NOT_FOUND; metadata over offset.metadata.max.bytes
OFFSET_METADATA_TOO_LARGE for its partition; unknown topics/partitions
UNKNOWN_TOPIC_OR_PARTITION. Errors are per partition (the response has no other error field).

When the broker has a transaction coordinator (``broker.transactions``), the group's offsets
partition must be part of the producer's ongoing transaction (AddOffsetsToTxn):
``verify_partition(transactional_id, producer_id, epoch, "__consumer_offsets", partition)``; its
refusal (e.g. INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH) answers every partition. From v5
(transaction version 2) the broker adds that partition to the transaction itself. A cluster
member asks the transactional id's coordinator wherever it is (``broker.links.txn``,
AddPartitionsToTxn v4+ over the wire).

Authorization (``broker/authz.py``), as Kafka's ``KafkaApis.handleTxnOffsetCommitRequest``: WRITE
on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition), then
READ on the group (else GROUP_AUTHORIZATION_FAILED for every partition), then READ on each topic
(else TOPIC_AUTHORIZATION_FAILED for its partitions, which are not committed).

Bounds: as OffsetCommit (the request frame cap; offset.metadata.max.bytes per partition).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from coordinator.group.service import CONSUMER_OFFSETS_TOPIC
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import YIELD_EVERY, denied_in_slices, in_slices
from coordinator.group import offsets as off
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import TxnOffsetCommitRequest

API_KEY = 28
VERSIONS = (0, 5)


async def _respond(ctx: RequestContext, req: TxnOffsetCommitRequest, codes: dict[tuple[str, int], ErrorCode],
                   default: ErrorCode = ErrorCode.none) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    topics: dict[str, list[Any]] = {}
    i = 0
    for t in req.topics:
        parts = topics.setdefault(t.name, [])
        for p in t.partitions:
            i += 1
            if i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            parts.append(make(m.TxnOffsetCommitResponsePartition,
                              partition_index=p.partition_index,
                              error_code=codes.get((t.name, p.partition_index), default)))
    answers = await in_slices(topics.items(), lambda kv: make(
        m.TxnOffsetCommitResponseTopic, name=kv[0], partitions=tuple(kv[1])))
    return make(m.TxnOffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(answers))


async def handle(ctx: RequestContext, req: TxnOffsetCommitRequest) -> Any:
    if not ctx.authorized(Operation.WRITE,
                          Resource(ResourceType.TRANSACTIONAL_ID, req.transactional_id)):
        return await _respond(ctx, req, {}, ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorized(Operation.READ, Resource(ResourceType.GROUP, req.group_id)):
        return await _respond(ctx, req, {}, ErrorCode.group_authorization_failed)
    if not req.topics:
        return await _respond(ctx, req, {})
    denied = await denied_in_slices(ctx, Operation.READ, ResourceType.TOPIC,
                                    (t.name for t in req.topics))
    codes: dict[tuple[str, int], ErrorCode] = {}
    parts: list[off.OffsetCommitPartition] = []
    i = 0
    for t in req.topics:
        topic = ctx.broker.topics.get(t.name) if t.name not in denied else None
        for p in t.partitions:
            i += 1
            if i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            k = (t.name, p.partition_index)
            if t.name in denied:
                codes[k] = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < topic.partitions:
                codes[k] = ErrorCode.unknown_topic_or_partition
            else:
                parts.append(off.OffsetCommitPartition(
                    t.name, p.partition_index, p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    if not parts:
        return await _respond(ctx, req, codes)
    service = ctx.broker.share_groups
    error = await _verify(ctx, req, service.partition_for(req.group_id))
    if error is not None:
        codes.update({(p.topic, p.partition): error for p in parts})
        return await _respond(ctx, req, codes)
    res = await service.txn_commit_offsets(
        req.transactional_id, req.group_id, req.producer_id, req.producer_epoch,
        getattr(req, "member_id", ""), getattr(req, "generation_id", -1),
        getattr(req, "group_instance_id", None), tuple(parts))
    for topic_name, partition, code in res.partitions:
        codes[(topic_name, partition)] = code
    return await _respond(ctx, req, codes)


async def _verify(ctx: RequestContext, req: TxnOffsetCommitRequest, partition: int) -> ErrorCode | None:
    """The transaction coordinator's answer whether the group's offsets partition is in the
    producer's ongoing transaction (None: yes). From v5 (transaction version 2, KIP-890 part 2)
    the producer sends no AddOffsetsToTxn: the partition is added here instead."""
    links = ctx.broker.links
    if links is not None:  # a cluster member: the coordinator may be another broker
        tp = (CONSUMER_OFFSETS_TOPIC, partition)
        if ctx.api_version >= 5:
            answer = await links.txn.add(req.transactional_id, req.producer_id,
                                         req.producer_epoch, (tp,))
        else:
            answer = (await links.txn.verify(req.transactional_id, req.producer_id,
                                             req.producer_epoch, (tp,)))[tp]
        if answer is ErrorCode.network_exception:
            # The coordinator could not be reached in time: a code every client retries (as
            # Kafka's group coordinator answers transient failures).
            answer = ErrorCode.coordinator_not_available
        return None if answer == ErrorCode.none else answer
    txns = ctx.broker.transactions
    if ctx.api_version >= 5:
        code: ErrorCode = await txns.add_partitions(
            req.transactional_id, req.producer_id, req.producer_epoch,
            ((CONSUMER_OFFSETS_TOPIC, partition),), client_tv=2)
    else:
        code = txns.verify_partition(req.transactional_id, req.producer_id, req.producer_epoch,
                                     CONSUMER_OFFSETS_TOPIC, partition)
    return None if code == ErrorCode.none else code
