"""Consumer-group (KIP-848) coordinator records on ``__consumer_offsets`` (record types 3, 5-8, 16).

Concept: a consumer group's hard state is the fold of these records (STYLE.md 1.3), as for share
groups (``coordinator/group/record.py``). Field names are the snake_case of Kafka 4.x's
``group-coordinator/src/main/resources/common/message/ConsumerGroup*.json``; the binary encoding
lives in ``serde.py`` (same framing: int16 record type + non-flexible key; int16 value version 0
+ flexible value with tagged fields).

- 3  ConsumerGroupMetadata: the group epoch (+ tagged 0: the subscribed-topic metadata hash).
- 5  ConsumerGroupMemberMetadata: instance id, rack, client, subscription (names and/or regex),
  rebalance timeout, server assignor. (Tagged 0, classic member metadata, is never written:
  members of a Shoal consumer group always speak the consumer protocol.)
- 6  ConsumerGroupTargetAssignmentMetadata: the assignment epoch (+ tagged 0: its timestamp).
- 7  ConsumerGroupTargetAssignmentMember: one member's target partitions.
- 8  ConsumerGroupCurrentMemberAssignment: member epoch, previous epoch, reconciliation state,
  assigned partitions and partitions pending revocation.
- 16 ConsumerGroupRegularExpression: the topics a subscribed regex resolved to, with the
  topics-image version it was resolved against and when.

Record type 4 (ConsumerGroupPartitionMetadata) is deprecated since Kafka 4.1 (the metadata hash
replaced it) and is never written; the serde skips it on load.

Invariants as in ``coordinator/group/record.py``: frozen values holding tuples; partition lists
sorted, topics sorted by id, so one logical state yields byte-identical records.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from coordinator.group.record import Record, TopicPartitions, topic_partitions

# Kafka's MemberState byte values (modern/consumer MemberState).
STATE_STABLE = 0
STATE_UNREVOKED_PARTITIONS = 1
STATE_UNRELEASED_PARTITIONS = 2
STATE_UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    RECORD_TYPE: ClassVar[int] = 3
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    VERSION: ClassVar[int] = 0
    epoch: int
    metadata_hash: int = 0  # tagged 0 (KIP-1101)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    RECORD_TYPE: ClassVar[int] = 5
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    """One protocol a classic member supports (JoinGroup's protocol name and metadata)."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member that uses the classic protocol inside a consumer group keeps (tagged field
    0 of ConsumerGroupMemberMetadataValue, a nullable struct): its session timeout and the
    protocols of its last JoinGroup, in the client's order of preference."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    VERSION: ClassVar[int] = 0
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged 0; None: consumer protocol


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    RECORD_TYPE: ClassVar[int] = 6
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    VERSION: ClassVar[int] = 0
    assignment_epoch: int
    assignment_timestamp: int = 0  # tagged 0 (KIP-1263)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    RECORD_TYPE: ClassVar[int] = 7
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    VERSION: ClassVar[int] = 0
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    RECORD_TYPE: ClassVar[int] = 8
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    VERSION: ClassVar[int] = 0
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    RECORD_TYPE: ClassVar[int] = 16
    group_id: str
    regular_expression: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    VERSION: ClassVar[int] = 0
    topics: tuple[str, ...]
    version: int
    timestamp: int


CONSUMER_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupRegularExpressionKey,
)
CONSUMER_RECORD_TYPES = frozenset(k.RECORD_TYPE for k in CONSUMER_KEYS)
DEPRECATED_RECORD_TYPES = frozenset({4})  # ConsumerGroupPartitionMetadata: skipped on load


# --------------------------------------------------------------------------- constructors


def new_group_metadata_record(group_id: str, epoch: int, metadata_hash: int) -> Record:
    return Record(ConsumerGroupMetadataKey(group_id),
                  ConsumerGroupMetadataValue(epoch, metadata_hash))


def new_group_metadata_tombstone(group_id: str) -> Record:
    return Record(ConsumerGroupMetadataKey(group_id), None)


def new_member_record(group_id: str, member_id: str, *, instance_id: str | None,
                      rack_id: str | None, client_id: str, client_host: str,
                      subscribed_topic_names: Iterable[str], subscribed_topic_regex: str | None,
                      rebalance_timeout_ms: int, server_assignor: str | None,
                      classic: ClassicMemberMetadata | None = None) -> Record:
    return Record(ConsumerGroupMemberMetadataKey(group_id, member_id),
                  ConsumerGroupMemberMetadataValue(
                      instance_id, rack_id, client_id, client_host,
                      tuple(sorted(set(subscribed_topic_names))), subscribed_topic_regex,
                      rebalance_timeout_ms, server_assignor, classic))


def new_member_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ConsumerGroupMemberMetadataKey(group_id, member_id), None)


def new_target_metadata_record(group_id: str, epoch: int, timestamp: int = 0) -> Record:
    return Record(ConsumerGroupTargetAssignmentMetadataKey(group_id),
                  ConsumerGroupTargetAssignmentMetadataValue(epoch, timestamp))


def new_target_metadata_tombstone(group_id: str) -> Record:
    return Record(ConsumerGroupTargetAssignmentMetadataKey(group_id), None)


def new_target_member_record(group_id: str, member_id: str,
                             assignment: Mapping[uuid.UUID, Iterable[int]]) -> Record:
    return Record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
                  ConsumerGroupTargetAssignmentMemberValue(
                      topic_partitions(assignment)))


def new_target_member_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None)


def new_current_assignment_record(group_id: str, member_id: str, *, member_epoch: int,
                                  previous_member_epoch: int, state: int,
                                  assigned: Mapping[uuid.UUID, Iterable[int]],
                                  pending_revocation: Mapping[uuid.UUID, Iterable[int]]
                                  ) -> Record:
    return Record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id),
                  ConsumerGroupCurrentMemberAssignmentValue(
                      member_epoch, previous_member_epoch, state, topic_partitions(assigned),
                      topic_partitions(pending_revocation)))


def new_current_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None)


def new_regex_record(group_id: str, regex: str, topics: Iterable[str], version: int,
                     timestamp: int) -> Record:
    return Record(ConsumerGroupRegularExpressionKey(group_id, regex),
                  ConsumerGroupRegularExpressionValue(
                      tuple(sorted(set(topics))), version, timestamp))


def new_regex_tombstone(group_id: str, regex: str) -> Record:
    return Record(ConsumerGroupRegularExpressionKey(group_id, regex), None)
