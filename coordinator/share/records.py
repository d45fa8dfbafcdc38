"""ShareSnapshot / ShareUpdate records of ``__share_group_state`` and their constructors.

Concept (KIP-932; reference section 6): the share coordinator keeps the durable state of every
share-partition (group, topic id, partition) as records on ``__share_group_state``:

- **ShareSnapshot** (record type 0): the complete state of one key (snapshot epoch, state epoch,
  leader epoch, start offset, delivery complete count, timestamps, state batches).
- **ShareUpdate** (record type 1): a delta against the latest snapshot of the key (same snapshot
  epoch, leader epoch, start offset or -1 for "unchanged", delivery complete count, the batches
  that changed). It carries no state epoch.
- **Tombstone**: a ShareSnapshot key with a null value; it deletes the key.

Invariants:
- Keys and values are immutable; the shard builds them and only ``replay`` interprets them.
- A record's key type and value type agree (snapshot key with snapshot value, update key with
  update value); a tombstone is a snapshot key with ``value is None``.
- Field names are the schema names in snake_case (``kafka-schemas/records/Share*.json``), so
  serde maps them one to one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import ClassVar

from persister.api import PersisterStateBatch, SharePartitionKey

# Record type ids: the "apiKey" of the coordinator-key schemas, written as the int16 key prefix.
SHARE_SNAPSHOT_RECORD_TYPE = 0
SHARE_UPDATE_RECORD_TYPE = 1

# Highest (and only) value versions in Kafka 4.3 ("validVersions": "0").
SHARE_SNAPSHOT_VALUE_VERSION = 0
SHARE_UPDATE_VALUE_VERSION = 0

# Schema default of the tagged DeliveryCompleteCount field (KIP-1226): "not known".
UNKNOWN_DELIVERY_COMPLETE_COUNT = -1

# The nested StateBatch struct of both values has exactly the fields of the persister's batch
# (FirstOffset, LastOffset, DeliveryState, DeliveryCount), so the one immutable type is shared.
StateBatch = PersisterStateBatch


@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    """Key of a ShareSnapshot record (and of a tombstone)."""

    record_type: ClassVar[int] = SHARE_SNAPSHOT_RECORD_TYPE

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def share_partition_key(self) -> SharePartitionKey:
        return SharePartitionKey(self.group_id, self.topic_id, self.partition)


@dataclass(frozen=True, slots=True)
class ShareUpdateKey:
    """Key of a ShareUpdate record."""

    record_type: ClassVar[int] = SHARE_UPDATE_RECORD_TYPE

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def share_partition_key(self) -> SharePartitionKey:
        return SharePartitionKey(self.group_id, self.topic_id, self.partition)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSnapshotValue:
    """Complete state of one share-partition (ShareSnapshotValue v0)."""

    version: ClassVar[int] = SHARE_SNAPSHOT_VALUE_VERSION

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareUpdateValue:
    """Delta against the latest snapshot of one share-partition (ShareUpdateValue v0)."""

    version: ClassVar[int] = SHARE_UPDATE_VALUE_VERSION

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT
    state_batches: tuple[StateBatch, ...] = ()


ShareKey = ShareSnapshotKey | ShareUpdateKey
ShareValue = ShareSnapshotValue | ShareUpdateValue


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One ``__share_group_state`` record: a key and a value, or ``None`` for a tombstone.

    Raises:
        TypeError: the value type does not match the key type (a programming error).
    """

    key: ShareKey
    value: ShareValue | None

    def __post_init__(self) -> None:
        if self.value is None:
            if not isinstance(self.key, ShareSnapshotKey):
                raise TypeError("a tombstone uses a ShareSnapshotKey")
        elif isinstance(self.key, ShareSnapshotKey) != isinstance(self.value, ShareSnapshotValue):
            raise TypeError(f"{type(self.value).__name__} cannot go with {type(self.key).__name__}")

    @property
    def is_tombstone(self) -> bool:
        return self.value is None

    def share_partition_key(self) -> SharePartitionKey:
        return self.key.share_partition_key()


def new_share_snapshot_record(key: SharePartitionKey, value: ShareSnapshotValue) -> ShareRecord:
    """A ShareSnapshot record for ``key`` (Kafka: ShareCoordinatorRecordHelpers)."""
    return ShareRecord(ShareSnapshotKey(key.group_id, key.topic_id, key.partition), value)


def new_share_update_record(key: SharePartitionKey, value: ShareUpdateValue) -> ShareRecord:
    """A ShareUpdate record for ``key``."""
    return ShareRecord(ShareUpdateKey(key.group_id, key.topic_id, key.partition), value)


def new_share_tombstone_record(key: SharePartitionKey) -> ShareRecord:
    """The tombstone deleting ``key``: a ShareSnapshot key with a null value (reference section 6)."""
    return ShareRecord(ShareSnapshotKey(key.group_id, key.topic_id, key.partition), None)
