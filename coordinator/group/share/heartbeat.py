"""The ShareGroupHeartbeat operation and the membership steps it shares with other ops.

Concept (KIP-932; reference section 5): a share consumer heartbeats to its group coordinator with
its member id (client-chosen, kept for the consumer's life), its member epoch (0 joins/rejoins,
-1 leaves) and, when it changed, its subscription. The coordinator answers with the member's
epoch and, when needed, its assignment. Everything here is a pure function of (group, request,
topic metadata, now): it returns the records to append plus the response, and never mutates
(STYLE.md 1.3). ``Txn`` folds each emitted record into a scratch copy of the group through
``share_group.apply_record`` so later steps of the same op see earlier steps' effects exactly as
replay will.

Rules (reference section 5, Kafka ``GroupCoordinatorService``/``GroupMetadataManager``):
- INVALID_REQUEST: blank group id; member id blank or longer than 36 chars; epoch < -1; a
  non-null but blank rack id; epoch 0 without subscribed topics.
- GROUP_ID_NOT_FOUND: the group id belongs to a classic/consumer/streams group.
- Epoch 0: join (new member) or rejoin (known member id). A new member is refused with
  GROUP_MAX_SIZE_REACHED when the group already has ``max_size`` members.
- Epoch > 0: the member must exist (UNKNOWN_MEMBER_ID, also for an unknown group); the epoch must
  be its current epoch or its previous epoch (the bumped response may have been lost), else
  FENCED_MEMBER_EPOCH.
- Epoch -1: leave. The member is fenced: tombstones for its current assignment, target
  assignment and metadata, then a group epoch bump. Reply epoch -1.
- A changed subscription or subscribed-topic metadata hash bumps the group epoch; whenever the
  group epoch is ahead of the assignment epoch a new target assignment is computed (we do it at
  once: no ``share.assignment.interval.ms`` rate limit, as in Kafka 4.2). The member then moves to
  the target: member epoch = assignment epoch.
- The assignment is returned on epoch 0, when SubscribedTopicNames was sent, or when the member's
  partitions changed; otherwise it is None.

Deliberate difference: in the Kafka code we read, the member-epoch check also runs for epoch 0,
so an epoch-0 heartbeat from a still-known member id is fenced unless its previous epoch is 0
(the member must first expire). We accept it as a rejoin: a share member owns nothing
exclusively (no revocation), so letting a client that was answered FENCED_MEMBER_EPOCH rejoin at
once cannot create conflicting ownership, and it avoids waiting a whole session timeout.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.group.share import records as r
from coordinator.group.share.assignor import assign
from coordinator.group.share.group import (
    PartitionSet,
    ShareGroup,
    ShareGroupMember,
    apply_record,
)
from coordinator.group.topics_image import TopicsImage

LEAVE_GROUP_MEMBER_EPOCH = -1
JOIN_GROUP_MEMBER_EPOCH = 0
MAX_MEMBER_ID_LENGTH = 36  # share member ids are 1-36 chars (KafkaApis checks this on ShareFetch)


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """Per-group settings, read on every op so dynamic group configs apply live.

    Defaults are Kafka's broker defaults (reference section 2): share.session.timeout.ms 45000,
    share.heartbeat.interval.ms 5000, group.share.max.size 200.
    """

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """ShareGroupHeartbeat v1 request fields plus the client id/host from the request context."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None  # None = unchanged
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """ShareGroupHeartbeat v1 response fields (throttle time is the shell's business).

    ``assignment`` maps topic id -> sorted partitions; None means "not sent" (null on the wire),
    while ``{}`` is an empty assignment.
    """

    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[uuid.UUID, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class ShareStateInitialization:
    """A request to initialize share state (InitializeShareGroupState, StartOffset -1).

    ``state_epoch`` is the group epoch at the time, as Kafka sends it. After the persister
    answers, call ``GroupCoordinatorShard.mark_initialized`` (success) or
    ``mark_initialization_failed`` (failure) with the same partitions.
    """

    group_id: str
    state_epoch: int
    partitions: Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class ShareStateDeletion:
    """Share state of deleted topics to delete (DeleteShareGroupState), per topic id the
    partitions the group had Initializing or Initialized (empty when no longer known). After the
    persister answers, call ``GroupCoordinatorShard.mark_deleted`` with the topic ids done."""

    group_id: str
    partitions: Mapping[uuid.UUID, frozenset[int]]


def error_response(code: ErrorCode, message: str) -> HeartbeatResponse:
    return HeartbeatResponse(error_code=code, error_message=message)


# --------------------------------------------------------------------------- transaction


class Txn:
    """Scratch state of one group during one op: emitted records, folded as replay would."""

    __slots__ = ("group_id", "group", "records")

    def __init__(self, group_id: str, group: ShareGroup | None, records: list[r.Record]) -> None:
        self.group_id = group_id
        self.group = group
        self.records = records

    def emit(self, record: r.Record) -> None:
        self.records.append(record)
        self.group = apply_record(self.group, record)

    @property
    def current(self) -> ShareGroup:
        """The scratch group (an empty one if it does not exist yet)."""
        return self.group if self.group is not None else ShareGroup(self.group_id)


# --------------------------------------------------------------------------- shared steps


def validate(req: HeartbeatRequest) -> str | None:
    """The INVALID_REQUEST message for a malformed request, or None."""
    if not req.group_id or not req.group_id.strip():
        return "GroupId can't be empty."
    if not req.member_id or not req.member_id.strip():
        return "MemberId can't be empty."
    if len(req.member_id) > MAX_MEMBER_ID_LENGTH:
        return f"MemberId can't be longer than {MAX_MEMBER_ID_LENGTH} characters."
    if req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        return f"MemberEpoch is invalid: {req.member_epoch}."
    if req.rack_id is not None and not req.rack_id.strip():
        return "RackId can't be empty."
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH and not req.subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    return None


def partitions_needing_initialization(
    group: ShareGroup, topics: TopicsImage
) -> dict[uuid.UUID, frozenset[int]]:
    """Subscribed partitions that are neither initialized nor initializing."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for name in sorted(group.subscribed_topic_names()):
        info = topics.get(name)
        if info is None:
            continue
        done = group.initialized.get(info.topic_id)
        busy = group.initializing.get(info.topic_id)
        missing = frozenset(range(info.num_partitions))
        missing -= done.partitions if done else frozenset()
        missing -= busy.partitions if busy else frozenset()
        if missing:
            out[info.topic_id] = missing
    return out


def state_metadata_record(
    group_id: str,
    initializing: Mapping[uuid.UUID, PartitionSet],
    initialized: Mapping[uuid.UUID, PartitionSet],
    deleting: Mapping[uuid.UUID, str],
) -> r.Record:
    return r.new_state_partition_metadata_record(
        group_id,
        initializing={t: (ps.topic_name, ps.partitions) for t, ps in initializing.items()},
        initialized={t: (ps.topic_name, ps.partitions) for t, ps in initialized.items()},
        deleting=deleting,
    )


def mark_initializing(
    txn: Txn, partitions: Mapping[uuid.UUID, frozenset[int]], topics: TopicsImage
) -> ShareStateInitialization | None:
    """Step 1 of the two-phase initialisation: record the partitions as Initializing."""
    group = txn.current
    ids = topics.ids()
    initializing = dict(group.initializing)
    wanted: dict[uuid.UUID, frozenset[int]] = {}
    for tid, parts in partitions.items():
        info = ids.get(tid)
        if info is None:
            continue
        parts = frozenset(p for p in parts if 0 <= p < info.num_partitions)
        if parts:
            old = initializing.get(tid)
            merged = parts | (old.partitions if old else frozenset())
            initializing[tid] = PartitionSet(info.name, merged)
            wanted[tid] = parts
    if not wanted:
        return None
    if initializing != dict(group.initializing):
        txn.emit(
            state_metadata_record(txn.group_id, initializing, group.initialized, group.deleting)
        )
    return ShareStateInitialization(txn.group_id, txn.current.group_epoch, wanted)


def plan_initialization(txn: Txn, topics: TopicsImage) -> ShareStateInitialization | None:
    """Mark every subscribed partition that needs share state as Initializing."""
    needing = partitions_needing_initialization(txn.current, topics)
    return mark_initializing(txn, needing, topics) if needing else None


def prune_state_metadata(
    txn: Txn, topics: TopicsImage, *, deleted_topics: bool = True
) -> ShareStateDeletion | None:
    """Keep the state metadata in line with the topics that exist.

    Partition indexes beyond a topic's current count are dropped (Kafka never shrinks a topic,
    but a metadata image must not make us hand out partitions that do not exist). With
    ``deleted_topics``, topics that no longer exist (by id, so a re-created topic is new) move
    from Initializing/Initialized to Deleting (record 15, Kafka's DeletingTopics) and the
    returned ``ShareStateDeletion`` names their share state to delete; they leave Deleting once
    ``GroupCoordinatorShard.mark_deleted`` runs. A topic already Deleting is planned again (its
    partitions are then unknown: empty sets). The heartbeat path passes ``deleted_topics=False``
    and leaves deleted topics to the topic-change op, which owns their deletion.
    """
    group = txn.current
    ids = topics.ids()
    gone: dict[uuid.UUID, tuple[str, set[int]]] = {}

    def pruned(sets: Mapping[uuid.UUID, PartitionSet]) -> dict[uuid.UUID, PartitionSet]:
        out = {}
        for tid, ps in sets.items():
            info = ids.get(tid)
            if info is None:
                if deleted_topics:
                    gone.setdefault(tid, (ps.topic_name, set()))[1].update(ps.partitions)
                else:
                    out[tid] = ps
                continue
            parts = frozenset(p for p in ps.partitions if p < info.num_partitions)
            if parts:
                out[tid] = PartitionSet(ps.topic_name, parts)
        return out

    initializing, initialized = pruned(group.initializing), pruned(group.initialized)
    deleting = dict(group.deleting)
    for tid, (name, _parts) in gone.items():
        deleting[tid] = name
    if initializing != dict(group.initializing) or initialized != dict(group.initialized) \
            or deleting != dict(group.deleting):
        txn.emit(state_metadata_record(txn.group_id, initializing, initialized, deleting))
    if not deleted_topics:
        return None
    plan = {tid: frozenset(gone[tid][1]) if tid in gone else frozenset()
            for tid in deleting if tid not in ids}
    return ShareStateDeletion(txn.group_id, plan) if plan else None


def bump_group_epoch(txn: Txn, topics: TopicsImage | None, *, force: bool) -> None:
    """Bump the group epoch if forced or the subscribed-topic metadata hash changed.

    Without a topics image (timer path) the stored hash is kept; the next heartbeat recomputes it.
    """
    group = txn.current
    new_hash = (
        topics.metadata_hash(group.subscribed_topic_names())
        if topics is not None
        else group.metadata_hash
    )
    if force or new_hash != group.metadata_hash:
        txn.emit(r.new_share_group_metadata_record(txn.group_id, group.group_epoch + 1, new_hash))


def maybe_compute_target(txn: Txn, topics: TopicsImage, now_ms: int, *, gated: bool) -> None:
    """Install a new target assignment if the group epoch is ahead of the assignment epoch."""
    group = txn.current
    if group.group_epoch <= group.assignment_epoch:
        return
    members = {mid: m.subscribed_topic_names for mid, m in group.members.items()}
    new = assign(
        members,
        topics,
        previous=group.target_assignment,
        assignable=group.initialized_partitions() if gated else None,
    )
    for mid in sorted(set(group.target_assignment) - set(new)):
        txn.emit(r.new_target_assignment_member_tombstone(txn.group_id, mid))
    for mid in sorted(new):
        if mid not in group.target_assignment or dict(group.target_assignment[mid]) != new[mid]:
            txn.emit(r.new_target_assignment_member_record(txn.group_id, mid, new[mid]))
    txn.emit(r.new_target_assignment_metadata_record(txn.group_id, group.group_epoch, now_ms))


def reconcile_member(txn: Txn, member_id: str) -> bool:
    """Move the member to the target assignment; True if its partitions changed."""
    group = txn.current
    member = group.members[member_id]
    target = dict(group.target_assignment.get(member_id, {}))
    changed = dict(member.assigned_partitions) != target
    if member.member_epoch != group.assignment_epoch or changed:
        previous = (
            member.member_epoch
            if member.member_epoch != group.assignment_epoch
            else member.previous_member_epoch
        )
        txn.emit(
            r.new_current_assignment_record(
                txn.group_id,
                member_id,
                member_epoch=group.assignment_epoch,
                previous_member_epoch=previous,
                assigned_partitions=target,
            )
        )
    return changed


def fence_member(
    txn: Txn, member_id: str, topics: TopicsImage | None, now_ms: int, *, gated: bool
) -> None:
    """Remove a member (leave or session expiry) and bump the group epoch.

    Order as in Kafka's shareGroupFenceMember: current assignment, target assignment and member
    metadata tombstones, then the epoch bump. With a topics image the target is recomputed at
    once; without one the remaining members' next heartbeat does it.
    """
    txn.emit(r.new_current_assignment_tombstone(txn.group_id, member_id))
    if member_id in txn.current.target_assignment:
        txn.emit(r.new_target_assignment_member_tombstone(txn.group_id, member_id))
    txn.emit(r.new_member_tombstone(txn.group_id, member_id))
    bump_group_epoch(txn, topics, force=True)
    if topics is not None:
        maybe_compute_target(txn, topics, now_ms, gated=gated)


def assignment_response(assigned: Mapping[uuid.UUID, frozenset[int]]) -> dict[uuid.UUID, list[int]]:
    return {tid: sorted(parts) for tid, parts in sorted(assigned.items()) if parts}


# --------------------------------------------------------------------------- the op


@dataclass(frozen=True, slots=True)
class HeartbeatOutcome:
    records: tuple[r.Record, ...]
    response: HeartbeatResponse
    initialization: ShareStateInitialization | None = None


def share_group_heartbeat(
    group: ShareGroup | None,
    req: HeartbeatRequest,
    topics: TopicsImage,
    now_ms: int,
    settings: ShareGroupSettings,
    *,
    gated: bool,
    is_non_share_group: bool,
) -> HeartbeatOutcome:
    """Validate and apply one heartbeat against ``group`` (None if the id is unused).

    Pure: returns records and the response; the caller (the shard) re-arms the session timer
    for successful non-leave heartbeats and cancels it on leave.
    """
    error = check_request(group, req, settings, is_non_share_group=is_non_share_group)
    if error is not None:
        return HeartbeatOutcome((), error)
    txn = Txn(req.group_id, group, [])
    if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
        fence_member(txn, req.member_id, topics, now_ms, gated=gated)
        leave = HeartbeatResponse(member_id=req.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)
        return HeartbeatOutcome(tuple(txn.records), leave)

    existing = group.members.get(req.member_id) if group is not None else None
    subscription_changed = update_member(txn, existing, req)
    if gated:
        prune_state_metadata(txn, topics, deleted_topics=False)
    bump_group_epoch(txn, topics, force=subscription_changed)
    maybe_compute_target(txn, topics, now_ms, gated=gated)
    partitions_changed = reconcile_member(txn, req.member_id)
    initialization = plan_initialization(txn, topics) if gated else None

    member = txn.current.members[req.member_id]
    send_assignment = (
        req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        or req.subscribed_topic_names is not None
        or partitions_changed
    )
    response = HeartbeatResponse(
        member_id=req.member_id,
        member_epoch=member.member_epoch,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        assignment=assignment_response(member.assigned_partitions) if send_assignment else None,
    )
    return HeartbeatOutcome(tuple(txn.records), response, initialization)


def check_request(
    group: ShareGroup | None,
    req: HeartbeatRequest,
    settings: ShareGroupSettings,
    *,
    is_non_share_group: bool,
) -> HeartbeatResponse | None:
    """The error response for a heartbeat that must be refused, or None (see module rules)."""
    message = validate(req)
    if message is not None:
        return error_response(ErrorCode.invalid_request, message)
    if is_non_share_group:
        return error_response(
            ErrorCode.group_id_not_found, f"Group {req.group_id} is not a share group."
        )
    existing = group.members.get(req.member_id) if group is not None else None
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if existing is None and group is not None and len(group.members) >= settings.max_size:
            return error_response(
                ErrorCode.group_max_size_reached,
                f"The share group has reached its maximum capacity of {settings.max_size} members.",
            )
        return None
    if existing is None:  # also for an unknown group, as Kafka answers
        return error_response(
            ErrorCode.unknown_member_id,
            f"Member {req.member_id} is not a member of share group {req.group_id}.",
        )
    if req.member_epoch != LEAVE_GROUP_MEMBER_EPOCH and req.member_epoch not in (
        existing.member_epoch,
        existing.previous_member_epoch,
    ):
        return error_response(
            ErrorCode.fenced_member_epoch,
            f"The share group member has epoch {req.member_epoch} but the group coordinator "
            f"expects {existing.member_epoch}. The member must rejoin with epoch 0.",
        )
    return None


def update_member(txn: Txn, existing: ShareGroupMember | None, req: HeartbeatRequest) -> bool:
    """Write the member's metadata record if new or changed; True if its subscription changed
    (a new member counts as a subscription change)."""
    old = existing or ShareGroupMember(req.member_id)
    subscribed = (
        tuple(sorted(set(req.subscribed_topic_names)))
        if req.subscribed_topic_names is not None
        else old.subscribed_topic_names
    )
    rack_id = req.rack_id if req.rack_id is not None else old.rack_id
    if existing is None or (
        (old.rack_id, old.client_id, old.client_host, old.subscribed_topic_names)
        != (rack_id, req.client_id, req.client_host, subscribed)
    ):
        txn.emit(
            r.new_member_record(
                req.group_id,
                req.member_id,
                rack_id=rack_id,
                client_id=req.client_id,
                client_host=req.client_host,
                subscribed_topic_names=subscribed,
            )
        )
    return existing is None or old.subscribed_topic_names != subscribed
