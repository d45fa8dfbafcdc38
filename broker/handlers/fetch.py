"""Fetch (1) v4-17: read whole batches from the logs, long-polling for MinBytes up to MaxWaitMs.

Batches are returned exactly as stored (no decoding). Limits follow KIP-74: the response stays
under MaxBytes (capped by ``fetch.max.bytes``) and each partition under its PartitionMaxBytes,
except that the first batch of the first non-empty partition is always returned whole so a
consumer can make progress. A fetch waiting for data is woken by any append to one of its
partitions. Fetch sessions (KIP-227) are not kept: we answer session id 0, which every client
treats as "send full requests".

Isolation (KIP-98, ``broker/log/txn_log.py``): read_uncommitted (0) reads up to the high watermark
(the log end offset of a partition with one replica; of a replicated one, the offset every
in-sync replica has, ``broker/replication/``). read_committed (1) reads only below the last stable
offset (the first offset of the oldest ongoing transaction, never past the high watermark),
answers it as LastStableOffset, and lists the aborted transactions that intersect the returned
batches (from the segments' transaction indexes) so the consumer drops their records; markers
themselves go to the consumer, which skips control batches. A marker wakes waiting
read_committed fetches (it moves the LSO), and so does a high watermark that moves.

Authorization (``broker/authz.py``): READ on each topic, asked once per topic and request (not
on every long-poll pass); a partition of a topic the principal may not read is answered
TOPIC_AUTHORIZATION_FAILED, before the unknown-partition check for topics named (an unknown id
stays UNKNOWN_TOPIC_ID: ids reveal nothing). A fetch with a replica id is a follower's: it is
answered by ``broker/replication/replica_fetch.py`` and needs CLUSTER_ACTION instead.

Bounded work per request (issue 12): a pass over the partitions yields to the event loop every
``YIELD_EVERY`` partitions, long-poll wake-up keys are deduplicated, and a response over many
partitions is encoded in a worker thread (``broker/wire_limits.py``), so a Fetch listing 100k
partitions shares the loop with everyone else.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers._routing import endpoint_entries, leader_problem, moved_leader
from broker.log.watch import wait_for_any
from broker.replication.replica_fetch import replica_fetch, replica_id_of
from broker.wire_limits import YIELD_EVERY, EncodeOffLoop
from protocol.codec import response_module
from protocol.messages import make
from storage.log import OffsetOutOfRangeError

if TYPE_CHECKING:
    from broker.handlers._requests import FetchRequest

API_KEY = 1
VERSIONS = (4, 17)
READ_COMMITTED = 1


def handle(ctx: RequestContext, req: FetchRequest) -> Any:
    replica = replica_id_of(req)
    if replica >= 0:
        return replica_fetch(ctx, req, replica)
    return _fetch(ctx, req)


async def _fetch(ctx: RequestContext, req: FetchRequest) -> Any:
    broker = ctx.broker
    clock = broker.clock
    max_wait_ms = max(0, int(req.max_wait.total_seconds() * 1000))
    deadline = clock.monotonic_ms() + max_wait_ms
    count = sum(len(ft.partitions) for ft in req.topics)
    by_id = ctx.api_version >= 13
    denied = ctx.denied(Operation.READ, ResourceType.TOPIC, (
        name for ft in req.topics
        if (name := _topic_name(broker, ft, by_id)) is not None))
    while True:
        resp, total, errors, keys, sent = await _read(ctx, req, count > YIELD_EVERY, denied)
        remaining = deadline - clock.monotonic_ms()
        if total >= req.min_bytes or errors or remaining <= 0 or not keys:
            for topic_name, n in sent:
                broker.metrics.fetch_bytes.inc(topic_name, n)
            return EncodeOffLoop(resp) if count > YIELD_EVERY else resp
        fut = broker.logs.watch.watch(dict.fromkeys(keys))
        await wait_for_any(fut, remaining / 1000)
        await asyncio.sleep(0)


def _topic_name(broker: Any, ft: Any, by_id: bool) -> str | None:
    """The name a fetched topic is authorized under (None: an unknown topic id)."""
    if not by_id:
        return str(ft.topic)
    topic = broker.topics.by_id(ft.topic_id)
    return topic.name if topic is not None else None


async def _read(ctx: RequestContext, req: FetchRequest, cooperative: bool, denied: frozenset[str]
                ) -> tuple[Any, int, bool, list[tuple[str, int]], list[tuple[str, int]]]:
    """One pass over the requested partitions: (response, bytes, any error, watch keys,
    (topic, bytes) of each non-empty partition for the metrics). ``cooperative``: yield to the
    loop every YIELD_EVERY partitions; ``denied``: topic names answered
    TOPIC_AUTHORIZATION_FAILED."""
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    by_id = ctx.api_version >= 13
    budget = min(req.max_bytes, broker.config.get("fetch.max.bytes"))
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    txn_log = broker.txn_log
    rep = broker.replication
    total = 0
    errors = False
    keys: list[tuple[str, int]] = []
    sent: list[tuple[str, int]] = []
    topics = []
    leaders: dict[int, Any] = {}  # KIP-951: where NOT_LEADER_OR_FOLLOWER partitions went
    done = 0
    ft: Any  # the FetchTopic of req's version (a loop over their union)
    for ft in req.topics:
        topic = broker.topics.by_id(ft.topic_id) if by_id else broker.topics.get(ft.topic)
        parts = []
        refused = bool(denied) and (topic.name if topic is not None
                                    else getattr(ft, "topic", None)) in denied
        for fp in ft.partitions:
            done += 1
            if cooperative and done % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            p = fp.partition
            if refused:
                errors = True
                parts.append(_pdata(m, p, ErrorCode.topic_authorization_failed, -1, -1, b""))
                continue
            not_here = leader_problem(ctx, topic.name, p) if topic is not None else None
            if not_here is not None and topic is not None:
                errors = True
                parts.append(_pdata(m, p, not_here, -1, -1, b"", **moved_leader(
                    ctx, m, topic.name, p, leaders)))
                continue
            lg = broker.logs.get(topic.name, p) if topic is not None else None
            if lg is None:
                errors = True
                err = ErrorCode.unknown_topic_id if by_id and topic is None \
                    else ErrorCode.unknown_topic_or_partition
                parts.append(_pdata(m, p, err, -1, -1, b""))
                continue
            assert topic is not None  # a log is found only for a known topic
            keys.append((topic.name, p))
            hwm = lg.log_end_offset if rep is None else rep.high_watermark(topic.name, p, lg)
            data = b""
            err = ErrorCode.none
            limit = min(fp.partition_max_bytes, budget)
            bound = lso = hwm
            aborted: tuple[Any, ...] = ()
            if limit > 0 or total == 0:
                try:
                    if committed:
                        bound = lso = min(hwm, txn_log.last_stable_offset(topic.name, p))
                    read = lg.read(fp.fetch_offset, max(limit, 1), bound)
                    data = read.data
                    if data and committed:
                        aborted = tuple(
                            make(m.AbortedTransaction, producer_id=a.producer_id,
                                 first_offset=a.first_offset)
                            for a in txn_log.aborted_transactions(
                                topic.name, p, read.first_offset, read.next_offset))
                except OffsetOutOfRangeError:
                    err = ErrorCode.offset_out_of_range
                    errors = True
                except OSError:  # LogDirOfflineError: the log directory failed
                    err = ErrorCode.kafka_storage_error
                    errors = True
                if data and len(data) > limit and total > 0:
                    data = b""  # over budget: only the very first batch may exceed the limit
                    aborted = ()
            elif committed:
                try:
                    lso = min(hwm, txn_log.last_stable_offset(topic.name, p))
                except OSError:
                    err = ErrorCode.kafka_storage_error
                    errors = True
            if data:
                sent.append((topic.name, len(data)))
            total += len(data)
            budget -= len(data)
            parts.append(_pdata(m, p, err, hwm, lg.log_start_offset, data, lso, aborted))
        topics.append(make(m.FetchableTopicResponse, topic=getattr(ft, "topic", None),
                           topic_id=getattr(ft, "topic_id", None), partitions=tuple(parts)))
    resp = make(m.FetchResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                session_id=0, responses=tuple(topics),
                node_endpoints=endpoint_entries(m, leaders))
    return resp, total, errors, keys, sent


def _pdata(m: Any, p: int, err: ErrorCode, hwm: int, log_start: int, data: bytes,
           lso: int | None = None, aborted: tuple[Any, ...] = (), **leader: Any) -> Any:
    return make(m.PartitionData, partition_index=p, error_code=err, high_watermark=hwm,
                last_stable_offset=hwm if lso is None else lso, log_start_offset=log_start,
                aborted_transactions=aborted, preferred_read_replica=-1, records=data, **leader)
