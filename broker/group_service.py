"""``ShareGroupService``: share groups over ``__consumer_offsets``, through the coordinator runtime.

It also serves classic consumer groups and committed offsets (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit/Fetch/Delete) on the same shards (``coordinator/group/classic.py``,
``coordinator/group/offsets.py``), and
consumer-protocol (KIP-848) groups (ConsumerGroupHeartbeat/Describe,
``coordinator/group/consumer_groups.py``); their regex subscriptions are resolved against
``topics_version()``, a fingerprint of the topic names and ids.
A classic request whose answer comes later (a JoinGroup waiting for the rebalance, a follower's
SyncGroup waiting for the leader) registers a waiter id and a future before its op runs; the
shard delivers the answer through ``_deliver`` (after the records it depends on are committed).

Concept (STYLE.md 1.3-1.6, after Kafka's ``GroupCoordinatorService``): one
``GroupCoordinatorShard`` per ``__consumer_offsets`` partition, driven by a ``CoordinatorRuntime``
(``coordinator/runtime/loop.py``) that runs each partition's ops one at a time, appends their
ShareGroup* records (``coordinator/group/serde.py``), fsyncs with group commit, and releases the
responses after commit; a failed append or fsync reverts the shard (and the op answers
COORDINATOR_NOT_AVAILABLE). A group lives on partition ``abs(hashCode(groupId)) % partitions``
(``coordinator/group/placement.py``), so ops of different groups on different partitions run in
parallel and ops of one group are serial. There is no lock here.

Lifecycle: ``open_share_groups`` creates ``__consumer_offsets`` if needed and loads every
partition in parallel before the broker listens; the runtime replays each log and calls
``on_loaded``, which re-arms session timers (members get a fresh session timeout) and retries
Initializing share-partitions. A partition that is (re)loading answers
COORDINATOR_LOAD_IN_PROGRESS (heartbeat, describe, ListGroups), one this broker does not hold
NOT_COORDINATOR. Timers (session expiry, initialisation retry) are armed and run by the runtime.

Write ops (heartbeat, topic change, share-state initialisation answers, delete):
1. the shard op runs with ``now_ms`` and the current ``TopicsImage``; the runtime appends and
   replays its records and answers after commit;
2. then, for each ``initializations(result)`` entry, an owned task sends InitializeShareGroupState
   (StartOffset -1, StateEpoch = the group epoch) per share-partition through the persister, and
   runs ``mark_initialized`` / ``mark_initialization_failed`` as write ops (reference section 5,
   two-phase flow: Initializing is durable before the request goes out, Initialized before the
   partition is assigned). Initialized partitions are never initialized again while the group
   exists, so consumption progress survives restarts;
3. member listeners hear about a member removed by a leave or session expiry once the removal is
   durable (the shard reports it from ``commit``).

Shoal extension, ``group.share.initialize.wait.ms`` (default 500, 0 = Kafka): a heartbeat
answered while its group has initializations in flight waits for them (bounded) and reconciles
the member once more before answering, so a joining member gets its partitions in the join
answer. Kafka answers at once with an empty assignment, and the partitions arrive one heartbeat
interval (5 s by default) later.

Transactions (issue 15; Kafka ``GroupCoordinatorService.commitTransactionalOffsets`` and
``completeTransaction``): ``txn_commit_offsets`` runs the shard's TxnOffsetCommit op as a
transactional write of the producer (``CoordinatorRuntime.write_transactional``), so its offsets
stay pending until ``complete_transaction`` writes the producer's COMMIT or ABORT marker into the
partition (called by the transaction coordinator at EndTxn for the partitions AddOffsetsToTxn
added).

Reads (describe, list, membership and assignment lookups) use the shards' committed view.

Topic metadata: the broker calls ``topics_changed`` from create/delete/add-partitions; the cached
``TopicsImage`` is dropped and ``on_topics_changed`` runs on every partition, so groups subscribed
to a new or grown topic get it (after its share state is initialized) on their next heartbeat.

Log size: the runtime prunes a partition's log below the shard's ``last_redundant_offset`` (the
oldest latest-record of a live key); Kafka compacts ``__consumer_offsets`` instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from broker.clock import Clock
from broker.config import BrokerConfig, consumer_assignors
from broker.group_configs import GroupConfigs, ShareGroupConfig
from broker.log.topics import Topic
from coordinator.group import classic as cl
from coordinator.group import consumer_heartbeat as ch
from coordinator.group import offsets as off
from coordinator.group import records as r
from coordinator.group.assignor import TopicsImage
from coordinator.group.heartbeat import (
    HeartbeatRequest,
    HeartbeatResponse,
    ShareGroupSettings,
    ShareStateDeletion,
    ShareStateInitialization,
    error_response,
)
from coordinator.group.placement import DEFAULT_NUM_PARTITIONS, partition_for_group
from coordinator.group.serde import GroupRecordSerde
from coordinator.group.shard import GROUP_TYPE as SHARE_GROUP_TYPE
from coordinator.group.shard import (
    ConsumerDescribeResult,
    DeleteGroupResponse,
    DescribeResult,
    GroupCoordinatorShard,
    ListedGroup,
    deletions,
    initializations,
)
from coordinator.runtime.loop import CoordinatorFailure, CoordinatorRuntime, Op, PartitionStatus
from coordinator.runtime.result import CoordinatorResult
from coordinator.share.state import NO_LEADER_EPOCH
from persister.api import (
    UNINITIALIZED_START_OFFSET,
    DeleteParams,
    InitializeParams,
    Persister,
    ReadParams,
    SharePartitionKey,
    WriteResult,
)
from storage.log import PartitionLogLike

if TYPE_CHECKING:
    from broker.app import Broker

log = logging.getLogger("shoal.groups")

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
# segment.bytes of __consumer_offsets when we create it (Kafka: offsets.topic.segment.bytes,
# 100 MiB). Pruning deletes whole segments, so this bounds the redundant bytes kept.
OFFSETS_SEGMENT_BYTES = 1 << 20
# Group records are rare (joins, leaves, assignment changes), so every append is fsynced
# (group commit) before the heartbeat is answered.
GROUP_APPEND_FSYNC = True

MemberListener = Callable[[str, str], None]
_Described = TypeVar("_Described")
"""Called with (group id, member id) after a member left or was fenced (session expiry)."""

ShardOp = Callable[[GroupCoordinatorShard, int], CoordinatorResult[r.Record, Any]]


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What a wrapped op hands back through the runtime: its response and the share-state
    initialisations and deletions to start once its records are committed."""

    response: Any
    initializations: tuple[ShareStateInitialization, ...]
    deletions: tuple[ShareStateDeletion, ...] = ()


