"""DescribeTopicPartitions (75) v0: topics and their partitions, paged (KIP-966; what
``kafka-topics --describe`` and ``Admin.describeTopics`` use on Kafka 4.x).

Request: the topics by name (empty: every topic, internal ones included and flagged, as Kafka's
metadata cache lists them; the tool hides them itself), a cursor (first topic and partition) and
``ResponsePartitionLimit``. The response lists topics sorted by name, starting at the cursor's
topic (its partitions from the cursor's index), with at most
``min(ResponsePartitionLimit, max.request.partition.size.limit)`` partitions in all; when that
cuts the listing short, ``NextCursor`` names the first partition left out (the next topic at
partition 0 when a topic ended exactly at the limit), else it is null. Partition entries come
from ``metadata.partition_entry``, the same as Metadata's.

Errors, as Kafka's DescribeTopicPartitionsRequestHandler:
- a named topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION (zero topic id);
- a cursor whose topic is not among the named topics, a negative cursor partition or a limit
  below 1: INVALID_REQUEST for every topic named, and nothing else.

Authorization (``broker/authz.py``): DESCRIBE on each topic. A named topic without it is
TOPIC_AUTHORIZATION_FAILED with the zero id, whether or not it exists; the all-topics listing
leaves such topics out quietly. Every listed topic carries its AuthorizedOperations bitfield.
When the cursor's topic may not be described, partitions start at 0 (Kafka resets the cursor
index the same way).

Bounds: the partitions are bounded by the limit; the topic names by the request size (one
dictionary lookup and one authorization each). A response over many topics is encoded off the
event loop.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers.metadata import partition_entry
from broker.wire_limits import YIELD_EVERY, EncodeOffLoop
from protocol.codec import response_module

if TYPE_CHECKING:
    from broker.handlers._requests import DescribeTopicPartitionsRequest

API_KEY = 75
VERSIONS = (0, 0)

ZERO_ID = uuid.UUID(int=0)


def _error_topic(m: Any, error: ErrorCode, name: str) -> Any:
    return m.DescribeTopicPartitionsResponseTopic(error_code=error, name=name, topic_id=ZERO_ID,
                                                  is_internal=False, partitions=())


def _invalid(m: Any, req: DescribeTopicPartitionsRequest) -> Any:
    return m.DescribeTopicPartitionsResponse(
        throttle_time=NO_THROTTLE, next_cursor=None,
        topics=tuple(_error_topic(m, ErrorCode.invalid_request, t.name) for t in req.topics))


def handle(ctx: RequestContext, req: DescribeTopicPartitionsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    broker = ctx.broker
    cursor = req.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    named = bool(req.topics)
    limit = min(int(req.response_partition_limit),
                int(broker.config.get("max.request.partition.size.limit")))
    if limit < 1 or (cursor is not None and cursor.partition_index < 0):
        return _invalid(m, req)
    if named:
        names: set[str] = {t.name for t in req.topics if t.name >= start_topic}
        if cursor is not None and cursor.topic_name not in names:
            return _invalid(m, req)
    else:
        names = {t.name for t in broker.topics.all() if t.name >= start_topic}
    hidden = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, names, audit=named)
    refused = [_error_topic(m, ErrorCode.topic_authorization_failed, n)
               for n in sorted(hidden)] if named else []
    first = (cursor.partition_index if cursor is not None and start_topic not in hidden else 0)
    out: list[Any] = []
    next_cursor = None
    left = limit
    for name in sorted(names - hidden):
        if left == 0:
            next_cursor = m.Cursor(topic_name=name, partition_index=0)
            break
        topic = broker.topics.get(name)
        if topic is None:
            if named:
                out.append(_error_topic(m, ErrorCode.unknown_topic_or_partition, name))
            continue
        lo = min(first, topic.partitions) if name == start_topic else 0
        hi = min(topic.partitions, lo + left)
        parts = tuple(partition_entry(m.DescribeTopicPartitionsResponsePartition,
                                      broker.node_id, topic, p, broker.cluster)
                      for p in range(lo, hi))
        left -= len(parts)
        out.append(m.DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.none, name=name, topic_id=topic.topic_id,
            is_internal=topic.internal, partitions=parts,
            topic_authorized_operations=ctx.authorized_operations(
                Resource(ResourceType.TOPIC, name))))
        if hi < topic.partitions:
            next_cursor = m.Cursor(topic_name=name, partition_index=hi)
            break
    resp = m.DescribeTopicPartitionsResponse(throttle_time=NO_THROTTLE, next_cursor=next_cursor,
                                             topics=tuple(out + refused))
    return EncodeOffLoop(resp) if len(resp.topics) > YIELD_EVERY else resp
