"""``ShareGroupService``: the asyncio shell around the sans-IO ``GroupCoordinatorShard``.

Concept (STYLE.md 1.1/1.6, after Kafka's ``GroupCoordinatorService`` and ``CoordinatorRuntime``):
the shard decides, this class does the I/O around it. One broker is the coordinator of every
group, so there is one shard (Kafka: one per ``__consumer_offsets`` partition).

Every write op (heartbeat, topic change, timer, share-state initialization answer) runs the same
way, one at a time (``_write`` holds a lock, so ops are serial as on Kafka's per-partition
executor):
1. call the shard op with ``now_ms`` from the broker clock and the current ``TopicsImage``;
2. append its records (``RecordLog.append``; see below), then replay each into the shard (the
   only mutator), then tell member listeners about removed members;
3. re-arm the single ``loop.call_later`` for ``shard.next_deadline()``; when it fires,
   ``shard.on_timer`` runs as a write op (session expiry fences members);
4. for each ``extra["initialize"]`` entry start an owned task that calls
   ``persister.initialize`` (StartOffset -1, StateEpoch = the group epoch) per partition, unless
   the persister already has state for it (``_initialize_one``), and then runs
   ``mark_initialized`` / ``mark_initialization_failed`` as write ops;
5. answer (respond after commit, STYLE.md 1.4).

Shoal extension, ``group.share.initialize.wait.ms`` (default 500, 0 = Kafka): a heartbeat
answered while its group has initializations in flight waits for them (bounded) and reconciles
the member once more before answering, so a joining member gets its partitions in the join
answer. Kafka answers at once with an empty assignment, and the partitions arrive one heartbeat
interval (5 s by default) later.

The seam for durability: ``RecordLog``. Today ``InMemoryRecordLog`` keeps nothing and commits at
once, so group membership lives as long as the process. When ``__consumer_offsets`` is written,
an implementation appends the encoded records (``coordinator/group/serde.py``) and returns once
they are durable; a failed append raises, nothing is replayed, and the op answers
COORDINATOR_NOT_AVAILABLE (Kafka maps failed appends the same way). Loading then replays the
partition and calls ``shard.on_loaded``.

Reads (describe, list, assignment lookups) read the replayed state directly.

Topic metadata: the broker calls ``topics_changed`` from create/delete/add-partitions; the cached
``TopicsImage`` is dropped and ``on_topics_changed`` runs as an op, so groups subscribed to a new
or grown topic get it (after its share state is initialized) on their next heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.group_configs import GroupConfigs, ShareGroupConfig
from broker.topics import Topic
from coordinator.group import records as r
from coordinator.group.assignor import TopicsImage
from coordinator.group.heartbeat import (
    HeartbeatRequest,
    HeartbeatResponse,
    ShareGroupSettings,
    ShareStateInitialization,
    error_response,
)
from coordinator.group.shard import (
    DescribeResult,
    GroupCoordinatorShard,
    ListedGroup,
    initializations,
)
from coordinator.runtime.result import CoordinatorResult
from persister.api import (
    UNINITIALIZED_START_OFFSET,
    InitializeParams,
    Persister,
    ReadParams,
    SharePartitionKey,
    WriteResult,
)

log = logging.getLogger("shoal.groups")

NO_LEADER_EPOCH = -1  # summaries do not fence on the leader epoch

MemberListener = Callable[[str, str], None]
"""Called with (group id, member id) after a member left or was fenced (session expiry)."""


class RecordLog(Protocol):
    """Where group coordinator records go before they are replayed (``__consumer_offsets``)."""

    async def append(self, records: Sequence[r.Record]) -> None:
        """Return once ``records`` are durable.

        Raises:
            Exception: the append failed; the caller replays nothing.
        """
        ...


class InMemoryRecordLog:
    """No log yet: records are committed as soon as they are produced (see module doc)."""

    async def append(self, records: Sequence[r.Record]) -> None:
        return None


class ShareGroupService:
    """Share-group membership for this broker (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Clock,
        broker_config: BrokerConfig,
        group_configs: GroupConfigs,
        persister: Persister,
        topics: Callable[[], Iterable[Topic]],
        record_log: RecordLog | None = None,
    ) -> None:
        """
        Args:
            topics: the broker's current topics (read when the cached image is stale).
            record_log: where records are appended; ``InMemoryRecordLog`` by default.
        """
        self._clock = clock
        self._broker_config = broker_config
        self._configs = group_configs
        self._persister = persister
        self._topics = topics
        self._log: RecordLog = record_log or InMemoryRecordLog()
        self._shard = GroupCoordinatorShard(
            group_config=self._settings,
            # No classic/consumer groups exist yet, so no group id belongs to another type.
            is_non_share_group=lambda _group_id: False,
            initialize_retry_interval_ms=broker_config.get(
                "group.share.initialize.retry.interval.ms"),
        )
        self._lock = asyncio.Lock()
        self._image: TopicsImage | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._armed: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Initialization tasks still running, by group (heartbeats may wait for them).
        self._pending_inits: dict[str, set[asyncio.Task[None]]] = {}
        self._member_listeners: list[MemberListener] = []
        self._stopped = False

    # ------------------------------------------------------------------ lifecycle

    async def stop(self) -> None:
        """Disarm the timer and cancel owned tasks (pending initializations are retried by the
        shard's init-retry logic if the state survives)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks.clear()

    # ------------------------------------------------------------------ configs and listeners

    def config(self, group_id: str) -> ShareGroupConfig:
        """The group's effective share configs (read per call; dynamic changes apply)."""
        return self._configs.get(group_id)

    def add_member_listener(self, cb: MemberListener) -> None:
        """Call ``cb(group_id, member_id)`` after a member leaves (epoch -1) or is fenced by
        session expiry. Runs on the event loop right after the records are applied; it must not
        block and should not raise (exceptions are logged)."""
        self._member_listeners.append(cb)

    # ------------------------------------------------------------------ reads

    def describe(self, group_ids: Iterable[str]) -> list[DescribeResult]:
        """ShareGroupDescribe: one result per id (GROUP_ID_NOT_FOUND for unknown ids)."""
        return [self._shard.describe(g) for g in group_ids]

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[ListedGroup]:
        """Share groups sorted by id, optionally filtered by state name (case-insensitive)."""
        return self._shard.list_groups(states_filter)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self._shard.group(group_id)
        return group is not None and member_id in group.members

    def assignment(self, group_id: str,
                   member_id: str) -> Mapping[uuid.UUID, frozenset[int]] | None:
        """The member's current assignment (topic id -> partitions), or None if not a member."""
        group = self._shard.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        return None if member is None else member.assigned_partitions

    def topics_image(self) -> TopicsImage:
        """The topic metadata the shard sees (cached until the topics change)."""
        if self._image is None:
            self._image = TopicsImage.of(
                {t.name: (t.topic_id, t.partitions) for t in self._topics()})
        return self._image

    @property
    def shard(self) -> GroupCoordinatorShard:
        """The underlying shard (read-only use: tests and diagnostics)."""
        return self._shard

    # ------------------------------------------------------------------ write ops

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        """ShareGroupHeartbeat; expected failures are error codes in the response.

        Shoal extension (``group.share.initialize.wait.ms``, 0 = Kafka's behaviour): while the
        group has share-state initializations in flight, wait for them (bounded) and then
        reconcile the member once more, so a joining member gets its partitions in this answer
        rather than one heartbeat interval later. The answer is one Kafka could give: the member's
        epoch and assignment after a heartbeat at the same epoch.
        """
        try:
            result = await self._write(
                lambda now: self._shard.share_group_heartbeat(req, self.topics_image(), now))
            response: HeartbeatResponse = result.response
            wait_ms = self._broker_config.get("group.share.initialize.wait.ms")
            pending = self._pending_inits.get(req.group_id)
            if pending and wait_ms > 0 and response.error_code == ErrorCode.none \
                    and response.member_epoch > 0:
                done, _ = await asyncio.wait(set(pending), timeout=wait_ms / 1000)
                if done:
                    response = await self._reconcile_again(req, response)
        except Exception:
            log.exception("share group heartbeat for group %s failed", req.group_id)
            return error_response(ErrorCode.coordinator_not_available,
                                  "The group coordinator could not store the change.")
        return response

    async def _reconcile_again(self, req: HeartbeatRequest,
                               first: HeartbeatResponse) -> HeartbeatResponse:
        again = HeartbeatRequest(group_id=req.group_id, member_id=req.member_id,
                                 member_epoch=first.member_epoch, client_id=req.client_id,
                                 client_host=req.client_host)
        result = await self._write(
            lambda now: self._shard.share_group_heartbeat(again, self.topics_image(), now))
        follow: HeartbeatResponse = result.response
        if follow.error_code != ErrorCode.none:  # e.g. fenced meanwhile: the first answer holds
            return first
        if follow.assignment is None:  # unchanged since the first answer
            return replace(follow, assignment=first.assignment)
        return follow

    def topics_changed(self, _name: str | None = None) -> None:
        """Topic created, deleted or grown: drop the image and recompute affected groups."""
        self._image = None
        if self._stopped:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # called outside the loop (e.g. a synchronous test): image only
            return
        self._spawn(self._run_op(
            "topic change", lambda now: self._shard.on_topics_changed(self.topics_image(), now)))

    # ------------------------------------------------------------------ the runtime

    async def _write(
        self, op: Callable[[int], CoordinatorResult[r.Record, Any]]
    ) -> CoordinatorResult[r.Record, Any]:
        """Run one write op: validate, append, replay, re-arm the timer, start initializations.

        Raises:
            Exception: the append failed (nothing was replayed).
        """
        async with self._lock:
            result = op(self._clock.now_ms())
            if result.records:
                await self._log.append(result.records)
                _log_membership(self._shard, result)
                for record in result.records:
                    self._shard.replay_record(record)
            self._rearm()
            for init in initializations(result):
                task = self._spawn(self._initialize(init))
                if task is not None:
                    self._track_initialization(init.group_id, task)
        if result.records:
            self._notify_removed_members(result.records)
        return result

    async def _run_op(self, what: str,
                      op: Callable[[int], CoordinatorResult[r.Record, Any]]) -> None:
        try:
            await self._write(op)
        except Exception:
            log.exception("group coordinator %s failed", what)

    def _settings(self, group_id: str) -> ShareGroupSettings:
        c = self._configs.get(group_id)
        return ShareGroupSettings(
            session_timeout_ms=c.session_timeout_ms,
            heartbeat_interval_ms=c.heartbeat_interval_ms,
            max_size=self._broker_config.get("group.share.max.size"),
        )

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        if self._stopped:
            coro.close()
            return None
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- timers

    def _rearm(self) -> None:
        deadline = self._shard.next_deadline()
        if deadline == self._armed and (deadline is None or self._timer is not None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed = deadline
        if deadline is None or self._stopped:
            return
        delay_s = max(0.0, (deadline - self._clock.now_ms()) / 1000)
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer_due)

    def _on_timer_due(self) -> None:
        self._timer = None
        self._armed = None
        self._spawn(self._run_op(
            "timer", lambda now: self._shard.on_timer(now, self.topics_image())))

    # -- share-state initialization (reference section 5, two-phase flow)

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
            await self._run_op("share-state initialization",
                               lambda now: self._shard.mark_initialized(
                                   gid, done, self.topics_image(), now))
        if failed:
            await self._run_op("share-state initialization failure",
                               lambda _now: self._shard.mark_initialization_failed(gid, failed))

    async def _initialize_one(self, key: SharePartitionKey, state_epoch: int) -> WriteResult:
        """InitializeShareGroupState for one share-partition, unless its state already exists.

        Bridge until group records are durable: the persister keeps share state across
        restarts but this coordinator does not yet remember which partitions it initialized.
        Initializing again would wipe consumption progress (or be fenced, with a lower group
        epoch than the stored state epoch), so existing state counts as initialized.
        """
        summary = await self._persister.read_summary(ReadParams(key, NO_LEADER_EPOCH))
        if summary.error == ErrorCode.none and (
                summary.state_epoch > 0 or summary.start_offset != UNINITIALIZED_START_OFFSET):
            return WriteResult(ErrorCode.none)
        return await self._persister.initialize(
            InitializeParams(key, state_epoch, UNINITIALIZED_START_OFFSET))

    # -- listeners

    def _notify_removed_members(self, records: Sequence[r.Record]) -> None:
        for record in records:
            if isinstance(record.key, r.ShareGroupMemberMetadataKey) and record.value is None:
                for cb in self._member_listeners:
                    try:
                        cb(record.key.group_id, record.key.member_id)
                    except Exception:
                        log.exception("member listener failed for group %s member %s",
                                      record.key.group_id, record.key.member_id)


def _log_membership(shard: GroupCoordinatorShard, result: CoordinatorResult[r.Record, Any]) -> None:
    """Log members joining, leaving and expiring (operator events, with group/member context).

    Called after the append and before replay, so a member the shard does not know yet is new.
    """
    expired = set(getattr(result.response, "expired_members", ()))
    for record in result.records:
        key = record.key
        if not isinstance(key, r.ShareGroupMemberMetadataKey):
            continue
        gid, mid = key.group_id, key.member_id
        value = record.value
        if value is None:
            if (gid, mid) in expired:
                log.warning("member %s of share group %s expired: no heartbeat within the session "
                            "timeout", mid, gid,
                            extra={"event": "member_expired", "group": gid, "member": mid})
            else:
                log.info("member %s left share group %s", mid, gid,
                         extra={"event": "member_left", "group": gid, "member": mid})
            continue
        group = shard.group(gid)
        if isinstance(value, r.ShareGroupMemberMetadataValue) and (
                group is None or mid not in group.members):
            log.info("member %s joined share group %s (client %s at %s, topics %s)", mid, gid,
                     value.client_id, value.client_host, ",".join(value.subscribed_topic_names),
                     extra={"event": "member_joined", "group": gid, "member": mid})
