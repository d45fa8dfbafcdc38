"""DescribeProducers (61) v0: the active producers of partitions (KIP-664; what
``kafka-transactions describe-producers``, ``find-hanging`` and ``abort --start-offset`` read).

Per partition, every producer id the partition's producer state (``broker/log/producer_state.py``)
knows: producer id, epoch, last sequence (-1 when no batch of the current epoch is cached), last
timestamp, coordinator epoch of its last marker (-1: none) and the first offset of its ongoing
transaction (-1: none; ``find-hanging`` looks for old ones, ``abort --start-offset`` finds the
producer by it). The state is loaded from the partition's snapshot and log tail on first use, as
Produce loads it.

Deliberate difference: Kafka's last timestamp is the newest record timestamp of the producer's last
batch; Shoal's producer state keeps the broker time of its last append instead (so after a restart
the producers replayed from the log tail show the load time), which ``find-hanging`` does not use.

Errors, as Kafka's KafkaApis: an illegal topic name is INVALID_TOPIC_EXCEPTION, an unknown topic
UNKNOWN_TOPIC_OR_PARTITION, for every partition asked; a partition the topic does not have is
UNKNOWN_TOPIC_OR_PARTITION, one this broker does not lead (cluster mode) NOT_LEADER_OR_FOLLOWER,
and one whose state cannot be read (log directory offline, unreadable log) KAFKA_STORAGE_ERROR.

Authorization (``broker/authz.py``): READ on each topic, else TOPIC_AUTHORIZATION_FAILED for each
of its partitions (checked after the name, before existence, so a refused principal learns
nothing of it).

Bounds: one lookup per partition named, which the request size bounds; the handler yields to the
event loop every ``YIELD_EVERY`` partitions and encodes a response over that many off the loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.log.topics import topic_name_problem
from broker.wire_limits import YIELD_EVERY, EncodeOffLoop
from protocol.codec import response_module
from storage.log import LogError

if TYPE_CHECKING:
    from broker.handlers._requests import DescribeProducersRequest

log = logging.getLogger("shoal.broker")

API_KEY = 61
VERSIONS = (0, 0)


def _error(m: Any, p: int, error: ErrorCode, message: str | None = None) -> Any:
    return m.PartitionResponse(partition_index=p, error_code=error, error_message=message,
                               active_producers=())


def _partition(m: Any, ctx: RequestContext, topic: str, partitions: int, p: int) -> Any:
    broker = ctx.broker
    if not 0 <= p < partitions:
        return _error(m, p, ErrorCode.unknown_topic_or_partition)
    if not broker.cluster.is_leader(topic, p):
        return _error(m, p, ErrorCode.not_leader_or_follower)
    try:
        states = broker.producers.states(topic, p)
    except (OSError, LogError) as exc:
        log.warning("DescribeProducers: the producer state of %s-%d could not be read: %s",
                    topic, p, exc)
        return _error(m, p, ErrorCode.kafka_storage_error, f"reading the producer state: {exc}")
    producers = tuple(
        m.ProducerState(producer_id=v.producer_id, producer_epoch=v.epoch,
                        last_sequence=v.last_sequence, last_timestamp=v.last_append_ms,
                        coordinator_epoch=v.coordinator_epoch,
                        current_txn_start_offset=v.txn_start_offset)
        for v in states.describe())
    return m.PartitionResponse(partition_index=p, error_code=ErrorCode.none, error_message=None,
                               active_producers=producers)


async def handle(ctx: RequestContext, req: DescribeProducersRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    topics = []
    done = 0
    for t in req.topics:
        name = t.name
        error = message = None
        problem = topic_name_problem(name)
        if problem:
            error, message = ErrorCode.invalid_topic_exception, problem
        elif not ctx.authorized(Operation.READ, Resource(ResourceType.TOPIC, name)):
            error = ErrorCode.topic_authorization_failed
        else:
            known = ctx.broker.topics.get(name)
            if known is None:
                error = ErrorCode.unknown_topic_or_partition
        parts = []
        for p in t.partition_indexes:
            if error is not None:
                parts.append(_error(m, int(p), error, message))
            else:
                assert known is not None
                parts.append(_partition(m, ctx, name, known.partitions, int(p)))
            done += 1
            if done % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        topics.append(m.TopicResponse(name=name, partitions=tuple(parts)))
    resp = m.DescribeProducersResponse(throttle_time=NO_THROTTLE, topics=tuple(topics))
    return EncodeOffLoop(resp) if done > YIELD_EVERY else resp
