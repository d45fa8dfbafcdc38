"""Classic consumer groups: JoinGroup/SyncGroup/Heartbeat/LeaveGroup membership.

Concept (after Kafka's ``ClassicGroup`` and the classic paths of ``GroupMetadataManager``): a
sans-IO state machine living inside ``GroupCoordinatorShard``, driven with an injected
``now_ms``; the broker only relays the client assignors' metadata and assignments. Committed
offsets are another concept (``offsets.py``, shared with consumer-protocol groups): this module
validates who may commit (a member of the current generation, or a simple commit to an Empty
group, as Kafka's ``ClassicGroup.validateOffsetCommit``) and whether OffsetDelete/DeleteGroups may
touch a group, and hands the records to ``self.offsets``.

Hard state is the fold of records (STYLE.md 1.3): ``GroupMetadata`` (generation, protocol, leader,
members with subscription and assignment bytes; written when a generation's assignment is synced
and when a rebalance ends with no members), replayed into the partition's ``DurableStore``
(``offsets.py``; it holds the OffsetCommit records too), which keeps an undo log so
``revert``/committed reads work as for share groups.

Soft state (as in Kafka): members taking part in a rebalance, their pending JoinGroup/SyncGroup
answers, session and rebalance deadlines. Ops change it directly (Kafka does the same; a failed
append answers the op with an error and the members rejoin). After a load, each group is rebuilt
from its GroupMetadata value (Stable with its members, or Empty) and members get a fresh session.

Deferred answers: JoinGroup waits until every member rejoined (or the rebalance timeout) and a
follower's SyncGroup waits for the leader's. Such an op answers ``PENDING`` and the answer is later
handed to ``deliver(waiter, response)`` (injected) with the ``waiter`` id the caller passed in.
Answers released by an op that writes records wait for those records to commit (``commit``).

Bounds as Kafka's: a GroupMetadata record must fit ``message.max.bytes`` (else SyncGroup answers
UNKNOWN_SERVER_ERROR and the group rebalances); sizes of JoinGroup itself are bounded only by the
request size. A ``consumer`` group's subscribed topics are read from its members' metadata at
each generation (``consumer_protocol.py``), for OffsetDelete. Groups that hold nothing (a refused
join, a MEMBER_ID_REQUIRED id never used) are forgotten at once.

States: Empty -> PreparingRebalance (a join) -> CompletingRebalance (all joined: generation + 1,
leader chosen, join answers sent) -> Stable (leader's SyncGroup: assignments written) -> back to
PreparingRebalance on a new member, a leave, an expiry or a leader/protocol change. Dead after
DeleteGroups.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group.classic import records as cr
from coordinator.group.consumer.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    group_subscription,
)
from coordinator.group.offsets import (
    RETENTION_TIMER,
    CommittedOffsets,
    DurableStore,
    OffsetCommitPartition,
    OffsetCommitResponse,
    TimerCancel,
    TimerSchedule,
)
from coordinator.group.share.records import Record
from coordinator.group.txn_offsets import PendingOffsets

PENDING: Any = object()  # an op's response that is delivered later through ``deliver``
UNKNOWN_MEMBER = ""
GROUP_TYPE = "classic"
JOIN_TIMER = "c-join"
SYNC_TIMER = "c-sync"
SESSION_TIMER = "c-session"


class ClassicState(Enum):
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicSettings:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 0x7FFFFFFF
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # Largest GroupMetadata record (message.max.bytes, as Kafka's coordinator runtime bounds a
    # batch by __consumer_offsets' max message size): the members' metadata and assignments.
    max_record_bytes: int = 1024 * 1024 + 12


# ------------------------------------------------------------------------ requests / responses


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool
    client_id: str = ""
    client_host: str = ""
    skip_assignment_supported: bool = False  # JoinGroup v9+ (KIP-814)


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error_code: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class SyncResponse:
    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""
    detail: str = ""  # why, for the broker's log (not on the wire)


@dataclass(frozen=True, slots=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeaveResponse:
    error_code: ErrorCode
    members: tuple[tuple[LeaveMember, ErrorCode], ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ClassicDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...]


# ------------------------------------------------------------------------ soft state


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_waiter: int | None = None
    sync_waiter: int | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: ClassicState = ClassicState.EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int = 0
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED
    initial_delay: bool = False  # the first rebalance of an Empty group is being delayed
    state_timestamp: int = 0
    # Topics the members subscribe to, as of the last generation (Kafka's subscribedTopics);
    # None when unknown (not a "consumer" group, or metadata that does not parse).
    subscribed: frozenset[str] | None = None

    def subscribes_to(self, topic: str) -> bool:
        """Kafka's isSubscribedToTopic: unknown counts as subscribed for a consumer group."""
        if self.subscribed is None:
            return self.protocol_type == CONSUMER_PROTOCOL_TYPE
        return topic in self.subscribed

    def compute_subscribed(self) -> None:
        if not self.members and self.protocol_type == CONSUMER_PROTOCOL_TYPE:
            self.subscribed = frozenset()
        elif self.protocol is None:
            self.subscribed = None
        else:
            self.subscribed = group_subscription(
                self.protocol_type, [m.metadata(self.protocol) for m in self.members.values()])

    def static_member(self, instance_id: str | None) -> Member | None:
        if instance_id is None:
            return None
        for m in self.members.values():
            if m.group_instance_id == instance_id:
                return m
        return None

    def supports(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return self.protocol_type == protocol_type and bool(names & self.candidates())

    def candidates(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str | None:
        cands = self.candidates()
        votes: dict[str, int] = {}
        for m in self.members.values():
            for name, _ in m.protocols:
                if name in cands:
                    votes[name] = votes.get(name, 0) + 1
                    break
        if not votes:
            return None
        # Most votes wins; ties go to the first candidate in the leader's preference order.
        order = [n for n, _ in self.members[self.leader].protocols] if self.leader in \
            self.members else sorted(cands)
        return max(votes, key=lambda n: (votes[n], -order.index(n) if n in order else 0))


MEMBER_ID_PREFIX_CHARS = 1000


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


Deliver = Callable[[int, Any], None]


@dataclass(slots=True)
class Effects:
    """What one op produced: records to append and answers to other waiters (released after the
    records commit)."""

    records: list[Record] = field(default_factory=list)
    deliveries: list[tuple[int, Any]] = field(default_factory=list)


class ClassicGroups:
    """Classic groups of one coordinator partition, and the partition's committed offsets
    (``offsets``) they validate commits for (see the module docstring)."""

    def __init__(self, *, settings: Callable[[str], ClassicSettings], schedule: TimerSchedule,
                 cancel: TimerCancel, busy: Callable[[str], bool] = lambda _gid: False) -> None:
        """``busy(group_id)``: the id is a consumer-protocol group with members, whose offsets
        must not expire (the shard arms retention again once it is empty)."""
        self.groups: dict[str, ClassicGroup] = {}
        # The fold of the partition's classic records (GroupMetadata here, OffsetCommit in
        # ``offsets``), shared with the offsets of every group type.
        self.store = DurableStore()
        # Transactional offsets waiting for their transaction's marker (``txn_offsets.py``).
        self.pending = PendingOffsets()
        self.offsets = CommittedOffsets(self.store, settings=settings, schedule=schedule,
                                        cancel=cancel, expirable=self._expirable,
                                        forget=self._forget, pending=self.pending)
        self._settings = settings
        self._schedule = schedule
        self._cancel = cancel
        self._busy = busy

    # -------------------------------------------------------------- reads

    def group_ids(self) -> set[str]:
        """Every classic group id: live groups and ids holding committed or pending offsets."""
        return set(self.groups) | set(self.store.keys_per_group) | self.pending.groups()

    def has(self, group_id: str) -> bool:
        return group_id in self.groups or group_id in self.store.keys_per_group \
            or self.pending.has_group(group_id)

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, state, protocol type) of every classic group, committed offsets included."""
        out = []
        committed = self.store.committed_items()
        ids = set(self.groups) | {k.group_id for k in committed} | self.pending.groups()
        for gid in sorted(ids):
            g = self.groups.get(gid)
            if g is None:
                out.append((gid, ClassicState.EMPTY.value, ""))
            else:
                out.append((gid, g.state.value, g.protocol_type or ""))
        return out

    def describe(self, group_id: str) -> ClassicDescription | None:
        g = self.groups.get(group_id)
        if g is None:
            if self.has(group_id):
                return ClassicDescription(group_id, ClassicState.EMPTY.value, "", "", ())
            return None
        members = tuple(DescribedMember(m.member_id, m.group_instance_id, m.client_id,
                                        m.client_host, m.metadata(g.protocol), m.assignment)
                        for m in g.members.values())
        protocol = g.protocol or "" if g.state is not ClassicState.PREPARING else ""
        return ClassicDescription(group_id, g.state.value, g.protocol_type or "", protocol,
                                  members)

    # -------------------------------------------------------------- replay

    def replay(self, offset: int, key: cr.ClassicKey, value: cr.ClassicValue | None) -> None:
        self.store.replay(offset, key, value)
        if value is None and isinstance(key, cr.OffsetCommitKey):
            self.pending.tombstone(offset, key)  # as Kafka: pending ones of it go too

    def replay_transactional(self, offset: int, producer_id: int, producer_epoch: int,
                             key: cr.OffsetCommitKey, value: cr.OffsetCommitValue) -> None:
        self.pending.replay(offset, producer_id, producer_epoch, key, value)

    def replay_end_transaction(self, offset: int, producer_id: int, commit: bool) -> None:
        """The producer's marker: on COMMIT its pending offsets become committed, each unless a
        commit appended after it already holds the partition (Kafka keeps the most recent)."""
        txn = self.pending.end(offset, producer_id)
        if txn is None or not commit:
            return
        for key in sorted(txn.offsets, key=lambda k: (k.group_id, k.topic, k.partition)):
            p = txn.offsets[key]
            current = self.store.key_offsets.get(key)
            if current is None or p.record_offset > current:
                self.store.replay(offset, key, p.value, value_offset=p.record_offset)

    def on_loaded(self, now_ms: int) -> None:
        """Rebuild groups from their GroupMetadata values; arm sessions and retention."""
        self.store.journaling = True
        self.pending.journaling = True
        for key, value in self.store.values.items():
            if not isinstance(key, cr.GroupMetadataKey):
                continue
            assert isinstance(value, cr.GroupMetadataValue)
            g = ClassicGroup(key.group_id, protocol_type=value.protocol_type or None,
                             protocol=value.protocol, generation=value.generation,
                             leader=value.leader, state_timestamp=now_ms)
            for mm in value.members:
                g.members[mm.member_id] = Member(
                    mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                    mm.session_timeout, mm.rebalance_timeout, value.protocol_type,
                    ((value.protocol or "", mm.subscription),), mm.assignment)
                self._schedule((SESSION_TIMER, key.group_id, mm.member_id),
                               now_ms + mm.session_timeout)
            g.state = ClassicState.STABLE if g.members else ClassicState.EMPTY
            g.compute_subscribed()
            self.groups[key.group_id] = g
        for gid in sorted(self.group_ids()):
            self.offsets.arm_retention(gid, now_ms)

    def clear(self) -> None:
        self.groups.clear()
        self.store.clear()
        self.store.journaling = False
        self.pending.clear()
        self.pending.journaling = False

    # -------------------------------------------------------------- JoinGroup

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

    def _forget_if_unused(self, g: ClassicGroup) -> None:
        """Drop an Empty group that holds nothing (no member, no pending member, no record).

        A refused join, or a MEMBER_ID_REQUIRED id never used, would otherwise leave one such
        group per group id a client makes up, for as long as the broker runs. Kafka writes an
        Empty GroupMetadata for them and deletes it at its next offsets-retention check; Shoal
        never keeps them (they hold nothing a client could read back)."""
        if (g.state is ClassicState.EMPTY and not g.members and not g.pending
                and g.group_id not in self.store.keys_per_group):
            self.groups.pop(g.group_id, None)

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

    def _join_members(self, g: ClassicGroup) -> tuple[JoinMember, ...]:
        return tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(g.protocol))
                     for m in g.members.values())

    def _remove(self, g: ClassicGroup, mid: str) -> None:
        m = g.members.pop(mid, None)
        self._cancel((SESSION_TIMER, g.group_id, mid))
        if m is not None and g.leader == mid:
            g.leader = next(iter(g.members), None)

    # -------------------------------------------------------------- SyncGroup

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

    def _fits(self, g: ClassicGroup, record: Record) -> bool:
        """Whether a GroupMetadata record is within message.max.bytes."""
        return len(cr.encode_value(record.value) or b"") <= \
            self._settings(g.group_id).max_record_bytes  # type: ignore[arg-type]

    def _assignment_too_large(self, g: ClassicGroup, leader: Member, record: Record,
                              now_ms: int, fx: Effects) -> SyncResponse:
        """The generation's GroupMetadata record would pass message.max.bytes. As Kafka (whose
        append fails with RECORD_LIST_TOO_LARGE, answered as UNKNOWN_SERVER_ERROR): every member
        waiting in SyncGroup gets the error, the assignment is dropped and the group
        rebalances."""
        size = len(cr.encode_value(record.value) or b"")  # type: ignore[arg-type]
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

    # -------------------------------------------------------------- Heartbeat / LeaveGroup

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

    def _validate_member(self, g: ClassicGroup, member_id: str,
                         instance_id: str | None) -> ErrorCode | None:
        if instance_id is not None:
            static = g.static_member(instance_id)
            if static is not None and static.member_id != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in g.members:
            return ErrorCode.unknown_member_id
        return None

    # -------------------------------------------------------------- timers

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

    # -------------------------------------------------------------- offsets

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

    def delete_group(self, group_id: str, fx: Effects) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is not None and (g.members or g.state not in (ClassicState.EMPTY,)):
            return ErrorCode.non_empty_group
        if self.pending.has_group(group_id):
            return ErrorCode.non_empty_group  # an ongoing transaction holds offsets of it
        self.offsets.delete_all(group_id, fx.records)
        self.groups.pop(group_id, None)
        return ErrorCode.none

    def _expirable(self, group_id: str) -> bool:
        """Whether the id's offsets may expire: no group or an Empty one, and not a
        consumer-protocol group with members (``busy``)."""
        if self._busy(group_id):
            return False
        g = self.groups.get(group_id)
        return g is None or g.state is ClassicState.EMPTY

    def _forget(self, group_id: str) -> None:
        """The id's last offset expired: its (Empty) group goes with it."""
        self.groups.pop(group_id, None)

    def _metadata_record(self, g: ClassicGroup, now_ms: int) -> Record:
        value = cr.GroupMetadataValue(
            g.protocol_type or "", g.generation, g.protocol, g.leader, now_ms,
            tuple(cr.MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout_ms, m.session_timeout_ms,
                                    m.metadata(g.protocol), m.assignment)
                  for m in g.members.values()))
        return Record(cr.GroupMetadataKey(g.group_id), value)  # type: ignore[arg-type]