def _wrap(op: ShardOp) -> Op[GroupCoordinatorShard]:
    def run(shard: GroupCoordinatorShard, now_ms: int) -> CoordinatorResult[r.Record, _Outcome]:
        result = op(shard, now_ms)
        return CoordinatorResult(records=result.records, response=_Outcome(
            result.response, initializations(result), deletions(result)))

    return run


@dataclass(frozen=True, slots=True)
class ConsumerGroupView:
    """A consumer group as the metrics see it (``ShareGroupService.consumer_groups``).
    ``members`` is None for a group type whose members this service cannot count yet."""

    group_id: str
    group_type: str
    state: str
    members: int | None
    offsets: tuple[off.FetchedOffset, ...]


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
        num_partitions: int = DEFAULT_NUM_PARTITIONS,
        fsync: bool = GROUP_APPEND_FSYNC,
    ) -> None:
        """
        Args:
            topics: the broker's current topics (read when the cached image is stale).
            num_partitions: partitions of ``__consumer_offsets`` (the topic's actual count).
            fsync: fsync appends before answering (see ``CoordinatorRuntime``).

        Raises:
            ValueError: ``num_partitions`` is not positive.
        """
        if num_partitions <= 0:
            raise ValueError("num_partitions must be positive")
        self._clock = clock
        self._broker_config = broker_config
        self._configs = group_configs
        self._persister = persister
        self._topics = topics
        self.num_partitions = num_partitions
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
            self._new_shard, GroupRecordSerde(), clock_ms=clock.now_ms, fsync=fsync,
            name="group-coordinator")
        self.load_ms: float | None = None
        self._image: TopicsImage | None = None
        self._image_version: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Initialization tasks still running, by group (heartbeats may wait for them).
        self._pending_inits: dict[str, set[asyncio.Task[None]]] = {}
        self._member_listeners: list[MemberListener] = []
        self._leaving: set[tuple[str, str]] = set()  # leave heartbeats in flight (for logs)
        self._consumer_leaving: set[tuple[str, str]] = set()
        self._stopped = False
        # Classic-group requests waiting for a deferred answer (JoinGroup, follower SyncGroup).
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        self._next_waiter = 0

    def _new_shard(self, _partition: int) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(
            group_config=self._settings,
            # No classic/consumer groups exist yet, so no group id belongs to another type.
            is_non_share_group=lambda _group_id: False,
            initialize_retry_interval_ms=self._broker_config.get(
                "group.share.initialize.retry.interval.ms"),
            loading=True,
            on_member_removed=self._member_removed,
            classic_config=self._classic_settings,
            deliver=self._deliver,
            consumer_config=self._consumer_settings,
            on_consumer_member_removed=self._consumer_member_removed,
        )

    def _consumer_member_removed(self, group_id: str, member_id: str) -> None:
        if (group_id, member_id) in self._consumer_leaving:
            return  # logged by consumer_heartbeat
        log.warning("member %s of consumer group %s was removed: no heartbeat within its session "
                    "timeout, or it did not revoke partitions within its rebalance timeout",
                    member_id, group_id, extra={"event": "member_expired", "group": group_id,
                                                "member": member_id})

    def _consumer_settings(self, group_id: str) -> ch.ConsumerGroupSettings:
        get = self._broker_config.get
        session, heartbeat = self._configs.consumer_timeouts(group_id)
        return ch.ConsumerGroupSettings(
            session_timeout_ms=session, heartbeat_interval_ms=heartbeat,
            settling_heartbeat_interval_ms=get("group.consumer.settling.heartbeat.interval.ms"),
            max_size=get("group.consumer.max.size"),
            assignors=consumer_assignors(get("group.consumer.assignors")))

    def _classic_settings(self, _group_id: str) -> cl.ClassicSettings:
        get = self._broker_config.get
        return cl.ClassicSettings(
            min_session_timeout_ms=get("group.min.session.timeout.ms"),
            max_session_timeout_ms=get("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms"),
            max_size=get("group.max.size"),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes"),
            offsets_retention_ms=get("offsets.retention.minutes") * 60_000,
            max_record_bytes=get("message.max.bytes"),
        )

    def _deliver(self, waiter: int, response: Any) -> None:
        fut = self._waiters.pop(waiter, None)
        if fut is not None and not fut.done():
            fut.set_result(response)

    # ------------------------------------------------------------------ classic groups

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
            req.group_id, lambda shard, w, now: shard.classic_join(req, w, now), timeout,
            lambda e: cl.JoinResponse(e, member_id=req.member_id))
        return res

    async def sync_group(self, req: cl.SyncRequest, timeout_ms: int) -> cl.SyncResponse:
        """SyncGroup; a follower's answer waits for the leader's assignment."""
        res: cl.SyncResponse = await self._deferred(
            req.group_id, lambda shard, w, now: shard.classic_sync(req, w, now), timeout_ms,
            cl.SyncResponse)
        return res

    async def classic_heartbeat(self, group_id: str, member_id: str, generation: int,
                                instance_id: str | None) -> ErrorCode:
        out = await self._write(group_id, lambda shard, now: shard.classic_heartbeat(
            group_id, member_id, generation, instance_id, now))
        return out.error if isinstance(out, CoordinatorFailure) else out  # type: ignore[no-any-return]

    async def leave_group(self, group_id: str,
                          members: tuple[cl.LeaveMember, ...]) -> cl.LeaveResponse:
        out = await self._write(group_id, lambda shard, now: shard.classic_leave(
            group_id, members, now))
        if isinstance(out, CoordinatorFailure):
            return cl.LeaveResponse(out.error, tuple((m, out.error) for m in members))
        res: cl.LeaveResponse = out
        return res

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
            _wrap(lambda shard, now: shard.txn_commit_offsets(
                group_id, producer_id, producer_epoch, member_id, generation, instance_id,
                parts, now)))
        if isinstance(out, CoordinatorFailure):
            error = self._failure_code(group_id, out)
            log.warning("TxnOffsetCommit of transactional id %s (producer %d, epoch %d) for "
                        "group %s not written: %s %s", transactional_id, producer_id,
                        producer_epoch, group_id, error.name, out.message)
            return off.OffsetCommitResponse(error, tuple((p.topic, p.partition, error)
                                                        for p in parts))
        assert isinstance(out, _Outcome)
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

    # ------------------------------------------------------------------ consumer groups (KIP-848)

    async def consumer_heartbeat(self, req: ch.ConsumerHeartbeatRequest,
                                 allowed: ch.TopicFilter | None = None
                                 ) -> ch.ConsumerHeartbeatResponse:
        """ConsumerGroupHeartbeat; expected failures are error codes in the response.
        ``allowed`` narrows regex matches to the topics the principal may DESCRIBE."""
        leave = (req.group_id, req.member_id)
        if req.member_epoch < 0:
            self._consumer_leaving.add(leave)
        try:
            out = await self._write(req.group_id, lambda shard, now: shard.consumer_group_heartbeat(
                req, self.topics_image(), now, topics_version=self.topics_version(),
                allowed=allowed))
        finally:
            self._consumer_leaving.discard(leave)
        if isinstance(out, CoordinatorFailure):
            return ch.error_response(out.error, out.message)
        response: ch.ConsumerHeartbeatResponse = out
        if response.error_code == ErrorCode.none:
            if req.member_epoch == 0:
                log.info("member %s joined consumer group %s (client %s at %s)",
                         response.member_id, req.group_id, req.client_id, req.client_host,
                         extra={"event": "member_joined", "group": req.group_id,
                                "member": response.member_id})
            elif req.member_epoch < 0:
                log.info("member %s left consumer group %s", response.member_id, req.group_id,
                         extra={"event": "member_left", "group": req.group_id,
                                "member": response.member_id})
        return response

    def describe_consumer(self, group_ids: Iterable[str]) -> list[ConsumerDescribeResult]:
        """ConsumerGroupDescribe: one result per id (GROUP_ID_NOT_FOUND for unknown, share and
        classic ids; COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR when not served)."""
        return self._describe_each(group_ids, GroupCoordinatorShard.describe_consumer,
                                   ConsumerDescribeResult)

    def consumer_exists(self, group_id: str) -> bool:
        shard = self.shard_for(group_id)
        return shard is not None and shard.consumer.committed_group(group_id) is not None

    def topics_version(self) -> int:
        """Identifies the set of topics (names and ids) of the current image; a regex resolved
        against another version is resolved again. Stable across restarts."""
        if self._image_version is None:
            image = self.topics_image()
            parts = sorted(f"{n}\x00{info.topic_id}" for n, info in image.by_name.items())
            digest = hashlib.blake2b("\x01".join(parts).encode(), digest_size=8).digest()
            self._image_version = int.from_bytes(digest, "big", signed=True)
        return self._image_version

    def classic_exists(self, group_id: str) -> bool:
        shard = self.shard_for(group_id)
        return shard is not None and shard.classic.has(group_id)

    def describe_classic(self, group_id: str) -> cl.ClassicDescription | None:
        shard = self.shard_for(group_id)
        return None if shard is None else shard.describe_classic(group_id)

    # ------------------------------------------------------------------ lifecycle

    async def load(self, log_for: Callable[[int], PartitionLogLike]) -> float:
        """Load every partition in parallel; returns the ms taken. A partition that fails to
        load answers NOT_COORDINATOR (logged by the runtime)."""
        self.load_ms = await self.runtime.load_many(
            {p: log_for(p) for p in range(self.num_partitions)})
        return self.load_ms

    async def stop(self) -> None:
        """Cancel owned tasks (Initializing partitions are retried after the next load), then
        stop the runtime: what is appended is flushed and answered, the rest NOT_COORDINATOR."""
        self._stopped = True
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
        await self.runtime.close()

    # ------------------------------------------------------------------ configs and listeners

    def config(self, group_id: str) -> ShareGroupConfig:
        """The group's effective share configs (read per call; dynamic changes apply)."""
        return self._configs.get(group_id)

    def add_member_listener(self, cb: MemberListener) -> None:
        """Call ``cb(group_id, member_id)`` once a member's leave (epoch -1) or session-expiry
        fencing is durable. Runs on the event loop in the runtime's commit path (before the
        leave is answered); it must not block and should not raise (exceptions are logged)."""
        self._member_listeners.append(cb)

    # ------------------------------------------------------------------ reads

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition coordinating ``group_id``."""
        return partition_for_group(group_id, self.num_partitions)

    def shard_for(self, group_id: str) -> GroupCoordinatorShard | None:
        """The shard of the group's partition if it is being served (diagnostics and tests)."""
        p = self.partition_for(group_id)
        return self.runtime.shard(p) if self.runtime.status(p) is PartitionStatus.ACTIVE else None

    def loading(self) -> bool:
        """Whether some partition is (re)loading (ListGroups answers
        COORDINATOR_LOAD_IN_PROGRESS then, as Kafka's does)."""
        return any(self.runtime.status(p) is PartitionStatus.LOADING
                   for p in self.runtime.partitions())

    def describe(self, group_ids: Iterable[str]) -> list[DescribeResult]:
        """ShareGroupDescribe: one result per id (GROUP_ID_NOT_FOUND for unknown ids,
        COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR when its partition is not served)."""
        return self._describe_each(group_ids, GroupCoordinatorShard.describe, DescribeResult)

    def _describe_each(self, group_ids: Iterable[str],
                       describe: Callable[[GroupCoordinatorShard, str], _Described],
                       failed: Callable[[ErrorCode], _Described]) -> list[_Described]:
        """``describe(shard, id)`` for each id whose partition is served, else ``failed`` with
        COORDINATOR_LOAD_IN_PROGRESS (loading) or NOT_COORDINATOR."""
        out = []
        for gid in group_ids:
            p = self.partition_for(gid)
            status = self.runtime.status(p)
            shard = self.runtime.shard(p)
            if status is PartitionStatus.ACTIVE and shard is not None:
                out.append(describe(shard, gid))
            elif status is PartitionStatus.LOADING:
                out.append(failed(ErrorCode.coordinator_load_in_progress))
            else:
                out.append(failed(ErrorCode.not_coordinator))
        return out

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[ListedGroup]:
        """Committed share groups of every served partition, sorted by id, optionally filtered
        by state name (case-insensitive)."""
        states = list(states_filter) if states_filter is not None else None
        out: list[ListedGroup] = []
        for p in self.runtime.partitions():
            shard = self.runtime.shard(p)
            if self.runtime.status(p) is PartitionStatus.ACTIVE and shard is not None:
                out.extend(shard.list_groups(states))
        out.sort(key=lambda g: g.group_id)
        return out

    def consumer_groups(self) -> list[ConsumerGroupView]:
        """Every non-share group of the served partitions (classic, and consumer-type groups
        where the shard lists them) with its member count and committed offsets, sorted by id.
        Read-only, committed view; for the metrics collector."""
        out: list[ConsumerGroupView] = []
        for p in self.runtime.partitions():
            shard = self.runtime.shard(p)
            if self.runtime.status(p) is not PartitionStatus.ACTIVE or shard is None:
                continue
            offsets = shard.classic.offsets.committed_offsets()
            for g in shard.list_groups():
                if g.group_type == SHARE_GROUP_TYPE:
                    continue
                members: int | None = None
                if g.group_type == cl.GROUP_TYPE:
                    described = shard.describe_classic(g.group_id)
                    members = len(described.members) if described is not None else 0
                elif g.group_type == "consumer":
                    # KIP-848 groups live in ``shard.consumer`` (their offsets, like classic
                    # groups', in the classic offsets store read above).
                    group = shard.consumer.committed_group(g.group_id)
                    members = len(group.members) if group is not None else None
                out.append(ConsumerGroupView(g.group_id, g.group_type, g.state, members,
                                             tuple(offsets.get(g.group_id, ()))))
        out.sort(key=lambda v: v.group_id)
        return out

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

    def topics_image(self) -> TopicsImage:
        """The topic metadata the shards see (cached until the topics change)."""
        if self._image is None:
            self._image = TopicsImage.of(
                {t.name: (t.topic_id, t.partitions) for t in self._topics()})
        return self._image

    def _committed_group(self, group_id: str) -> Any:
        shard = self.shard_for(group_id)
        return None if shard is None else shard.committed_group(group_id)

    # ------------------------------------------------------------------ write ops

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
        op = _wrap(lambda shard, now: shard.on_topics_changed(self.topics_image(), now))
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

    # ------------------------------------------------------------------ the runtime

    async def _write(self, group_id: str, op: ShardOp) -> Any:
        """Run ``op`` on the group's partition; its response once its records are committed
        (after starting the initialisations it asked for), or a ``CoordinatorFailure``."""
        out = await self.runtime.write(self.partition_for(group_id), _wrap(op))
        if isinstance(out, CoordinatorFailure):
            if out.error not in (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator):
                log.warning("group coordinator op for group %s failed: %s %s", group_id,
                            out.error.name, out.message)
            if out.error == ErrorCode.kafka_storage_error:
                # Group RPCs do not list KAFKA_STORAGE_ERROR; Kafka's group coordinator answers a
                # storage failure with NOT_COORDINATOR, so the client looks for it again.
                return CoordinatorFailure(ErrorCode.not_coordinator, out.message)
            return out
        assert isinstance(out, _Outcome)
        self._start_initializations(out.initializations)
        self._start_deletions(out.deletions)
        return out.response

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


