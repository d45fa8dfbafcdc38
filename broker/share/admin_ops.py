"""Share-group administration, its pure half: the results of describe/alter/delete offsets and
group deletion, and the group ops the coordinator shard does not offer itself
(``prepare_alter_op``, ``forget_topics_op``), built only from its public record helpers.
``broker/share/admin.py`` (the service) runs them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from coordinator.group.shard import GroupCoordinatorShard
from coordinator.group.share import heartbeat as hb
from coordinator.group.share import records as r
from coordinator.group.share.group import ShareGroup
from coordinator.group.share.heartbeat import Txn
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.loop import CoordinatorFailure
from coordinator.runtime.result import CoordinatorResult
from persister.api import (
    UNINITIALIZED_START_OFFSET,
)

if TYPE_CHECKING:
    pass


NO_LEADER_EPOCH = -1  # summaries and admin reads do not fence on the leader epoch
UNKNOWN_LAG = -1

NOT_EMPTY = "The group is not empty."
NO_OFFSETS = "There is no offset information to delete."
UNKNOWN_PARTITION = "This server does not host this topic-partition."


def share_lag(log_end_offset: int, start_offset: int, delivery_complete_count: int) -> int:
    """KIP-1226 share-partition lag; -1 when the start offset or the complete count is unknown."""
    if start_offset < 0 or delivery_complete_count < 0:
        return UNKNOWN_LAG
    return max(0, log_end_offset - start_offset - delivery_complete_count)


def group_not_found(group_id: str) -> str:
    return f"Group {group_id} not found."


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    partition: int
    start_offset: int = UNINITIALIZED_START_OFFSET
    leader_epoch: int = NO_LEADER_EPOCH
    lag: int = UNKNOWN_LAG
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    topic_name: str
    topic_id: uuid.UUID | None
    partitions: tuple[PartitionOffset, ...]


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    group_id: str
    topics: tuple[TopicOffsets, ...] = ()
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionResult:
    partition: int
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicAlterResult:
    topic_name: str
    topic_id: uuid.UUID | None
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True)
class AlterResult:
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    topics: tuple[TopicAlterResult, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDeleteResult:
    topic_name: str
    topic_id: uuid.UUID | None
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteOffsetsResult:
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    topics: tuple[TopicDeleteResult, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupDeleteResult:
    group_id: str
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterPlan:
    """What ``prepare_alter_op`` decided: an error, or the state epoch to initialize with."""

    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    state_epoch: int = 0


# --------------------------------------------------------------------------- pure group ops


def committed_problem(group_id: str,
                       group: ShareGroup | None | CoordinatorFailure) -> tuple[ErrorCode, str] | None:
    """Why an offsets/group deletion cannot proceed, judged on the committed group."""
    if isinstance(group, CoordinatorFailure):
        return group.error, group.message
    if group is None:
        return ErrorCode.group_id_not_found, group_not_found(group_id)
    if group.members:
        return ErrorCode.non_empty_group, NOT_EMPTY
    return None


def prepare_alter_op(
    shard: GroupCoordinatorShard,
    group_id: str,
    partitions: Mapping[uuid.UUID, frozenset[int]],
    topics: TopicsImage,
) -> CoordinatorResult[r.Record, AlterPlan]:
    """Phase 1 of AlterShareGroupOffsets: check the group is Empty (or absent), create it if
    absent, bump its epoch (the new state epoch) and record ``partitions`` as Initializing.

    Pure: returns records, mutates nothing. With no partitions only the checks run.
    """
    if not shard.loaded:
        return CoordinatorResult(response=AlterPlan(ErrorCode.coordinator_load_in_progress,
                                                    "The group coordinator is loading."))
    group = shard.group(group_id)
    if group is not None and group.members:
        return CoordinatorResult(response=AlterPlan(ErrorCode.non_empty_group, NOT_EMPTY))
    if not partitions:
        return CoordinatorResult(response=AlterPlan())
    txn = Txn(group_id, group, [])
    current = txn.current
    txn.emit(r.new_share_group_metadata_record(group_id, current.group_epoch + 1,
                                               current.metadata_hash))
    hb.mark_initializing(txn, partitions, topics)
    return CoordinatorResult(records=tuple(txn.records),
                             response=AlterPlan(state_epoch=txn.current.group_epoch))


def forget_topics_op(
    shard: GroupCoordinatorShard, group_id: str, topic_ids: Iterable[uuid.UUID]
) -> CoordinatorResult[r.Record, None]:
    """After DeleteShareGroupOffsets: drop the topics from the group's share-state metadata
    (initializing and initialized), so a later subscription initializes them afresh."""
    group = shard.group(group_id)
    gone = frozenset(topic_ids)
    if group is None or not gone:
        return CoordinatorResult(response=None)
    initializing = {t: ps for t, ps in group.initializing.items() if t not in gone}
    initialized = {t: ps for t, ps in group.initialized.items() if t not in gone}
    if initializing == dict(group.initializing) and initialized == dict(group.initialized):
        return CoordinatorResult(response=None)
    record = hb.state_metadata_record(group_id, initializing, initialized, group.deleting)
    return CoordinatorResult(records=(record,), response=None)


def group_partitions(group: ShareGroup) -> dict[uuid.UUID, frozenset[int]]:
    """Partitions whose share state the group initialized or is initializing."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for sets in (group.initialized, group.initializing):
        for tid, ps in sets.items():
            out[tid] = out.get(tid, frozenset()) | ps.partitions
    return out
