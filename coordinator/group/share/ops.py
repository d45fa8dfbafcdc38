"""Share-group operations of the group coordinator service (KIP-932; see
``coordinator/group/service.py`` for the whole): ShareGroupHeartbeat (with the bounded wait for
in-flight share-state initialisations), ShareGroupDescribe, DeleteGroups, topic changes, the
two-phase share-state initialisation and the deletion of deleted topics' share state through the
persister, and the member listeners.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from kio.schema.errors import ErrorCode

from coordinator.group.service_base import (
    GroupServiceBase,
    MemberListener,
    ShareGroupTimeouts,
    wrap_op,
)
from coordinator.group.shard import (
    DeleteGroupResponse,
    DescribeResult,
    GroupCoordinatorShard,
)
from coordinator.group.share.heartbeat import (
    HeartbeatRequest,
    HeartbeatResponse,
    ShareGroupSettings,
    ShareStateDeletion,
    ShareStateInitialization,
    error_response,
)
from coordinator.runtime.loop import CoordinatorFailure, PartitionStatus
from coordinator.share.state import NO_LEADER_EPOCH
from persister.api import (
    UNINITIALIZED_START_OFFSET,
    DeleteParams,
    InitializeParams,
    ReadParams,
    SharePartitionKey,
    WriteResult,
)

log = logging.getLogger("shoal.groups")


class ShareGroupOps(GroupServiceBase):
    """Share groups (see the module doc)."""

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        """ShareGroupHeartbeat; expected failures are error codes in the response.

        Shoal extension (``group.share.initialize.wait.ms``, 0 = Kafka's behaviour): while the
        group has share-state initializations in flight, wait for them (bounded) and then
        reconcile the member once more, so a joining member gets its partitions in this answer
        rather than one heartbeat interval later. The answer is one Kafka could give: the member's
        epoch and assignment after a heartbeat at the same epoch.
        """
        leave = (req.group_id, req.member_id)
        if req.member_epoch == -1:
            self._leaving.add(leave)
        try:
            out = await self._write(req.group_id, lambda shard, now: shard.share_group_heartbeat(
                req, self.topics_image(), now))
        finally:
            self._leaving.discard(leave)
        if isinstance(out, CoordinatorFailure):
            return error_response(out.error, out.message)
        response: HeartbeatResponse = out
        if req.member_epoch == 0 and response.error_code == ErrorCode.none:
            log.info("member %s joined share group %s (client %s at %s, topics %s)",
                     response.member_id, req.group_id, req.client_id, req.client_host,
                     ",".join(req.subscribed_topic_names or ()),
                     extra={"event": "member_joined", "group": req.group_id,
                            "member": response.member_id})
        wait_ms = self._broker_config.get("group.share.initialize.wait.ms")
        pending = self._pending_inits.get(req.group_id)
        if pending and wait_ms > 0 and response.error_code == ErrorCode.none \
                and response.member_epoch > 0:
            done, _ = await asyncio.wait(set(pending), timeout=wait_ms / 1000)
            if done:
                response = await self._reconcile_again(req, response)
        return response

    async def _reconcile_again(self, req: HeartbeatRequest,
                               first: HeartbeatResponse) -> HeartbeatResponse:
        again = HeartbeatRequest(group_id=req.group_id, member_id=req.member_id,
                                 member_epoch=first.member_epoch, client_id=req.client_id,
                                 client_host=req.client_host)
        out = await self._write(req.group_id, lambda shard, now: shard.share_group_heartbeat(
            again, self.topics_image(), now))
        if isinstance(out, CoordinatorFailure) or out.error_code != ErrorCode.none:
            return first  # e.g. fenced meanwhile: the first answer holds
        follow: HeartbeatResponse = out
        if follow.assignment is None:  # unchanged since the first answer
            return replace(follow, assignment=first.assignment)
        return follow

    async def delete_group(self, group_id: str) -> DeleteGroupResponse:
        """DeleteGroups for a share group (Empty groups only; see the shard). The response lists
        the share-partitions whose durable state the caller should delete."""
        out = await self._write(group_id, lambda shard, _now: shard.delete_group(group_id))
        if isinstance(out, CoordinatorFailure):
            return DeleteGroupResponse(out.error, out.message)
        response: DeleteGroupResponse = out
        return response

    def describe(self, group_ids: Iterable[str]) -> list[DescribeResult]:
        """ShareGroupDescribe: one result per id (GROUP_ID_NOT_FOUND for unknown ids,
        COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR when its partition is not served)."""
        return self._describe_each(group_ids, GroupCoordinatorShard.describe, DescribeResult)

    def has_members(self, group_id: str) -> bool:
        """Whether the committed group has members (False for an unknown group; True while the
        group's partition is not served, so nothing is taken for empty that may not be)."""
        p = self.partition_for(group_id)
        if self.runtime.status(p) is not PartitionStatus.ACTIVE:
            return True
        group = self._committed_group(group_id)
        return group is not None and bool(group.members)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self._committed_group(group_id)
        return group is not None and member_id in group.members

    def assignment(self, group_id: str,
                   member_id: str) -> Mapping[uuid.UUID, frozenset[int]] | None:
        """The member's committed assignment (topic id -> partitions), or None if not a member."""
        group = self._committed_group(group_id)
        member = group.members.get(member_id) if group is not None else None
        return None if member is None else member.assigned_partitions

    # ------------------------------------------------------------------ topic changes

    def topics_changed(self, _name: str | None = None) -> None:
        """Topic created, deleted or grown: drop the image and recompute affected groups."""
        self._image = None
        self._image_version = None
        if self._stopped:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # called outside the loop (e.g. a synchronous test): image only
            return
        self._spawn(self._on_topics_changed())

    async def _on_topics_changed(self) -> None:
        op = wrap_op(lambda shard, now: shard.on_topics_changed(self.topics_image(), now))
        served = [p for p in self.runtime.partitions()
                  if self.runtime.status(p) is PartitionStatus.ACTIVE]
        outs = await self.runtime.write_each({p: (op,) for p in served})
        for p, (out,) in outs.items():
            if isinstance(out, CoordinatorFailure):
                log.warning("group coordinator partition %d: topic change not applied: %s %s",
                            p, out.error.name, out.message)
            else:
                self._start_initializations(out.initializations)
                self._start_deletions(out.deletions)

    # ------------------------------------------------------------------ configs and listeners

    def config(self, group_id: str) -> ShareGroupTimeouts:
        """The group's effective share configs (read per call; dynamic changes apply)."""
        return self._configs.get(group_id)

    def _settings(self, group_id: str) -> ShareGroupSettings:
        c = self._configs.get(group_id)
        return ShareGroupSettings(
            session_timeout_ms=c.session_timeout_ms,
            heartbeat_interval_ms=c.heartbeat_interval_ms,
            max_size=self._broker_config.get("group.share.max.size"),
        )

    def add_member_listener(self, cb: MemberListener) -> None:
        """Call ``cb(group_id, member_id)`` once a member's leave (epoch -1) or session-expiry
        fencing is durable. Runs on the event loop in the runtime's commit path (before the
        leave is answered); it must not block and should not raise (exceptions are logged)."""
        self._member_listeners.append(cb)

    def _member_removed(self, group_id: str, member_id: str) -> None:
        if (group_id, member_id) in self._leaving:
            log.info("member %s left share group %s", member_id, group_id,
                     extra={"event": "member_left", "group": group_id, "member": member_id})
        else:
            log.warning("member %s of share group %s expired: no heartbeat within the session "
                        "timeout", member_id, group_id,
                        extra={"event": "member_expired", "group": group_id, "member": member_id})
        for cb in self._member_listeners:
            try:
                cb(group_id, member_id)
            except Exception:
                log.exception("member listener failed for group %s member %s", group_id,
                              member_id)

    # -- share-state initialization (reference section 5, two-phase flow)

    def _start_initializations(self, inits: Sequence[ShareStateInitialization]) -> None:
        for init in inits:
            task = self._spawn(self._initialize(init))
            if task is not None:
                self._track_initialization(init.group_id, task)

    def _track_initialization(self, group_id: str, task: asyncio.Task[None]) -> None:
        pending = self._pending_inits.setdefault(group_id, set())
        pending.add(task)

        def forget(t: asyncio.Task[None]) -> None:
            pending.discard(t)
            if not pending and self._pending_inits.get(group_id) is pending:
                del self._pending_inits[group_id]

        task.add_done_callback(forget)

    async def _initialize(self, init: ShareStateInitialization) -> None:
        keys = [(tid, p) for tid, parts in sorted(init.partitions.items()) for p in sorted(parts)]
        results = await asyncio.gather(
            *(self._initialize_one(SharePartitionKey(init.group_id, tid, p), init.state_epoch)
              for tid, p in keys),
            return_exceptions=True)
        done: dict[uuid.UUID, set[int]] = {}
        failed: dict[uuid.UUID, set[int]] = {}
        for (tid, p), res in zip(keys, results, strict=True):
            if isinstance(res, BaseException):
                if isinstance(res, asyncio.CancelledError):
                    raise res
                log.error("initializing share state of group %s partition %s-%d failed",
                          init.group_id, tid, p, exc_info=res)
                failed.setdefault(tid, set()).add(p)
            elif res.error != ErrorCode.none:
                log.warning("initializing share state of group %s partition %s-%d: %s %s",
                            init.group_id, tid, p, res.error.name, res.error_message or "")
                failed.setdefault(tid, set()).add(p)
            else:
                done.setdefault(tid, set()).add(p)
        gid = init.group_id
        if done:
            await self._write(gid, lambda shard, now: shard.mark_initialized(
                gid, done, self.topics_image(), now))
        if failed:
            await self._write(gid, lambda shard, _now: shard.mark_initialization_failed(
                gid, failed))

    async def _initialize_one(self, key: SharePartitionKey, state_epoch: int) -> WriteResult:
        """InitializeShareGroupState for one share-partition that is not Initialized yet, unless
        it already has state.

        Only partitions the shard recorded as Initializing get here, but such a partition can
        already hold state and progress: the answer to an earlier initialisation was lost (a
        restart or the retry timer re-planned it), and any member may fetch a partition that is
        not assigned to it. Initializing again would reset that progress and raise the state
        epoch under the loaded share-partition (its writes would then be fenced), so existing
        state is kept and the partition simply becomes Initialized. The check reads with no
        leader epoch (-1), which fences nobody.
        """
        existing = await self._persister.read(ReadParams(key, NO_LEADER_EPOCH))
        if existing.error == ErrorCode.none:
            log.info("share state of group %s partition %s-%d already exists (start offset %d); "
                     "keeping it", key.group_id, key.topic_id, key.partition,
                     existing.start_offset)
            return WriteResult(ErrorCode.none)
        if existing.error != ErrorCode.invalid_request:  # invalid_request: no state yet
            return WriteResult(existing.error, existing.error_message)
        return await self._persister.initialize(
            InitializeParams(key, state_epoch, UNINITIALIZED_START_OFFSET))

    # -- share state of deleted topics (Kafka's DeletingTopics in record 15)

    def _start_deletions(self, dels: Sequence[ShareStateDeletion]) -> None:
        for d in dels:
            self._spawn(self._delete_state(d))

    async def _delete_state(self, d: ShareStateDeletion) -> None:
        """DeleteShareGroupState for the share-partitions of deleted topics, then drop the topics
        from Deleting. A topic whose deletion fails stays Deleting and is retried at the next
        topic change or load (the share coordinator also sweeps deleted topics' keys)."""
        keys = [SharePartitionKey(d.group_id, tid, p)
                for tid, parts in sorted(d.partitions.items()) for p in sorted(parts)]
        results = await asyncio.gather(*(self._persister.delete(DeleteParams(k)) for k in keys),
                                       return_exceptions=True)
        failed: set[uuid.UUID] = set()
        for key, res in zip(keys, results, strict=True):
            if isinstance(res, BaseException):
                if isinstance(res, asyncio.CancelledError):
                    raise res
                log.error("deleting share state of group %s partition %s-%d failed",
                          d.group_id, key.topic_id, key.partition, exc_info=res)
                failed.add(key.topic_id)
            elif res.error not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition):
                # UNKNOWN_TOPIC_OR_PARTITION: the topic is gone and so is any state.
                log.warning("deleting share state of group %s partition %s-%d: %s %s; it is "
                            "retried at the next topic change or restart", d.group_id,
                            key.topic_id, key.partition, res.error.name, res.error_message or "")
                failed.add(key.topic_id)
        done = [tid for tid in d.partitions if tid not in failed]
        if done:
            gid = d.group_id
            await self._write(gid, lambda shard, _now: shard.mark_deleted(gid, done))
            log.info("share state of group %s for deleted topic(s) %s deleted", gid,
                     ", ".join(str(t) for t in done), extra={"group": gid})

    # -- listeners
