"""The share-group request path shared by ShareFetch and ShareAcknowledge.

``ShareService`` holds the session cache and the partition manager, validates the parts of a
request that do not depend on its RPC (group and member ids, acknowledgement batches per version),
applies acknowledgements partition by partition, and releases a member's records when its share
session ends (epoch -1, a new epoch 0 does *not* release, or the connection drops).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
import logging
import uuid
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.share.partition_manager import SharePartitionManager
from broker.share.session import ShareSession, ShareSessionCache
from persister.api import Persister, SharePartitionKey
from protocol.messages import make

if TYPE_CHECKING:
    from broker.app import Broker

log = logging.getLogger("shoal.share")

MAX_MEMBER_ID_LENGTH = 36
RENEW = 4


@dataclass(slots=True)
class AckResult:
    error: ErrorCode
    message: str | None = None


_ACK_NOT_AUTHORIZED = AckResult(ErrorCode.topic_authorization_failed,
                                "not authorized to READ this topic; acknowledgements not applied")


def request_problem(group_id: str | None, member_id: str | None) -> str | None:
    """Why a share request's ids are invalid (INVALID_REQUEST), or None."""
    if not group_id:
        return "GroupId must be set"
    if not member_id or len(member_id) > MAX_MEMBER_ID_LENGTH:
        return f"MemberId must be 1-{MAX_MEMBER_ID_LENGTH} characters"
    return None


def top_level(response_type: type, lock_ms: int) -> Any:
    """A builder of ShareFetch/ShareAcknowledge responses: (error, message, responses) -> response."""

    def build(error: ErrorCode, message: str | None = None, responses: tuple[Any, ...] = (),
              node_endpoints: tuple[Any, ...] = ()) -> Any:
        return make(response_type, throttle_time=timedelta(0), error_code=error,
                    error_message=message, acquisition_lock_timeout=timedelta(milliseconds=lock_ms),
                    responses=responses, node_endpoints=node_endpoints)

    return build


def batch_problem(batches: Sequence[Any], version: int, is_renew: bool) -> str | None:
    """Per-partition acknowledgement checks done before the share-partition sees them."""
    previous_last = -1
    for b in batches:
        if b.first_offset > b.last_offset:
            return f"batch {b.first_offset}-{b.last_offset}: first offset after last offset"
        if b.first_offset < previous_last:
            return "acknowledgement batches are not in ascending order"
        previous_last = b.last_offset
        types = b.acknowledge_types
        if not types:
            return f"batch {b.first_offset}-{b.last_offset} has no acknowledge types"
        if len(types) > 1 and len(types) != b.last_offset - b.first_offset + 1:
            return f"batch {b.first_offset}-{b.last_offset} has {len(types)} types"
        top = 4 if version >= 2 else 3
        for t in types:
            if not 0 <= t <= top:
                return f"acknowledge type {t} is not valid in version {version}"
            if t == RENEW and not is_renew:
                return "RENEW acknowledgements need IsRenewAck"
    return None


