"""Members that use the classic protocol inside a consumer group (KIP-848's mixed groups).

Concept (Kafka's ``classicGroupJoinToConsumerGroup``, ``classicGroupSyncToConsumerGroup``,
``classicGroupHeartbeatToConsumerGroup`` and ``classicGroupLeaveToConsumerGroup``; our own
code): once a group is a consumer group (``migration.py``), clients still on
``group.protocol=classic`` take part through JoinGroup/SyncGroup/Heartbeat/LeaveGroup. The
coordinator, not a client leader, assigns their partitions: each such member is a
consumer-group member with classic metadata (session timeout, supported protocols), its member
epoch is its generation, and:

- **JoinGroup** (protocol type ``consumer``, a protocol every classic member supports, else
  INCONSISTENT_GROUP_PROTOCOL; GROUP_MAX_SIZE_REACHED past ``group.consumer.max.size``; an
  unknown dynamic member of JoinGroup v4+ gets MEMBER_ID_REQUIRED with a new id) updates the
  member from its first protocol's subscription (topics, rack; INCONSISTENT_GROUP_PROTOCOL if it
  does not parse), bumps the group epoch if its subscription changed, computes the target if
  needed and reconciles the member with the partitions its subscription says it owns. It is
  answered at once (after its records commit) with generation = the member epoch, protocol =
  the member's first protocol, no leader and no member list: every classic member is a
  follower and syncs an empty assignment. The member must SyncGroup within its rebalance
  timeout, else it is fenced.
- **SyncGroup** answers the member's assigned partitions in the consumer protocol's format (at
  its subscription's version); REBALANCE_IN_PROGRESS if the group epoch moved past the member
  and it is not revoking (it must rejoin within its rebalance timeout, else it is fenced).
- **Heartbeat** answers REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch
  moved past it, it must revoke partitions, or partitions it waits for were released.
- **LeaveGroup** removes the members (by member id or instance id) and bumps the group epoch.

Errors as Kafka's: UNKNOWN_MEMBER_ID for a member that is not there or uses the consumer
protocol, FENCED_INSTANCE_ID for a static member named by another member id,
ILLEGAL_GENERATION for a generation that is not the member epoch, INCONSISTENT_GROUP_PROTOCOL
for a SyncGroup whose protocol type or name is not the member's.

Pure: each function returns records, the answer and the timers to arm or cancel (``Timers``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from coordinator.group.classic.group import (
    UNKNOWN_MEMBER,
    JoinRequest,
    JoinResponse,
    LeaveMember,
    LeaveResponse,
    SyncRequest,
    SyncResponse,
)
from coordinator.group.consumer import heartbeat as ch
from coordinator.group.consumer import records as c
from coordinator.group.consumer.group import ConsumerGroup, ConsumerGroupMember
from coordinator.group.consumer.migration import classic_member_metadata
from coordinator.group.consumer.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    SubscriptionFormatError,
    decode_subscription,
    encode_assignment,
    subscription_version,
)
from coordinator.group.record import Record
from coordinator.group.topics_image import TopicsImage

SESSION = "consumer-session"
JOIN = "consumer-join"  # a classic member told to rejoin must do so within its rebalance timeout
SYNC = "consumer-sync"  # a classic member that joined must sync within its rebalance timeout


@dataclass(slots=True)
class Timers:
    """Timers an op asks the shard to arm (key, deadline) or cancel (key)."""

    schedule: list[tuple[tuple[str, ...], int]] = field(default_factory=list)
    cancel: list[tuple[str, ...]] = field(default_factory=list)
    # Arm only if not armed yet (Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent).
    schedule_if_absent: list[tuple[tuple[str, ...], int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Outcome:
    records: tuple[Record, ...]
    response: object
    timers: Timers


def supports(group: ConsumerGroup, protocol_type: str, names: set[str]) -> bool:
    """Kafka's ``ConsumerGroup.supportsClassicProtocols``: the consumer protocol type, and one
    of the member's protocols supported by every classic member."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    common: set[str] | None = None
    for m in group.members.values():
        if m.classic is None:
            continue
        theirs = {p.name for p in m.classic.supported_protocols}
        common = theirs if common is None else common & theirs
    return common is None or bool(names & common)


