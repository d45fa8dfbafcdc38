"""``InMemoryPersister``: the ``Persister`` backed directly by share coordinator shards.

Concept: a real implementation of the persister interface without a log or network. It owns one
``ShareCoordinatorShard`` per ``__share_group_state`` partition (created on first use), routes each
call by ``partition_for`` exactly as the coordinator-backed persister will, runs the shard op, and
"appends" its records by replaying them at the next offset of that partition and committing at
once. A test double: the broker runs the coordinator-backed persister.

Invariants:
- the same validation, fencing, snapshot cadence and error codes as the durable path (it *is* the
  shard); only durability differs: state lives as long as the process;
- every method returns an error code for expected outcomes and never raises for them;
- with ``keep_log=True`` the records are kept per partition (offset, record) so tests can rebuild
  a shard from them; by default nothing but the shards' state is retained.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TypeVar

from coordinator.runtime.result import CoordinatorResult
from coordinator.share.records import ShareRecord
from coordinator.share.service import DEFAULT_NUM_PARTITIONS, partition_for_key
from coordinator.share.shard import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT, ShareCoordinatorShard
from persister.api import (
    DeleteParams,
    InitializeParams,
    ReadParams,
    ReadResult,
    SharePartitionKey,
    SummaryResult,
    WriteParams,
    WriteResult,
)

_R = TypeVar("_R")


def _zero_clock() -> int:
    return 0


class InMemoryPersister:
    """Share state in process memory, with the share coordinator's semantics (see module doc)."""

    def __init__(
        self,
        *,
        num_partitions: int = DEFAULT_NUM_PARTITIONS,
        snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
        clock_ms: Callable[[], int] = _zero_clock,
        partition_exists: Callable[[uuid.UUID, int], bool] | None = None,
        keep_log: bool = False,
    ) -> None:
        """``clock_ms`` supplies the record timestamps (inject the broker clock; tests use a fake).

        Raises:
            ValueError: ``num_partitions`` is not positive or the snapshot cadence is out of range.
        """
        if num_partitions <= 0:
            raise ValueError("num_partitions must be positive")
        # Validate the cadence once, up front, rather than on the first shard creation.
        ShareCoordinatorShard(snapshot_update_records_per_snapshot=snapshot_update_records_per_snapshot)
        self._num_partitions = num_partitions
        self._updates_per_snapshot = snapshot_update_records_per_snapshot
        self._clock_ms = clock_ms
        self._partition_exists = partition_exists
        self._keep_log = keep_log
        self._shards: dict[int, ShareCoordinatorShard] = {}
        self._logs: dict[int, list[tuple[int, ShareRecord]]] = {}

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def partition_of(self, key: SharePartitionKey) -> int:
        """The ``__share_group_state`` partition owning ``key``."""
        return partition_for_key(key, self._num_partitions)

    def shard(self, partition: int) -> ShareCoordinatorShard:
        """The shard of one ``__share_group_state`` partition (created empty on first use)."""
        shard = self._shards.get(partition)
        if shard is None:
            shard = ShareCoordinatorShard(
                snapshot_update_records_per_snapshot=self._updates_per_snapshot,
                partition_exists=self._partition_exists,
            )
            self._shards[partition] = shard
        return shard

    def log(self, partition: int) -> tuple[tuple[int, ShareRecord], ...]:
        """Records appended to ``partition`` as (offset, record); empty unless ``keep_log``."""
        return tuple(self._logs.get(partition, ()))

    # ------------------------------------------------------------------------------------------
    # Persister

    async def initialize(self, params: InitializeParams) -> WriteResult:
        shard = self._shard_for(params.key)
        return self._append(params.key, shard.initialize_state(params, now_ms=self._clock_ms()))

    async def read(self, params: ReadParams) -> ReadResult:
        shard = self._shard_for(params.key)
        return self._append(params.key, shard.read_state(params, now_ms=self._clock_ms()))

    async def write(self, params: WriteParams) -> WriteResult:
        shard = self._shard_for(params.key)
        return self._append(params.key, shard.write_state(params, now_ms=self._clock_ms()))

    async def delete(self, params: DeleteParams) -> WriteResult:
        shard = self._shard_for(params.key)
        return self._append(params.key, shard.delete_state(params))

    async def read_summary(self, params: ReadParams) -> SummaryResult:
        return self._shard_for(params.key).read_state_summary(params)

    # ------------------------------------------------------------------------------------------

    def _shard_for(self, key: SharePartitionKey) -> ShareCoordinatorShard:
        return self.shard(self.partition_of(key))

    def _append(self, key: SharePartitionKey, result: CoordinatorResult[ShareRecord, _R]) -> _R:
        """Replay the op's records at the partition's next offsets, commit, return the response."""
        partition = self.partition_of(key)
        shard = self.shard(partition)
        for record in result.records:
            offset = shard.end_offset
            shard.replay(offset, record.key, record.value)
            if self._keep_log:
                self._logs.setdefault(partition, []).append((offset, record))
        shard.commit(shard.end_offset)
        response = result.response
        assert response is not None, "every share shard op sets a response"
        return response
