"""Classic-group operations of the group coordinator service (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup; ``coordinator/group/classic/group.py`` holds the state machine). A request whose
answer comes later (a JoinGroup waiting for the rebalance, a follower's SyncGroup waiting for
the leader) registers a waiter id and a future before its op runs; the shard delivers the
answer through ``_deliver`` after the records it depends on are committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group.classic import group as cl
from coordinator.group.service_base import GroupServiceBase
from coordinator.group.shard import GroupCoordinatorShard
from coordinator.runtime.loop import CoordinatorFailure

log = logging.getLogger("shoal.groups")


class ClassicGroupOps(GroupServiceBase):
    """Classic groups (see the module doc)."""

    def _classic_settings(self, _group_id: str) -> cl.ClassicSettings:
        get = self._broker_config.get
        return cl.ClassicSettings(
            min_session_timeout_ms=get("group.min.session.timeout.ms"),
            max_session_timeout_ms=get("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms"),
            max_size=get("group.max.size"),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes"),
            offsets_retention_ms=get("offsets.retention.minutes") * 60_000,
            offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms"),
            max_record_bytes=get("message.max.bytes"),
        )

    def _deliver(self, waiter: int, response: Any) -> None:
        fut = self._waiters.pop(waiter, None)
        if fut is not None and not fut.done():
            fut.set_result(response)

    async def _deferred(self, group_id: str, op: Callable[[GroupCoordinatorShard, int, int], Any],
                        timeout_ms: int, failure: Callable[[ErrorCode], Any]) -> Any:
        """Run a classic op that may answer later (``classic.PENDING``); wait for its answer
        at most ``timeout_ms`` (then ``failure(REBALANCE_IN_PROGRESS)``: the client rejoins)."""
        self._next_waiter += 1
        waiter = self._next_waiter
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = fut
        try:
            out = await self._write(group_id, lambda shard, now: op(shard, waiter, now))
            if isinstance(out, CoordinatorFailure):
                return failure(out.error)
            if out is not cl.PENDING:
                return out
            try:
                res = await asyncio.wait_for(fut, timeout_ms / 1000)
            except TimeoutError:
                return failure(ErrorCode.rebalance_in_progress)
            return failure(ErrorCode.not_coordinator) if res is cl.PENDING else res
        finally:
            self._waiters.pop(waiter, None)

    async def join_group(self, req: cl.JoinRequest) -> cl.JoinResponse:
        """JoinGroup; answers once the rebalance completes (or at once for errors)."""
        timeout = max(req.rebalance_timeout_ms, req.session_timeout_ms) + 5000
        res: cl.JoinResponse = await self._deferred(
            req.group_id, lambda shard, w, now: shard.classic_join(req, w, now, self.topics_image()), timeout,
            lambda e: cl.JoinResponse(e, member_id=req.member_id))
        return res

    async def sync_group(self, req: cl.SyncRequest, timeout_ms: int) -> cl.SyncResponse:
        """SyncGroup; a follower's answer waits for the leader's assignment."""
        res: cl.SyncResponse = await self._deferred(
            req.group_id, lambda shard, w, now: shard.classic_sync(req, w, now, self.topics_image()), timeout_ms,
            cl.SyncResponse)
        return res

    async def classic_heartbeat(self, group_id: str, member_id: str, generation: int,
                                instance_id: str | None) -> ErrorCode:
        out = await self._write(group_id, lambda shard, now: shard.classic_heartbeat(
            group_id, member_id, generation, instance_id, now))
        code: ErrorCode = out.error if isinstance(out, CoordinatorFailure) else out
        return code

    async def leave_group(self, group_id: str,
                          members: tuple[cl.LeaveMember, ...]) -> cl.LeaveResponse:
        out = await self._write(group_id, lambda shard, now: shard.classic_leave(
            group_id, members, now))
        if isinstance(out, CoordinatorFailure):
            return cl.LeaveResponse(out.error, tuple((m, out.error) for m in members))
        res: cl.LeaveResponse = out
        return res

    def classic_exists(self, group_id: str) -> bool:
        shard = self.shard_for(group_id)
        return shard is not None and shard.classic.has(group_id)

    def describe_classic(self, group_id: str) -> cl.ClassicDescription | None:
        shard = self.shard_for(group_id)
        return None if shard is None else shard.describe_classic(group_id)