def _member(group: ConsumerGroup, member_id: str, instance_id: str | None
            ) -> tuple[ConsumerGroupMember | None, ErrorCode | None]:
    """Kafka's validateConsumerGroupMember plus throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is None:
        m = group.members.get(member_id)
    else:
        m = group.static_member(instance_id)
        if m is not None and m.member_id != member_id:
            return None, ErrorCode.fenced_instance_id
    if m is None or m.classic is None:
        return None, ErrorCode.unknown_member_id
    return m, None


def _join_error(code: ErrorCode, member_id: str) -> Outcome:
    return Outcome((), JoinResponse(code, member_id=member_id), Timers())


def join(group: ConsumerGroup, req: JoinRequest, topics: TopicsImage, now_ms: int,
         settings: ch.ConsumerGroupSettings, *,
         new_member_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> Outcome:
    """JoinGroup of a classic member to the non-empty consumer group ``group``."""
    gid = group.group_id
    unknown = req.member_id == UNKNOWN_MEMBER
    member_id = new_member_id() if unknown else req.member_id
    if len(group.members) >= settings.max_size and member_id not in group.members \
            and group.static_member(req.group_instance_id) is None:
        return _join_error(ErrorCode.group_max_size_reached, req.member_id)
    if not supports(group, req.protocol_type, {n for n, _ in req.protocols}):
        return _join_error(ErrorCode.inconsistent_group_protocol, req.member_id)
    if unknown and req.group_instance_id is None and req.require_known_member_id:
        return _join_error(ErrorCode.member_id_required, member_id)
    try:
        sub = decode_subscription(req.protocols[0][1])
    except SubscriptionFormatError:
        return _join_error(ErrorCode.inconsistent_group_protocol, req.member_id)
    txn = ch.Txn(gid, group, [])
    existing = group.members.get(member_id)
    static = group.static_member(req.group_instance_id)
    if static is not None and static.member_id != member_id:
        if not unknown:
            return _join_error(ErrorCode.fenced_instance_id, req.member_id)
        existing = ch.replace_static(txn, static, member_id)  # takes over its partitions
    elif existing is not None and existing.classic is None:
        return _join_error(ErrorCode.unknown_member_id, req.member_id)
    old = existing or ConsumerGroupMember(member_id)
    classic = classic_member_metadata(req.session_timeout_ms, req.protocols)
    rebalance_timeout = (req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                         else old.rebalance_timeout_ms)
    topics_changed = existing is None or set(old.subscribed_topic_names) != set(sub.topics)
    new_values = (req.group_instance_id or old.instance_id, sub.rack_id or old.rack_id,
                  req.client_id, req.client_host, tuple(sorted(set(sub.topics))),
                  rebalance_timeout, classic)
    old_values = (old.instance_id, old.rack_id, old.client_id, old.client_host,
                  tuple(old.subscribed_topic_names), old.rebalance_timeout_ms, old.classic)
    if existing is None or new_values != old_values or old.subscribed_topic_regex \
            or old.server_assignor:
        txn.emit(c.new_member_record(
            gid, member_id, instance_id=new_values[0], rack_id=new_values[1],
            client_id=req.client_id, client_host=req.client_host,
            subscribed_topic_names=sub.topics, subscribed_topic_regex=None,
            rebalance_timeout_ms=rebalance_timeout, server_assignor=None, classic=classic))
    ch.drop_unused_regexes(txn)
    ch.bump_group_epoch(txn, topics, force=topics_changed)
    ch.maybe_compute_target(txn, topics, now_ms, settings)
    owned = {}
    for name, parts in sub.owned.items():
        info = topics.get(name)
        if info is not None:
            owned[info.topic_id] = parts
    ch.reconcile_member(txn, member_id, owned)
    after = txn.current.members[member_id]
    timers = Timers()
    timers.cancel.append((JOIN, gid, member_id))
    timers.schedule.append(((SESSION, gid, member_id), now_ms + req.session_timeout_ms))
    timers.schedule.append(((SYNC, gid, member_id), now_ms + max(rebalance_timeout, 0)))
    response = JoinResponse(ErrorCode.none, after.member_epoch, CONSUMER_PROTOCOL_TYPE,
                            req.protocols[0][0], "", member_id)
    return Outcome(tuple(txn.records), response, timers)


def _must_rejoin(group: ConsumerGroup, m: ConsumerGroupMember) -> bool:
    """Heartbeat's REBALANCE_IN_PROGRESS conditions (Kafka's)."""
    if m.member_epoch < group.group_epoch or m.state == c.STATE_UNREVOKED_PARTITIONS:
        return True
    if m.state != c.STATE_UNRELEASED_PARTITIONS:
        return False
    owners = group.owners()
    target = group.target_assignment.get(m.member_id, {})
    waiting = any((tid, p) in owners and owners[(tid, p)] != m.member_id
                  for tid, parts in target.items() for p in parts
                  if p not in m.assigned.get(tid, frozenset()))
    return not waiting  # what it waited for was released: it rejoins to get it


def sync(group: ConsumerGroup, req: SyncRequest, topics: TopicsImage, now_ms: int) -> Outcome:
    """SyncGroup of a classic member of ``group`` (the leader's assignments are ignored)."""
    m, error = _member(group, req.member_id, req.group_instance_id)
    if error is not None or m is None:
        return Outcome((), SyncResponse(error or ErrorCode.unknown_member_id), Timers())
    assert m.classic is not None
    if req.generation_id != m.member_epoch:
        return Outcome((), SyncResponse(ErrorCode.illegal_generation), Timers())
    first = m.classic.supported_protocols[0] if m.classic.supported_protocols else None
    if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            req.protocol_name is not None
            and (first is None or req.protocol_name != first.name)):
        return Outcome((), SyncResponse(ErrorCode.inconsistent_group_protocol), Timers())
    timers = Timers()
    gid = group.group_id
    if group.group_epoch > m.member_epoch and m.state != c.STATE_UNREVOKED_PARTITIONS:
        timers.schedule_if_absent.append(((JOIN, gid, m.member_id),
                                          now_ms + max(m.rebalance_timeout_ms, 0)))
        return Outcome((), SyncResponse(ErrorCode.rebalance_in_progress), timers)
    timers.cancel.append((SYNC, gid, m.member_id))
    timers.schedule.append(((SESSION, gid, m.member_id), now_ms + m.classic.session_timeout_ms))
    names = {}
    for tid, parts in m.assigned.items():
        info = topics.by_id(tid)
        if info is not None:
            names[info.name] = parts
    version = subscription_version(first.metadata) if first is not None else 0
    return Outcome((), SyncResponse(ErrorCode.none, req.protocol_type, req.protocol_name,
                                    encode_assignment(names, version)), timers)


