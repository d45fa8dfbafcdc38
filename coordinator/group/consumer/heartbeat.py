"""The ConsumerGroupHeartbeat operation (KIP-848) and the membership steps other ops share.

Concept (Kafka ``GroupMetadataManager.consumerGroupHeartbeat``, our own code): a consumer
heartbeats with its member id (client-generated in v1), its member epoch (0 joins, -1 leaves, -2
leaves as a static member that will come back), and whatever changed since its last heartbeat:
subscription (topic names and/or a regex), server assignor, rebalance timeout, instance id, rack,
and the partitions it owns. Everything here is a pure function of (group, request, topics, now):
it returns records and a response and never mutates (STYLE.md 1.3). ``Txn`` folds each emitted
record into a scratch copy of the group through ``consumer_group.apply_record``.

Rules (as Kafka answers them):
- INVALID_REQUEST: blank group id; blank instance/rack id; epoch > 0 or -1 with an empty member
  id (v0 allows an empty id at epoch 0: the coordinator makes one); epoch 0 without a rebalance
  timeout, with owned partitions, or without a subscription (names or regex); epoch -2 without an
  instance id; epoch < -2.
- UNSUPPORTED_ASSIGNOR: a ServerAssignor not in ``group.consumer.assignors``.
- INVALID_REGULAR_EXPRESSION: a SubscribedTopicRegex RE2 cannot compile (``topic_regex.py``).
- GROUP_ID_NOT_FOUND: the id belongs to a share group or a classic group with members.
- UNKNOWN_MEMBER_ID: epoch != 0 and the member (or group) does not exist; a static member's
  instance id is unknown.
- FENCED_MEMBER_EPOCH: the epoch is ahead of the member's, or behind it and not (its previous
  epoch with owned partitions within its assignment: the bumped answer may have been lost).
- UNRELEASED_INSTANCE_ID: a static member joins with an instance id another live member holds
  (only one that left with epoch -2 may be replaced); FENCED_INSTANCE_ID: the instance id is held
  by another member id.
- GROUP_MAX_SIZE_REACHED: a new member when the group has ``max_size`` members.

Flow of an accepted heartbeat: update the member (metadata record if changed); resolve its regex
if new or resolved against an older topics image (record 16); bump the group epoch if a
subscription or the subscribed topics' metadata hash changed; compute a new target assignment
when the group epoch is ahead (the group's assignor: the one most members ask for, else the first
configured); reconcile the member (``consumer/reconcile.py``). The assignment is in the answer on
a join, on a full request, or when the member's assigned partitions changed.

Deliberate difference: Kafka fences an epoch-0 heartbeat from a member id it still knows (until
the member's session expires). We take it as a rejoin: a member that joins with epoch 0 owns
nothing (owned partitions must be empty), so its old partitions are released at once and it
rejoins without waiting a session timeout.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from coordinator.group.consumer import records as c
from coordinator.group.consumer.assignor import (
    ASSIGNORS,
    DEFAULT_ASSIGNORS,
    MemberSubscription,
)
from coordinator.group.consumer.group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    apply_record,
)
from coordinator.group.consumer.messages import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    MAX_ID_LENGTH,
    ConsumerGroupSettings,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    TopicFilter,
    error_response,
)
from coordinator.group.consumer.reconcile import Step, is_subset, reconcile
from coordinator.group.record import Record
from coordinator.group.topic_regex import (
    InvalidTopicRegex,
    compile_topic_regex,
    matching_topics,
)
from coordinator.group.topics_image import TopicsImage

__all__ = ["JOIN_GROUP_MEMBER_EPOCH", "LEAVE_GROUP_MEMBER_EPOCH", "MAX_ID_LENGTH",
           "ConsumerGroupSettings", "ConsumerHeartbeatRequest", "ConsumerHeartbeatResponse",
           "HeartbeatOutcome", "TopicFilter", "Txn", "consumer_group_heartbeat", "error_response",
           "fence_member", "heartbeat_interval", "partitions_of", "replace_static", "validate"]


def heartbeat_interval(group: ConsumerGroup, settings: ConsumerGroupSettings, now_ms: int) -> int:
    """The interval to answer a member of ``group`` with.

    The broker cannot push a new assignment: a member learns that it must revoke or may take
    partitions only from its next heartbeat answer. With Kafka's 5 s interval, a second member
    joining right after the first waits up to 5 s for partitions the first must give up. So while
    the group settles (a member not yet at the target, or less than one regular interval since
    the last target assignment, which covers members answered just before a change), members are
    told the shorter settling interval; once it is quiet they go back to the regular one.
    """
    regular = settings.heartbeat_interval_ms
    fast = settings.settling_heartbeat_interval_ms
    if fast <= 0 or fast >= regular:
        return regular
    if now_ms - group.assignment_timestamp_ms < regular:
        return fast
    if group.group_epoch > group.assignment_epoch or any(
            m.member_epoch != group.assignment_epoch or m.state != c.STATE_STABLE
            for m in group.members.values()):
        return fast
    return regular


def _all_topics(names: frozenset[str]) -> frozenset[str]:
    return names


class Txn:
    """Scratch state of one group during one op: emitted records, folded as replay would."""

    __slots__ = ("group_id", "group", "records")

    def __init__(self, group_id: str, group: ConsumerGroup | None, records: list[Record]) -> None:
        self.group_id = group_id
        self.group = group
        self.records = records

    def emit(self, record: Record) -> None:
        self.records.append(record)
        self.group = apply_record(self.group, record)

    @property
    def current(self) -> ConsumerGroup:
        return self.group if self.group is not None else ConsumerGroup(self.group_id)


# --------------------------------------------------------------------------- validation


def validate(req: ConsumerHeartbeatRequest, settings: ConsumerGroupSettings
             ) -> tuple[ErrorCode, str] | None:
    """The error for a malformed request, or None."""
    bad = ErrorCode.invalid_request
    if not req.group_id.strip():
        return bad, "GroupId can't be empty."
    if req.instance_id is not None and not req.instance_id.strip():
        return bad, "InstanceId can't be empty."
    if req.rack_id is not None and not req.rack_id.strip():
        return bad, "RackId can't be empty."
    if len(req.member_id) > MAX_ID_LENGTH or len(req.instance_id or "") > MAX_ID_LENGTH:
        return bad, f"MemberId and InstanceId can't be longer than {MAX_ID_LENGTH} characters."
    epoch = req.member_epoch
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not req.member_id.strip():
            return bad, "MemberId can't be empty."
    elif epoch == JOIN_GROUP_MEMBER_EPOCH:
        if req.version >= 1 and not req.member_id.strip():
            return bad, "MemberId can't be empty."
        if req.rebalance_timeout_ms == -1:
            return bad, "RebalanceTimeoutMs must be provided in first request."
        if req.owned is None or any(req.owned.values()):
            return bad, "TopicPartitions must be empty when (re-)joining."
        if not req.subscribed_topic_names and not req.subscribed_topic_regex:
            return bad, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not req.member_id.strip():
            return bad, "MemberId can't be empty."
        if req.instance_id is None:
            return bad, "InstanceId can't be null."
    else:
        return bad, f"MemberEpoch is invalid: {epoch}."
    if req.rebalance_timeout_ms < -1:
        return bad, "RebalanceTimeoutMs can't be negative."
    if req.server_assignor is not None and req.server_assignor not in settings.assignors:
        return (ErrorCode.unsupported_assignor,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(settings.assignors)}.")
    if req.subscribed_topic_regex:  # "" clears a regex subscription (librdkafka sends it)
        try:
            compile_topic_regex(req.subscribed_topic_regex)
        except InvalidTopicRegex as exc:
            return ErrorCode.invalid_regular_expression, str(exc)
    return None


def _epoch_error(member: ConsumerGroupMember, req: ConsumerHeartbeatRequest
                 ) -> ConsumerHeartbeatResponse | None:
    received = req.member_epoch
    if received > member.member_epoch:
        return error_response(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a greater member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin.")
    if received < member.member_epoch and (
            received != member.previous_member_epoch or not is_subset(req.owned, member.assigned)):
        return error_response(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a smaller member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin.")
    return None


# --------------------------------------------------------------------------- shared steps


def bump_group_epoch(txn: Txn, topics: TopicsImage | None, *, force: bool) -> None:
    """Bump the group epoch if forced or the subscribed topics' metadata hash changed (kept as
    stored without a topics image: the next heartbeat recomputes it)."""
    group = txn.current
    new_hash = (topics.metadata_hash(group.subscribed_topic_names()) if topics is not None
                else group.metadata_hash)
    if force or new_hash != group.metadata_hash:
        txn.emit(c.new_group_metadata_record(txn.group_id, group.group_epoch + 1, new_hash))


def preferred_assignor(group: ConsumerGroup, settings: ConsumerGroupSettings) -> str:
    """The assignor most members ask for (ties: configured order), else the first configured."""
    votes: dict[str, int] = {}
    for m in group.members.values():
        if m.server_assignor in settings.assignors:
            votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
    if votes:
        order = settings.assignors
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))
    return settings.assignors[0] if settings.assignors else DEFAULT_ASSIGNORS[0]


def maybe_compute_target(txn: Txn, topics: TopicsImage, now_ms: int,
                         settings: ConsumerGroupSettings) -> None:
    """Install a new target assignment if the group epoch is ahead of the assignment epoch."""
    group = txn.current
    if group.group_epoch <= group.assignment_epoch:
        return
    infos = topics.ids()
    subs = {}
    for mid, m in group.members.items():
        ids = frozenset(info.topic_id for n in group.member_topics(m)
                        if (info := topics.get(n)) is not None)
        subs[mid] = MemberSubscription(mid, m.instance_id, m.rack_id, ids,
                                       dict(group.target_assignment.get(mid, {})))
    assignor = ASSIGNORS[preferred_assignor(group, settings)]
    new = assignor.assign(subs, infos) if subs else {}
    for mid in sorted(set(group.target_assignment) - set(new)):
        txn.emit(c.new_target_member_tombstone(txn.group_id, mid))
    for mid in sorted(new):
        wanted = {t: p for t, p in new[mid].items() if p}
        if mid not in group.target_assignment or dict(group.target_assignment[mid]) != wanted:
            txn.emit(c.new_target_member_record(txn.group_id, mid, wanted))
    txn.emit(c.new_target_metadata_record(txn.group_id, group.group_epoch, now_ms))


def apply_step(txn: Txn, member_id: str, step: Step) -> bool:
    """Write the member's current assignment if it changed; True if its assigned partitions
    changed."""
    m = txn.current.members[member_id]
    before = (m.member_epoch, m.previous_member_epoch, m.state, dict(m.assigned),
              dict(m.pending_revocation))
    after = (step.member_epoch, step.previous_member_epoch, step.state, step.assigned,
             step.pending_revocation)
    if before != after:
        txn.emit(c.new_current_assignment_record(
            txn.group_id, member_id, member_epoch=step.member_epoch,
            previous_member_epoch=step.previous_member_epoch, state=step.state,
            assigned=step.assigned, pending_revocation=step.pending_revocation))
    return dict(m.assigned) != step.assigned


def reconcile_member(txn: Txn, member_id: str,
                     owned: Mapping[uuid.UUID, frozenset[int]] | None) -> bool:
    group = txn.current
    member = group.members[member_id]
    target = group.target_assignment.get(member_id, {})
    owners = {k: v for k, v in group.owners().items() if v != member_id}
    return apply_step(txn, member_id, reconcile(member, group.assignment_epoch, target, owners,
                                                owned))


def drop_unused_regexes(txn: Txn) -> None:
    group = txn.current
    used = group.subscribed_regexes()
    for regex in sorted(set(group.regexes) - used):
        txn.emit(c.new_regex_tombstone(txn.group_id, regex))


def remove_member(txn: Txn, member_id: str) -> None:
    """Tombstones of a member (Kafka's order: current assignment, target, metadata)."""
    txn.emit(c.new_current_assignment_tombstone(txn.group_id, member_id))
    if member_id in txn.current.target_assignment:
        txn.emit(c.new_target_member_tombstone(txn.group_id, member_id))
    txn.emit(c.new_member_tombstone(txn.group_id, member_id))


def fence_member(txn: Txn, member_id: str, topics: TopicsImage | None, now_ms: int,
                 settings: ConsumerGroupSettings) -> None:
    """Remove a member (leave, session or rebalance timeout) and bump the group epoch; with a
    topics image the new target is computed at once, else by the next heartbeat."""
    remove_member(txn, member_id)
    drop_unused_regexes(txn)
    bump_group_epoch(txn, topics, force=True)
    if topics is not None:
        maybe_compute_target(txn, topics, now_ms, settings)


def assignment_response(assigned: Mapping[uuid.UUID, frozenset[int]]
                        ) -> dict[uuid.UUID, list[int]]:
    return {tid: sorted(parts) for tid, parts in sorted(assigned.items()) if parts}


def resolve_regex(txn: Txn, regex: str, topics: TopicsImage, version: int, now_ms: int,
                  allowed: TopicFilter) -> None:
    """Record what ``regex`` matches now (record 16) unless already resolved at ``version``."""
    old = txn.current.regexes.get(regex)
    if old is not None and old.version == version:
        return
    try:
        compiled = compile_topic_regex(regex)
    except InvalidTopicRegex:  # validated on the way in; an old stored pattern may be bad
        matched: frozenset[str] = frozenset()
    else:
        matched = allowed(matching_topics(compiled, topics.by_name))
    txn.emit(c.new_regex_record(txn.group_id, regex, matched, version, now_ms))


# --------------------------------------------------------------------------- the op


@dataclass(frozen=True, slots=True)
class HeartbeatOutcome:
    records: tuple[Record, ...]
    response: ConsumerHeartbeatResponse
    # Member whose rebalance timer to (re)arm with its timeout (None: it is not revoking).
    revoking: tuple[str, int | None] | None = None
    replaced: str | None = None  # a static member id replaced by this join
    fenced: tuple[str, ...] = ()


def consumer_group_heartbeat(
    group: ConsumerGroup | None,
    req: ConsumerHeartbeatRequest,
    topics: TopicsImage,
    now_ms: int,
    settings: ConsumerGroupSettings,
    *,
    other_type: bool,
    topics_version: int,
    allowed: TopicFilter = _all_topics,
    new_member_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> HeartbeatOutcome:
    """Validate and apply one heartbeat against ``group`` (None if the id is unused).

    ``other_type``: the id is held by a share group or a classic group with members.
    ``topics_version`` identifies ``topics`` (regexes resolved against another version are
    resolved again). The caller arms the session timer on success (and the rebalance timer
    when ``revoking`` says so); timers of members gone meanwhile fire harmlessly.
    """
    error = validate(req, settings)
    if error is not None:
        return HeartbeatOutcome((), error_response(*error))
    gid = req.group_id
    if other_type:
        return HeartbeatOutcome((), error_response(
            ErrorCode.group_id_not_found, f"Group {gid} is not a consumer group."))
    if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
        return _leave(group, req, topics, now_ms, settings)
    if group is None and req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
        return HeartbeatOutcome((), error_response(
            ErrorCode.unknown_member_id, f"Consumer group {gid} not found."))
    member_id = req.member_id or new_member_id()  # v0: the coordinator names a joining member
    if _group_full(group, req, member_id, settings):
        return HeartbeatOutcome((), error_response(
            ErrorCode.group_max_size_reached,
            f"The consumer group has reached its maximum capacity of {settings.max_size} "
            "members."))
    txn = Txn(gid, group, [])
    replaced: str | None = None
    existing, refusal = _member_for(group, req, member_id)
    if refusal is not None:
        return HeartbeatOutcome((), refusal)
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH and req.instance_id is not None:
        static = group.static_member(req.instance_id) if group is not None else None
        if static is not None and static.member_id != member_id:
            existing = replace_static(txn, static, member_id)
            replaced = static.member_id
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH and existing is not None and replaced is None \
            and (existing.member_epoch != 0 or existing.assigned or existing.pending_revocation):
        # A known member rejoins: it owns nothing now (see the module's deliberate difference).
        txn.emit(c.new_current_assignment_record(
            gid, member_id, member_epoch=0, previous_member_epoch=0, state=c.STATE_STABLE,
            assigned={}, pending_revocation={}))
        existing = txn.current.members[member_id]

    changed = _update_member(txn, existing, req, member_id)
    regex = txn.current.members[member_id].subscribed_topic_regex
    if regex:
        resolve_regex(txn, regex, topics, topics_version, now_ms, allowed)
    drop_unused_regexes(txn)
    bump_group_epoch(txn, topics, force=changed)
    maybe_compute_target(txn, topics, now_ms, settings)
    before = txn.current.members[member_id]
    owned = req.owned if req.member_epoch != JOIN_GROUP_MEMBER_EPOCH else {}
    partitions_changed = reconcile_member(txn, member_id, owned)
    after = txn.current.members[member_id]
    revoking = _revoking(before, after)
    full = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH or (
        req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None
        and req.owned is not None)
    response = ConsumerHeartbeatResponse(
        member_id=member_id, member_epoch=after.member_epoch,
        heartbeat_interval_ms=heartbeat_interval(txn.current, settings, now_ms),
        assignment=(assignment_response(after.assigned)
                    if full or partitions_changed or replaced else None))
    return HeartbeatOutcome(tuple(txn.records), response, revoking, replaced)


def _group_full(group: ConsumerGroup | None, req: ConsumerHeartbeatRequest, member_id: str,
                settings: ConsumerGroupSettings) -> bool:
    """Whether a new member would pass ``group.consumer.max.size`` (a returning one would not)."""
    members = group.members if group is not None else {}
    return len(members) >= settings.max_size and member_id not in members and (
        group is None or group.static_member(req.instance_id) is None)


def _revoking(before: ConsumerGroupMember, after: ConsumerGroupMember
              ) -> tuple[str, int | None] | None:
    """The rebalance timer to arm (member id, timeout ms) when revoking starts, to cancel
    (member id, None) when nothing is left to revoke, or None: leave it."""
    if after.state == c.STATE_UNREVOKED_PARTITIONS and (
            before.state != c.STATE_UNREVOKED_PARTITIONS
            or dict(before.pending_revocation) != dict(after.pending_revocation)):
        return after.member_id, max(after.rebalance_timeout_ms, 0)
    if after.state != c.STATE_UNREVOKED_PARTITIONS:
        return after.member_id, None
    return None


def _member_for(group: ConsumerGroup | None, req: ConsumerHeartbeatRequest, member_id: str
                ) -> tuple[ConsumerGroupMember | None, ConsumerHeartbeatResponse | None]:
    """The existing member the request speaks for (None: a new member), or the refusal."""
    gid = req.group_id
    members = group.members if group is not None else {}
    if req.instance_id is None:
        member = members.get(member_id)
        if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            return member, None
        if member is None:
            return None, error_response(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of consumer group {gid}.")
        return member, _epoch_error(member, req)
    static = group.static_member(req.instance_id) if group is not None else None
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if static is None or static.member_id == member_id:
            return members.get(member_id), None
        if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return None, error_response(
                ErrorCode.unreleased_instance_id,
                f"Static member {member_id} with instance id {req.instance_id} cannot join the "
                f"group because the instance id is owned by member {static.member_id}.")
        return None, None  # replaced by the caller
    if static is None:
        return None, error_response(ErrorCode.unknown_member_id,
                                    f"Instance id {req.instance_id} is unknown.")
    if static.member_id != member_id:
        return None, error_response(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
            f"{static.member_id}.")
    return static, _epoch_error(static, req)


def replace_static(txn: Txn, old: ConsumerGroupMember, new_id: str) -> ConsumerGroupMember:
    """A static member that left with epoch -2 comes back under a new member id: the new id takes
    over its metadata, target and assigned partitions (no rebalance of the others)."""
    gid = txn.group_id
    target = dict(txn.current.target_assignment.get(old.member_id, {}))
    remove_member(txn, old.member_id)
    txn.emit(c.new_member_record(
        gid, new_id, instance_id=old.instance_id, rack_id=old.rack_id, client_id=old.client_id,
        client_host=old.client_host, subscribed_topic_names=old.subscribed_topic_names,
        subscribed_topic_regex=old.subscribed_topic_regex,
        rebalance_timeout_ms=old.rebalance_timeout_ms, server_assignor=old.server_assignor))
    if target:
        txn.emit(c.new_target_member_record(gid, new_id, target))
    # The new instance takes over what the old one held and may keep (its part of the target);
    # the rest is released at once: the old process is gone and the new one owns nothing yet,
    # so there is nothing to revoke (a member never revokes at epoch 0).
    kept = {t: ps & target.get(t, frozenset()) for t, ps in old.assigned.items()}
    txn.emit(c.new_current_assignment_record(
        gid, new_id, member_epoch=0, previous_member_epoch=0, state=c.STATE_STABLE,
        assigned={t: ps for t, ps in kept.items() if ps}, pending_revocation={}))
    return txn.current.members[new_id]


def _update_member(txn: Txn, existing: ConsumerGroupMember | None, req: ConsumerHeartbeatRequest,
                   member_id: str) -> bool:
    """Write the member's metadata if new or changed; True if its subscription changed (a new
    member counts as a change)."""
    old = existing or ConsumerGroupMember(member_id)
    new = replace(
        old,
        instance_id=req.instance_id if req.instance_id is not None else old.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else old.rack_id,
        rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                              else old.rebalance_timeout_ms),
        server_assignor=(req.server_assignor if req.server_assignor is not None
                         else old.server_assignor),
        subscribed_topic_names=(tuple(sorted(set(req.subscribed_topic_names)))
                                if req.subscribed_topic_names is not None
                                else old.subscribed_topic_names),
        subscribed_topic_regex=(req.subscribed_topic_regex or None
                                if req.subscribed_topic_regex is not None
                                else old.subscribed_topic_regex),
        client_id=req.client_id, client_host=req.client_host,
        classic=None)  # a member heartbeating with the consumer protocol uses it from now on
    if existing is not None and new == old:
        return False
    txn.emit(c.new_member_record(
        txn.group_id, member_id, instance_id=new.instance_id, rack_id=new.rack_id,
        client_id=new.client_id, client_host=new.client_host,
        subscribed_topic_names=new.subscribed_topic_names,
        subscribed_topic_regex=new.subscribed_topic_regex,
        rebalance_timeout_ms=new.rebalance_timeout_ms, server_assignor=new.server_assignor))
    return existing is None or (old.subscribed_topic_names, old.subscribed_topic_regex) != (
        new.subscribed_topic_names, new.subscribed_topic_regex)


def _leave(group: ConsumerGroup | None, req: ConsumerHeartbeatRequest, topics: TopicsImage,
           now_ms: int, settings: ConsumerGroupSettings) -> HeartbeatOutcome:
    gid = req.group_id
    if group is None:
        return HeartbeatOutcome((), error_response(
            ErrorCode.unknown_member_id, f"Consumer group {gid} not found."))
    if req.instance_id is None:
        member = group.members.get(req.member_id)
        if member is None:
            return HeartbeatOutcome((), error_response(
                ErrorCode.unknown_member_id,
                f"Member {req.member_id} is not a member of consumer group {gid}."))
    else:
        member = group.static_member(req.instance_id)
        if member is None:
            return HeartbeatOutcome((), error_response(
                ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown."))
        if member.member_id != req.member_id:
            return HeartbeatOutcome((), error_response(
                ErrorCode.fenced_instance_id,
                f"Static member {req.member_id} with instance id {req.instance_id} was fenced by "
                f"member {member.member_id}."))
    txn = Txn(gid, group, [])
    if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        # The static member keeps its assigned partitions until its session times out (or it
        # returns); what it was revoking is released (as Kafka).
        txn.emit(c.new_current_assignment_record(
            gid, member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
            previous_member_epoch=member.previous_member_epoch, state=member.state,
            assigned=member.assigned, pending_revocation={}))
    else:
        fence_member(txn, member.member_id, topics, now_ms, settings)
    return HeartbeatOutcome(tuple(txn.records), ConsumerHeartbeatResponse(
        member_id=member.member_id, member_epoch=req.member_epoch), revoking=None)


def partitions_of(owned: Iterable[tuple[uuid.UUID, Iterable[int]]]
                  ) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for tid, parts in owned:
        out.setdefault(tid, set()).update(parts)
    return {t: frozenset(p) for t, p in out.items()}
