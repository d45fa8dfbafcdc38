"""Share groups and their members as immutable values, and how a record changes them.

Concept (KIP-932; reference section 5): a share group has
- a **group epoch**, bumped whenever what the assignment depends on changes (membership,
  subscriptions, subscribed-topic metadata, the set of initialized share-partitions);
- a **target assignment** (member -> partitions) computed for one group epoch, its
  **assignment epoch**;
- **members**, each with a **member epoch**: the assignment epoch of the target it last received.
  A member catches up with the target on its own next heartbeat (no revocation phase in share
  groups, so it simply gets the new partitions);
- share-partition **state metadata** (record 15): which partitions' durable share state is
  initializing / initialized / being deleted at the share coordinator.

``apply_record(group, record)`` is the single place where a record changes a group; the shard's
``replay`` and every write op's scratch state both go through it, so a write op's predicted state
and the state rebuilt from the log cannot drift apart.

Invariants:
- Values are never mutated; every change builds a new ``ShareGroup``/``ShareGroupMember``.
- ``assignment_epoch <= group_epoch``; a member's epoch is an assignment epoch it was sent.
- Assignments never contain empty partition sets.
- State: EMPTY when there are no members, STABLE otherwise. A deleted group is simply absent
  (Kafka's DEAD is never observed by callers; ``GroupState.DEAD`` exists for list filters).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from coordinator.group.share import records as r

Assignment = Mapping[uuid.UUID, frozenset[int]]


class GroupState(enum.Enum):
    """Share group states as Kafka names them in ListGroups/ShareGroupDescribe."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    # Accepted in place of member_epoch: the response that bumped the epoch may have been lost
    # (Kafka GroupMetadataManager.throwIfShareGroupMemberEpochIsInvalid).
    previous_member_epoch: int = 0
    state: int = r.MEMBER_STATE_STABLE
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()  # sorted, unique
    assigned_partitions: Assignment = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionSet:
    """A topic's partitions in the state metadata (record 15), with the topic name it carries."""

    topic_name: str
    partitions: frozenset[int]


@dataclass(frozen=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    assignment_timestamp_ms: int = 0
    members: Mapping[str, ShareGroupMember] = field(default_factory=dict)
    target_assignment: Mapping[str, Assignment] = field(default_factory=dict)
    initializing: Mapping[uuid.UUID, PartitionSet] = field(default_factory=dict)
    initialized: Mapping[uuid.UUID, PartitionSet] = field(default_factory=dict)
    deleting: Mapping[uuid.UUID, str] = field(default_factory=dict)

    @property
    def state(self) -> GroupState:
        return GroupState.STABLE if self.members else GroupState.EMPTY

    def subscribed_topic_names(self) -> frozenset[str]:
        """Union of all members' subscriptions."""
        return frozenset(n for m in self.members.values() for n in m.subscribed_topic_names)

    def initialized_partitions(self) -> dict[uuid.UUID, frozenset[int]]:
        return {tid: ps.partitions for tid, ps in self.initialized.items()}

    def initializing_partitions(self) -> dict[uuid.UUID, frozenset[int]]:
        return {tid: ps.partitions for tid, ps in self.initializing.items()}


# --------------------------------------------------------------------------- replay core


V = TypeVar("V")


def _without(mapping: Mapping[str, V], key: str) -> dict[str, V]:
    return {k: v for k, v in mapping.items() if k != key}


def _partition_sets(infos: tuple[r.TopicPartitionsInfo, ...]) -> dict[uuid.UUID, PartitionSet]:
    out: dict[uuid.UUID, PartitionSet] = {}
    for info in infos:
        old = out.get(info.topic_id)
        parts = frozenset(info.partitions) | (old.partitions if old else frozenset())
        if parts:
            out[info.topic_id] = PartitionSet(info.topic_name, parts)
    return out


def _apply_group_metadata(group: ShareGroup, key: Any, value: Any) -> ShareGroup | None:
    if value is None:
        return None  # the group is deleted; its other records were tombstoned before
    return replace(group, group_epoch=value.epoch, metadata_hash=value.metadata_hash)


def _apply_member_metadata(group: ShareGroup, key: Any, value: Any) -> ShareGroup:
    if value is None:
        return replace(group, members=_without(group.members, key.member_id))
    old = group.members.get(key.member_id) or ShareGroupMember(key.member_id)
    member = replace(
        old,
        rack_id=value.rack_id,
        client_id=value.client_id,
        client_host=value.client_host,
        subscribed_topic_names=tuple(sorted(set(value.subscribed_topic_names))),
    )
    return replace(group, members={**group.members, key.member_id: member})


def _apply_current_assignment(group: ShareGroup, key: Any, value: Any) -> ShareGroup:
    old = group.members.get(key.member_id)
    if value is None:
        if old is None:
            return group
        # Kafka resets the member's epoch and assignment; the member metadata tombstone that
        # follows removes the member itself.
        member = replace(old, member_epoch=-1, previous_member_epoch=-1, assigned_partitions={})
    else:
        member = replace(
            old or ShareGroupMember(key.member_id),
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=value.state,
            assigned_partitions=r.assignment_of(value.assigned_partitions),
        )
    return replace(group, members={**group.members, key.member_id: member})


def _apply_target_member(group: ShareGroup, key: Any, value: Any) -> ShareGroup:
    if value is None:
        return replace(group, target_assignment=_without(group.target_assignment, key.member_id))
    assignment = r.assignment_of(value.topic_partitions)
    return replace(group, target_assignment={**group.target_assignment, key.member_id: assignment})


def _apply_target_metadata(group: ShareGroup, key: Any, value: Any) -> ShareGroup:
    if value is None:
        return replace(group, assignment_epoch=0, assignment_timestamp_ms=0)
    return replace(
        group,
        assignment_epoch=value.assignment_epoch,
        assignment_timestamp_ms=value.assignment_timestamp,
    )


def _apply_state_partitions(group: ShareGroup, key: Any, value: Any) -> ShareGroup:
    if value is None:
        return replace(group, initializing={}, initialized={}, deleting={})
    return replace(
        group,
        initializing=_partition_sets(value.initializing_topics),
        initialized=_partition_sets(value.initialized_topics),
        deleting={t.topic_id: t.topic_name for t in value.deleting_topics},
    )


_APPLY: dict[type, Callable[[ShareGroup, Any, Any], ShareGroup | None]] = {
    r.ShareGroupMetadataKey: _apply_group_metadata,
    r.ShareGroupMemberMetadataKey: _apply_member_metadata,
    r.ShareGroupCurrentMemberAssignmentKey: _apply_current_assignment,
    r.ShareGroupTargetAssignmentMemberKey: _apply_target_member,
    r.ShareGroupTargetAssignmentMetadataKey: _apply_target_metadata,
    r.ShareGroupStatePartitionMetadataKey: _apply_state_partitions,
}


def apply_record(group: ShareGroup | None, record: r.Record) -> ShareGroup | None:
    """The group after ``record``; None when the group does not exist (never created/deleted).

    Records for an absent group create it (as Kafka's replay does), except tombstones, which
    are no-ops on an absent group or member. The value's type matches its key's record type
    (``records.RECORD_TYPES``); serde guarantees that for decoded records.

    Raises:
        TypeError: the key is not a share-group record key (a bug in the caller).
    """
    apply = _APPLY.get(type(record.key))
    if apply is None:
        raise TypeError(f"not a share-group record key: {type(record.key).__name__}")
    if group is None:
        if record.value is None:
            return None
        group = ShareGroup(record.key.group_id)
    return apply(group, record.key, record.value)
