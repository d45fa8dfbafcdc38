"""Share-group coordinator records (``__consumer_offsets`` record types 10-15).

Concept: the group coordinator's hard state is exactly the fold of these records
(STYLE.md 1.3). Each record is a key (which entity) and a value (its new content) or ``None``
(a tombstone: the entity is gone). Field names are the snake_case of the Kafka 4.3 JSON schemas in
``shared/reference/kafka-schemas/records/ShareGroup*.json``; the binary encoding lives in
``serde.py``.

Invariants:
- Keys and values are frozen and hold only tuples, so records are hashable values.
- Partition lists inside records are sorted and topic lists are sorted by topic id, so the same
  logical state always yields byte-identical records (tests compare records exactly).
- ``RECORD_TYPE`` on a key class is the schema's ``apiKey``; value classes carry ``VERSION`` 0
  (the only version Kafka 4.3 defines for these records).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from coordinator.group.record import (
    Assignment,
    Record,
    TopicPartitions,
    assignment_of,
    topic_partitions,
)

__all__ = ["Assignment", "Record", "TopicPartitions", "assignment_of", "topic_partitions"]

# Kafka's MemberState byte values (group-coordinator modern/MemberState.java). A share member is
# always STABLE: share groups have no revocation phase (KIP-932 "no reconciliation").
MEMBER_STATE_STABLE = 0


# --------------------------------------------------------------------------- common structs
# (TopicPartitions, shared with the consumer-group records, is in coordinator/group/record.py.)


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    """``TopicPartitionsInfo`` struct of ShareGroupStatePartitionMetadataValue."""

    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """``TopicInfo`` struct of ShareGroupStatePartitionMetadataValue (DeletingTopics)."""

    topic_id: uuid.UUID
    topic_name: str


# --------------------------------------------------------------------------- 10 member metadata


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    RECORD_TYPE: ClassVar[int] = 10
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    VERSION: ClassVar[int] = 0
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


# --------------------------------------------------------------------------- 11 group metadata


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    RECORD_TYPE: ClassVar[int] = 11
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    VERSION: ClassVar[int] = 0
    epoch: int
    metadata_hash: int


# --------------------------------------------------------------------------- 12 target metadata


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    RECORD_TYPE: ClassVar[int] = 12
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    VERSION: ClassVar[int] = 0
    assignment_epoch: int
    # Tagged field 0 (Kafka 4.3, KIP-1263); default 0 is not written on the wire.
    assignment_timestamp: int = 0


# --------------------------------------------------------------------------- 13 target member


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    RECORD_TYPE: ClassVar[int] = 13
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    VERSION: ClassVar[int] = 0
    topic_partitions: tuple[TopicPartitions, ...]


# --------------------------------------------------------------------------- 14 current member


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    RECORD_TYPE: ClassVar[int] = 14
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    VERSION: ClassVar[int] = 0
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...]


# --------------------------------------------------------------------------- 15 state partitions


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    RECORD_TYPE: ClassVar[int] = 15
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    VERSION: ClassVar[int] = 0
    initializing_topics: tuple[TopicPartitionsInfo, ...]
    initialized_topics: tuple[TopicPartitionsInfo, ...]
    deleting_topics: tuple[TopicInfo, ...]


RecordKey: TypeAlias = (
    ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
    | ShareGroupStatePartitionMetadataKey
)
RecordValue: TypeAlias = (
    ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue
)

# record type id -> (key class, value class); serde and replay dispatch on it.
RECORD_TYPES: Mapping[int, tuple[type, type]] = {
    10: (ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue),
    11: (ShareGroupMetadataKey, ShareGroupMetadataValue),
    12: (ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue),
    13: (ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue),
    14: (ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue),
    15: (ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue),
}



# --------------------------------------------------------------------------- constructors
# One constructor per record, named like Kafka's GroupCoordinatorRecordHelpers (new_*_record).


def new_member_record(
    group_id: str,
    member_id: str,
    *,
    rack_id: str | None,
    client_id: str,
    client_host: str,
    subscribed_topic_names: Iterable[str],
) -> Record:
    """ShareGroupMemberMetadata (10): a member's rack, client and subscription."""
    return Record(
        ShareGroupMemberMetadataKey(group_id, member_id),
        ShareGroupMemberMetadataValue(
            rack_id=rack_id,
            client_id=client_id,
            client_host=client_host,
            subscribed_topic_names=tuple(sorted(set(subscribed_topic_names))),
        ),
    )


