"""``GroupServiceBase``: what every part of the group coordinator service shares.

The service (``coordinator/group/service.py``, which documents the whole) is one class made of
parts, one per group kind (``share/ops.py``, ``consumer/ops.py``, ``classic/ops.py``) plus
committed offsets (``offset_ops.py``), over this base: the runtime and its partitions,
placement, the write path (``_write``: run a shard op, answer after commit, start the share-state
work it asked for), owned tasks, the cached topic image and the lifecycle (load, stop).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from coordinator.group.placement import DEFAULT_NUM_PARTITIONS, partition_for_group
from coordinator.group.serde import GroupRecordSerde
from coordinator.group.shard import GroupCoordinatorShard, deletions, initializations
from coordinator.group.share import records as r
from coordinator.group.share.heartbeat import (
    ShareStateDeletion,
    ShareStateInitialization,
)
from coordinator.group.topics_image import TopicsImage
from coordinator.host import Clock, ConfigValues, TopicView
from coordinator.runtime.loop import (
    CoordinatorFailure,
    CoordinatorRuntime,
    Op,
    PartitionStatus,
)
from coordinator.runtime.result import CoordinatorResult
from persister.api import Persister
from storage.log import PartitionLogLike

log = logging.getLogger("shoal.groups")

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
# Group records are rare (joins, leaves, assignment changes), so every append is fsynced
# (group commit) before the heartbeat is answered.
GROUP_APPEND_FSYNC = True

MemberListener = Callable[[str, str], None]
_Described = TypeVar("_Described")
"""Called with (group id, member id) after a member left or was fenced (session expiry)."""



class ShareGroupTimeouts(Protocol):
    """A share group's effective session and heartbeat settings."""

    @property
    def session_timeout_ms(self) -> int: ...

    @property
    def heartbeat_interval_ms(self) -> int: ...


class GroupConfigSource(Protocol):
    """Per-group configs (dynamic: read on every use; the broker's ``GroupConfigs``)."""

    def get(self, group_id: str) -> ShareGroupTimeouts: ...

    def consumer_timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout ms, heartbeat interval ms) of a consumer group."""
        ...


ShardOp = Callable[[GroupCoordinatorShard, int], CoordinatorResult[r.Record, Any]]


@dataclass(frozen=True, slots=True)
class OpOutcome:
    """What a wrapped op hands back through the runtime: its response and the share-state
    initialisations and deletions to start once its records are committed."""

    response: Any
    initializations: tuple[ShareStateInitialization, ...]
    deletions: tuple[ShareStateDeletion, ...] = ()


def wrap_op(op: ShardOp) -> Op[GroupCoordinatorShard]:
    def run(shard: GroupCoordinatorShard, now_ms: int) -> CoordinatorResult[r.Record, OpOutcome]:
        result = op(shard, now_ms)
        return CoordinatorResult(records=result.records, response=OpOutcome(
            result.response, initializations(result), deletions(result)))

    return run


class GroupServiceBase:
    """The state and the write path of the group coordinator service (see the module doc)."""

    def __init__(
        self,
        *,
        clock: Clock,
        broker_config: ConfigValues,
        group_configs: GroupConfigSource,
        persister: Persister,
        topics: Callable[[], Iterable[TopicView]],
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

    def _new_shard(self, partition: int) -> GroupCoordinatorShard:
        """A fresh shard for ``partition`` (the composed service wires every group kind)."""
        raise NotImplementedError

    def _start_initializations(self, inits: Sequence[ShareStateInitialization]) -> None:
        raise NotImplementedError  # share/ops.py

    def _start_deletions(self, dels: Sequence[ShareStateDeletion]) -> None:
        raise NotImplementedError  # share/ops.py

    # ------------------------------------------------------------------ lifecycle

    async def load(self, log_for: Callable[[int], PartitionLogLike],
                   partitions: Iterable[int] | None = None) -> float:
        """Load every partition, or those of ``partitions`` (a cluster member loads the ones it
        leads), in parallel; returns the ms taken. A partition that fails to load, or is not
        loaded, answers NOT_COORDINATOR (logged by the runtime)."""
        chosen = range(self.num_partitions) if partitions is None else partitions
        self.load_ms = await self.runtime.load_many({p: log_for(p) for p in chosen})
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

    # ------------------------------------------------------------------ placement and reads

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

    def topics_image(self) -> TopicsImage:
        """The topic metadata the shards see (cached until the topics change)."""
        if self._image is None:
            self._image = TopicsImage.of(
                {t.name: (t.topic_id, t.partitions) for t in self._topics()})
        return self._image

    def topics_version(self) -> int:
        """Identifies the set of topics (names and ids) of the current image; a regex resolved
        against another version is resolved again. Stable across restarts."""
        if self._image_version is None:
            image = self.topics_image()
            parts = sorted(f"{n}\x00{info.topic_id}" for n, info in image.by_name.items())
            digest = hashlib.blake2b("\x01".join(parts).encode(), digest_size=8).digest()
            self._image_version = int.from_bytes(digest, "big", signed=True)
        return self._image_version

    def _committed_group(self, group_id: str) -> Any:
        shard = self.shard_for(group_id)
        return None if shard is None else shard.committed_group(group_id)

    # ------------------------------------------------------------------ the runtime

    async def _write(self, group_id: str, op: ShardOp) -> Any:
        """Run ``op`` on the group's partition; its response once its records are committed
        (after starting the initialisations it asked for), or a ``CoordinatorFailure``."""
        out = await self.runtime.write(self.partition_for(group_id), wrap_op(op))
        if isinstance(out, CoordinatorFailure):
            if out.error not in (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator):
                log.warning("group coordinator op for group %s failed: %s %s", group_id,
                            out.error.name, out.message)
            if out.error == ErrorCode.kafka_storage_error:
                # Group RPCs do not list KAFKA_STORAGE_ERROR; Kafka's group coordinator answers a
                # storage failure with NOT_COORDINATOR, so the client looks for it again.
                return CoordinatorFailure(ErrorCode.not_coordinator, out.message)
            return out
        assert isinstance(out, OpOutcome)
        self._start_initializations(out.initializations)
        self._start_deletions(out.deletions)
        return out.response

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        if self._stopped:
            coro.close()
            return None
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- share-state initialization (reference section 5, two-phase flow)
