"""``AckSender``: a member's share sessions, its unsent acknowledgements, and ShareAcknowledge.

There is one ``ShareSession`` per broker the member fetches from (``client.session``). ShareFetch
(``client.fetcher``) and ShareAcknowledge both use it, and every request must carry the
session's next epoch, so requests on one broker's session are serialised by a per-broker lock.
Both the sessions and the locks live here, and the fetcher borrows them.

Acknowledgements wait in ``pending`` (per partition, ``{offset: type}``) until they are sent:
piggybacked on the next ShareFetch to the partition's leader, or by ``send`` (commit_sync,
commit_async, close, unsubscribe, the lock keeper), which sends one ShareAcknowledge to each
leader in parallel. GAPs (acquired offsets without records) are queued here by the fetcher.

Results (per partition: None or a ``KafkaError``) go to the application's
``acknowledgement_commit_callback`` whenever they arrive (``report``), GAPs left out. A request
that fails or meets a lost session fails all of its partitions; no acknowledgement is retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from client.acks import to_wire_batches
from client.cluster import Cluster
from client.errors import KafkaError, error_for
from client.records import AcknowledgeType, TopicPartition
from client.session import (
    CLOSE_EPOCH,
    SESSION_LOST,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    ShareSession,
    TopicIdPartition,
)

log = logging.getLogger("client.share_consumer")

AckResults = dict[TopicPartition, KafkaError | None]
AckCallback = Callable[[dict[TopicPartition, set[int]], KafkaError | None], Any]
PendingAcks = dict[TopicPartition, dict[int, AcknowledgeType]]

__all__ = ["AckCallback", "AckResults", "AckSender", "PendingAcks"]


class AckSender:
    """Share sessions per broker, pending acknowledgements, and sending them.

    Args:
        cluster: metadata (leaders, topic ids) and connections.
        group_id: the share group.
        member_id: this member's id (fixed for the consumer's life).
        max_share_version: highest ShareFetch/ShareAcknowledge version to use.
        callback: the application's ``acknowledgement_commit_callback``.
    """

    def __init__(self, cluster: Cluster, group_id: str, member_id: str, max_share_version: int,
                 callback: AckCallback | None) -> None:
        self._cluster, self._group_id, self._member_id = cluster, group_id, member_id
        self._max_share_version, self._callback = max_share_version, callback
        self.sessions: dict[int, ShareSession] = {}
        self._node_locks: dict[int, asyncio.Lock] = {}
        self.pending: PendingAcks = {}
        self.lock_timeout_ms: int | None = None

    # -- share sessions ---------------------------------------------------------------------------

    def node_lock(self, node: int) -> asyncio.Lock:
        """The lock that serialises requests on ``node``'s share session."""
        lock = self._node_locks.get(node)
        if lock is None:
            lock = self._node_locks[node] = asyncio.Lock()
        return lock

    async def session(self, node: int) -> ShareSession:
        """``node``'s share session, made (at the highest version both sides have) on first use."""
        session = self.sessions.get(node)
        if session is None:
            conn = await self._cluster.connection(node)
            version = min(conn.version(SHARE_FETCH, 1, self._max_share_version),
                          conn.version(SHARE_ACKNOWLEDGE, 1, self._max_share_version))
            session = ShareSession(node, self._group_id, self._member_id, version)
            self.sessions[node] = session
        return session

    def share_version(self) -> int:
        """The lowest version among the sessions (the configured maximum before any)."""
        versions = [s.version for s in self.sessions.values()]
        return min(versions) if versions else self._max_share_version

    def note_lock_timeout(self, resp: Any) -> None:
        """Remember the acquisition lock duration a ShareFetch/ShareAcknowledge reported."""
        # ShareAcknowledge v1 has no AcquisitionLockTimeoutMs; ShareFetch v1+ has it.
        lock = getattr(resp, "acquisition_lock_timeout", None)
        if lock is not None and lock.total_seconds() > 0:
            self.lock_timeout_ms = int(lock.total_seconds() * 1000)

    # -- pending acknowledgements -----------------------------------------------------------------

    def add(self, acks: PendingAcks) -> None:
        """Queue acknowledgements (a later type for an offset replaces an unsent earlier one)."""
        for tp, a in acks.items():
            self.pending.setdefault(tp, {}).update(a)

    def pending_for(self, tps: Iterable[TopicPartition] | None) -> PendingAcks:
        """Remove and return the pending acknowledgements of ``tps`` (None: of every partition)."""
        if tps is None:
            out, self.pending = self.pending, {}
            return out
        return {tp: self.pending.pop(tp) for tp in tps if tp in self.pending}

    def wire(self, acks: PendingAcks) -> dict[TopicIdPartition, list[tuple[int, int, tuple[int, ...]]]]:
        """``acks`` as AcknowledgementBatches by topic id (topics without a known id are dropped)."""
        ids = self._cluster.topic_ids
        return {(ids[tp.topic], tp.partition): to_wire_batches(a)
                for tp, a in acks.items() if a and tp.topic in ids}

    def report(self, acks: PendingAcks, results: AckResults) -> None:
        """Hand acknowledgement results to the application's callback (GAPs are not shown)."""
        if self._callback is None:
            return
        for tp, exc in results.items():
            offsets = {o for o, k in acks.get(tp, {}).items() if k != AcknowledgeType.GAP}
            if offsets:
                try:
                    self._callback({tp: offsets}, exc)
                except Exception:
                    log.exception("acknowledgement commit callback failed")

    # -- ShareAcknowledge -------------------------------------------------------------------------

    async def send(self, acks: PendingAcks, *, renew: bool = False,
                   close: bool = False) -> AckResults:
        """ShareAcknowledge to each leader in parallel (``close``: epoch -1 on every session)."""
        by_node: dict[int, PendingAcks] = {}
        for tp, a in acks.items():
            by_node.setdefault(self._cluster.leaders.get(tp, -1), {})[tp] = a
        if close:
            for node, s in self.sessions.items():
                if s.is_open:
                    by_node.setdefault(node, {})
        results: AckResults = {}
        answers = await asyncio.gather(*(self._acknowledge(node, a, renew=renew, close=close)
                                         for node, a in by_node.items()))
        for r in answers:
            results.update(r)
        return results

    async def _acknowledge(self, node: int, acks: PendingAcks, *, renew: bool,
                           close: bool) -> AckResults:
        session = self.sessions.get(node)
        if session is None or not session.is_open:
            results = {tp: error_for(ErrorCode.share_session_not_found,
                                     "no open share session on the partition's leader", tp)
                       for tp in acks}
            self.report(acks, results)
            return results
        async with self.node_lock(node):
            if not session.is_open:
                results = {tp: error_for(ErrorCode.share_session_not_found, None, tp) for tp in acks}
                self.report(acks, results)
                return results
            renew = renew and session.version >= 2 and any(
                k == AcknowledgeType.RENEW for a in acks.values() for k in a.values())
            conn = await self._cluster.connection(node)
            body = session.acknowledge_request(self.wire(acks), renew=renew,
                                               epoch=CLOSE_EPOCH if close else None)
            try:
                resp = await asyncio.wait_for(conn.call(SHARE_ACKNOWLEDGE, session.version, body),
                                              self._cluster.timeout)
            except (TimeoutError, ConnectionError, OSError) as e:
                session.reset()
                results = {tp: error_for(ErrorCode.network_exception, str(e), tp) for tp in acks}
                self.report(acks, results)
                return results
            code = ErrorCode(resp.error_code)
            if code != ErrorCode.none:
                if code in SESSION_LOST or close:
                    session.reset()
                results = {tp: error_for(code, resp.error_message, tp) for tp in acks}
                self.report(acks, results)
                return results
            if close:
                session.reset()
            else:
                session.advance()
            self.note_lock_timeout(resp)
            names = self._cluster.topic_names
            results = {}
            for t in resp.responses:
                for p in t.partitions:
                    tp = TopicPartition(names.get(t.topic_id, "?"), int(p.partition_index))
                    if tp in acks:
                        results[tp] = error_for(p.error_code, p.error_message, tp)
            for tp in acks:
                results.setdefault(tp, None)
            self.report(acks, results)
            return results
