"""``CoordinatorPersister``: the default ``Persister``, backed by the share coordinator.

Concept (Kafka ``DefaultStatePersister`` + ``PersisterStateManager``): share-partition leaders call
the persister once per share-partition; the persister hands each call to a share-state backend
that takes lists of keys. Here the backend is the in-process ``ShareCoordinatorService`` (this
broker is the coordinator of every key: FindCoordinator SHARE answers with it). A broker whose
coordinator is elsewhere would plug in a backend with the same five list methods that sends
Initialize/Read/Write/Delete/ReadSummary ShareGroupState RPCs to the coordinator found with
FindCoordinator(key type SHARE), grouping keys per coordinator node; that is the seam, not built.

Batching: the persister adds no delay. Concurrent calls for many share-partitions reach the
coordinator runtime as separate events on their coordinator partition; the runtime drains them
into one append and lets every append made during an fsync share the next one. So the
acknowledgement hot path pays roughly one fsync per drain, not one per acknowledgement.

Invariants:
- expected outcomes (fencing, uninitialized key, coordinator loading or unavailable) come back as
  error codes, never as exceptions;
- one call, one key, one reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from persister.api import (
    DeleteParams,
    InitializeParams,
    ReadParams,
    ReadResult,
    SummaryResult,
    WriteParams,
    WriteResult,
)


class ShareStateBackend(Protocol):
    """The share coordinator as the persister sees it: the five state RPCs over lists of keys."""

    async def initialize_state(self, params: Sequence[InitializeParams]) -> list[WriteResult]: ...

    async def read_state(self, params: Sequence[ReadParams]) -> list[ReadResult]: ...

    async def write_state(self, params: Sequence[WriteParams]) -> list[WriteResult]: ...

    async def delete_state(self, params: Sequence[DeleteParams]) -> list[WriteResult]: ...

    async def read_state_summary(self, params: Sequence[ReadParams]) -> list[SummaryResult]: ...


class CoordinatorPersister:
    """``Persister`` over a ``ShareStateBackend`` (see module doc)."""

    def __init__(self, backend: ShareStateBackend) -> None:
        self._backend = backend

    async def initialize(self, params: InitializeParams) -> WriteResult:
        return (await self._backend.initialize_state((params,)))[0]

    async def read(self, params: ReadParams) -> ReadResult:
        return (await self._backend.read_state((params,)))[0]

    async def write(self, params: WriteParams) -> WriteResult:
        return (await self._backend.write_state((params,)))[0]

    async def delete(self, params: DeleteParams) -> WriteResult:
        return (await self._backend.delete_state((params,)))[0]

    async def read_summary(self, params: ReadParams) -> SummaryResult:
        return (await self._backend.read_state_summary((params,)))[0]
