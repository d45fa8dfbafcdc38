"""DeleteRecords (21) v0-2: move partitions' log start offsets forward (admin ``delete_records``).

For each partition, records below the requested offset become unreadable and whole segments
below it are deleted; the answer's ``low_watermark`` is the resulting log start offset. Offset -1
means the high watermark (the log end: one broker, nothing unreplicated). An offset at or below
the current start changes nothing and answers the current start (the start never moves back).

- a topic the principal may not DELETE (``broker/authz.py``, asked once per topic) ->
  TOPIC_AUTHORIZATION_FAILED, before existence is checked (Kafka);
- unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION;
- internal topics -> INVALID_TOPIC_EXCEPTION (their records are coordinator state; Kafka
  refuses too);
- a topic whose ``cleanup.policy`` lacks ``delete`` (compact only) -> POLICY_VIOLATION (Kafka);
- an offset above the log end, or negative other than -1 -> OFFSET_OUT_OF_RANGE;
- a disk error -> KAFKA_STORAGE_ERROR (logged).

The checkpoint write and segment unlinks block, so they run in a worker thread, as retention
does (``PartitionLog`` is safe for that). Nothing is woken: readers find out on their next read.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, ResourceType
from broker.config import cleanup_policies, topic_config_value
from broker.context import RequestContext
from broker.wire_limits import denied_in_slices, in_slices
from broker.handlers._common import NO_THROTTLE, OK
from protocol.codec import response_module
from protocol.messages import make
from storage.log import LogClosedError, OffsetOutOfRangeError
from storage.log import PartitionLogLike as PartitionLog

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.handlers._requests import DeleteRecordsRequest

log = logging.getLogger("shoal.admin")

API_KEY = 21
VERSIONS = (0, 2)

HIGH_WATERMARK = -1


@dataclass(slots=True)
class Deletion:
    """One requested partition: its log (if found) and then the outcome."""

    topic: str
    partition: int
    offset: int
    log: PartitionLog | None = None
    error: ErrorCode = OK
    low_watermark: int = -1
    high_watermark: int = -1  # where records may be deleted up to (replicated: what all have)


def plan(broker: Broker, topic: str, partition: int, offset: int) -> Deletion:
    """Find the partition's log and check what can be checked without touching it."""
    d = Deletion(topic, partition, offset)
    t = broker.topics.get(topic)
    lg = broker.logs.get(topic, partition) if t is not None else None
    if t is None or lg is None:
        d.error = ErrorCode.unknown_topic_or_partition
    elif t.internal:
        d.error = ErrorCode.invalid_topic_exception
    elif "delete" not in cleanup_policies(topic_config_value("cleanup.policy", t.configs,
                                                             broker.config)):
        # Kafka: records of a compact-only topic "can not be deleted due to the configured
        # policy".
        d.error = ErrorCode.policy_violation
    elif offset < 0 and offset != HIGH_WATERMARK:
        d.error = ErrorCode.offset_out_of_range
    else:
        rep = broker.replication
        d.high_watermark = lg.log_end_offset if rep is None \
            else rep.high_watermark(topic, partition, lg)
        if offset > d.high_watermark:
            d.error = ErrorCode.offset_out_of_range  # Kafka: not past the high watermark
        else:
            d.log = lg
    return d


def apply(d: Deletion) -> None:
    """Move one log's start offset (blocking: run in a worker thread)."""
    lg = d.log
    if lg is None:
        return
    target = d.high_watermark if d.offset == HIGH_WATERMARK else d.offset
    try:
        d.low_watermark = lg.delete_records_before(target)
    except OffsetOutOfRangeError:
        d.error = ErrorCode.offset_out_of_range
    except LogClosedError:  # the topic was deleted meanwhile
        d.error = ErrorCode.unknown_topic_or_partition
    except OSError:
        log.exception("DeleteRecords on %s-%d failed", d.topic, d.partition)
        d.error = ErrorCode.kafka_storage_error


def _apply_all(deletions: list[Deletion]) -> None:
    for d in deletions:
        apply(d)


def handle(ctx: RequestContext, req: DeleteRecordsRequest) -> Any:
    return _delete_records(ctx, req)


async def _delete_records(ctx: RequestContext, req: DeleteRecordsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    denied = await denied_in_slices(ctx, Operation.DELETE, ResourceType.TOPIC,
                                    (t.name for t in req.topics))

    def planned(entry: tuple[str, Any]) -> Deletion:
        name, p = entry
        if name in denied:
            return Deletion(name, p.partition_index, p.offset,
                            error=ErrorCode.topic_authorization_failed)
        return plan(ctx.broker, name, p.partition_index, p.offset)

    # Per partition, a slice at a time: tens of thousands of topics, or of partitions of one
    # topic, do not hold the event loop.
    deletions = await in_slices(((t.name, p) for t in req.topics for p in t.partitions), planned)
    todo = [d for d in deletions if d.log is not None]
    if todo:
        await asyncio.to_thread(_apply_all, todo)
    rows = await in_slices(deletions, lambda d: make(
        m.DeleteRecordsPartitionResult, partition_index=d.partition,
        low_watermark=d.low_watermark if d.error == OK else -1, error_code=d.error))
    starts = list(itertools.accumulate((len(t.partitions) for t in req.topics), initial=0))
    topics = await in_slices(range(len(req.topics)), lambda i: make(
        m.DeleteRecordsTopicResult, name=req.topics[i].name,
        partitions=tuple(rows[starts[i]:starts[i + 1]])))
    return make(m.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
