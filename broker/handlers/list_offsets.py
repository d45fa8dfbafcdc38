"""ListOffsets (2) v1-10: earliest, latest, max-timestamp and by-timestamp lookups.

Special timestamps: -1 latest (the high watermark: the log end offset of a partition with one
replica, what every in-sync replica has of a replicated one; under read_committed
(v2+) the last stable offset, ``broker/log/txn_log.py``), -2 earliest (log start offset), -3 the
offset of the largest timestamp (v7+), -4 earliest local (v8+, same as -2 here), -5 latest tiered
(v9+, none: -1). Otherwise the earliest offset whose timestamp is at or after the given one, or -1
if there is none: the log finds the first batch late enough and its records are read for the
first such record, as Kafka answers (``protocol/record_timestamps.py``; should they not parse, the
batch's base offset answers). As Kafka does, a timestamp lookup (and -3) whose answer is at or
past the last fetchable offset (the LSO under read_committed, else the high watermark) answers
-1: a read_committed consumer cannot be sent into an ongoing transaction.

Authorization (``broker/authz.py``): DESCRIBE on each topic, asked once per topic; every
partition of a topic the principal may not describe is TOPIC_AUTHORIZATION_FAILED (checked
before existence, as Kafka does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers._routing import leader_problem
from broker.wire_limits import YIELD_EVERY, Steps, denied_steps, paced
from protocol.codec import response_module
from protocol.log_validator import DECOMPRESSED_FLOOR
from protocol.messages import make
from protocol.record_timestamps import first_record_at_or_after

if TYPE_CHECKING:
    from broker.handlers._requests import ListOffsetsRequest

API_KEY = 2
VERSIONS = (1, 10)

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
READ_COMMITTED = 1


def lookup(lg: Any, ts: int, last_fetchable: int | None = None) -> tuple[int, int]:
    """(offset, timestamp) for a ListOffsets timestamp on one log; ``last_fetchable`` (default
    the log end offset) bounds what may be answered (Kafka's Partition.fetchOffsetForTimestamp).
    """
    bound = lg.log_end_offset if last_fetchable is None else last_fetchable
    if ts == LATEST:
        return bound, -1
    if ts in (EARLIEST, EARLIEST_LOCAL):
        return lg.log_start_offset, -1
    if ts == LATEST_TIERED:
        return -1, -1
    if ts == MAX_TIMESTAMP:
        found = lg.max_timestamp_offset()
        return found if found is not None and found[0] < bound else (-1, -1)
    found = lg.offset_for_timestamp(ts)
    if found is None:
        return -1, -1
    batch = lg.read(found[0], 1)  # the batch holding the answer (at least one batch is read)
    exact = first_record_at_or_after(batch.data, ts, found[0], DECOMPRESSED_FLOOR)
    answer = exact if exact is not None else found
    return answer if answer[0] < bound else (-1, -1)


def handle(ctx: RequestContext, req: ListOffsetsRequest) -> Any:
    # Over YIELD_EVERY topics and partitions the event loop is served every YIELD_EVERY.
    return paced(_answer(ctx, req),
                 sum(1 + len(t.partitions) for t in req.topics) > YIELD_EVERY)


def _answer(ctx: RequestContext, req: ListOffsetsRequest) -> Steps[Any]:
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    topics = []
    denied = yield from denied_steps(ctx, Operation.DESCRIBE, ResourceType.TOPIC,
                                     (t.name for t in req.topics))
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    rep = broker.replication
    cluster = broker.cluster
    step = 0
    for t in req.topics:
        refused = t.name in denied
        topic = broker.topics.get(t.name) if not refused else None
        parts = []
        for p in t.partitions:
            step += 1
            if step % YIELD_EVERY == 0:
                yield
            not_here = leader_problem(ctx, t.name, p.partition_index) if topic else None
            if not_here is not None:
                parts.append(make(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                                  error_code=not_here, timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            lg = broker.logs.get(t.name, p.partition_index) if topic is not None else None
            if lg is None:
                error = ErrorCode.topic_authorization_failed if refused \
                    else ErrorCode.unknown_topic_or_partition
                parts.append(make(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                                  error_code=error, timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            error = ErrorCode.none
            try:
                hw = None if rep is None else rep.high_watermark(t.name, p.partition_index, lg)
                bound = hw
                if committed:
                    lso = broker.txn_log.last_stable_offset(t.name, p.partition_index)
                    bound = lso if hw is None else min(hw, lso)
                offset, ts = lookup(lg, p.timestamp, bound)
            except OSError:  # LogDirOfflineError: the log directory failed (storage/log_dir.py)
                error, offset, ts = ErrorCode.kafka_storage_error, -1, -1
            parts.append(make(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                              error_code=error, timestamp=ts, offset=offset,
                              leader_epoch=info.leader_epoch if (info := cluster.partition(
                                  t.name, p.partition_index)) is not None else 0))
        topics.append(make(m.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts)))
    return make(m.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