def new_member_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ShareGroupMemberMetadataKey(group_id, member_id), None)


def new_share_group_metadata_record(group_id: str, epoch: int, metadata_hash: int) -> Record:
    """ShareGroupMetadata (11): the group epoch and the hash of its subscribed topics."""
    return Record(ShareGroupMetadataKey(group_id), ShareGroupMetadataValue(epoch, metadata_hash))


def new_share_group_metadata_tombstone(group_id: str) -> Record:
    return Record(ShareGroupMetadataKey(group_id), None)


def new_target_assignment_metadata_record(
    group_id: str, assignment_epoch: int, assignment_timestamp: int = 0
) -> Record:
    """ShareGroupTargetAssignmentMetadata (12): the epoch of the current target assignment."""
    return Record(
        ShareGroupTargetAssignmentMetadataKey(group_id),
        ShareGroupTargetAssignmentMetadataValue(assignment_epoch, assignment_timestamp),
    )


def new_target_assignment_metadata_tombstone(group_id: str) -> Record:
    return Record(ShareGroupTargetAssignmentMetadataKey(group_id), None)


def new_target_assignment_member_record(
    group_id: str, member_id: str, assignment: Mapping[uuid.UUID, Iterable[int]]
) -> Record:
    """ShareGroupTargetAssignmentMember (13): one member's partitions in the target assignment."""
    return Record(
        ShareGroupTargetAssignmentMemberKey(group_id, member_id),
        ShareGroupTargetAssignmentMemberValue(topic_partitions(assignment)),
    )


def new_target_assignment_member_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ShareGroupTargetAssignmentMemberKey(group_id, member_id), None)


def new_current_assignment_record(
    group_id: str,
    member_id: str,
    *,
    member_epoch: int,
    previous_member_epoch: int,
    assigned_partitions: Mapping[uuid.UUID, Iterable[int]],
    state: int = MEMBER_STATE_STABLE,
) -> Record:
    """ShareGroupCurrentMemberAssignment (14): the member's epoch and what it was told it owns."""
    return Record(
        ShareGroupCurrentMemberAssignmentKey(group_id, member_id),
        ShareGroupCurrentMemberAssignmentValue(
            member_epoch=member_epoch,
            previous_member_epoch=previous_member_epoch,
            state=state,
            assigned_partitions=topic_partitions(assigned_partitions),
        ),
    )


def new_current_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ShareGroupCurrentMemberAssignmentKey(group_id, member_id), None)


def new_state_partition_metadata_record(
    group_id: str,
    *,
    initializing: Mapping[uuid.UUID, tuple[str, Iterable[int]]],
    initialized: Mapping[uuid.UUID, tuple[str, Iterable[int]]],
    deleting: Mapping[uuid.UUID, str],
) -> Record:
    """ShareGroupStatePartitionMetadata (15): the full initializing/initialized/deleting sets.

    ``initializing``/``initialized`` map topic id -> (topic name, partitions).
    """

    def infos(m: Mapping[uuid.UUID, tuple[str, Iterable[int]]]) -> tuple[TopicPartitionsInfo, ...]:
        out = []
        for tid in sorted(m, key=lambda t: t.bytes):
            name, parts = m[tid]
            ps = tuple(sorted(set(parts)))
            if ps:
                out.append(TopicPartitionsInfo(tid, name, ps))
        return tuple(out)

    return Record(
        ShareGroupStatePartitionMetadataKey(group_id),
        ShareGroupStatePartitionMetadataValue(
            initializing_topics=infos(initializing),
            initialized_topics=infos(initialized),
            deleting_topics=tuple(
                TopicInfo(tid, deleting[tid]) for tid in sorted(deleting, key=lambda t: t.bytes)
            ),
        ),
    )


def new_state_partition_metadata_tombstone(group_id: str) -> Record:
    return Record(ShareGroupStatePartitionMetadataKey(group_id), None)
