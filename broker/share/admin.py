"""Share-group administration: offsets (describe with lag, alter, delete) and group deletion.

Concept (KIP-932 admin APIs, KIP-1226 lag; reference section 7 and section 8 item 28): a share
group's "offsets" are its share-partition start offsets (SPSO), kept by the share coordinator and
reached only through the persister. This module is the domain behind the admin RPC handlers
(DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups): the
handlers decode and encode, ``ShareAdmin`` decides.

Rules, as Apache Kafka 4.3 answers them:
- **Lag** = log end offset - SPSO - delivery complete count (records at or after the SPSO already
  acknowledged or archived). It is -1 when the partition has no start offset yet (never
  consumed, reference item 28: start offset -1) or the count is unknown. Released records still
  count as lag, rejected ones do not (they are archived). On a cluster member the log end
  offset of a partition led elsewhere comes from its leader (``broker/share/remote_offsets.py``);
  -1 when that leader does not answer.
- **Describe** with ``topics=None`` lists the partitions whose share state the group initialized;
  an unknown group then simply has no topics (no GROUP_ID_NOT_FOUND). Named partitions are read
  from the persister whether or not the group exists; an unknown topic or partition index answers
  UNKNOWN_TOPIC_OR_PARTITION for that partition.
- **Alter** works only on an Empty group (else NON_EMPTY_GROUP, top level). An unknown group id
  is created as an Empty share group (as Kafka does). Each partition is re-initialized at the
  share coordinator with the given start offset and a state epoch above the stored one, which
  fences any write still in flight from the old state; loaded share-partitions are dropped so the
  next ShareFetch reads the new state. (Shoal also accepts -1, "never consumed": the next fetch
  starts from ``share.auto.offset.reset``; below -1 is INVALID_REQUEST.)
- **Delete offsets** needs an existing (GROUP_ID_NOT_FOUND), Empty (NON_EMPTY_GROUP) group; per
  topic, an unknown topic or one without share state answers UNKNOWN_TOPIC_OR_PARTITION, otherwise
  every partition's state is deleted and the topic leaves the group's state metadata.
- **Delete group** (DeleteGroups): only an Empty share group (NON_EMPTY_GROUP otherwise); its
  share state is deleted first and a failure keeps the group (Kafka's order); then the group's
  records are tombstoned and its group configs removed.

Group-state changes run as write ops on the group's ``__consumer_offsets`` partition through the
group coordinator runtime (``GroupCoordinatorService.runtime``): the op validates against the latest
replayed state, its records are appended, replayed and committed before the answer; reads use the
committed view. The pure ops that the shard does not offer yet (``prepare_alter_op``,
``forget_topics_op``) and the result types live in ``broker/share/admin_ops.py``, built only
from the coordinator's public record helpers.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from broker.group_configs import GroupConfigs
from broker.log.manager import LogManager
from broker.log.topics import Topic, TopicRegistry
from broker.share.admin_ops import (  # noqa: F401  (the results are part of this API)
    AlterPlan,
    AlterResult,
    DeleteOffsetsResult,
    GroupDeleteResult,
    GroupOffsets,
    NOT_EMPTY,
    NO_LEADER_EPOCH,
    NO_OFFSETS,
    PartitionOffset,
    PartitionResult,
    TopicAlterResult,
    TopicDeleteResult,
    TopicOffsets,
    UNKNOWN_LAG,
    UNKNOWN_PARTITION,
    committed_problem,
    group_partitions,
    forget_topics_op,
    group_not_found,
    prepare_alter_op,
    share_lag,
)
from broker.share.partition_manager import SharePartitionManager
from broker.share.remote_offsets import log_end_offsets
from broker.wire_limits import YIELD_EVERY, breathe
from storage.log_dir import describe
from coordinator.group.service import GroupCoordinatorService
from coordinator.group.shard import GroupCoordinatorShard
from coordinator.group.share import records as r
from coordinator.group.share.group import ShareGroup
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.loop import CoordinatorFailure
from coordinator.runtime.result import CoordinatorResult
from persister.api import (
    UNINITIALIZED_START_OFFSET,
    DeleteParams,
    InitializeParams,
    Persister,
    ReadParams,
    SharePartitionKey,
    SummaryResult,
    WriteResult,
)

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.txn_remote import BrokerLinks

log = logging.getLogger("shoal.share_admin")


T = TypeVar("T")
A = TypeVar("A")

GroupOp = Callable[[GroupCoordinatorShard, int], CoordinatorResult[r.Record, Any]]


# --------------------------------------------------------------------------- the service


class ShareAdmin:
    """Admin operations on share groups (see the module docstring). Cheap to build per request."""

    def __init__(
        self,
        *,
        groups: GroupCoordinatorService,
        persister: Persister,
        partitions: SharePartitionManager,
        group_configs: GroupConfigs,
        topics: TopicRegistry,
        logs: LogManager,
        links: BrokerLinks | None = None,
    ) -> None:
        self._groups = groups
        self._persister = persister
        self._partitions = partitions
        self._configs = group_configs
        self._topics = topics
        self._logs = logs
        self._links = links  # a cluster member's: lag of partitions led elsewhere

    @classmethod
    def of(cls, broker: Broker) -> ShareAdmin:
        assert broker.persister is not None
        return cls(groups=broker.share_groups, persister=broker.persister,
                   partitions=broker.shares.partitions, group_configs=broker.group_configs,
                   topics=broker.topics, logs=broker.logs, links=broker.links)

    async def _write(self, group_id: str, op: GroupOp) -> Any:
        """Run ``op`` on the group's coordinator partition: its response once its records are
        committed, or a ``CoordinatorFailure`` (loading, not held, append failed)."""
        svc = self._groups
        return await svc.runtime.write(svc.partition_for(group_id), op)

    async def _committed(self, group_id: str) -> ShareGroup | None | CoordinatorFailure:
        """The group as of the committed offset, None if absent, or why it cannot be read."""
        svc = self._groups
        out: ShareGroup | None | CoordinatorFailure = await svc.runtime.read(
            svc.partition_for(group_id), lambda shard: shard.committed_group(group_id))
        return out

    # ------------------------------------------------------------------ describe offsets

    async def describe_offsets(
        self, group_id: str, requested: Sequence[tuple[str, Sequence[int]]] | None
    ) -> GroupOffsets:
        """DescribeShareGroupOffsets for one group: start offset, leader epoch and lag per
        partition (``requested`` = (topic name, partitions), or None for the group's own)."""
        if not group_id:
            return GroupOffsets(group_id, error=ErrorCode.invalid_group_id,
                                error_message="The group id must not be empty.")
        group = await self._committed(group_id)
        if isinstance(group, CoordinatorFailure):
            return GroupOffsets(group_id, error=group.error, error_message=group.message)
        if requested is None:
            plan: list[tuple[str, Topic | None, list[int]]] = []
            if group is not None:
                for tid, parts in sorted(group_partitions(group).items(),
                                         key=lambda kv: self._name_of(kv[0])):
                    topic = self._topics.by_id(tid)
                    if topic is not None:  # a deleted topic has no offsets to show
                        plan.append((topic.name, topic, sorted(parts)))
        else:
            plan = [(name, self._topics.get(name), list(parts)) for name, parts in requested]
        ends = await self._remote_ends(plan)
        topics = await _gather_in_slices(
            plan, lambda row: self._topic_offsets(group_id, row[0], row[1], row[2], ends))
        return GroupOffsets(group_id, tuple(topics))

    def _name_of(self, topic_id: uuid.UUID) -> str:
        topic = self._topics.by_id(topic_id)
        return topic.name if topic is not None else ""

    async def _remote_ends(self, plan: Sequence[tuple[str, Topic | None, Sequence[int]]]
                           ) -> dict[tuple[str, int], int | None]:
        """Log end offsets of the planned partitions another cluster member leads (one
        ListOffsets per leading broker, ``broker/share/remote_offsets.py``; None: its leader
        did not answer); {} on one broker."""
        if self._links is None:
            return {}
        rpc = self._links.rpc
        parts = [(name, p) for name, topic, ps in plan if topic is not None for p in ps
                 if 0 <= p < topic.partitions and rpc.leader(name, p) != rpc.node_id]
        found = await log_end_offsets(rpc, parts) if parts else {}
        return {tp: found.get(tp) for tp in parts}

    async def _topic_offsets(self, group_id: str, name: str, topic: Topic | None,
                             partitions: Sequence[int],
                             ends: dict[tuple[str, int], int | None]) -> TopicOffsets:
        if topic is None:
            return TopicOffsets(name, None, tuple(
                PartitionOffset(p, error=ErrorCode.unknown_topic_or_partition,
                                error_message=UNKNOWN_PARTITION) for p in partitions))
        rows = await _gather_in_slices(
            partitions, lambda p: self._partition_offset(group_id, topic, p, ends))
        return TopicOffsets(topic.name, topic.topic_id, tuple(rows))

    async def _partition_offset(self, group_id: str, topic: Topic, p: int,
                                ends: dict[tuple[str, int], int | None]) -> PartitionOffset:
        if not 0 <= p < topic.partitions:
            return PartitionOffset(p, error=ErrorCode.unknown_topic_or_partition,
                                   error_message=UNKNOWN_PARTITION)
        key = SharePartitionKey(group_id, topic.topic_id, p)
        summary = await _guard("reading a share-state summary",
                               self._persister.read_summary(ReadParams(key, NO_LEADER_EPOCH)),
                               lambda code: SummaryResult(code))
        if summary.error != ErrorCode.none:
            return PartitionOffset(p, error=summary.error, error_message=summary.error_message)
        lg = self._logs.get(topic.name, p)
        if (topic.name, p) in ends:  # led elsewhere
            end = ends[(topic.name, p)]
        else:
            end = lg.log_end_offset if lg is not None else 0
        lag = (UNKNOWN_LAG if end is None  # its leader did not say
               else share_lag(end, summary.start_offset, summary.delivery_complete_count))
        return PartitionOffset(p, start_offset=summary.start_offset,
                               leader_epoch=summary.leader_epoch, lag=lag)

    # ------------------------------------------------------------------ alter offsets

    async def alter_offsets(
        self, group_id: str, requested: Sequence[tuple[str, Sequence[tuple[int, int]]]]
    ) -> AlterResult:
        """AlterShareGroupOffsets: set the start offset of each (topic, [(partition, offset)])."""
        if not group_id:
            return AlterResult(ErrorCode.invalid_group_id, "The group id must not be empty.")
        # Validate every entry; keep the valid ones by topic id.
        layout: list[tuple[str, Topic | None, list[tuple[int, PartitionResult | None]]]] = []
        wanted: dict[uuid.UUID, dict[int, int]] = {}
        steps = 0
        for name, entries in requested:
            topic = self._topics.get(name)
            rows: list[tuple[int, PartitionResult | None]] = []
            for p, offset in entries:
                steps += 1
                await breathe(steps)
                if topic is None or not 0 <= p < topic.partitions:
                    rows.append((p, PartitionResult(p, ErrorCode.unknown_topic_or_partition,
                                                    UNKNOWN_PARTITION)))
                elif offset < UNINITIALIZED_START_OFFSET:
                    rows.append((p, PartitionResult(
                        p, ErrorCode.invalid_request,
                        f"The start offset {offset} is invalid; use -1 or an offset >= 0.")))
                else:
                    wanted.setdefault(topic.topic_id, {})[p] = offset
                    rows.append((p, None))
            layout.append((name, topic, rows))

        image = self._groups.topics_image()
        parts = {tid: frozenset(offsets) for tid, offsets in wanted.items()}
        plan = await self._write(
            group_id, lambda shard, _now: prepare_alter_op(shard, group_id, parts, image))
        if isinstance(plan, CoordinatorFailure):
            return AlterResult(plan.error, plan.message)
        if plan.error != ErrorCode.none:
            return AlterResult(plan.error, plan.error_message)

        keys = [(SharePartitionKey(group_id, tid, p), offset)
                for tid, offsets in wanted.items() for p, offset in sorted(offsets.items())]
        results = await _gather_in_slices(
            keys, lambda kv: self._reinitialize(kv[0], kv[1], plan.state_epoch))
        outcome = {(key.topic_id, key.partition): res for (key, _), res in zip(keys, results)}
        await self._finish_initialization(group_id, outcome, image)
        self._partitions.forget(key for (key, _), res in zip(keys, results)
                                if res.error == ErrorCode.none)

        topics = []
        steps = 0
        for name, topic, rows in layout:
            out = []
            for p, decided in rows:
                steps += 1
                await breathe(steps)
                if decided is None:
                    assert topic is not None
                    res = outcome[(topic.topic_id, p)]
                    decided = PartitionResult(p, res.error, res.error_message)
                out.append(decided)
            topics.append(TopicAlterResult(name, topic.topic_id if topic else None, tuple(out)))
        if wanted:
            log.info("share-group offsets of group %s altered: %s", group_id,
                     {self._name_of(t): o for t, o in wanted.items()}, extra={"group": group_id})
        return AlterResult(topics=tuple(topics))

    async def _reinitialize(self, key: SharePartitionKey, start_offset: int,
                            group_epoch: int) -> WriteResult:
        """InitializeShareGroupState with a state epoch above the stored one, so writes still in
        flight from the old state are fenced (the stored epoch can exceed the group epoch, e.g.
        for state a leader initialized on its own or left by an earlier group of that id)."""
        summary = await _guard("reading a share-state summary",
                               self._persister.read_summary(ReadParams(key, NO_LEADER_EPOCH)),
                               lambda code: SummaryResult(code))
        if summary.error != ErrorCode.none:
            return WriteResult(summary.error, summary.error_message)
        epoch = max(group_epoch, summary.state_epoch + 1)
        return await _guard("initializing share state",
                            self._persister.initialize(InitializeParams(key, epoch, start_offset)),
                            lambda code: WriteResult(code))

    async def _finish_initialization(self, group_id: str,
                                     outcome: Mapping[tuple[uuid.UUID, int], WriteResult],
                                     image: TopicsImage) -> None:
        done: dict[uuid.UUID, set[int]] = {}
        failed: dict[uuid.UUID, set[int]] = {}
        for (tid, p), res in outcome.items():
            (done if res.error == ErrorCode.none else failed).setdefault(tid, set()).add(p)
        outs = []
        if done:
            outs.append(await self._write(
                group_id, lambda shard, now: shard.mark_initialized(group_id, done, image, now)))
        if failed:
            outs.append(await self._write(
                group_id, lambda shard, _now: shard.mark_initialization_failed(group_id, failed)))
        for out in outs:
            if isinstance(out, CoordinatorFailure):
                # The share state is set; only the group's bookkeeping is behind. The partitions
                # stay Initializing, and a later re-plan (init retry, reload) would initialize
                # them again from share.auto.offset.reset: the operator repeats the reset.
                log.warning("recording altered share partitions of group %s failed: %s %s",
                            group_id, out.error.name, out.message)

    # ------------------------------------------------------------------ delete offsets

    async def delete_offsets(self, group_id: str, topic_names: Sequence[str]) -> DeleteOffsetsResult:
        """DeleteShareGroupOffsets: delete the share state of whole topics of an Empty group."""
        if not group_id:
            return DeleteOffsetsResult(ErrorCode.invalid_group_id,
                                       "The group id must not be empty.")
        group = await self._committed(group_id)
        problem = committed_problem(group_id, group)
        if problem is not None:
            return DeleteOffsetsResult(*problem)
        assert isinstance(group, ShareGroup)
        held = self._held_partitions(group_id, group)
        results: dict[str, TopicDeleteResult] = {}
        jobs: dict[str, Awaitable[ErrorCode | None]] = {}
        for name in topic_names:
            if name in results or name in jobs:
                continue  # one answer per topic
            topic = self._topics.get(name)
            if topic is None:
                results[name] = TopicDeleteResult(name, None, ErrorCode.unknown_topic_or_partition,
                                                  UNKNOWN_PARTITION)
            elif not held.get(topic.topic_id):
                results[name] = TopicDeleteResult(name, topic.topic_id,
                                                  ErrorCode.unknown_topic_or_partition, NO_OFFSETS)
            else:
                jobs[name] = self._delete_state(group_id, topic.topic_id, held[topic.topic_id])
        errors = dict(zip(jobs, await asyncio.gather(*jobs.values())))
        deleted: list[uuid.UUID] = []
        for name, error in errors.items():
            topic = self._topics.get(name)
            tid = topic.topic_id if topic is not None else None
            if error is None and tid is not None:
                deleted.append(tid)
                results[name] = TopicDeleteResult(name, tid)
            else:
                code = error or ErrorCode.unknown_topic_or_partition
                results[name] = TopicDeleteResult(name, tid, code,
                                                  "Deleting the share state failed; retry.")
        if deleted:
            out = await self._write(
                group_id, lambda shard, _now: forget_topics_op(shard, group_id, deleted))
            if isinstance(out, CoordinatorFailure):
                log.warning("recording deleted share-group offsets of group %s failed: %s %s",
                            group_id, out.error.name, out.message)
            log.info("share-group offsets of group %s deleted for topics %s", group_id,
                     [self._name_of(t) for t in deleted], extra={"group": group_id})
        ordered = []
        seen: set[str] = set()
        for name in topic_names:
            if name not in seen:
                seen.add(name)
                ordered.append(results[name])
        return DeleteOffsetsResult(topics=tuple(ordered))

    def _held_partitions(self, group_id: str, group: ShareGroup) -> dict[uuid.UUID, frozenset[int]]:
        """Partitions the group may hold share state for: its state metadata, plus share-
        partitions loaded here (a fetch can initialize state the metadata does not list)."""
        held = group_partitions(group)
        for key in self._partitions.partitions():
            if key.group_id == group_id:
                held[key.topic_id] = held.get(key.topic_id, frozenset()) | {key.partition}
        return held

    async def _delete_state(self, group_id: str, topic_id: uuid.UUID,
                            partitions: Iterable[int]) -> ErrorCode | None:
        """Delete the share state of the partitions; the first error, or None on success."""
        keys = [SharePartitionKey(group_id, topic_id, p) for p in sorted(partitions)]
        results = await asyncio.gather(*(
            _guard("deleting share state", self._persister.delete(DeleteParams(k)),
                   lambda code: WriteResult(code)) for k in keys))
        self._partitions.forget(keys)
        for res in results:
            if res.error != ErrorCode.none:
                return res.error
        return None

    # ------------------------------------------------------------------ delete groups

    async def delete_groups(self, group_ids: Sequence[str]) -> list[GroupDeleteResult]:
        """DeleteGroups for share groups, one result per id in request order.

        The configs of the deleted share groups are removed together, with one write of the
        group-config file in a worker thread, before the answer (durable before the answer). If
        that write fails, those groups are deleted but keep their configs: they answer
        KAFKA_STORAGE_ERROR saying so (the configs can be removed with IncrementalAlterConfigs
        DELETE on the group)."""
        shares: list[str] = []  # the share groups deleted
        results = []
        for i, gid in enumerate(group_ids):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # unknown ids finish without suspending: serve the loop
            results.append(await self._delete_group(gid, shares))
        configs = self._configs
        drop = [gid for gid in dict.fromkeys(shares) if configs.overrides(gid)]
        if not drop:
            return results
        failed: str | None = None
        async with configs.lock:
            try:
                await configs.commit({gid: {} for gid in drop})
            except OSError as exc:
                failed = describe(exc)
                log.error("removing the configs of %d deleted share group(s) failed: %s",
                          len(drop), failed)
        if failed is None:
            return results
        gone = set(drop)
        return [GroupDeleteResult(
            res.group_id, ErrorCode.kafka_storage_error,
            f"share group {res.group_id!r} was deleted but its configs could not be removed "
            f"({failed}); remove them with IncrementalAlterConfigs DELETE on the group once "
            "the disk is fixed") if res.group_id in gone else res for res in results]

    async def _delete_group(self, group_id: str, shares: list[str]) -> GroupDeleteResult:
        """Delete one group; a deleted share group's id is added to ``shares``."""
        if not group_id:
            return GroupDeleteResult(group_id, ErrorCode.invalid_group_id,
                                     "The group id must not be empty.")
        group = await self._committed(group_id)
        consumer = group is None and self._groups.consumer_exists(group_id)
        if group is None and (consumer or self._groups.classic_exists(group_id)):
            # A classic or consumer group: no share state; the shard refuses one with members.
            classic = await self._groups.delete_group(group_id)
            if classic.error_code != ErrorCode.none:
                return GroupDeleteResult(group_id, classic.error_code, classic.error_message)
            log.info("%s group %s deleted", "consumer" if consumer else "classic", group_id,
                     extra={"group": group_id})
            return GroupDeleteResult(group_id)
        problem = committed_problem(group_id, group)
        if problem is not None:
            return GroupDeleteResult(group_id, *problem)
        assert isinstance(group, ShareGroup)
        for tid, parts in sorted(self._held_partitions(group_id, group).items(),
                                 key=lambda kv: kv[0].bytes):
            error = await self._delete_state(group_id, tid, parts)
            if error is not None:
                return GroupDeleteResult(group_id, error,
                                         "Deleting the group's share state failed; retry.")
        response = await self._groups.delete_group(group_id)
        if response.error_code != ErrorCode.none:
            return GroupDeleteResult(group_id, response.error_code, response.error_message)
        log.info("share group %s deleted", group_id, extra={"group": group_id})
        shares.append(group_id)
        return GroupDeleteResult(group_id)


async def _gather_in_slices(items: Sequence[A],
                            call: Callable[[A], Coroutine[Any, Any, T]]) -> list[T]:
    """``asyncio.gather`` of ``call(item)`` per item, ``YIELD_EVERY`` at a time (the coroutines
    made per slice too): tens of thousands of tasks made in one go held the event loop for a
    second (issue 25)."""
    out: list[T] = []
    for i in range(0, len(items), YIELD_EVERY):
        out += await asyncio.gather(*(call(item) for item in items[i:i + YIELD_EVERY]))
    return out


async def _guard(what: str, call: Awaitable[T], on_error: Any) -> T:
    """Await a persister call; an unexpected exception becomes UNKNOWN_SERVER_ERROR (logged)."""
    try:
        return await call
    except Exception:
        log.exception("%s failed", what)
        result: T = on_error(ErrorCode.unknown_server_error)
        return result
