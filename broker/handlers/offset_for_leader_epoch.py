"""OffsetForLeaderEpoch (23) v2-4: where a leader epoch ends in the leader's log.

Followers ask it to find where their log diverges from the leader's (Shoal's own followers learn
it from Fetch's DivergingEpoch, ``broker/replication/fetcher.py``); consumers ask it after a
leader change to check that their position was not truncated away (KIP-320).

Per partition: the largest leader epoch at or below the one asked that the leader's log knows,
and the offset where the next epoch begins (the log end offset for the latest epoch), from the
log's leader-epoch cache (``storage/leader_epoch.py``); ``(-1, -1)`` when the log knows no epoch
that old. A log written before any epoch was recorded (a single broker's, or a partition with one
replica) is all one epoch: the partition's current one, ending at the log end.

Errors, as Kafka: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (this broker does not lead
it), FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (the request's CurrentLeaderEpoch is older /
newer than the partition's), KAFKA_STORAGE_ERROR (log directory offline).

Authorization: a request with a replica id (v3+, >= 0) is a follower's and needs CLUSTER_ACTION
on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every partition; a consumer's needs DESCRIBE
on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import YIELD_EVERY, Steps, paced
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import OffsetForLeaderEpochRequest

API_KEY = 23
VERSIONS = (2, 4)


def handle(ctx: RequestContext, req: OffsetForLeaderEpochRequest) -> Any:
    return paced(_answer(ctx, req),
                 sum(1 + len(t.partitions) for t in req.topics) > YIELD_EVERY)


def _answer(ctx: RequestContext, req: OffsetForLeaderEpochRequest) -> Steps[Any]:
    m = response_module(API_KEY, ctx.api_version)
    replica = int(getattr(req, "replica_id", -1))
    cluster_denied = replica >= 0 and not ctx.authorized(Operation.CLUSTER_ACTION, CLUSTER)
    denied: frozenset[str] = frozenset()
    if replica < 0:
        denied = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC,
                            (t.topic for t in req.topics))
    step = 0
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            step += 1
            if step % YIELD_EVERY == 0:
                yield
            if cluster_denied:
                error, epoch, end = ErrorCode.cluster_authorization_failed, -1, -1
            elif t.topic in denied:
                error, epoch, end = ErrorCode.topic_authorization_failed, -1, -1
            else:
                error, epoch, end = _lookup(ctx, t.topic, p)
            parts.append(make(m.EpochEndOffset, error_code=error, partition=p.partition,
                              leader_epoch=epoch, end_offset=end))
        topics.append(make(m.OffsetForLeaderTopicResult, topic=t.topic, partitions=tuple(parts)))
    return make(m.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _lookup(ctx: RequestContext, topic: str, p: Any) -> tuple[ErrorCode, int, int]:
    broker = ctx.broker
    lg = broker.logs.get(topic, p.partition) if broker.topics.get(topic) is not None else None
    if lg is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    info = broker.cluster.partition(topic, p.partition)
    if info is None or not broker.cluster.is_leader(topic, p.partition):
        return ErrorCode.not_leader_or_follower, -1, -1
    current = int(p.current_leader_epoch)
    if current >= 0 and current != info.leader_epoch:
        return (ErrorCode.fenced_leader_epoch if current < info.leader_epoch
                else ErrorCode.unknown_leader_epoch), -1, -1
    try:
        if lg.latest_epoch < 0:
            # Never stamped: the whole log is the current epoch.
            if p.leader_epoch < 0:
                return ErrorCode.none, -1, -1
            return ErrorCode.none, min(int(p.leader_epoch), info.leader_epoch), lg.log_end_offset
        epoch, end = lg.end_offset_for_epoch(int(p.leader_epoch))
    except OSError:
        return ErrorCode.kafka_storage_error, -1, -1
    return ErrorCode.none, epoch, end
