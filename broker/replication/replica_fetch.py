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

Every partition answered carries the leader's high watermark and log start offset. The fetch
long-polls for ``MinBytes`` up to ``MaxWaitMs`` as a consumer's does; appends wake it.

Followers open fetch sessions (``fetch_session.py``): within one, a fetch names only what changed
and is answered with only what changed, and every partition of the session counts as fetched at
the offset the follower last gave for it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.replication.fetch_session import SessionPartition
from broker.replication.leader_state import replica_wake_key

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers._routing import endpoint_entries, moved_leader
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
    m = response_module(FETCH, ctx.api_version)
    allowed = ctx.authorized(Operation.CLUSTER_ACTION, CLUSTER)
    rep = broker.replication
    session = None
    if allowed and rep is not None:
        session, err = rep.sessions.begin(replica, int(getattr(req, "session_id", 0)),
                                          int(getattr(req, "session_epoch", -1)))
        if err != ErrorCode.none:
            return make(m.FetchResponse, throttle_time=NO_THROTTLE, error_code=err,
                        session_id=0, responses=(), node_endpoints=())
    full = session is None or session.full
    entries, named = await _entries(ctx, req, session)
    if session is not None:
        session.bump()
    max_wait_ms = max(0, int(req.max_wait.total_seconds() * 1000))
    deadline = clock.monotonic_ms() + max_wait_ms
    first = True
    while True:
        read = await _read(ctx, m, entries, named if first else None, replica, allowed, full,
                           req.max_bytes)
        first = False
        remaining = deadline - clock.monotonic_ms()
        if read.total >= req.min_bytes or read.errors or remaining <= 0 or not read.keys:
            return read.answer(m, session.id if session is not None else 0)
        fut = broker.logs.watch.watch([replica_wake_key(t, p) for t, p in read.keys])
        # As ``wait_for_any``, with the timeout settling the watch future itself: the fetch
        # resumes one loop turn after an append, not three through wait_for and shield.
        timer = asyncio.get_running_loop().call_later(remaining / 1000, _wake, fut)
        try:
            await fut
        finally:
            timer.cancel()
            if not fut.done():
                fut.cancel()
        await asyncio.sleep(0)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _entries(ctx: RequestContext, req: Any, session: Any
                   ) -> tuple[list[SessionPartition], set[tuple[Any, int]]]:
    """The partitions this fetch covers, and the keys of those it names. Without a session,
    the named ones; with one, the request's partitions are added to (or replace, when it is
    full) the session's, its forgotten ones removed, and all of the session's are covered."""
    by_id = ctx.api_version >= 13
    topics = ctx.broker.topics
    named: set[tuple[Any, int]] = set()
    fresh: list[SessionPartition] = []
    done = 0
    for ft in req.topics:
        tkey = ft.topic_id if by_id else ft.topic
        topic = topics.by_id(ft.topic_id) if by_id else topics.get(ft.topic)
        name = topic.name if topic is not None else None
        for fp in ft.partitions:
            done += 1
            if done % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            named.add((tkey, fp.partition))
            fresh.append(SessionPartition(
                name, ft.topic_id if by_id else None, fp.partition, int(fp.fetch_offset),
                int(getattr(fp, "current_leader_epoch", -1)),
                int(getattr(fp, "last_fetched_epoch", -1)),
                int(fp.partition_max_bytes), request_topic=getattr(ft, "topic", None)))
    if session is None:
        return fresh, named
    parts = session.partitions
    if session.full:
        parts.clear()
    for ft in getattr(req, "forgotten_topics_data", ()) or ():
        tkey = ft.topic_id if by_id else ft.topic
        for p in ft.partitions:
            parts.pop((tkey, p), None)
    for e in fresh:
        key = (e.topic_id if by_id else e.request_topic, e.partition)
        old = parts.get(key)
        if old is not None:  # what the follower last heard still holds
            e.sent_high_watermark = old.sent_high_watermark
            e.sent_log_start = old.sent_log_start
        parts[key] = e
    return list(parts.values()), named


class _Read:
    """One pass over a fetch's partitions: the answers, and what they tell the session."""

    __slots__ = ("by_topic", "total", "errors", "keys", "sent", "endpoints")

    def __init__(self) -> None:
        self.by_topic: dict[Any, tuple[SessionPartition, list[Any]]] = {}
        self.total = 0
        self.errors = False
        self.keys: list[tuple[str, int]] = []
        self.sent: list[tuple[SessionPartition, int, int]] = []
        self.endpoints: dict[int, Any] = {}

    def add(self, e: SessionPartition, pdata: Any, hw: int = -2, log_start: int = -2) -> None:
        key = e.topic_id if e.topic_id is not None else e.request_topic
        slot = self.by_topic.get(key)
        if slot is None:
            slot = self.by_topic[key] = (e, [])
        slot[1].append(pdata)
        self.sent.append((e, hw, log_start))

    def answer(self, m: Any, session_id: int) -> Any:
        """The response; the session now holds what it tells the follower."""
        for e, hw, log_start in self.sent:
            e.sent_high_watermark = hw
            e.sent_log_start = log_start
        topics = tuple(make(m.FetchableTopicResponse, topic=e.request_topic,
                            topic_id=e.topic_id, partitions=tuple(parts))
                       for e, parts in self.by_topic.values())
        return make(m.FetchResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                    session_id=session_id, responses=topics,
                    node_endpoints=endpoint_entries(m, self.endpoints))


