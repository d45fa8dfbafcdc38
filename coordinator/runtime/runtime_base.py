"""``RuntimeBase``: the state and the reads every part of ``CoordinatorRuntime`` shares
(``coordinator/runtime/loop.py`` documents the whole; its parts are ``load.py``,
``append.py``, ``commit.py``, ``prune.py`` and ``scheduling.py``), plus the small helpers they
all use: availability checks, releasing committed writes and failing queued ones.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic

from kio.schema.errors import ErrorCode

from coordinator.runtime.partition import (
    DEFAULT_IO_THREADS,
    DEFAULT_LOAD_THREADS,
    DEFAULT_MAX_BATCH_RECORDS,
    DEFAULT_MAX_QUEUED_WRITES,
    DEFAULT_PRUNE_INTERVAL_MS,
    CoordinatorFailure,
    PartitionState,
    PartitionStats,
    PartitionStatus,
    S,
    finish,
)
from coordinator.runtime.shard import RecordSerde

log = logging.getLogger("shoal.coordinator.runtime")


class RuntimeBase(Generic[S]):
    """Serial executors, group commit, loading, timers and pruning (see ``loop.py``)."""

    def __init__(
        self,
        shard_factory: Callable[[int], S],
        serde: RecordSerde[Any],
        *,
        clock_ms: Callable[[], int],
        fsync: bool = True,
        prune_interval_ms: int = DEFAULT_PRUNE_INTERVAL_MS,
        max_queued_writes: int = DEFAULT_MAX_QUEUED_WRITES,
        max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
        io_threads: int = DEFAULT_IO_THREADS,
        load_threads: int = DEFAULT_LOAD_THREADS,
        name: str = "coordinator",
    ) -> None:
        """``shard_factory(partition)`` builds an empty shard; ``clock_ms`` gives record
        timestamps and timer time. fsyncs and prunes run on ``io_threads`` worker threads, loads
        on ``load_threads``.

        Raises:
            ValueError: a limit is not positive.
        """
        if min(max_queued_writes, max_batch_records, io_threads, load_threads) < 1 or prune_interval_ms < 0:
            raise ValueError("runtime limits must be positive")
        self._factory = shard_factory
        self._serde = serde
        self._clock_ms = clock_ms
        self._fsync = fsync
        self._prune_interval_ms = prune_interval_ms
        self._max_queued = max_queued_writes
        self._max_batch_records = max_batch_records
        self._name = name
        self._pool = concurrent.futures.ThreadPoolExecutor(io_threads, thread_name_prefix=f"{name}-io")
        self._load_pool = concurrent.futures.ThreadPoolExecutor(
            load_threads, thread_name_prefix=f"{name}-load"
        )
        self._partitions: dict[int, PartitionState[S]] = {}
        self._closed = False
        # Set by the host when its partitions are replicated: ``replicated(partition, offset)``
        # returns once every in-sync replica has the log up to ``offset`` (True), or False when
        # this broker stopped leading the partition. Writes are answered only after it.
        self.replicated: Callable[[int, int], Awaitable[bool]] | None = None

    # ------------------------------------------------------------------------------------------
    # Introspection

    # ------------------------------------------------------------------------------------------
    # Reads

    @property
    def fsync(self) -> bool:
        return self._fsync

    def partitions(self) -> list[int]:
        return sorted(self._partitions)

    def status(self, partition: int) -> PartitionStatus | None:
        ctx = self._partitions.get(partition)
        return None if ctx is None else ctx.status

    def shard(self, partition: int) -> S | None:
        """The partition's shard (replayed state, committed or not), or None."""
        ctx = self._partitions.get(partition)
        return None if ctx is None else ctx.shard

    def stats(self, partition: int) -> PartitionStats | None:
        ctx = self._partitions.get(partition)
        return None if ctx is None else ctx.stats

    def committed_offset(self, partition: int) -> int | None:
        ctx = self._partitions.get(partition)
        return None if ctx is None else ctx.committed

    # ------------------------------------------------------------------------------------------
    # Loading and unloading

    def _unavailable(self, ctx: PartitionState[S] | None) -> CoordinatorFailure | None:
        if ctx is None or ctx.status in (PartitionStatus.CLOSED, PartitionStatus.FAILED):
            return CoordinatorFailure(ErrorCode.not_coordinator, "this broker does not serve the partition")
        if ctx.status is PartitionStatus.LOADING:
            return CoordinatorFailure(ErrorCode.coordinator_load_in_progress, "the partition is loading")
        return None

    # ------------------------------------------------------------------------------------------
    # The executor

    # ------------------------------------------------------------------------------------------
    # Releasing and failing writes

    def _release(self, ctx: PartitionState[S]) -> int:
        released = 0
        pending = ctx.pending
        while pending and pending[0].end_offset <= ctx.committed:
            waiting = pending.popleft()
            finish(waiting.future, waiting.responses)
            released += 1
        return released

    def _fail_pending(self, ctx: PartitionState[S], failure: CoordinatorFailure) -> None:
        while ctx.pending:
            waiting = ctx.pending.popleft()
            finish(waiting.future, [failure] * len(waiting.responses))

    def _fail_inbox(self, ctx: PartitionState[S], failure: CoordinatorFailure) -> None:
        while ctx.inbox:
            event = ctx.inbox.popleft()
            if event.admitted:
                ctx.slots.release()
            if event.shard_timer:
                ctx.shard_timer_queued = False
            finish(event.future, [failure] * max(1, len(event.ops)))

    # ------------------------------------------------------------------------------------------
    # Implemented by the parts (loop.py composes them); declared here so each part type-checks

    async def _run(self, ctx: PartitionState[S]) -> None:
        raise NotImplementedError  # append.py

    def _commit(self, ctx: PartitionState[S], offset: int) -> int:
        raise NotImplementedError  # commit.py

    def _maybe_flush(self, ctx: PartitionState[S]) -> None:
        raise NotImplementedError  # commit.py

    def _maybe_prune(self, ctx: PartitionState[S]) -> None:
        raise NotImplementedError  # prune.py

    async def prune(self, partition: int) -> int | None:
        raise NotImplementedError  # prune.py

    def _arm_timer(self, ctx: PartitionState[S]) -> None:
        raise NotImplementedError  # scheduling.py
