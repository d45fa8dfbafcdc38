"""Share-group ops of ``GroupCoordinatorShard`` (KIP-932; ``coordinator/group/shard.py``
documents the whole): ShareGroupHeartbeat, ShareGroupDescribe, topic changes, the two-phase
share-state initialisation (record 15) and DeleteGroups.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from kio.schema.errors import ErrorCode

from coordinator.group.classic import group as cl
from coordinator.group.shard_base import (
    DELETE_EXTRA,
    INIT_RETRY,
    INITIALIZE_EXTRA,
    SESSION,
    DeleteGroupResponse,
    DescribeResult,
    InitializeResponse,
    ShardBase,
    TimerKey,
    frozen_partitions,
    initialize_extra,
)
from coordinator.group.share import heartbeat as hb
from coordinator.group.share import records as r
from coordinator.group.share.group import PartitionSet
from coordinator.group.share.heartbeat import (
    HeartbeatRequest,
    HeartbeatResponse,
    ShareStateDeletion,
    ShareStateInitialization,
    Txn,
)
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.result import CoordinatorResult


class ShareShardOps(ShardBase):
    """Share groups of one coordinator partition (see the module doc)."""

    def describe(self, group_id: str) -> DescribeResult:
        """ShareGroupDescribe for one group id (GROUP_ID_NOT_FOUND if absent or not share)."""
        if not self._loaded:
            return DescribeResult(ErrorCode.coordinator_load_in_progress)
        group = self._store.committed_group(group_id)
        if group is None and (self.classic.has(group_id) or self.consumer.has(group_id)):
            return DescribeResult(ErrorCode.group_id_not_found,
                                  error_message=f"Group {group_id} is not a share group.")
        if group is None:
            return DescribeResult(
                ErrorCode.group_id_not_found, error_message=f"Group {group_id} not found."
            )
        return DescribeResult(ErrorCode.none, group)

    def partitions_needing_initialization(
        self, group_id: str, topics: TopicsImage
    ) -> dict[uuid.UUID, frozenset[int]]:
        """Subscribed partitions of the group that are neither initialized nor initializing."""
        group = self._groups.get(group_id)
        return hb.partitions_needing_initialization(group, topics) if group else {}

    # ------------------------------------------------------------------ heartbeat

    def share_group_heartbeat(
        self, req: HeartbeatRequest, topics: TopicsImage, now_ms: int
    ) -> CoordinatorResult[r.Record, HeartbeatResponse]:
        """Handle one ShareGroupHeartbeat (see ``heartbeat.py`` for the rules).

        Re-arms the member's session timer on success (cancels it on leave).
        """
        if not self._loaded:
            return CoordinatorResult(
                response=hb.error_response(ErrorCode.coordinator_load_in_progress, "Loading.")
            )
        settings = self._group_config(req.group_id)
        outcome = hb.share_group_heartbeat(
            self._groups.get(req.group_id),
            req,
            topics,
            now_ms,
            settings,
            gated=self._gated,
            is_non_share_group=bool(req.group_id) and (
                self._is_non_share_group(req.group_id) or self.classic.has(req.group_id)
                or self.consumer.has(req.group_id)),
        )
        response = outcome.response
        if response.error_code == ErrorCode.none:
            key: TimerKey = (SESSION, req.group_id, req.member_id)
            if response.member_epoch == hb.LEAVE_GROUP_MEMBER_EPOCH:
                self._timer.cancel(key)
            else:
                self._timer.schedule(key, now_ms + settings.session_timeout_ms)
        extra: dict[str, object] = {}
        if outcome.initialization is not None:
            extra[INITIALIZE_EXTRA] = (outcome.initialization,)
            self._timer.schedule((INIT_RETRY, req.group_id), now_ms + self._init_retry_ms)
        return CoordinatorResult(records=outcome.records, response=response, extra=extra)

    # ------------------------------------------------------------------ topic metadata

    def on_topics_changed(
        self, topics: TopicsImage, now_ms: int
    ) -> CoordinatorResult[r.Record, None]:
        """Topic created/deleted/grown: bump the epoch of every group whose subscribed-topic
        metadata hash changed and compute its new target; plan initialisation of new
        partitions. Members receive the change on their next heartbeat."""
        records: list[r.Record] = []
        inits: list[ShareStateInitialization] = []
        deletes: list[ShareStateDeletion] = []
        for gid in sorted(self._groups):
            txn = Txn(gid, self._groups[gid], records)
            if self._gated:
                deletion = hb.prune_state_metadata(txn, topics)
                if deletion is not None:
                    deletes.append(deletion)
            hb.bump_group_epoch(txn, topics, force=False)
            hb.maybe_compute_target(txn, topics, now_ms, gated=self._gated)
            init = hb.plan_initialization(txn, topics) if self._gated else None
            if init is not None:
                inits.append(init)
                self._timer.schedule((INIT_RETRY, gid), now_ms + self._init_retry_ms)
        if self._loaded:
            self.consumer.on_topics_changed(topics, now_ms, records)
        extra = initialize_extra(inits)
        if deletes:
            extra[DELETE_EXTRA] = tuple(deletes)
        return CoordinatorResult(records=tuple(records), extra=extra)

    def mark_deleted(
        self, group_id: str, topic_ids: Iterable[uuid.UUID]
    ) -> CoordinatorResult[r.Record, None]:
        """The share state of these deleted topics is gone: drop them from Deleting."""
        group = self._groups.get(group_id)
        if group is None:
            return CoordinatorResult()
        deleting = {t: n for t, n in group.deleting.items() if t not in set(topic_ids)}
        if deleting == dict(group.deleting):
            return CoordinatorResult()
        return CoordinatorResult(records=(hb.state_metadata_record(
            group_id, group.initializing, group.initialized, deleting),))

    # ------------------------------------------------------------------ initialisation

    def mark_initializing(
        self,
        group_id: str,
        partitions: Mapping[uuid.UUID, Iterable[int]],
        topics: TopicsImage,
        now_ms: int,
    ) -> CoordinatorResult[r.Record, InitializeResponse]:
        """Phase 1 by hand: record ``partitions`` as Initializing and return the request.

        Heartbeats and ``on_topics_changed`` already do this for subscribed partitions; this
        op is for explicit (re)initialisation. Partitions of unknown topics are ignored.
        """
        error = self._group_error(group_id)
        if error is not None:
            return CoordinatorResult(response=InitializeResponse(*error))
        txn = Txn(group_id, self._groups[group_id], [])
        init = hb.mark_initializing(txn, frozen_partitions(partitions), topics)
        if init is not None:
            self._timer.schedule((INIT_RETRY, group_id), now_ms + self._init_retry_ms)
        return CoordinatorResult(
            records=tuple(txn.records),
            response=InitializeResponse(ErrorCode.none, initialization=init),
            extra=initialize_extra([init] if init else []),
        )

    def mark_initialized(
        self,
        group_id: str,
        partitions: Mapping[uuid.UUID, Iterable[int]],
        topics: TopicsImage,
        now_ms: int,
    ) -> CoordinatorResult[r.Record, ErrorCode]:
        """Phase 2 success: the partitions' share state exists; make them assignable.

        Moves them from Initializing to Initialized (record 15), bumps the group epoch and
        recomputes the target assignment. Partitions of topics gone from ``topics`` are ignored.
        """
        error = self._group_error(group_id)
        if error is not None:
            return CoordinatorResult(response=error[0])
        group = self._groups[group_id]
        ids = topics.ids()
        initializing = dict(group.initializing)
        initialized = dict(group.initialized)
        for tid, parts in frozen_partitions(partitions).items():
            info = ids.get(tid)
            if info is None:
                continue
            parts = frozenset(p for p in parts if 0 <= p < info.num_partitions)
            busy = initializing.pop(tid, None)
            if busy is not None and busy.partitions - parts:
                initializing[tid] = PartitionSet(info.name, busy.partitions - parts)
            done = initialized.get(tid)
            merged = parts | (done.partitions if done else frozenset())
            if merged:
                initialized[tid] = PartitionSet(info.name, merged)
        if not initializing:
            self._timer.cancel((INIT_RETRY, group_id))  # nothing left to retry
        if initializing == dict(group.initializing) and initialized == dict(group.initialized):
            return CoordinatorResult(response=ErrorCode.none)
        txn = Txn(group_id, group, [])
        txn.emit(hb.state_metadata_record(group_id, initializing, initialized, group.deleting))
        if initialized != dict(group.initialized):
            # The assignable set grew: a new group epoch and target (reference section 5 step 3).
            hb.bump_group_epoch(txn, topics, force=True)
            hb.maybe_compute_target(txn, topics, now_ms, gated=self._gated)
        return CoordinatorResult(records=tuple(txn.records), response=ErrorCode.none)

    def mark_initialization_failed(
        self, group_id: str, partitions: Mapping[uuid.UUID, Iterable[int]]
    ) -> CoordinatorResult[r.Record, ErrorCode]:
        """Phase 2 failure: drop the partitions from Initializing; a later heartbeat retries."""
        error = self._group_error(group_id)
        if error is not None:
            return CoordinatorResult(response=error[0])
        group = self._groups[group_id]
        initializing = dict(group.initializing)
        for tid, parts in frozen_partitions(partitions).items():
            busy = initializing.pop(tid, None)
            if busy is not None and busy.partitions - parts:
                initializing[tid] = PartitionSet(busy.topic_name, busy.partitions - parts)
        if not initializing:
            self._timer.cancel((INIT_RETRY, group_id))  # the next heartbeat re-plans
        if initializing == dict(group.initializing):
            return CoordinatorResult(response=ErrorCode.none)
        record = hb.state_metadata_record(group_id, initializing, group.initialized, group.deleting)
        return CoordinatorResult(records=(record,), response=ErrorCode.none)

    # ------------------------------------------------------------------ delete

    def delete_group(self, group_id: str) -> CoordinatorResult[r.Record, DeleteGroupResponse]:
        """DeleteGroups for a share group: only an Empty group (else NON_EMPTY_GROUP).

        Tombstones every remaining record of the group, group metadata last (as Kafka orders
        them). The response lists the initialized share-partitions whose durable state the
        caller should delete through the persister.
        """
        if self._loaded and self.consumer.has(group_id):
            code, message, recs = self.consumer.delete_group(group_id)
            if code == ErrorCode.none and self.classic.pending.has_group(group_id):
                code, message = ErrorCode.non_empty_group, (
                    f"Consumer group {group_id} has offsets of an ongoing transaction.")
            if code != ErrorCode.none:
                return CoordinatorResult(response=DeleteGroupResponse(code, message))
            fx = cl.Effects()
            self.classic.delete_group(group_id, fx)  # its committed offsets
            return CoordinatorResult(records=(*fx.records, *recs),
                                     response=DeleteGroupResponse(ErrorCode.none))
        if self._loaded and group_id not in self._groups and self.classic.has(group_id):
            fx = cl.Effects()
            code = self.classic.delete_group(group_id, fx)
            message = None if code == ErrorCode.none else f"Group {group_id} is not empty."
            return CoordinatorResult(records=tuple(fx.records),
                                     response=DeleteGroupResponse(code, message))
        error = self._group_error(group_id)
        if error is not None:
            return CoordinatorResult(response=DeleteGroupResponse(*error))
        group = self._groups[group_id]
        if group.members:
            return CoordinatorResult(
                response=DeleteGroupResponse(
                    ErrorCode.non_empty_group, f"Share group {group_id} is not empty."
                )
            )
        records = [
            r.new_target_assignment_member_tombstone(group_id, m)
            for m in sorted(group.target_assignment)
        ]
        records.append(r.new_target_assignment_metadata_tombstone(group_id))
        records.append(r.new_state_partition_metadata_tombstone(group_id))
        records.append(r.new_share_group_metadata_tombstone(group_id))
        self._timer.cancel((INIT_RETRY, group_id))
        return CoordinatorResult(
            records=tuple(records),
            response=DeleteGroupResponse(
                ErrorCode.none, share_state_to_delete=group.initialized_partitions()
            ),
        )
