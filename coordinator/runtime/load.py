"""``PartitionLoader``: loading and unloading the partitions of ``CoordinatorRuntime``
(``loop.py`` documents the whole): replay a partition's log into a fresh shard on the load pool,
start its executor task, and shut it down (commit what is durable, fail the rest) on unload or
close.

It owns the partition table's entries (``RuntimeState.partitions``), each partition's ``status``
and executor ``task``, and the runtime's pools (``close`` stops them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Generic

from kio.schema.errors import ErrorCode

from coordinator.runtime.loader import LoadSummary, load_shard
from coordinator.runtime.partition import (
    CoordinatorFailure,
    PartitionState,
    PartitionStatus,
    S,
)
from coordinator.runtime.append import Executor
from coordinator.runtime.commit import Committer
from coordinator.runtime.runtime_state import RuntimeState
from coordinator.runtime.scheduling import Scheduler
from storage.log import PartitionLogLike

#: How long an unload waits for the in-sync replicas to confirm the last writes before failing
#: them (NOT_COORDINATOR; their clients retry on the new coordinator).
FINAL_CONFIRM_S = 1.0

log = logging.getLogger("shoal.coordinator.runtime")


class PartitionLoader(Generic[S]):
    """See the module doc."""

    def __init__(self, state: RuntimeState[S], executor: Executor[S], committer: Committer[S],
                 scheduler: Scheduler[S]) -> None:
        self._state = state
        self._executor = executor
        self._committer = committer
        self._scheduler = scheduler

    async def load(self, partition: int, log_: PartitionLogLike) -> LoadSummary | CoordinatorFailure:
        """Start serving ``partition``: replay ``log_`` into a fresh shard, then accept ops.

        Raises:
            ValueError: the partition is already held, or the runtime is closed.
        """
        state = self._state
        if state.closed:
            raise ValueError("the runtime is closed")
        if partition in state.partitions:
            raise ValueError(f"partition {partition} is already loaded")
        ctx: PartitionState[S] = PartitionState(
            partition, log_, state.factory(partition), asyncio.Semaphore(state.max_queued)
        )
        state.partitions[partition] = ctx
        ctx.task = asyncio.get_running_loop().create_task(
            self._executor.run(ctx), name=f"{state.name}-{partition}"
        )
        return await self._load_into(ctx)

    async def load_many(self, logs: Mapping[int, PartitionLogLike]) -> float:
        """``load`` every partition of ``logs`` in parallel; returns the wall time in ms.
        A partition that fails to load answers NOT_COORDINATOR (logged)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(self.load(p, lg) for p, lg in logs.items()))
        return (loop.time() - started) * 1000

    async def unload(self, partition: int) -> None:
        """Stop serving ``partition``: finish what is appended, fail the rest with NOT_COORDINATOR."""
        ctx = self._state.partitions.get(partition)
        if ctx is None:
            return
        await self._shutdown(ctx)
        del self._state.partitions[partition]

    async def close(self) -> None:
        """Unload every partition and stop the I/O threads. Logs stay open (their owner closes)."""
        if self._state.closed:
            return
        self._state.closed = True
        for number in list(self._state.partitions):
            await self.unload(number)
        self._state.io_pool.shutdown(wait=True)
        self._state.load_pool.shutdown(wait=True)

    async def _load_into(self, ctx: PartitionState[S]) -> LoadSummary | CoordinatorFailure:
        ctx.status = PartitionStatus.LOADING
        loop = asyncio.get_running_loop()
        started = loop.time()
        shard = ctx.shard
        try:
            summary = await loop.run_in_executor(self._state.load_pool, load_shard, ctx.log, shard,
                                               self._state.serde)
        except Exception as exc:  # corrupt log or I/O error: stop serving, keep the data
            log.exception("%s partition %d: loading failed", self._state.name, ctx.number)
            ctx.status = PartitionStatus.FAILED
            return CoordinatorFailure(ErrorCode.not_coordinator, f"loading failed: {exc}")
        if ctx.status is not PartitionStatus.LOADING:  # closed meanwhile
            return CoordinatorFailure(ErrorCode.not_coordinator, "unloaded while loading")
        ctx.committed = summary.end_offset
        ctx.stats.load = summary
        ctx.stats.load_ms = (loop.time() - started) * 1000
        shard.on_loaded(self._state.clock_ms())
        ctx.status = PartitionStatus.ACTIVE
        self._scheduler.arm(ctx)
        log.debug("%s partition %d loaded: %d records in %.1f ms", self._state.name, ctx.number,
                  summary.records, ctx.stats.load_ms)
        return summary

    async def _confirmed(self, ctx: PartitionState[S], target: int) -> bool:
        """Whether the records below ``target`` may be committed at unload: always without
        replication; else if the replicated wait says so within ``FINAL_CONFIRM_S``."""
        replicated = self._committer.replicated
        if replicated is None:
            return True
        try:
            return await asyncio.wait_for(replicated(ctx.number, target), FINAL_CONFIRM_S)
        except asyncio.TimeoutError:
            return False

    async def _shutdown(self, ctx: PartitionState[S]) -> None:
        ctx.status = PartitionStatus.CLOSED
        self._scheduler.disarm(ctx)
        if ctx.task is not None:
            ctx.task.cancel()
            await asyncio.gather(ctx.task, return_exceptions=True)
        if self._committer.replicated is not None and ctx.flush_task is not None:
            # Its replicated wait may never end (followers gone); what it waits for is failed
            # below anyway.
            ctx.flush_task.cancel()
        for task in (ctx.load_task, ctx.flush_task, ctx.prune_task):
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)
        if self._state.fsync and ctx.pending and ctx.pending[-1].end_offset > ctx.committed:
            # Appended but not yet fsynced: one last flush so their responses can still be sent.
            target = ctx.log.log_end_offset
            try:
                await asyncio.get_running_loop().run_in_executor(self._state.io_pool, ctx.log.sync_data)
            except OSError as exc:  # e.g. the log directory went offline: commit nothing more
                log.error("%s partition %d: final flush failed; records after offset %d stay "
                          "uncommitted: %s", self._state.name, ctx.number, ctx.committed, exc)
            except Exception:
                log.exception("%s partition %d: final flush failed", self._state.name, ctx.number)
            else:
                # A replicated partition's writes are answered only once the in-sync replicas
                # have them (a new leader may lack the rest); the replicated wait answers at
                # once for one replica, or for a broker that no longer leads or is stopping.
                if await self._confirmed(ctx, target):
                    self._committer.commit(ctx, target)
        closed = CoordinatorFailure(ErrorCode.not_coordinator, "the coordinator is shutting down")
        ctx.fail_pending(closed)
        ctx.fail_inbox(closed)
        ctx.shard.on_unloaded()
