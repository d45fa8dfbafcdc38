"""``Pruner``: log pruning in ``CoordinatorRuntime`` (``loop.py`` documents the whole): after
a commit, at most every ``prune_interval_ms``, the log is truncated below the shard's
``last_redundant_offset`` on the io pool.

It owns each ``PartitionState``'s ``prune_task`` and ``last_prune_ms``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Generic

from coordinator.runtime.partition import PartitionState, PartitionStatus, S
from coordinator.runtime.runtime_state import RuntimeState
from storage.log import PartitionLogLike

log = logging.getLogger("shoal.coordinator.runtime")


class Pruner(Generic[S]):
    """See the module doc."""

    def __init__(self, state: RuntimeState[S]) -> None:
        self._state = state

    async def prune_all(self) -> None:
        """``prune`` every active partition now (in parallel)."""
        await asyncio.gather(*(self.prune(p) for p in sorted(self._state.partitions)))

    async def prune(self, partition: int) -> int | None:
        """Prune ``partition`` now, whatever the interval: move its log start offset up to the
        shard's last redundant offset (within a segment too, so a later load reads less).
        Returns the new log start offset, or None if the partition is not active."""
        ctx = self._state.partitions.get(partition)
        if ctx is None or ctx.status is not PartitionStatus.ACTIVE:
            return None
        while ctx.prune_task is not None:
            await asyncio.gather(ctx.prune_task, return_exceptions=True)
        redundant = ctx.shard.last_redundant_offset()
        if redundant is not None and redundant > ctx.log.log_start_offset:
            ctx.prune_task = asyncio.get_running_loop().create_task(self._prune(ctx, redundant))
            await asyncio.gather(ctx.prune_task, return_exceptions=True)
        return ctx.log.log_start_offset

    def maybe_prune(self, ctx: PartitionState[S]) -> None:
        """Start pruning in the background if the interval has passed and a segment could go."""
        if ctx.prune_task is not None or ctx.status is not PartitionStatus.ACTIVE:
            return
        if ctx.log.segment_count < 2:
            return  # nothing could be deleted: the active segment always stays
        now = self._state.clock_ms()
        if ctx.last_prune_ms is not None and now - ctx.last_prune_ms < self._state.prune_interval_ms:
            return
        ctx.last_prune_ms = now
        redundant = ctx.shard.last_redundant_offset()
        if redundant is None or redundant <= ctx.log.log_start_offset:
            return
        ctx.prune_task = asyncio.get_running_loop().create_task(self._prune(ctx, redundant))

    async def _prune(self, ctx: PartitionState[S], redundant: int) -> None:
        moved = False
        try:
            moved = await asyncio.get_running_loop().run_in_executor(
                self._state.io_pool, _prune_log, ctx.log, redundant
            )
        except Exception:
            log.exception("%s partition %d: pruning below %d failed; will retry", self._state.name,
                          ctx.number, redundant)
        ctx.prune_task = None
        if moved:
            ctx.stats.prunes += 1
            self.maybe_prune(ctx)  # commits made while this one ran did not start one


def _prune_log(lg: PartitionLogLike, redundant: int) -> bool:
    """Move the log start up to ``redundant`` (fsyncing first so it never passes durable data)."""
    if lg.recovery_point < redundant:
        lg.flush()
    target = min(redundant, lg.recovery_point)
    if target <= lg.log_start_offset:
        return False
    lg.delete_records_before(target)
    return True
