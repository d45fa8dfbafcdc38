"""Consumer groups (KIP-848) and their members as immutable values, and how a record changes them.

Concept (KIP-848; Kafka ``modern/consumer/ConsumerGroup``/``ConsumerGroupMember``): as a share group
(``share/group.py``), a consumer group has a **group epoch** (bumped when membership, subscriptions
or the subscribed topics' metadata change), a **target assignment** computed for one group epoch
(the **assignment epoch**), and **members** that converge on their target one heartbeat at a time.
Unlike share groups, partitions are owned exclusively, so a member moves to its target through
reconciliation states (``consumer/reconcile.py``): it first revokes what it must give up
(UNREVOKED_PARTITIONS, epoch unchanged) and only gets a partition once its previous owner released
it (UNRELEASED_PARTITIONS). ``partitions_pending_revocation`` still belong to the member until it
confirms their revocation.

Static members (``instance_id``) may leave temporarily (epoch -2): they keep their assignment for a
session timeout so a restarted instance takes it over without a rebalance.

Resolved regular expressions (record 16) map each subscribed regex to the topics it matched, with
the topics-image version they were resolved against (re-resolved when that version changes).

``apply_record(group, record)`` is the single place where a record changes a group; the shard's
replay and each write op's scratch state both go through it.

Invariants:
- Values are never mutated; ``assignment_epoch <= group_epoch``.
- Assignments and pending revocations never contain empty partition sets.
- State: Empty with no members; Assigning while some member's target is older than the group
  epoch; Reconciling while some member is not at the assignment epoch or not Stable; else Stable.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from coordinator.group.consumer import records as c
from coordinator.group.record import Record, assignment_of

Assignment = Mapping[uuid.UUID, frozenset[int]]
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = c.STATE_STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # Set for a member that uses the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside
    # this consumer group: its session timeout and supported protocols (``classic_members.py``).
    classic: c.ClassicMemberMetadata | None = None

    @property
    def uses_classic(self) -> bool:
        return self.classic is not None


@dataclass(frozen=True)
class ResolvedRegex:
    topics: frozenset[str]
    version: int
    timestamp: int


@dataclass(frozen=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    assignment_timestamp_ms: int = 0
    members: Mapping[str, ConsumerGroupMember] = field(default_factory=dict)
    target_assignment: Mapping[str, Assignment] = field(default_factory=dict)
    regexes: Mapping[str, ResolvedRegex] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != c.STATE_STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def subscribed_regexes(self) -> frozenset[str]:
        return frozenset(m.subscribed_topic_regex for m in self.members.values()
                         if m.subscribed_topic_regex)

    def member_topics(self, member: ConsumerGroupMember) -> frozenset[str]:
        """The member's subscribed topic names plus what its regex resolved to."""
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            resolved = self.regexes.get(member.subscribed_topic_regex)
            if resolved is not None:
                names |= resolved.topics
        return frozenset(names)

    def subscribed_topic_names(self) -> frozenset[str]:
        """Union of every member's topics (names and resolved regexes)."""
        out: set[str] = set()
        for m in self.members.values():
            out |= self.member_topics(m)
        return frozenset(out)

    def owners(self) -> dict[tuple[uuid.UUID, int], str]:
        """(topic id, partition) -> the member owning it (assigned or pending revocation)."""
        out: dict[tuple[uuid.UUID, int], str] = {}
        for mid, m in self.members.items():
            for a in (m.assigned, m.pending_revocation):
                for tid, parts in a.items():
                    for p in parts:
                        out[(tid, p)] = mid
        return out


def _without(mapping: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


def _group_metadata(g: ConsumerGroup, key: Any, value: Any) -> ConsumerGroup | None:
    if value is None:
        return None
    return replace(g, group_epoch=value.epoch, metadata_hash=value.metadata_hash)


def _member_metadata(g: ConsumerGroup, key: Any, value: Any) -> ConsumerGroup:
    if value is None:
        return replace(g, members=_without(g.members, key.member_id))
    old = g.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
    m = replace(old, instance_id=value.instance_id, rack_id=value.rack_id,
                client_id=value.client_id, client_host=value.client_host,
                subscribed_topic_names=tuple(sorted(set(value.subscribed_topic_names))),
                subscribed_topic_regex=value.subscribed_topic_regex,
                rebalance_timeout_ms=value.rebalance_timeout_ms,
                server_assignor=value.server_assignor, classic=value.classic_member_metadata)
    return replace(g, members={**g.members, key.member_id: m})


def _current_assignment(g: ConsumerGroup, key: Any, value: Any) -> ConsumerGroup:
    old = g.members.get(key.member_id)
    if value is None:
        if old is None:
            return g
        m = replace(old, member_epoch=-1, previous_member_epoch=-1, state=c.STATE_STABLE,
                    assigned={}, pending_revocation={})
    else:
        m = replace(old or ConsumerGroupMember(key.member_id), member_epoch=value.member_epoch,
                    previous_member_epoch=value.previous_member_epoch, state=value.state,
                    assigned=assignment_of(value.assigned_partitions),
                    pending_revocation=assignment_of(value.partitions_pending_revocation))
    return replace(g, members={**g.members, key.member_id: m})


def _target_member(g: ConsumerGroup, key: Any, value: Any) -> ConsumerGroup:
    if value is None:
        return replace(g, target_assignment=_without(g.target_assignment, key.member_id))
    return replace(g, target_assignment={**g.target_assignment,
                                         key.member_id: assignment_of(value.topic_partitions)})


def _target_metadata(g: ConsumerGroup, key: Any, value: Any) -> ConsumerGroup:
    if value is None:
        return replace(g, assignment_epoch=0, assignment_timestamp_ms=0)
    return replace(g, assignment_epoch=value.assignment_epoch,
                   assignment_timestamp_ms=value.assignment_timestamp)


def _regex(g: ConsumerGroup, key: Any, value: Any) -> ConsumerGroup:
    if value is None:
        return replace(g, regexes=_without(g.regexes, key.regular_expression))
    resolved = ResolvedRegex(frozenset(value.topics), value.version, value.timestamp)
    return replace(g, regexes={**g.regexes, key.regular_expression: resolved})


_APPLY: dict[type, Callable[[ConsumerGroup, Any, Any], ConsumerGroup | None]] = {
    c.ConsumerGroupMetadataKey: _group_metadata,
    c.ConsumerGroupMemberMetadataKey: _member_metadata,
    c.ConsumerGroupCurrentMemberAssignmentKey: _current_assignment,
    c.ConsumerGroupTargetAssignmentMemberKey: _target_member,
    c.ConsumerGroupTargetAssignmentMetadataKey: _target_metadata,
    c.ConsumerGroupRegularExpressionKey: _regex,
}


def apply_record(group: ConsumerGroup | None, record: Record) -> ConsumerGroup | None:
    """The group after ``record``; None when it does not exist (never created, or deleted).

    Records for an absent group create it (as Kafka's replay does); tombstones on an absent
    group are no-ops.

    Raises:
        TypeError: not a consumer-group record key (a caller bug).
    """
    apply = _APPLY.get(type(record.key))
    if apply is None:
        raise TypeError(f"not a consumer-group record key: {type(record.key).__name__}")
    if group is None:
        if record.value is None:
            return None
        group = ConsumerGroup(record.key.group_id)
    return apply(group, record.key, record.value)
