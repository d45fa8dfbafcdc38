"""``ClassicGroups``: the classic groups of one coordinator partition (``group.py`` has the
concept). This module adds to the rebalance protocol (``rebalance.py``) the heartbeat, LeaveGroup,
the timers (join, sync, session) and the ops on committed offsets (who may commit, OffsetDelete,
DeleteGroups).
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from coordinator.group.classic import records as cr
from coordinator.group.classic.group import (
    JOIN_TIMER,
    SESSION_TIMER,
    SYNC_TIMER,
    UNKNOWN_MEMBER,
    ClassicGroup,
    ClassicState,
    Effects,
    JoinResponse,
    LeaveMember,
    LeaveResponse,
    SyncResponse,
)
from coordinator.group.classic.rebalance import ClassicRebalance
from coordinator.group.consumer.protocol import CONSUMER_PROTOCOL_TYPE
from coordinator.group.offsets import (
    RETENTION_TIMER,
    OffsetCommitPartition,
    OffsetCommitResponse,
)


class ClassicGroups(ClassicRebalance):
    """Classic groups of one coordinator partition, and the partition's committed offsets
    (``offsets``) they validate commits for (see ``group.py``)."""

    def heartbeat(self, group_id: str, member_id: str, generation: int,
                  instance_id: str | None, now_ms: int) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is None or g.state in (ClassicState.EMPTY, ClassicState.DEAD):
            return ErrorCode.unknown_member_id
        error = self._validate_member(g, member_id, instance_id)
        if error is not None:
            return error
        if generation != g.generation:
            return ErrorCode.illegal_generation
        m = g.members[member_id]
        self._schedule((SESSION_TIMER, group_id, member_id), now_ms + m.session_timeout_ms)
        if g.state is ClassicState.PREPARING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, members: Sequence[LeaveMember], now_ms: int,
              fx: Effects) -> LeaveResponse:
        g = self.groups.get(group_id)
        if g is None or g.state is ClassicState.DEAD:
            return LeaveResponse(ErrorCode.unknown_member_id,
                                 tuple((m, ErrorCode.unknown_member_id) for m in members))
        out: list[tuple[LeaveMember, ErrorCode]] = []
        removed = False
        for lm in members:
            mid = lm.member_id
            if lm.group_instance_id is not None:
                static = g.static_member(lm.group_instance_id)
                if static is None:
                    out.append((lm, ErrorCode.unknown_member_id))
                    continue
                if mid != UNKNOWN_MEMBER and mid != static.member_id:
                    out.append((lm, ErrorCode.fenced_instance_id))
                    continue
                mid = static.member_id
            if mid in g.pending:
                g.pending.discard(mid)
                self._cancel((SESSION_TIMER, group_id, mid))
                out.append((lm, ErrorCode.none))
                removed = True
                continue
            if mid not in g.members:
                out.append((lm, ErrorCode.unknown_member_id))
                continue
            self._drop_member(g, mid, fx)
            out.append((lm, ErrorCode.none))
            removed = True
        if removed:
            self._after_removal(g, now_ms, fx)
        return LeaveResponse(ErrorCode.none, tuple(out))

    def on_timer(self, key: tuple[str, ...], now_ms: int, fx: Effects) -> None:
        kind, gid = key[0], key[1]
        if kind == RETENTION_TIMER:
            self.offsets.expire_offsets(gid, now_ms, fx.records)
            return
        g = self.groups.get(gid)
        if g is None:
            return
        if kind == SESSION_TIMER:
            mid = key[2]
            member = g.members.get(mid)
            if member is not None and (member.join_waiter is not None
                                       or member.sync_waiter is not None):
                # A member waiting in JoinGroup/SyncGroup is alive (as Kafka keeps it).
                self._schedule(key, now_ms + member.session_timeout_ms)
                return
            if mid in g.pending:
                g.pending.discard(mid)
                self._try_complete_join(g, now_ms, fx)
                self._forget_if_unused(g)
            elif mid in g.members:
                self._drop_member(g, mid, fx)
                self._after_removal(g, now_ms, fx)
        elif kind == JOIN_TIMER and g.state is ClassicState.PREPARING:
            if g.initial_delay:
                g.initial_delay = False
            self._complete_join(g, now_ms, fx)
        elif kind == SYNC_TIMER and g.state is ClassicState.COMPLETING:
            # Members that did not sync in time are removed; the others rejoin.
            for mid in [mid for mid, m in g.members.items()
                        if m.sync_waiter is None and mid != g.leader]:
                self._drop_member(g, mid, fx)
            if g.leader in g.members:
                self._drop_member(g, g.leader, fx)
            self._prepare_rebalance(g, now_ms, fx)

    def commit_offsets(self, group_id: str, member_id: str, generation: int,
                       instance_id: str | None, parts: Sequence[OffsetCommitPartition],
                       now_ms: int, fx: Effects) -> OffsetCommitResponse:
        g = self.groups.get(group_id)
        error: ErrorCode | None = None
        if not cr.fits(group_id):
            error = ErrorCode.invalid_group_id  # no record could hold it (see _too_long_join)
        elif g is None:
            # Kafka: a commit with generation -1 to an unknown group makes a simple group;
            # otherwise GROUP_ID_NOT_FOUND (the handler answers ILLEGAL_GENERATION before v9).
            error = ErrorCode.group_id_not_found if generation >= 0 else None
        elif g.state is ClassicState.DEAD:
            error = ErrorCode.coordinator_not_available
        elif generation < 0 and g.state is ClassicState.EMPTY:
            error = None  # a simple (standalone or admin) commit
        elif generation < 0 and member_id == UNKNOWN_MEMBER and instance_id is None:
            error = ErrorCode.unknown_member_id  # a simple commit while members are in
        else:
            # As Kafka's ClassicGroup.validateOffsetCommit: the member and its generation
            # first (a fenced member learns it is fenced), then REBALANCE_IN_PROGRESS for a
            # member of the current generation while the leader's assignment is awaited.
            error = self._validate_member(g, member_id, instance_id)
            if error is None and generation != g.generation:
                error = ErrorCode.illegal_generation
            if error is None and g.state is ClassicState.COMPLETING:
                error = ErrorCode.rebalance_in_progress
            if error is None:
                m = g.members[member_id]
                self._schedule((SESSION_TIMER, group_id, member_id),
                               now_ms + m.session_timeout_ms)
        if error is not None:
            return OffsetCommitResponse(error, tuple((p.topic, p.partition, error)
                                                     for p in parts))
        return self.offsets.write_offsets(group_id, parts, now_ms, fx.records)

    def validate_txn_commit(self, group_id: str, member_id: str, generation: int,
                            instance_id: str | None) -> ErrorCode | None:
        """TxnOffsetCommit of a classic or simple group, as Kafka's
        ``ClassicGroup.validateOffsetCommit`` with ``isTransactional``: generation -1 to an
        unknown group makes a simple group, a generation to an unknown group is
        ILLEGAL_GENERATION; a Dead group COORDINATOR_NOT_AVAILABLE; generation -1 to an Empty
        group is allowed; a member id, instance id or generation must name the member
        (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) at the group's generation (ILLEGAL_GENERATION);
        without any of them (v0-v2 requests) the commit is allowed whatever the state. Unlike
        OffsetCommit, a rebalance in progress does not refuse it."""
        if not group_id or not cr.fits(group_id):
            return ErrorCode.invalid_group_id
        g = self.groups.get(group_id)
        if g is None:
            return None if generation < 0 else ErrorCode.illegal_generation
        if g.state is ClassicState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation < 0 and g.state is ClassicState.EMPTY:
            return None
        if generation >= 0 or member_id != UNKNOWN_MEMBER or instance_id is not None:
            error = self._validate_member(g, member_id, instance_id)
            if error is not None:
                return error
            if generation != g.generation:
                return ErrorCode.illegal_generation
        return None

    def delete_offsets(self, group_id: str, parts: Sequence[tuple[str, int]],
                       fx: Effects) -> tuple[ErrorCode, tuple[tuple[str, int, ErrorCode], ...]]:
        """OffsetDelete, as Kafka's ``OffsetMetadataManager.deleteOffsets``: a group with members
        that is not of the ``consumer`` protocol type gets NON_EMPTY_GROUP; a ``consumer`` group
        refuses (GROUP_SUBSCRIBED_TO_TOPIC) the partitions of topics its members subscribe to as
        of the last generation (every topic when their metadata does not parse) and deletes the
        others; an Empty or simple group deletes everything asked."""
        if not self.has(group_id):
            return ErrorCode.group_id_not_found, ()
        g = self.groups.get(group_id)
        if g is not None and g.state in (ClassicState.PREPARING, ClassicState.COMPLETING,
                                         ClassicState.STABLE) \
                and g.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.non_empty_group, ()
        subscribed = g.subscribes_to if g is not None else (lambda _topic: False)
        return ErrorCode.none, self.offsets.delete_partitions(group_id, parts, subscribed,
                                                              fx.records)

    # -------------------------------------------------------------- migration (consumer/migration.py)

    def adopt(self, g: ClassicGroup, now_ms: int, fx: Effects) -> None:
        """A consumer group became the classic group ``g`` (Stable, with its members'
        assignments): write its GroupMetadata, give each member a fresh session and start a
        rebalance (its members learn it from REBALANCE_IN_PROGRESS and rejoin)."""
        gid = g.group_id
        self.groups[gid] = g
        self._cancel((SYNC_TIMER, gid))
        for m in g.members.values():
            self._schedule((SESSION_TIMER, gid, m.member_id), now_ms + m.session_timeout_ms)
        fx.records.append(self._metadata_record(g, now_ms))
        self._prepare_rebalance(g, now_ms, fx)

    def evict(self, group_id: str, fx: Effects) -> None:
        """The classic group became a consumer group: drop its soft state; members waiting in
        JoinGroup or SyncGroup are answered REBALANCE_IN_PROGRESS (they rejoin the consumer
        group), as Kafka's ``convertToConsumerGroup``."""
        g = self.groups.pop(group_id, None)
        if g is None:
            return
        for m in g.members.values():
            if m.join_waiter is not None:
                fx.deliveries.append((m.join_waiter, JoinResponse(
                    ErrorCode.rebalance_in_progress, member_id=m.member_id)))
            if m.sync_waiter is not None:
                fx.deliveries.append((m.sync_waiter,
                                      SyncResponse(ErrorCode.rebalance_in_progress)))
            m.join_waiter = m.sync_waiter = None
            self._cancel((SESSION_TIMER, group_id, m.member_id))
        for mid in g.pending:
            self._cancel((SESSION_TIMER, group_id, mid))
        self._cancel((JOIN_TIMER, group_id))
        self._cancel((SYNC_TIMER, group_id))

    def delete_group(self, group_id: str, fx: Effects) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is not None and (g.members or g.state not in (ClassicState.EMPTY,)):
            return ErrorCode.non_empty_group
        if self.pending.has_group(group_id):
            return ErrorCode.non_empty_group  # an ongoing transaction holds offsets of it
        self.offsets.delete_all(group_id, fx.records)
        self.groups.pop(group_id, None)
        return ErrorCode.none