class ShareService:
    def __init__(self, broker: Broker, persister: Persister) -> None:
        self.broker = broker
        self.partitions = SharePartitionManager(broker, persister)
        try:
            max_sessions = int(broker.config.get("group.share.max.share.sessions"))
        except KeyError:
            max_sessions = 2000  # Kafka's default
        self.sessions = ShareSessionCache(max_sessions)
        broker.add_close_listener(self._on_connection_closed)
        broker.share_groups.add_member_listener(self._on_member_removed)

    def open_session(self, group_id: str, member_id: str, connection_id: int,
                     partitions: list[tuple[uuid.UUID, int]]) -> ShareSession | None:
        """ShareFetch epoch 0: open (or replace) a share session; None when the cache is full.

        When it is full, a member of the group takes the place of a session whose member is no
        longer in its group (left, fenced, or never joined), as Kafka evicts sessions that are
        no longer useful. A requester that is not a member evicts nobody, so a client inventing
        member ids cannot push out the sessions of real consumers.
        """
        session = self.sessions.open(group_id, member_id, connection_id, partitions)
        if session is not None:
            return session
        groups = self.broker.share_groups
        if not groups.is_member(group_id, member_id):
            return None
        gone = self.sessions.departed(groups.is_member)
        if gone is None:
            return None
        self._evict(gone, f"to make room for member {member_id} of group {group_id} "
                          "(group.share.max.share.sessions is reached)")
        return self.sessions.open(group_id, member_id, connection_id, partitions)

    def _on_member_removed(self, group_id: str, member_id: str) -> None:
        """A member left or was fenced: its share session here goes too. Its records are not
        released here: a leave already released them, and after a session timeout they wait for
        their acquisition locks, as in Kafka."""
        s = self.sessions.close(group_id, member_id)
        if s is not None:
            self.broker.metrics.share_session_evictions.value += 1
            log.info("share session of member %s in group %s closed: the member left the group "
                     "or was fenced", member_id, group_id,
                     extra={"event": "share_session_evicted", "group": group_id,
                            "member": member_id})
            self.broker.logs.watch.notify(("share-session-freed",))

    def _evict(self, s: ShareSession, why: str) -> None:
        self.sessions.close(s.group_id, s.member_id)
        self.broker.metrics.share_session_evictions.value += 1
        log.info("evicted the share session of member %s in group %s, which is no longer a "
                 "member, %s; releasing its records", s.member_id, s.group_id, why,
                 extra={"event": "share_session_evicted", "group": s.group_id,
                        "member": s.member_id})
        self.release_session(s)

    async def acknowledge(self, group_id: str, member_id: str, topic_id: uuid.UUID,
                          partition: int, batches: Sequence[Any], version: int,
                          is_renew: bool) -> AckResult:
        problem = batch_problem(batches, version, is_renew)
        if problem:
            return AckResult(ErrorCode.invalid_request, problem)
        topic = self.broker.topics.by_id(topic_id)
        if topic is None:
            return AckResult(ErrorCode.unknown_topic_id)
        if not 0 <= partition < topic.partitions:
            return AckResult(ErrorCode.unknown_topic_or_partition)
        cluster = self.broker.cluster
        if cluster.clustered and not cluster.is_leader(topic.name, partition):
            return AckResult(ErrorCode.not_leader_or_follower,
                             f"this broker does not lead {topic.name}-{partition}")
        key = SharePartitionKey(group_id, topic_id, partition)
        plain = [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]
        error, message = await self.partitions.acknowledge(key, member_id, plain)
        return AckResult(error, message)

    async def acknowledge_all(self, group_id: str, member_id: str, topics: Sequence[Any],
                              version: int, is_renew: bool,
                              refused: Container[uuid.UUID] = ()
                              ) -> dict[tuple[uuid.UUID, int], AckResult]:
        """Apply every partition's acknowledgements of a request concurrently; those of topics
        in ``refused`` (the principal may not READ them) are answered TOPIC_AUTHORIZATION_FAILED
        and not applied."""
        jobs: dict[tuple[uuid.UUID, int], Any] = {}
        denied: dict[tuple[uuid.UUID, int], AckResult] = {}
        for t in topics:
            if refused and t.topic_id in refused:
                for p in t.partitions:
                    if p.acknowledgement_batches:
                        denied[(t.topic_id, p.partition_index)] = _ACK_NOT_AUTHORIZED
                continue
            for p in t.partitions:
                if p.acknowledgement_batches:
                    jobs[(t.topic_id, p.partition_index)] = self.acknowledge(
                        group_id, member_id, t.topic_id, p.partition_index,
                        p.acknowledgement_batches, version, is_renew)
        if not jobs:
            return denied
        if len(jobs) == 1:  # the common case: no task and no gathering future for one partition
            ((tp, job),) = jobs.items()
            result = await job
            return {tp: result, **denied} if denied else {tp: result}
        results = await asyncio.gather(*jobs.values())
        return {**dict(zip(jobs.keys(), results)), **denied}

    def release_session(self, session: ShareSession) -> None:
        self.partitions.release_member(session.group_id, session.member_id,
                                       list(session.partitions))

    def release_member_in_group(self, group_id: str, member_id: str) -> None:
        """Release a departed member's records in every share-partition of its group."""
        keys = [(k.topic_id, k.partition) for k in self.partitions.partitions()
                if k.group_id == group_id]
        self.partitions.release_member(group_id, member_id, keys)

    def _on_connection_closed(self, connection_id: int) -> None:
        for s in self.sessions.close_connection(connection_id):
            self.broker.metrics.share_session_evictions.value += 1
            log.info("share session of member %s in group %s ended with its connection; "
                     "releasing its records", s.member_id, s.group_id,
                     extra={"event": "share_session_evicted", "group": s.group_id,
                            "member": s.member_id})
            self.release_session(s)

    async def stop(self) -> None:
        await self.partitions.stop()