# ---------------------------------------------------------------------------------------------
# Opening: __consumer_offsets, the runtime and the service


def _topic_configs() -> dict[str, Any]:
    # Group records must never expire by age or size; only pruning removes them.
    return {"retention.ms": -1, "retention.bytes": -1, "segment.bytes": OFFSETS_SEGMENT_BYTES}


def ensure_offsets_topic(broker: Broker) -> Topic:
    """``__consumer_offsets`` with ``offsets.topic.num.partitions`` partitions and the group
    coordinator's configs."""
    return broker.ensure_internal_topic(CONSUMER_OFFSETS_TOPIC, "offsets.topic.num.partitions",
                                        _topic_configs())


async def open_share_groups(broker: Broker) -> ShareGroupService:
    """Create or open ``__consumer_offsets``, load every partition and return the service.

    Needs ``broker.persister`` and ``broker.group_configs``.
    """
    topic = ensure_offsets_topic(broker)
    assert broker.persister is not None
    service = ShareGroupService(
        clock=broker.clock, broker_config=broker.config, group_configs=broker.group_configs,
        persister=broker.persister, topics=broker.topics.all, num_partitions=topic.partitions)

    def log_for(partition: int) -> PartitionLogLike:
        lg = broker.logs.get(CONSUMER_OFFSETS_TOPIC, partition)
        assert lg is not None, "LogManager opens every partition of a registered topic"
        return lg

    load_ms = await service.load(log_for)
    if any(g.deleting for p in service.runtime.partitions()
           if (shard := service.runtime.shard(p)) is not None for g in shard.groups.values()):
        service.topics_changed()  # finish deleting the share state of deleted topics
    runtime = service.runtime
    records = sum(s.load.records for p in runtime.partitions()
                  if (s := runtime.stats(p)) is not None and s.load is not None)
    shards = [shard for p in runtime.partitions() if (shard := runtime.shard(p)) is not None]
    groups = sum(len(shard.groups) for shard in shards)
    consumer = sum(len(shard.consumer.store.groups) for shard in shards)
    log.info("group coordinator loaded %d partition(s) of %s (%d records, %d share groups, %d "
             "consumer groups) in %.0f ms", topic.partitions, CONSUMER_OFFSETS_TOPIC, records,
             groups, consumer, load_ms)
    return service