async def _read(ctx: RequestContext, m: Any, entries: list[SessionPartition],
                named: set[tuple[Any, int]] | None, replica: int, allowed: bool, full: bool,
                max_bytes: int) -> _Read:
    """Read every entry. ``named`` (first pass only) are the partitions the request names: they
    are checked for divergence; every entry's fetch offset is reported to the replica manager
    on the first pass. Outside a full fetch, an entry with nothing new is left out."""
    broker = ctx.broker
    rep = broker.replication
    logs = broker.logs
    by_id = ctx.api_version >= 13
    out = _Read()
    budget = max_bytes
    done = 0
    now = broker.clock.monotonic_ms()
    for e in entries:
        done += 1
        if done % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        p = e.partition
        if not allowed:
            out.errors = True
            out.add(e, _pdata(m, p, ErrorCode.topic_authorization_failed))
            continue
        topic = e.topic
        lg = logs.get(topic, p) if topic is not None else None
        if topic is None or lg is None:
            out.errors = True
            out.add(e, _pdata(m, p, ErrorCode.unknown_topic_id if by_id
                              else ErrorCode.unknown_topic_or_partition))
            continue
        st = rep.leaders.get((topic, p)) if rep is not None else None
        if st is None:
            out.errors = True
            out.add(e, _pdata(m, p, ErrorCode.not_leader_or_follower, **moved_leader(
                ctx, m, topic, p, out.endpoints)))
            continue
        current = e.current_leader_epoch
        if current >= 0 and current != st.leader_epoch:
            out.errors = True
            out.add(e, _pdata(m, p, ErrorCode.fenced_leader_epoch if current < st.leader_epoch
                              else ErrorCode.unknown_leader_epoch, **moved_leader(
                                  ctx, m, topic, p, out.endpoints)))
            continue
        out.keys.append((topic, p))
        offset = e.fetch_offset
        end = lg.log_end_offset
        if named is not None:
            last_epoch = e.last_fetched_epoch
            if last_epoch >= 0 and not (last_epoch == lg.latest_epoch and offset <= end) \
                    and (e.topic_id if by_id else e.request_topic, p) in named:
                epoch, epoch_end = lg.end_offset_for_epoch(last_epoch)
                if epoch != last_epoch or epoch_end < offset:
                    out.errors = True  # answer now: the follower must truncate first
                    out.add(e, _pdata(m, p, ErrorCode.none, st.high_watermark,
                                      lg.log_start_offset, diverging_epoch=make(
                                          m.EpochEndOffset, epoch=epoch, end_offset=epoch_end)))
                    continue
            rep.follower_fetched(topic, p, replica, offset, lg, now)  # type: ignore[union-attr]
        hw = st.high_watermark
        log_start = lg.log_start_offset
        if not full and offset == end and hw == e.sent_high_watermark \
                and log_start == e.sent_log_start:
            continue  # nothing new for the follower
        data = b""
        err = ErrorCode.none
        limit = min(e.max_bytes, budget)
        if limit > 0 or out.total == 0:
            try:
                if offset < log_start or offset > end:
                    raise OffsetOutOfRangeError(offset)
                if offset < end:
                    data = lg.read(offset, max(limit, 1)).data
            except OffsetOutOfRangeError:
                err = ErrorCode.offset_out_of_range
                out.errors = True
            except OSError:  # LogDirOfflineError
                err = ErrorCode.kafka_storage_error
                out.errors = True
            if data and len(data) > limit and out.total > 0:
                data = b""
        if not full and not data and err == ErrorCode.none and hw == e.sent_high_watermark \
                and log_start == e.sent_log_start:
            continue  # out of budget this time; the next fetch gets it
        out.total += len(data)
        budget -= len(data)
        out.add(e, _pdata(m, p, err, hw, log_start, data),
                *((hw, log_start) if err == ErrorCode.none else (-2, -2)))
    return out


def _pdata(m: Any, p: int, err: ErrorCode, hwm: int = -1, log_start: int = -1,
           data: bytes = b"", **extra: Any) -> Any:
    return make(m.PartitionData, partition_index=p, error_code=err, high_watermark=hwm,
                last_stable_offset=hwm, log_start_offset=log_start, aborted_transactions=(),
                preferred_read_replica=-1, records=data, **extra)
