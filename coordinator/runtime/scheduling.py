"""``Scheduler``: the timers of ``CoordinatorRuntime`` (``loop.py`` documents the whole): ops
scheduled per partition and key (optionally repeating) and the shard's own timer, run as internal
write events when due; one event-loop timer handle per partition for the earliest deadline.

It owns the timer fields of each ``PartitionState`` (``timers``, ``timer_ops``, ``timer_handle``,
``timer_deadline``, and ``shard_timer_queued`` until the executor runs the event).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import Any, Generic

from coordinator.runtime.partition import (
    Op,
    PartitionState,
    PartitionStatus,
    S,
    WriteEvent,
)
from coordinator.runtime.result import CoordinatorResult
from coordinator.runtime.runtime_state import RuntimeState

log = logging.getLogger("shoal.coordinator.runtime")


class Scheduler(Generic[S]):
    """See the module doc."""

    def __init__(self, state: RuntimeState[S]) -> None:
        self._state = state

    def schedule(
        self, partition: int, key: Hashable, deadline_ms: int, op: Op[S], *, repeat_ms: int | None = None
    ) -> bool:
        """Run ``op`` as a write on ``partition`` at ``deadline_ms`` (then every ``repeat_ms``).
        Replaces a pending timer with the same key. False if the partition is not held."""
        ctx = self._state.partitions.get(partition)
        if ctx is None or ctx.status is PartitionStatus.CLOSED:
            return False
        ctx.timers.schedule(key, deadline_ms)
        ctx.timer_ops[key] = (op, repeat_ms)
        self.arm(ctx)
        return True

    def cancel(self, partition: int, key: Hashable) -> bool:
        """Disarm a timer; whether it was pending."""
        ctx = self._state.partitions.get(partition)
        if ctx is None:
            return False
        ctx.timer_ops.pop(key, None)
        return ctx.timers.cancel(key)

    def arm(self, ctx: PartitionState[S]) -> None:
        """Set the partition's event-loop timer to its earliest deadline (keyed timers or the
        shard's ``next_deadline()``); nothing unless the partition is active."""
        if ctx.status is not PartitionStatus.ACTIVE:
            return
        deadline = ctx.timers.next_deadline()
        next_deadline = getattr(ctx.shard, "next_deadline", None)
        if next_deadline is not None and not ctx.shard_timer_queued:
            shard_deadline = next_deadline()
            if shard_deadline is not None and (deadline is None or shard_deadline < deadline):
                deadline = shard_deadline
        if deadline == ctx.timer_deadline and ctx.timer_handle is not None:
            return
        if ctx.timer_handle is not None:
            ctx.timer_handle.cancel()
            ctx.timer_handle = None
        ctx.timer_deadline = deadline
        if deadline is None:
            return
        delay = max(0.0, (deadline - self._state.clock_ms()) / 1000)
        ctx.timer_handle = asyncio.get_running_loop().call_later(delay, self._on_timer, ctx)

    def disarm(self, ctx: PartitionState[S]) -> None:
        """Cancel the partition's event-loop timer (it stops serving); keyed timers stay."""
        if ctx.timer_handle is not None:
            ctx.timer_handle.cancel()
            ctx.timer_handle = None

    def _on_timer(self, ctx: PartitionState[S]) -> None:
        ctx.timer_handle = None
        ctx.timer_deadline = None
        if ctx.status is not PartitionStatus.ACTIVE:
            return
        now = self._state.clock_ms()
        for key in ctx.timers.poll(now):
            entry = ctx.timer_ops.pop(key, None)
            if entry is None:
                continue
            op, repeat_ms = entry
            if repeat_ms is not None:
                ctx.timers.schedule(key, now + repeat_ms)
                ctx.timer_ops[key] = entry
            ctx.inbox.append(WriteEvent((op,), None, admitted=False))
        next_deadline = getattr(ctx.shard, "next_deadline", None)
        if next_deadline is not None and not ctx.shard_timer_queued:
            due = next_deadline()
            if due is not None and due <= now:
                ctx.shard_timer_queued = True
                ctx.inbox.append(WriteEvent((_shard_timer_op,), None, admitted=False, shard_timer=True))
        if ctx.inbox:
            ctx.wakeup.set()
        self.arm(ctx)


def _shard_timer_op(shard: Any, now_ms: int) -> CoordinatorResult[Any, Any]:
    result: CoordinatorResult[Any, Any] = shard.on_timer(now_ms)
    return result