def heartbeat(group: ConsumerGroup, member_id: str, generation: int, instance_id: str | None,
              now_ms: int) -> Outcome:
    """Heartbeat of a classic member of ``group``."""
    m, error = _member(group, member_id, instance_id)
    if error is not None or m is None:
        return Outcome((), error or ErrorCode.unknown_member_id, Timers())
    assert m.classic is not None
    if generation != m.member_epoch:
        return Outcome((), ErrorCode.illegal_generation, Timers())
    gid = group.group_id
    timers = Timers()
    timers.schedule.append(((SESSION, gid, m.member_id), now_ms + m.classic.session_timeout_ms))
    if _must_rejoin(group, m):
        timers.schedule_if_absent.append(((JOIN, gid, m.member_id),
                                          now_ms + max(m.rebalance_timeout_ms, 0)))
        return Outcome((), ErrorCode.rebalance_in_progress, timers)
    return Outcome((), ErrorCode.none, timers)


def leave(group: ConsumerGroup, members: Sequence[LeaveMember]) -> Outcome:
    """LeaveGroup of classic members of ``group``: each is removed, then the group epoch bumps
    once (the next heartbeat or join computes the new target)."""
    txn = ch.Txn(group.group_id, group, [])
    out: list[tuple[LeaveMember, ErrorCode]] = []
    timers = Timers()
    for lm in members:
        current = txn.current
        if lm.group_instance_id is None:
            m = current.members.get(lm.member_id)
        else:
            m = current.static_member(lm.group_instance_id)
            if m is not None and lm.member_id != UNKNOWN_MEMBER and m.member_id != lm.member_id:
                out.append((lm, ErrorCode.fenced_instance_id))
                continue
        if m is None or m.classic is None:
            out.append((lm, ErrorCode.unknown_member_id))
            continue
        ch.remove_member(txn, m.member_id)
        for kind in (SESSION, JOIN, SYNC, "consumer-rebalance"):
            timers.cancel.append((kind, group.group_id, m.member_id))
        out.append((lm, ErrorCode.none))
    if txn.records:
        ch.drop_unused_regexes(txn)
        ch.bump_group_epoch(txn, None, force=True)
    return Outcome(tuple(txn.records), LeaveResponse(ErrorCode.none, tuple(out)), timers)
