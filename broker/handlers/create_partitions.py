"""CreatePartitions (37) v0-3: raise a topic's partition count.

Per topic: a name given twice -> INVALID_REQUEST (not changed); unknown topic ->
UNKNOWN_TOPIC_OR_PARTITION; a count not above the current one -> INVALID_PARTITIONS (partitions
are never removed); internal topics -> INVALID_REQUEST (their partition count fixes which
partition holds a group's state, so changing it would lose state). Manual assignments are
optional; when given they must list one entry per new partition, each on exactly this broker
on a single broker, or in a cluster on registered brokers, none twice, as many as the topic's
replication factor, else INVALID_REPLICA_ASSIGNMENT. New partitions of a cluster topic get its
replication factor, placed over the available brokers. ``validate_only`` checks without
changing anything. New partitions start empty; existing partitions keep their data and offsets.

Authorization (``broker/authz.py``): ALTER on each topic, after the duplicate check; a topic the
principal may not alter is TOPIC_AUTHORIZATION_FAILED whether or not it exists (Kafka).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.log.topics import TopicError
from broker.authz import Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.wire_limits import YIELD_EVERY, denied_in_slices
from broker.handlers._common import NO_THROTTLE, OK, err_message
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.handlers._requests import CreatePartitionsRequest

API_KEY = 37
VERSIONS = (0, 3)


def _assignment_problem(broker: Broker, name: str, added: int,
                        assignments: Any) -> str | None:
    if assignments is None:
        return None
    if len(assignments) != added:
        return (f"{added} partition(s) would be added but {len(assignments)} assignment(s) "
                "were given")
    if broker.member is not None:
        record = broker.member.store.view.topics.get(name)
        rf = len(record.partitions[0].target) if record and record.partitions else None
        return broker.member.assignment_problem([tuple(a.broker_ids) for a in assignments], rf)
    node = broker.node_id
    for i, a in enumerate(assignments):
        if list(a.broker_ids) != [node]:
            return (f"new partition {i} is assigned to brokers {list(a.broker_ids)}; "
                    f"the replication factor is 1 and the only broker is {node}")
    return None


async def create_partitions(broker: Broker, name: str, count: int, assignments: Any,
                            validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Check and (unless ``validate_only``) raise one topic's partition count."""
    topic = broker.topics.get(name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
    if topic.internal:
        return (ErrorCode.invalid_request,
                f"the partition count of internal topic {name} cannot be changed")
    current = topic.partitions
    if count < current:
        return (ErrorCode.invalid_partitions,
                f"topic has {current} partitions, more than the requested {count}; "
                "partitions cannot be removed")
    if count == current:
        return ErrorCode.invalid_partitions, f"topic already has {current} partitions"
    problem = _assignment_problem(broker, name, count - current, assignments)
    if problem:
        return ErrorCode.invalid_replica_assignment, problem
    try:
        broker.check_partition_budget(count - current)
        if not validate_only:
            await broker.admin_add_partitions(
                name, count, [tuple(a.broker_ids) for a in assignments] if assignments else None)
    except TopicError as exc:
        return exc.error, exc.message
    return OK, None


async def handle(ctx: RequestContext, req: CreatePartitionsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    counts = Counter(t.name for t in req.topics)
    results = []
    denied = await denied_in_slices(ctx, Operation.ALTER, ResourceType.TOPIC,
                                    (t.name for t in req.topics if counts[t.name] == 1))
    message: str | None
    t: Any  # the CreatePartitionsTopic of req's version (enumerate over their union)
    for i, t in enumerate(req.topics):
        if i and i % YIELD_EVERY == 0:  # tens of thousands of topics: serve the loop between
            await asyncio.sleep(0)
        if counts[t.name] > 1:
            continue
        if t.name in denied:
            error, message = ErrorCode.topic_authorization_failed, refusal(
                ctx.principal, Operation.ALTER, Resource(ResourceType.TOPIC, t.name))
        else:
            error, message = await create_partitions(ctx.broker, t.name, t.count,
                                                     t.assignments, req.validate_only)
        results.append(make(m.CreatePartitionsTopicResult, name=t.name, error_code=error,
                            error_message=err_message(error, message)))
    for name, n in counts.items():
        if n > 1:
            results.append(make(m.CreatePartitionsTopicResult, name=name,
                                error_code=ErrorCode.invalid_request,
                                error_message="duplicate topic name"))
    return make(m.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
