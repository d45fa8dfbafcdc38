"""``Fetcher``: ShareFetch to each partition leader, and the records they bring back.

At most one fetch task runs per broker. ``start`` starts one for every leader of an assigned
partition, and for every broker whose share session still holds partitions (so the next fetch
forgets them), that has none running. All of them run in parallel; ``wait`` waits until one
finishes and moves its records into ``buffer``; ``hand_out`` takes the next batch from it (at
most ``max_records`` in ``record_limit`` mode). A fetch still running when ``getmany`` returns
stays running, and a later ``getmany`` hands out its records.

One fetch, under the broker's session lock (``client.ack_sender``):

- The session's partition set moves toward the wanted one (added, forgotten). The pending
  acknowledgements of the session's partitions are piggybacked, unless the session is not open
  yet: the first ShareFetch (epoch 0) must not carry any.
- A connection error resets the session and fails the piggybacked acknowledgements; the fetch
  is logged and tried again by the next ``start``.
- A top-level error fails the piggybacked acknowledgements. SHARE_SESSION_NOT_FOUND and
  INVALID_SHARE_SESSION_EPOCH reset the session (the next fetch opens a new one at epoch 0);
  any other is fatal.
- Otherwise the session advances, and per partition: the acknowledgement result is reported;
  METADATA_STALE errors, and topic ids the metadata does not know, refresh the metadata once the
  response is read; any other partition error is fatal; acquired records are decoded, and
  acquired offsets without a record are queued as GAP acknowledgements.

Fatal errors go to ``on_fatal``; the consumer raises them from ``getmany``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from client.ack_sender import AckResults, AckSender, PendingAcks
from client.cluster import Cluster
from client.errors import KafkaError, error_class, error_for
from client.membership import Membership
from client.records import (
    AcknowledgeType,
    RawPartition,
    ShareRecord,
    TopicPartition,
    decode_partition,
)
from client.session import SESSION_LOST, SHARE_FETCH, FetchParams, TopicIdPartition

log = logging.getLogger("client.share_consumer")

Fetched = list[tuple[TopicPartition, list[ShareRecord] | RawPartition]]

METADATA_STALE = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                            ErrorCode.unknown_topic_id, ErrorCode.fenced_leader_epoch,
                            ErrorCode.leader_not_available})
# ShareFetch ShareAcquireMode (v2, KIP-1206).
ACQUIRE_MODES = {"batch_optimized": 0, "record_limit": 1}

__all__ = ["ACQUIRE_MODES", "Fetcher"]


class Fetcher:
    """The member's ShareFetch tasks and the records they fetched.

    Args:
        cluster: metadata (leaders, topic names) and connections.
        membership: the assignment to fetch.
        acks: share sessions and pending acknowledgements (piggybacked on fetches).
        params: ShareFetch parameters (``max_wait_ms`` is capped per fetch by the time left).
        on_fatal: receives errors the application must see.
        refresh_metadata: reloads the metadata of the subscribed topics.
        raw: buffer each partition's records undecoded, as one ``RawPartition`` (no gaps are
            found, so none are queued: acknowledging the acquired ranges covers them).
    """

    def __init__(self, cluster: Cluster, membership: Membership, acks: AckSender,
                 params: FetchParams, *, on_fatal: Callable[[KafkaError], None],
                 refresh_metadata: Callable[[], Awaitable[None]], raw: bool = False) -> None:
        self._cluster, self._membership, self._acks, self._params = cluster, membership, acks, params
        self._on_fatal, self._refresh_metadata = on_fatal, refresh_metadata
        self.raw = raw
        self.inflight: dict[int, asyncio.Task[Fetched]] = {}
        self.buffer: Fetched = []

    def hand_out_raw(self) -> list[RawPartition]:
        """Take the next raw batch from the buffer (``record_limit`` mode: whole partitions up
        to ``max_records`` acquired offsets, at least one; one fetch never exceeds it)."""
        record_limit = self._params.acquire_mode == ACQUIRE_MODES["record_limit"]
        budget = self._params.max_records if record_limit else None
        out: list[RawPartition] = []
        while self.buffer:
            part = self.buffer[0][1]
            assert isinstance(part, RawPartition)
            if budget is not None and out and part.count > budget:
                break
            self.buffer.pop(0)
            out.append(part)
            if budget is not None:
                budget -= part.count
        return out

    def hand_out(self) -> dict[TopicPartition, list[ShareRecord]]:
        """Take the next batch from the buffer (``record_limit`` mode: ``max_records`` at most)."""
        out: dict[TopicPartition, list[ShareRecord]] = {}
        record_limit = self._params.acquire_mode == ACQUIRE_MODES["record_limit"]
        budget = self._params.max_records if record_limit else None
        while self.buffer and (budget is None or budget > 0):
            tp, records = self.buffer[0]
            assert isinstance(records, list)
            if budget is not None and len(records) > budget:
                out.setdefault(tp, []).extend(records[:budget])
                self.buffer[0] = (tp, records[budget:])
                budget = 0
                break
            self.buffer.pop(0)
            out.setdefault(tp, []).extend(records)
            if budget is not None:
                budget -= len(records)
        return out

    async def start(self, remaining: float) -> None:
        """Start a fetch on every broker that needs one and has none running.

        ``remaining`` (seconds) caps the fetches' MaxWaitMs.
        """
        if self._membership.assignment and any(
                tid not in self._cluster.topic_names for tid in self._membership.assignment):
            await self._refresh_metadata()
        wanted = self._wanted()
        nodes = set(wanted) | {n for n, s in self._acks.sessions.items() if s.partitions}
        max_wait = max(0, min(int(remaining * 1000), self._params.max_wait_ms))
        for node in nodes:
            if node in self.inflight:
                continue
            parts = wanted.get(node, set())
            self.inflight[node] = asyncio.create_task(
                self._fetch(node, parts, max_wait), name=f"shoal-share-fetch-{node}")

    async def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a fetch to finish; buffer what the finished ones got.

        Raises:
            Exception: whatever unexpected exception a fetch task ended with.
        """
        done, _ = await asyncio.wait(list(self.inflight.values()), timeout=max(timeout, 0),
                                     return_when=asyncio.FIRST_COMPLETED)
        for node, task in list(self.inflight.items()):
            if task in done:
                del self.inflight[node]
                self._collect(node, task)

    def _wanted(self) -> dict[int, set[TopicIdPartition]]:
        """Assigned partitions grouped by their leader."""
        out: dict[int, set[TopicIdPartition]] = {}
        names = self._cluster.topic_names
        for tid, parts in self._membership.assignment.items():
            name = names.get(tid)
            if name is None:
                continue
            for p in parts:
                leader = self._cluster.leaders.get((name, p), -1)
                if leader >= 0:
                    out.setdefault(leader, set()).add((tid, p))
        return out

    async def _fetch(self, node: int, wanted: set[TopicIdPartition], max_wait_ms: int) -> Fetched:
        async with self._acks.node_lock(node):
            session = await self._acks.session(node)
            conn = await self._cluster.connection(node)
            added, forgotten = session.diff(wanted)
            names = self._cluster.topic_names
            tps = {TopicPartition(names[tid], p) for tid, p in wanted | session.partitions
                   if tid in names}
            acks = self._acks.pending_for(tps) if session.is_open else {}
            params = self._params
            if max_wait_ms != params.max_wait_ms:
                params = FetchParams(max_wait_ms, params.min_bytes, params.max_bytes,
                                     params.max_records, params.batch_size, params.acquire_mode)
            body = session.fetch_request(added, forgotten, self._acks.wire(acks), params)
            try:
                resp = await conn.call(SHARE_FETCH, session.version, body)
            except (ConnectionError, OSError) as e:
                session.reset()
                self._acks.report(acks, {tp: error_for(ErrorCode.network_exception, str(e), tp)
                                         for tp in acks})
                raise
            code = ErrorCode(resp.error_code)
            if code != ErrorCode.none:
                self._acks.report(acks, {tp: error_for(code, resp.error_message, tp)
                                         for tp in acks})
                if code in SESSION_LOST:
                    session.reset()
                    return []
                raise error_for(code, resp.error_message)  # type: ignore[misc]
            session.advance(added, forgotten)
            self._acks.note_lock_timeout(resp)
            out, stale = self._read(resp, names, acks)
            if stale:
                await self._refresh_metadata()
            return out

    def _read(self, resp: Any, names: dict[uuid.UUID, str], acks: PendingAcks) -> tuple[Fetched, bool]:
        """The records of a successful ShareFetch response, and whether the metadata is stale.

        Reports the piggybacked acknowledgements' results and queues GAPs as it goes.
        """
        out: Fetched = []
        results: AckResults = {}
        stale = False
        for t in resp.responses:
            name = names.get(t.topic_id)
            if name is None:
                stale = True
                continue
            for p in t.partitions:
                tp = TopicPartition(name, int(p.partition_index))
                if tp in acks:
                    results[tp] = error_for(p.acknowledge_error_code,
                                            p.acknowledge_error_message, tp)
                pcode = ErrorCode(p.error_code)
                if pcode != ErrorCode.none:
                    if pcode in METADATA_STALE:
                        stale = True
                    else:
                        self._on_fatal(error_class(pcode)(p.error_message, tp))
                    continue
                if not p.acquired_records:
                    continue
                if self.raw:
                    out.append((tp, RawPartition(
                        name, tp.partition, bytes(p.records or b""),
                        tuple((int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                              for a in p.acquired_records))))
                    continue
                decoded = decode_partition(
                    name, tp.partition, p.records,
                    [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                     for a in p.acquired_records])
                if decoded.gaps:
                    self._acks.add({tp: dict.fromkeys(decoded.gaps, AcknowledgeType.GAP)})
                if decoded.records:
                    out.append((tp, decoded.records))
        for tp in acks:
            results.setdefault(tp, None)
        self._acks.report(acks, results)
        return out, stale

    def _collect(self, node: int, task: asyncio.Task[Fetched]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            self.buffer.extend(task.result())
        elif isinstance(exc, (ConnectionError, OSError)):
            log.warning("share fetch to broker %s failed: %s", node, exc)
        elif isinstance(exc, KafkaError):
            self._on_fatal(exc)
        else:
            raise exc
