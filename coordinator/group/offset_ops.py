"""Committed-offset operations of the group coordinator service, shared by classic and
consumer-protocol groups: OffsetCommit/Fetch/Delete, and TxnOffsetCommit with the end-transaction
markers the transaction coordinator writes into ``__consumer_offsets`` (issue 15; Kafka
``GroupCoordinatorService.commitTransactionalOffsets`` and ``completeTransaction``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group import offsets as off
from coordinator.group.service_base import (
    CONSUMER_OFFSETS_TOPIC,
    GroupServiceBase,
    OpOutcome,
    wrap_op,
)
from coordinator.runtime.loop import CoordinatorFailure, PartitionStatus

log = logging.getLogger("shoal.groups")


class OffsetOps(GroupServiceBase):
    """Committed offsets (see the module doc)."""

    async def commit_offsets(self, group_id: str, member_id: str, generation: int,
                             instance_id: str | None,
                             parts: tuple[off.OffsetCommitPartition, ...],
                             api_version: int = 9) -> off.OffsetCommitResponse:
        out = await self._write(group_id, lambda shard, now: shard.commit_offsets(
            group_id, member_id, generation, instance_id, parts, now, api_version))
        if isinstance(out, CoordinatorFailure):
            return off.OffsetCommitResponse(out.error, tuple((p.topic, p.partition, out.error)
                                                            for p in parts))
        res: off.OffsetCommitResponse = out
        return res

    async def txn_commit_offsets(self, transactional_id: str, group_id: str, producer_id: int,
                                 producer_epoch: int, member_id: str, generation: int,
                                 instance_id: str | None,
                                 parts: tuple[off.OffsetCommitPartition, ...]
                                 ) -> off.OffsetCommitResponse:
        """TxnOffsetCommit: the offsets are pending in the group's partition until the
        producer's transaction ends (``complete_transaction``). Every refusal is an error code
        per partition (the shard's, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
        COORDINATOR_NOT_AVAILABLE from the runtime)."""
        out = await self.runtime.write_transactional(
            self.partition_for(group_id), producer_id, producer_epoch,
            wrap_op(lambda shard, now: shard.txn_commit_offsets(
                group_id, producer_id, producer_epoch, member_id, generation, instance_id,
                parts, now)))
        if isinstance(out, CoordinatorFailure):
            error = self._failure_code(group_id, out)
            log.warning("TxnOffsetCommit of transactional id %s (producer %d, epoch %d) for "
                        "group %s not written: %s %s", transactional_id, producer_id,
                        producer_epoch, group_id, error.name, out.message)
            return off.OffsetCommitResponse(error, tuple((p.topic, p.partition, error)
                                                        for p in parts))
        assert isinstance(out, OpOutcome)
        res: off.OffsetCommitResponse = out.response
        return res

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> ErrorCode:
        """Write the end-transaction marker of ``producer_id`` into
        ``__consumer_offsets-<partition>`` (the transaction contract, issue 15): its pending
        offsets there become committed (``commit``) or are dropped; NONE also when none pend.
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / KAFKA_STORAGE_ERROR /
        COORDINATOR_NOT_AVAILABLE: retry later. INVALID_PRODUCER_EPOCH: the marker's epoch is
        older than the producer's pending transaction there (nothing written)."""
        if not 0 <= partition < self.num_partitions:
            return ErrorCode.not_coordinator
        out = await self.runtime.complete_transaction(partition, producer_id, producer_epoch,
                                                      coordinator_epoch, commit)
        if isinstance(out, CoordinatorFailure):
            log.warning("%s marker of producer %d (epoch %d) not written to %s-%d: %s %s; the "
                        "transaction coordinator retries", "COMMIT" if commit else "ABORT",
                        producer_id, producer_epoch, CONSUMER_OFFSETS_TOPIC, partition,
                        out.error.name, out.message)
            if out.error in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                             ErrorCode.kafka_storage_error):
                return out.error
            return ErrorCode.coordinator_not_available
        if out != ErrorCode.none:
            log.error("%s marker of producer %d (epoch %d) refused by %s-%d: %s (a newer epoch "
                      "of the producer holds pending offsets there)",
                      "COMMIT" if commit else "ABORT", producer_id, producer_epoch,
                      CONSUMER_OFFSETS_TOPIC, partition, out.name)
        code: ErrorCode = out
        return code

    @staticmethod
    def _failure_code(group_id: str, out: CoordinatorFailure) -> ErrorCode:
        # As ``_write``: a storage failure answers NOT_COORDINATOR (group RPCs do not list
        # KAFKA_STORAGE_ERROR), so the client looks the coordinator up again.
        return ErrorCode.not_coordinator if out.error == ErrorCode.kafka_storage_error \
            else out.error

    async def delete_offsets(self, group_id: str, parts: tuple[tuple[str, int], ...]) -> Any:
        out = await self._write(group_id, lambda shard, _now: shard.delete_offsets(
            group_id, parts))
        if isinstance(out, CoordinatorFailure):
            return out.error, ()
        return out

    def fetch_offsets(self, group_id: str,
                      topics: Sequence[tuple[str, Sequence[int]]] | None,
                      member_id: str | None = None, member_epoch: int = -1,
                      require_stable: bool = False) -> off.OffsetFetchResponse:
        p = self.partition_for(group_id)
        status = self.runtime.status(p)
        shard = self.runtime.shard(p)
        if status is PartitionStatus.LOADING:
            return off.OffsetFetchResponse(ErrorCode.coordinator_load_in_progress)
        if status is not PartitionStatus.ACTIVE or shard is None:
            return off.OffsetFetchResponse(ErrorCode.not_coordinator)
        return shard.fetch_offsets(group_id, topics, member_id, member_epoch, require_stable)
