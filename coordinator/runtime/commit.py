"""``Committer``: flush and commit in ``CoordinatorRuntime`` (``loop.py`` documents the whole):
group commit (one fsync for every write appended since the last one, on the io pool), then, for a
replicated partition, the wait until every in-sync replica has it (``replicated``), then the shard
commits and the writes below the durable offset are answered; a failed fsync fails the partition.

It owns each ``PartitionState``'s ``flush_task`` and ``committed`` offset (after loading) and
answers its ``pending`` writes; after a commit it asks the ``Pruner`` to prune.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic

from kio.schema.errors import ErrorCode

from coordinator.runtime.partition import (
    CoordinatorFailure,
    PartitionState,
    PartitionStatus,
    S,
)
from coordinator.runtime.prune import Pruner
from coordinator.runtime.runtime_state import RuntimeState
from coordinator.runtime.scheduling import Scheduler

log = logging.getLogger("shoal.coordinator.runtime")


class Committer(Generic[S]):
    """See the module doc."""

    def __init__(self, state: RuntimeState[S], pruner: Pruner[S], scheduler: Scheduler[S]) -> None:
        self._state = state
        self._pruner = pruner
        self._scheduler = scheduler
        # Set by the host when its partitions are replicated: ``replicated(partition, offset)``
        # returns once every in-sync replica has the log up to ``offset`` (True), or False when
        # this broker stopped leading the partition. Writes are answered only after it.
        self.replicated: Callable[[int, int], Awaitable[bool]] | None = None

    def maybe_flush(self, ctx: PartitionState[S]) -> None:
        """Start a flush of what is appended and not yet committed, unless one is running."""
        if ctx.flush_task is not None or ctx.status is not PartitionStatus.ACTIVE:
            return
        target = ctx.log.log_end_offset
        if not ctx.pending and target <= ctx.committed:
            return
        # Records of internal (timer) events have no waiter but must still commit promptly: a
        # shard reports effects (e.g. a fenced member) and reads serve the committed view.
        if target <= ctx.committed:
            ctx.release()
            return
        ctx.flush_task = asyncio.get_running_loop().create_task(self._flush(ctx, target))

    async def _flush(self, ctx: PartitionState[S], target: int) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._state.io_pool, ctx.log.sync_data)
        except Exception as exc:
            log.exception("%s partition %d: fsync failed", self._state.name, ctx.number)
            ctx.flush_task = None
            if ctx.status is PartitionStatus.ACTIVE:
                self._on_flush_failure(ctx, exc)
            return
        if self.replicated is not None and not await self.replicated(ctx.number, target):
            # No longer the leader (or the broker is stopping): nothing past the last commit
            # can be confirmed here any more. The writes waiting are answered NOT_COORDINATOR
            # now, as unloading the partition would (their clients find the new coordinator);
            # waiting for the unload instead deadlocks a shutdown whose own last write waits
            # here before the unload can come.
            ctx.flush_task = None
            ctx.fail_pending(CoordinatorFailure(
                ErrorCode.not_coordinator, "this broker no longer leads the partition"))
            return
        ctx.flush_task = None
        ctx.stats.flushes += 1
        released = self.commit(ctx, target)
        ctx.stats.flushed_writes += released
        ctx.stats.max_writes_per_flush = max(ctx.stats.max_writes_per_flush, released)
        if ctx.status is PartitionStatus.ACTIVE:
            self.maybe_flush(ctx)

    def commit(self, ctx: PartitionState[S], offset: int) -> int:
        """Mark records below ``offset`` committed; returns the number of writes released."""
        if offset > ctx.committed:
            ctx.shard.commit(offset)
            ctx.committed = offset
        released = ctx.release()
        self._pruner.maybe_prune(ctx)
        return released

    def _on_flush_failure(self, ctx: PartitionState[S], exc: BaseException) -> None:
        """An fsync failed: fail everything not yet committed and stop serving (module doc, 4)."""
        log.error("%s partition %d: fsync failed (%s); records after offset %d are not committed, "
                  "their writers get KAFKA_STORAGE_ERROR and the partition stops serving until "
                  "the broker restarts (the fsync is never retried)", self._state.name, ctx.number, exc,
                  ctx.committed)
        ctx.status = PartitionStatus.FAILED
        ctx.shard.revert(ctx.committed)
        failed = CoordinatorFailure(ErrorCode.kafka_storage_error, f"fsync failed: {exc}")
        ctx.fail_pending(failed)
        ctx.fail_inbox(failed)
        self._scheduler.disarm(ctx)
