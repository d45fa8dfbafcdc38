"""Classic-group and committed-offset ops of ``GroupCoordinatorShard``
(``coordinator/group/shard.py`` documents the whole): JoinGroup, SyncGroup, Heartbeat,
LeaveGroup through ``classic.ClassicGroups``, and OffsetCommit/TxnOffsetCommit/OffsetDelete/
OffsetFetch, whose offsets ``classic.offsets`` keeps for classic and consumer-protocol groups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group import offsets as off
from coordinator.group.classic import group as cl
from coordinator.group.classic import records as cr
from coordinator.group.shard_base import ShardBase
from coordinator.group.share import records as r
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.result import CoordinatorResult


class ClassicShardOps(ShardBase):
    """Classic groups and committed offsets of one coordinator partition (see the module doc)."""

    def _classic_op(self, group_id: str, fn: Callable[[cl.Effects], Any],
                    refused: Callable[[ErrorCode], Any], *,
                    share_error: ErrorCode = ErrorCode.group_id_not_found,
                    consumer_error: ErrorCode = ErrorCode.unknown_member_id,
                    replace_empty_consumer: bool = False,
                    in_consumer: Callable[[], tuple[tuple[r.Record, ...], Any]] | None = None,
                    ) -> CoordinatorResult[r.Record, Any]:
        """Run a classic op: on a classic group (or none), or through ``in_consumer`` on a
        consumer group with members (classic members inside it, ``consumer/classic_members.py``);
        ``replace_empty_consumer``: an empty consumer group gives its id to a classic group."""
        if not self._loaded:
            return CoordinatorResult(response=refused(ErrorCode.coordinator_load_in_progress))
        if group_id in self._groups:
            return CoordinatorResult(response=refused(share_error))
        fx = cl.Effects()
        if self.consumer.has(group_id):
            if in_consumer is not None and self.consumer.has_members(group_id):
                records, response = in_consumer()
                return CoordinatorResult(records=records, response=response)
            if not replace_empty_consumer or self.consumer.has_members(group_id):
                return CoordinatorResult(response=refused(consumer_error))
            # As Kafka: a classic member may take over an empty consumer group's id (its
            # committed offsets stay); the consumer group's records are tombstoned first.
            fx.records.extend(self.consumer.delete_group(group_id)[2])
        response = fn(fx)
        self._queue(fx)
        return CoordinatorResult(records=tuple(fx.records), response=response)

    def classic_join(self, req: cl.JoinRequest, waiter: int, now_ms: int,
                     topics: TopicsImage | None = None) -> CoordinatorResult[r.Record, Any]:
        """JoinGroup: a ``JoinResponse`` or ``classic.PENDING`` (answered via ``deliver``). A
        share group's id gets INCONSISTENT_GROUP_PROTOCOL; a consumer group with members takes
        the member in as a classic member (answered at once; ``topics`` maps its subscription),
        an empty consumer group is replaced by the classic group."""
        image = self._image(topics)
        return self._classic_op(
            req.group_id, lambda fx: self.classic.join(req, waiter, now_ms, fx),
            lambda e: cl.JoinResponse(e, member_id=(
                "" if e == ErrorCode.inconsistent_group_protocol else req.member_id)),
            share_error=ErrorCode.inconsistent_group_protocol,
            consumer_error=ErrorCode.inconsistent_group_protocol, replace_empty_consumer=True,
            in_consumer=lambda: self.consumer.classic_join(req, image, now_ms))

    def classic_sync(self, req: cl.SyncRequest, waiter: int, now_ms: int,
                     topics: TopicsImage | None = None) -> CoordinatorResult[r.Record, Any]:
        """SyncGroup: a ``SyncResponse`` or ``classic.PENDING``. As Heartbeat, LeaveGroup and
        OffsetCommit, a share group's id gets GROUP_ID_NOT_FOUND (Kafka: "not a classic
        group"); a classic member of a consumer group gets its assigned partitions."""
        image = self._image(topics)
        return self._classic_op(
            req.group_id, lambda fx: self.classic.sync(req, waiter, now_ms, fx),
            cl.SyncResponse,
            in_consumer=lambda: ((), self.consumer.classic_sync(req, image, now_ms)))

    def classic_heartbeat(self, group_id: str, member_id: str, generation: int,
                          instance_id: str | None,
                          now_ms: int) -> CoordinatorResult[r.Record, ErrorCode]:
        return self._classic_op(
            group_id, lambda _fx: self.classic.heartbeat(group_id, member_id, generation,
                                                         instance_id, now_ms),
            lambda e: e,
            in_consumer=lambda: ((), self.consumer.classic_heartbeat(
                group_id, member_id, generation, instance_id, now_ms)))

    def classic_leave(self, group_id: str, members: tuple[cl.LeaveMember, ...],
                      now_ms: int) -> CoordinatorResult[r.Record, cl.LeaveResponse]:
        return self._classic_op(
            group_id, lambda fx: self.classic.leave(group_id, members, now_ms, fx),
            lambda e: cl.LeaveResponse(e, tuple((m, e) for m in members)),
            in_consumer=lambda: self._leave_consumer_group(group_id, members, now_ms))

    def _leave_consumer_group(self, group_id: str, members: tuple[cl.LeaveMember, ...],
                              now_ms: int) -> tuple[tuple[r.Record, ...], cl.LeaveResponse]:
        records, response, emptied = self.consumer.classic_leave(group_id, members)
        if emptied:
            self.classic.offsets.arm_retention(group_id, now_ms, emptied=True)
        return records, response

    def _image(self, topics: TopicsImage | None) -> TopicsImage:
        if topics is not None:
            self._topics_seen = topics
            return topics
        return self._topics_seen

    def describe_classic(self, group_id: str) -> cl.ClassicDescription | None:
        return self.classic.describe(group_id) if self._loaded else None

    # ------------------------------------------------------------------ committed offsets

    def commit_offsets(self, group_id: str, member_id: str, generation: int,
                       instance_id: str | None, parts: tuple[off.OffsetCommitPartition, ...],
                       now_ms: int, api_version: int = 9
                       ) -> CoordinatorResult[r.Record, off.OffsetCommitResponse]:
        """OffsetCommit for a classic, consumer-protocol or standalone group; a share group's id
        gets GROUP_ID_NOT_FOUND. A consumer group's member is validated by member id and epoch
        (``generation`` is the member epoch: STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID)."""
        if self._loaded and group_id not in self._groups and self.consumer.has(group_id):
            problem = self.consumer.validate_commit(group_id, member_id, generation, api_version)
            if problem is not None:
                return CoordinatorResult(response=off.OffsetCommitResponse(
                    problem[0], tuple((p.topic, p.partition, problem[0]) for p in parts)))
            fx = cl.Effects()
            res = self.classic.offsets.write_offsets(group_id, parts, now_ms, fx.records)
            return CoordinatorResult(records=tuple(fx.records), response=res)
        return self._classic_op(
            group_id, lambda fx: self.classic.commit_offsets(
                group_id, member_id, generation, instance_id, parts, now_ms, fx),
            lambda e: off.OffsetCommitResponse(e, tuple((p.topic, p.partition, e)
                                                       for p in parts)))

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                           member_id: str, generation: int, instance_id: str | None,
                           parts: tuple[off.OffsetCommitPartition, ...], now_ms: int
                           ) -> CoordinatorResult[r.Record, off.OffsetCommitResponse]:
        """TxnOffsetCommit: OffsetCommit records for the runtime to append as a transactional
        batch of ``producer_id`` (pending until its marker). Refusals, for every partition:
        COORDINATOR_LOAD_IN_PROGRESS, INVALID_GROUP_ID, GROUP_ID_NOT_FOUND (a share group's id),
        INVALID_PRODUCER_EPOCH (an epoch older than the producer's pending transaction here),
        and the member checks of ``classic.validate_txn_commit`` /
        ``consumer_groups.validate_txn_commit``. Metadata over offset.metadata.max.bytes gets
        OFFSET_METADATA_TOO_LARGE for its partition."""
        def refused(code: ErrorCode) -> CoordinatorResult[r.Record, off.OffsetCommitResponse]:
            return CoordinatorResult(response=off.OffsetCommitResponse(
                code, tuple((p.topic, p.partition, code) for p in parts)))

        if not self._loaded:
            return refused(ErrorCode.coordinator_load_in_progress)
        if not group_id or not cr.fits(group_id):
            return refused(ErrorCode.invalid_group_id)
        if group_id in self._groups:
            return refused(ErrorCode.group_id_not_found)
        epoch = self.classic.pending.epoch(producer_id)
        if epoch is not None and producer_epoch < epoch:
            return refused(ErrorCode.invalid_producer_epoch)
        if self.consumer.has(group_id):
            error = self.consumer.validate_txn_commit(group_id, member_id, generation)
        else:
            error = self.classic.validate_txn_commit(group_id, member_id, generation,
                                                     instance_id)
        if error is not None:
            return refused(error)
        records: list[r.Record] = []
        res = self.classic.offsets.write_offsets(group_id, parts, now_ms, records)
        return CoordinatorResult(records=tuple(records), response=res)

    def delete_offsets(self, group_id: str, parts: tuple[tuple[str, int], ...]
                       ) -> CoordinatorResult[r.Record, Any]:
        if self._loaded and self.consumer.has(group_id):
            codes, recs = self.consumer.delete_offsets(
                group_id, parts, lambda key: key in self.classic.store.values
                or self.classic.pending.has(key))
            return CoordinatorResult(records=recs, response=(ErrorCode.none, codes))
        return self._classic_op(
            group_id, lambda fx: self.classic.delete_offsets(group_id, parts, fx),
            lambda e: (e, ()))

    def fetch_offsets(self, group_id: str, topics: Any, member_id: str | None = None,
                      member_epoch: int = -1,
                      require_stable: bool = False) -> off.OffsetFetchResponse:
        """OffsetFetch (committed view). Unknown groups have no offsets (-1). For a consumer
        group, a member id or epoch >= 0 (v9+) must name a member at that epoch
        (UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH). ``require_stable``: partitions with pending
        transactional offsets answer UNSTABLE_OFFSET_COMMIT."""
        if not self._loaded:
            return off.OffsetFetchResponse(ErrorCode.coordinator_load_in_progress)
        if self._store.committed_group(group_id) is not None:
            return off.OffsetFetchResponse(ErrorCode.group_id_not_found)
        if self.consumer.committed_group(group_id) is not None:
            error = self.consumer.validate_fetch(group_id, member_id, member_epoch)
            if error is not None:
                return off.OffsetFetchResponse(error)
        return self.classic.offsets.fetch_offsets(group_id, topics, require_stable)
