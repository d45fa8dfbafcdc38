"""The persister: how a share-partition leader reads and writes durable share state.

KIP-932 keeps share-partition state (the start offset and the Available/Acknowledged/Archived
ranges with delivery counts) with a share coordinator on ``__share_group_state``. Leaders reach it
only through this interface (Kafka: ``server-common/.../share/persister/Persister.java``). Every
call is per (group, topic id, partition) here; the coordinator-backed implementation batches many
of them into few RPCs/appends.

Invariants:
- ``state_epoch`` is owned by the coordinator (bumped by initialize/alter); a write carrying an older
  one is fenced with FENCED_STATE_EPOCH.
- ``leader_epoch`` is the partition leader's epoch; a write/read with an older one than the last
  seen is fenced with FENCED_LEADER_EPOCH.
- Only delivery states 0 (Available), 2 (Acknowledged), 3 (Archiving: a dead-letter copy not yet
  durable, KIP-1191 as Kafka 4.4 writes it) and 4 (Archived) are ever persisted.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

# Delivery states as persisted (ShareSnapshotValue / ShareUpdateValue schema doc).
AVAILABLE = 0
ACKNOWLEDGED = 2
ARCHIVING = 3
ARCHIVED = 4
PERSISTED_STATES = frozenset({AVAILABLE, ACKNOWLEDGED, ARCHIVING, ARCHIVED})

# Start offset meaning "never consumed: resolve by share.auto.offset.reset".
UNINITIALIZED_START_OFFSET = -1


@dataclass(frozen=True, slots=True)
class PersisterStateBatch:
    """A contiguous inclusive offset range sharing one delivery state and delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """The FindCoordinator(SHARE) key Kafka uses: ``group:topicId:partition``, with the topic
        id in Kafka's string form (URL-safe base64, no padding)."""
        topic = base64.urlsafe_b64encode(self.topic_id.bytes).decode().rstrip("=")
        return f"{self.group_id}:{topic}:{self.partition}"


@dataclass(frozen=True, slots=True)
class InitializeParams:
    key: SharePartitionKey
    state_epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class ReadParams:
    key: SharePartitionKey
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class WriteParams:
    key: SharePartitionKey
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[PersisterStateBatch, ...]


@dataclass(frozen=True, slots=True)
class DeleteParams:
    key: SharePartitionKey


@dataclass(frozen=True, slots=True)
class ReadResult:
    error: ErrorCode
    state_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[PersisterStateBatch, ...] = ()
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryResult:
    error: ErrorCode
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    delivery_complete_count: int = -1
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Result of initialize/write/delete: an error code (``ErrorCode.none`` on success)."""

    error: ErrorCode
    error_message: str | None = None


class Persister(Protocol):
    """Durable share state, per share-partition. Implementations never raise for expected
    outcomes (fencing, unknown group): they return the error code."""

    async def initialize(self, params: InitializeParams) -> WriteResult: ...

    async def read(self, params: ReadParams) -> ReadResult: ...

    async def write(self, params: WriteParams) -> WriteResult: ...

    async def delete(self, params: DeleteParams) -> WriteResult: ...

    async def read_summary(self, params: ReadParams) -> SummaryResult: ...
