"""The leader's side of a follower's Fetch (Fetch with a replica id, v12+), and the epoch lookup
OffsetForLeaderEpoch answers.

A follower's fetch is told apart by its replica id (``ReplicaState.ReplicaId`` from v15, the
top-level ``ReplicaId`` before). It needs CLUSTER_ACTION on the cluster (the inter-broker login,
a ``super.users`` member); without it every partition is TOPIC_AUTHORIZATION_FAILED, as Kafka
answers. Per partition, in this order:

- not replicated here with this broker as leader: NOT_LEADER_OR_FOLLOWER (with the current
  leader, KIP-951, so the follower need not wait for etcd);
- the request's CurrentLeaderEpoch older than the leader's: FENCED_LEADER_EPOCH; newer:
  UNKNOWN_LEADER_EPOCH (this broker has not seen that epoch yet);
- LastFetchedEpoch given and the leader's log disagrees (the leader's end offset for that epoch
  is below the fetch offset, or the leader knows no such epoch): no records, and DivergingEpoch
  names the largest epoch the two logs share up to where they agree; the follower truncates
  there and fetches again;
- a fetch offset outside the leader's log: OFFSET_OUT_OF_RANGE (the follower starts over at the
  leader's log start when it is behind it);
- else the records from the fetch offset up to the log end (not the high watermark: followers
  copy everything), and the fetch offset reports the follower's progress to the
  ``ReplicaManager``, which may move the high watermark.

Every answer carries the leader's high watermark and log start offset. The fetch long-polls for
``MinBytes`` up to ``MaxWaitMs`` as a consumer's does; appends wake it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers._routing import moved_leader
from broker.log.watch import wait_for_any
from broker.wire_limits import YIELD_EVERY
from protocol.codec import response_module
from protocol.messages import make
from storage.log import OffsetOutOfRangeError

FETCH = 1


def replica_id_of(req: Any) -> int:
    """The follower's node id, or -1 for a consumer's fetch."""
    state = getattr(req, "replica_state", None)
    if state is not None and state.replica_id >= 0:
        return int(state.replica_id)
    return int(getattr(req, "replica_id", -1))


async def replica_fetch(ctx: RequestContext, req: Any, replica: int) -> Any:
    """Answer follower ``replica``'s Fetch (module doc)."""
    broker = ctx.broker
    clock = broker.clock
    allowed = ctx.authorized(Operation.CLUSTER_ACTION, CLUSTER)
    max_wait_ms = max(0, int(req.max_wait.total_seconds() * 1000))
    deadline = clock.monotonic_ms() + max_wait_ms
    first = True
    while True:
        resp, total, errors, keys = await _read(ctx, req, replica, allowed, first)
        first = False
        remaining = deadline - clock.monotonic_ms()
        if total >= req.min_bytes or errors or remaining <= 0 or not keys:
            return resp
        fut = broker.logs.watch.watch(dict.fromkeys(keys))
        await wait_for_any(fut, remaining / 1000)
        await asyncio.sleep(0)


async def _read(ctx: RequestContext, req: Any, replica: int, allowed: bool, report: bool
                ) -> tuple[Any, int, bool, list[tuple[str, int]]]:
    broker = ctx.broker
    rep = broker.replication
    m = response_module(FETCH, ctx.api_version)
    by_id = ctx.api_version >= 13
    budget = req.max_bytes
    total = 0
    errors = False
    keys: list[tuple[str, int]] = []
    topics = []
    leaders: dict[int, Any] = {}
    done = 0
    for ft in req.topics:
        topic = broker.topics.by_id(ft.topic_id) if by_id else broker.topics.get(ft.topic)
        parts = []
        for fp in ft.partitions:
            done += 1
            if done % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            p = fp.partition
            if not allowed:
                errors = True
                parts.append(_pdata(m, p, ErrorCode.topic_authorization_failed))
                continue
            lg = broker.logs.get(topic.name, p) if topic is not None else None
            if topic is None or lg is None:
                errors = True
                parts.append(_pdata(m, p, ErrorCode.unknown_topic_id if by_id
                                    else ErrorCode.unknown_topic_or_partition))
                continue
            st = rep.leaders.get((topic.name, p)) if rep is not None else None
            if st is None:
                errors = True
                parts.append(_pdata(m, p, ErrorCode.not_leader_or_follower, **moved_leader(
                    ctx, m, topic.name, p, leaders)))
                continue
            current = int(fp.current_leader_epoch)
            if current >= 0 and current != st.leader_epoch:
                errors = True
                parts.append(_pdata(m, p, ErrorCode.fenced_leader_epoch
                                    if current < st.leader_epoch
                                    else ErrorCode.unknown_leader_epoch, **moved_leader(
                                        ctx, m, topic.name, p, leaders)))
                continue
            keys.append((topic.name, p))
            offset = int(fp.fetch_offset)
            last_epoch = int(getattr(fp, "last_fetched_epoch", -1))
            if last_epoch >= 0:
                epoch, end = lg.end_offset_for_epoch(last_epoch)
                if epoch != last_epoch or end < offset:
                    errors = True  # answer now: the follower must truncate first
                    parts.append(_pdata(m, p, ErrorCode.none, st.high_watermark,
                                        lg.log_start_offset, diverging_epoch=make(
                                            m.EpochEndOffset, epoch=epoch, end_offset=end)))
                    continue
            if report:
                rep.follower_fetched(topic.name, p, replica, offset, lg)  # type: ignore[union-attr]
            data = b""
            err = ErrorCode.none
            limit = min(fp.partition_max_bytes, budget)
            if limit > 0 or total == 0:
                try:
                    if offset < lg.log_start_offset or offset > lg.log_end_offset:
                        raise OffsetOutOfRangeError(offset)
                    data = lg.read(offset, max(limit, 1)).data
                except OffsetOutOfRangeError:
                    err = ErrorCode.offset_out_of_range
                    errors = True
                except OSError:  # LogDirOfflineError
                    err = ErrorCode.kafka_storage_error
                    errors = True
                if data and len(data) > limit and total > 0:
                    data = b""
            total += len(data)
            budget -= len(data)
            parts.append(_pdata(m, p, err, st.high_watermark, lg.log_start_offset, data))
        topics.append(make(m.FetchableTopicResponse, topic=getattr(ft, "topic", None),
                           topic_id=getattr(ft, "topic_id", None), partitions=tuple(parts)))
    resp = make(m.FetchResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                session_id=0, responses=tuple(topics), node_endpoints=())
    return resp, total, errors, keys


def _pdata(m: Any, p: int, err: ErrorCode, hwm: int = -1, log_start: int = -1,
           data: bytes = b"", **extra: Any) -> Any:
    return make(m.PartitionData, partition_index=p, error_code=err, high_watermark=hwm,
                last_stable_offset=hwm, log_start_offset=log_start, aborted_transactions=(),
                preferred_read_replica=-1, records=data, **extra)
