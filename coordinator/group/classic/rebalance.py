"""The classic rebalance protocol: JoinGroup, SyncGroup and member removal (Kafka's
``ClassicGroup`` and the classic paths of ``GroupMetadataManager``; the states and the deferred
answers are described in ``group.py``).
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group.classic import records as cr
from coordinator.group.classic.group import (
    JOIN_TIMER,
    MEMBER_ID_PREFIX_CHARS,
    PENDING,
    SESSION_TIMER,
    SYNC_TIMER,
    UNKNOWN_MEMBER,
    ClassicGroup,
    ClassicSettings,
    ClassicState,
    Effects,
    JoinRequest,
    JoinResponse,
    Member,
    SyncRequest,
    SyncResponse,
)
from coordinator.group.classic.groups_base import ClassicGroupsBase
from coordinator.group.record import Record


def _too_long_join(req: JoinRequest) -> ErrorCode | None:
    """Strings of a JoinGroup that no GroupMetadata record could hold (int16 lengths; JoinGroup
    v6+ can carry longer ones). Kafka takes them and then fails the record's write (a loop of
    MEMBER_ID_REQUIRED / UNKNOWN_MEMBER_ID, or UNKNOWN_SERVER_ERROR at SyncGroup); Shoal refuses
    them up front: INVALID_GROUP_ID for the group id, INVALID_REQUEST for the rest."""
    if not cr.fits(req.group_id):
        return ErrorCode.invalid_group_id
    if not (cr.fits(req.group_instance_id) and cr.fits(req.protocol_type)
            and all(cr.fits(name) for name, _ in req.protocols)):
        return ErrorCode.invalid_request
    return None


class ClassicRebalance(ClassicGroupsBase):
    """Joins, syncs and removals of classic groups (see the module doc)."""

    def join(self, req: JoinRequest, waiter: int, now_ms: int, fx: Effects) -> Any:
        s = self._settings(req.group_id)
        if not req.group_id:
            return JoinResponse(ErrorCode.invalid_group_id, member_id=req.member_id)
        too_long = _too_long_join(req)
        if too_long is not None:
            return JoinResponse(too_long, member_id=req.member_id)
        if not s.min_session_timeout_ms <= req.session_timeout_ms <= s.max_session_timeout_ms:
            return JoinResponse(ErrorCode.invalid_session_timeout, member_id=req.member_id)
        g = self.groups.get(req.group_id)
        if g is None:
            if req.member_id != UNKNOWN_MEMBER:
                return JoinResponse(ErrorCode.unknown_member_id, member_id=req.member_id)
            g = ClassicGroup(req.group_id, state_timestamp=now_ms)
            self.groups[req.group_id] = g
        if g.state is ClassicState.DEAD:
            return JoinResponse(ErrorCode.coordinator_not_available, member_id=req.member_id)
        if not g.supports(req.protocol_type, (n for n, _ in req.protocols)):
            self._forget_if_unused(g)
            return JoinResponse(ErrorCode.inconsistent_group_protocol, member_id=req.member_id)
        if req.member_id == UNKNOWN_MEMBER:
            res = self._join_unknown(g, req, s, waiter, now_ms, fx)
        else:
            res = self._join_known(g, req, s, waiter, now_ms, fx)
        if res is not PENDING:
            self._forget_if_unused(g)
        return res

    def _join_unknown(self, g: ClassicGroup, req: JoinRequest, s: ClassicSettings, waiter: int,
                      now_ms: int, fx: Effects) -> Any:
        # Kafka's member id form, the prefix cut so the id fits the GroupMetadata record.
        prefix = req.client_id if req.group_instance_id is None else req.group_instance_id
        new_id = f"{prefix[:MEMBER_ID_PREFIX_CHARS]}-{uuid.uuid4()}"
        old = g.static_member(req.group_instance_id)
        if old is not None:
            return self._replace_static(g, old, new_id, req, waiter, now_ms, fx)
        if len(g.members) + len(g.pending) >= s.max_size:
            return JoinResponse(ErrorCode.group_max_size_reached, member_id=UNKNOWN_MEMBER)
        if req.require_known_member_id and req.group_instance_id is None:
            g.pending.add(new_id)
            self._schedule((SESSION_TIMER, g.group_id, new_id), now_ms + req.session_timeout_ms)
            return JoinResponse(ErrorCode.member_id_required, member_id=new_id)
        self._add_member(g, new_id, req, waiter, now_ms, fx)
        return PENDING

    def _join_known(self, g: ClassicGroup, req: JoinRequest, s: ClassicSettings, waiter: int,
                    now_ms: int, fx: Effects) -> Any:
        mid = req.member_id
        if mid in g.pending:
            if len(g.members) >= s.max_size:
                g.pending.discard(mid)
                return JoinResponse(ErrorCode.group_max_size_reached, member_id=mid)
            g.pending.discard(mid)
            self._add_member(g, mid, req, waiter, now_ms, fx)
            return PENDING
        m = g.members.get(mid)
        if req.group_instance_id is not None:
            static = g.static_member(req.group_instance_id)
            if static is not None and static.member_id != mid:
                return JoinResponse(ErrorCode.fenced_instance_id, member_id=mid)
        if m is None:
            return JoinResponse(ErrorCode.unknown_member_id, member_id=mid)
        same = m.protocols == req.protocols
        if g.state is ClassicState.PREPARING:
            self._update_member(m, req, waiter, fx)
            self._try_complete_join(g, now_ms, fx)
            return PENDING
        if g.state is ClassicState.COMPLETING and same:
            return self._current_join(g, m)
        if g.state is ClassicState.STABLE and same and mid != g.leader:
            return self._current_join(g, m)
        self._update_member(m, req, waiter, fx)
        self._prepare_rebalance(g, now_ms, fx)
        return PENDING

    def _current_join(self, g: ClassicGroup, m: Member) -> JoinResponse:
        return JoinResponse(
            ErrorCode.none, g.generation, g.protocol_type, g.protocol, g.leader or "",
            m.member_id, self._join_members(g) if m.member_id == g.leader else ())

    def _replace_static(self, g: ClassicGroup, old: Member, new_id: str, req: JoinRequest,
                        waiter: int, now_ms: int, fx: Effects) -> Any:
        """A static member rejoined with an unknown id: the new id replaces the old one."""
        fenced = JoinResponse(ErrorCode.fenced_instance_id, member_id=old.member_id)
        if old.join_waiter is not None:
            fx.deliveries.append((old.join_waiter, fenced))
        if old.sync_waiter is not None:
            fx.deliveries.append((old.sync_waiter, SyncResponse(ErrorCode.fenced_instance_id)))
        old.join_waiter = old.sync_waiter = None
        was_leader = g.leader == old.member_id
        old_leader = old.member_id
        del g.members[old.member_id]
        self._cancel((SESSION_TIMER, g.group_id, old.member_id))
        old.member_id = new_id
        g.members[new_id] = old
        if was_leader:
            g.leader = new_id
        previous = old.protocols
        old.protocols = req.protocols
        # As Kafka: a Stable group keeps its generation if the protocol it would select next
        # is the one in use (the member's metadata may differ, e.g. owned partitions).
        same = g.supports(req.protocol_type, (n for n, _ in req.protocols)) and \
            g.select_protocol() == g.protocol
        old.protocols = previous
        record = None
        if g.state is ClassicState.STABLE and same:
            old.protocols = req.protocols
            record = self._metadata_record(g, now_ms)
            if not self._fits(g, record):
                record = None  # too large to keep in place: a rebalance (and its SyncGroup) says so
        if record is not None:
            old.session_timeout_ms = req.session_timeout_ms
            old.rebalance_timeout_ms = req.rebalance_timeout_ms
            self._schedule((SESSION_TIMER, g.group_id, new_id), now_ms + req.session_timeout_ms)
            fx.records.append(record)
            if was_leader and req.skip_assignment_supported:
                # KIP-814: the replaced leader learns it leads (members included, to keep its
                # view of the group) but must not compute a new assignment.
                return JoinResponse(ErrorCode.none, g.generation, g.protocol_type, g.protocol,
                                    new_id, new_id, self._join_members(g), skip_assignment=True)
            # Before v9 a replaced leader is told the old id leads, so it acts as a follower
            # and syncs the assignment it already has (Kafka does the same).
            return JoinResponse(ErrorCode.none, g.generation, g.protocol_type, g.protocol,
                                old_leader if was_leader else g.leader or "", new_id)
        self._update_member(old, req, waiter, fx)
        if g.state is ClassicState.PREPARING:
            self._try_complete_join(g, now_ms, fx)
        else:
            self._prepare_rebalance(g, now_ms, fx)
        return PENDING

    def _add_member(self, g: ClassicGroup, mid: str, req: JoinRequest, waiter: int, now_ms: int,
                    fx: Effects) -> None:
        m = Member(mid, req.group_instance_id, req.client_id, req.client_host,
                   req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type,
                   req.protocols, join_waiter=waiter)
        if not g.members:
            g.protocol_type = req.protocol_type
        g.members[mid] = m
        if g.leader is None or g.leader not in g.members:
            g.leader = mid
        self._schedule((SESSION_TIMER, g.group_id, mid), now_ms + req.session_timeout_ms)
        if g.state is ClassicState.PREPARING:
            if g.initial_delay:
                # As Kafka's initial delayed join: each new member extends the wait by the
                # delay, never past the rebalance timeout from the rebalance's start.
                s = self._settings(g.group_id)
                rebalance = max(m.rebalance_timeout_ms for m in g.members.values())
                self._schedule((JOIN_TIMER, g.group_id), min(
                    now_ms + s.initial_rebalance_delay_ms, g.state_timestamp + rebalance))
            self._try_complete_join(g, now_ms, fx)
        else:
            self._prepare_rebalance(g, now_ms, fx)

    def _update_member(self, m: Member, req: JoinRequest, waiter: int, fx: Effects) -> None:
        if m.join_waiter is not None and m.join_waiter != waiter:
            fx.deliveries.append((m.join_waiter, JoinResponse(ErrorCode.unknown_member_id,
                                                              member_id=m.member_id)))
        m.protocols = req.protocols
        m.session_timeout_ms = req.session_timeout_ms
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.client_id = req.client_id
        m.client_host = req.client_host
        m.join_waiter = waiter

    def _prepare_rebalance(self, g: ClassicGroup, now_ms: int, fx: Effects) -> None:
        if g.state is ClassicState.COMPLETING:
            # Members waiting in SyncGroup must rejoin.
            for m in g.members.values():
                if m.sync_waiter is not None:
                    fx.deliveries.append((m.sync_waiter,
                                          SyncResponse(ErrorCode.rebalance_in_progress)))
                    m.sync_waiter = None
            self._cancel((SYNC_TIMER, g.group_id))
        was_empty = g.state is ClassicState.EMPTY
        g.state = ClassicState.PREPARING
        g.state_timestamp = now_ms
        rebalance = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        delay = self._settings(g.group_id).initial_rebalance_delay_ms
        if was_empty and delay > 0:
            g.initial_delay = True
            self._schedule((JOIN_TIMER, g.group_id), now_ms + min(delay, rebalance))
        else:
            g.initial_delay = False
            self._schedule((JOIN_TIMER, g.group_id), now_ms + rebalance)
            self._try_complete_join(g, now_ms, fx)

    def _try_complete_join(self, g: ClassicGroup, now_ms: int, fx: Effects) -> None:
        if g.state is not ClassicState.PREPARING or g.initial_delay:
            return
        if g.pending or any(m.join_waiter is None for m in g.members.values()):
            return
        self._complete_join(g, now_ms, fx)

    def _complete_join(self, g: ClassicGroup, now_ms: int, fx: Effects) -> None:
        self._cancel((JOIN_TIMER, g.group_id))
        for mid in [mid for mid, m in g.members.items() if m.join_waiter is None]:
            self._remove(g, mid)
        g.pending.clear()
        g.initial_delay = False
        g.generation += 1
        g.state_timestamp = now_ms
        if not g.members:
            g.state = ClassicState.EMPTY
            g.protocol = None
            g.leader = None
            g.compute_subscribed()
            fx.records.append(self._metadata_record(g, now_ms))
            self.offsets.arm_retention(g.group_id, now_ms)
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.protocol = g.select_protocol()
        g.compute_subscribed()
        g.state = ClassicState.COMPLETING
        members = self._join_members(g)
        for m in g.members.values():
            m.assignment = b""
            assert m.join_waiter is not None
            fx.deliveries.append((m.join_waiter, JoinResponse(
                ErrorCode.none, g.generation, g.protocol_type, g.protocol, g.leader or "",
                m.member_id, members if m.member_id == g.leader else ())))
            m.join_waiter = None
            self._schedule((SESSION_TIMER, g.group_id, m.member_id),
                           now_ms + m.session_timeout_ms)
        rebalance = max(m.rebalance_timeout_ms for m in g.members.values())
        self._schedule((SYNC_TIMER, g.group_id), now_ms + rebalance)

    def sync(self, req: SyncRequest, waiter: int, now_ms: int, fx: Effects) -> Any:
        g = self.groups.get(req.group_id)
        if g is None or g.state in (ClassicState.EMPTY, ClassicState.DEAD):
            return SyncResponse(ErrorCode.unknown_member_id)
        error = self._validate_member(g, req.member_id, req.group_instance_id)
        if error is not None:
            return SyncResponse(error)
        if req.generation_id != g.generation:
            return SyncResponse(ErrorCode.illegal_generation)
        if (req.protocol_type is not None and req.protocol_type != g.protocol_type) or \
                (req.protocol_name is not None and req.protocol_name != g.protocol):
            return SyncResponse(ErrorCode.inconsistent_group_protocol)
        m = g.members[req.member_id]
        self._schedule((SESSION_TIMER, g.group_id, m.member_id), now_ms + m.session_timeout_ms)
        if g.state is ClassicState.PREPARING:
            return SyncResponse(ErrorCode.rebalance_in_progress)
        if g.state is ClassicState.STABLE:
            return SyncResponse(ErrorCode.none, g.protocol_type, g.protocol, m.assignment)
        if req.member_id != g.leader:
            if m.sync_waiter is not None:
                fx.deliveries.append((m.sync_waiter, SyncResponse(ErrorCode.unknown_member_id)))
            m.sync_waiter = waiter
            return PENDING
        given = dict(req.assignments)
        for member in g.members.values():
            member.assignment = given.get(member.member_id, b"")
        record = self._metadata_record(g, now_ms)
        if not self._fits(g, record):
            return self._assignment_too_large(g, m, record, now_ms, fx)
        g.state = ClassicState.STABLE
        g.state_timestamp = now_ms
        self._cancel((SYNC_TIMER, g.group_id))
        fx.records.append(record)
        for member in g.members.values():
            if member.sync_waiter is not None and member.member_id != m.member_id:
                fx.deliveries.append((member.sync_waiter, SyncResponse(
                    ErrorCode.none, g.protocol_type, g.protocol, member.assignment)))
            member.sync_waiter = None
        return SyncResponse(ErrorCode.none, g.protocol_type, g.protocol, m.assignment)

    def _assignment_too_large(self, g: ClassicGroup, leader: Member, record: Record,
                              now_ms: int, fx: Effects) -> SyncResponse:
        """The generation's GroupMetadata record would pass message.max.bytes. As Kafka (whose
        append fails with RECORD_LIST_TOO_LARGE, answered as UNKNOWN_SERVER_ERROR): every member
        waiting in SyncGroup gets the error, the assignment is dropped and the group
        rebalances."""
        size = len(cr.encode_value(record.value) or b"")
        limit = self._settings(g.group_id).max_record_bytes
        detail = (f"group {g.group_id[:200]} generation {g.generation}: the members' metadata and "
                  f"assignments make a {size}-byte GroupMetadata record, over message.max.bytes "
                  f"({limit}); subscribe to fewer topics, send smaller assignments or raise "
                  "message.max.bytes")
        error = SyncResponse(ErrorCode.unknown_server_error, detail=detail)
        for member in g.members.values():
            member.assignment = b""
            if member.sync_waiter is not None and member is not leader:
                fx.deliveries.append((member.sync_waiter, error))
            member.sync_waiter = None
        self._prepare_rebalance(g, now_ms, fx)
        return error

    def _drop_member(self, g: ClassicGroup, mid: str, fx: Effects) -> None:
        m = g.members[mid]
        if m.join_waiter is not None:
            fx.deliveries.append((m.join_waiter, JoinResponse(ErrorCode.unknown_member_id,
                                                              member_id=mid)))
        if m.sync_waiter is not None:
            fx.deliveries.append((m.sync_waiter, SyncResponse(ErrorCode.unknown_member_id)))
        self._remove(g, mid)

    def _after_removal(self, g: ClassicGroup, now_ms: int, fx: Effects) -> None:
        if g.state in (ClassicState.STABLE, ClassicState.COMPLETING):
            self._prepare_rebalance(g, now_ms, fx)
        elif g.state is ClassicState.PREPARING:
            if not g.members and not g.pending:
                self._complete_join(g, now_ms, fx)
            else:
                self._try_complete_join(g, now_ms, fx)
