"""``Executor``: the write path of ``CoordinatorRuntime`` (``loop.py`` documents the whole):
ops are queued per partition (bounded inbox), and the partition's executor task (``run``) drains
the inbox, runs the ops one at a time against the shard, encodes their records (and
end-transaction markers) into batches and appends them to the log; the ``Committer`` then makes
them durable and answers them.

It owns each ``PartitionState``'s ``inbox``, ``slots`` and ``wakeup``, and replays records into
the shard (the only writer of shard state besides loading).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic

from kio.schema.errors import ErrorCode

from coordinator.runtime.partition import (
    Batches,
    CoordinatorFailure,
    Op,
    PartitionState,
    PartitionStatus,
    R,
    S,
    TxnMarker,
    Waiting,
    WriteEvent,
    finish,
    log_failures,
    unavailable,
)
from coordinator.runtime.records import encode_batch, encode_end_txn_marker
from coordinator.runtime.commit import Committer
from coordinator.runtime.runtime_state import RuntimeState
from coordinator.runtime.scheduling import Scheduler

log = logging.getLogger("shoal.coordinator.runtime")


class Executor(Generic[S]):
    """See the module doc."""

    def __init__(self, state: RuntimeState[S], committer: Committer[S], scheduler: Scheduler[S]) -> None:
        self._state = state
        self._committer = committer
        self._scheduler = scheduler

    async def write_many(self, partition: int, ops: Sequence[Op[S]]) -> list[Any]:
        """Run ``ops`` back to back (each sees the records of the previous ones) as one event;
        their responses, or ``CoordinatorFailure`` per op, in order."""
        return await self._submit(partition, WriteEvent(tuple(ops), None, admitted=True), len(ops))

    async def write_transactional(self, partition: int, producer_id: int, producer_epoch: int,
                                  op: Op[S]) -> Any:
        """``write`` whose records form a transactional batch of ``producer_id`` at
        ``producer_epoch`` (module doc, 8); its response once committed, or a failure."""
        return (await self._submit(partition, WriteEvent((op,), None, True,
                                                     txn=(producer_id, producer_epoch))))[0]

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> Any:
        """Append the end-transaction marker of ``producer_id`` (module doc, 8). Returns
        ``ErrorCode.none`` once it is committed, the shard's refusal, or a
        ``CoordinatorFailure``."""
        marker = TxnMarker(producer_id, producer_epoch, coordinator_epoch, commit)
        return (await self._submit(partition, WriteEvent((), None, True, marker=marker)))[0]

    async def _submit(self, partition: int, event: WriteEvent, count: int = 1) -> list[Any]:
        """Queue ``event`` (waiting for room in the inbox); its ``count`` responses."""
        ctx = self._state.partitions.get(partition)
        failure = unavailable(ctx)
        if failure is not None or ctx is None:
            return [failure] * count
        await ctx.slots.acquire()
        failure = unavailable(ctx)
        if failure is not None:
            ctx.slots.release()
            return [failure] * count
        event.future = asyncio.get_running_loop().create_future()
        ctx.inbox.append(event)
        ctx.wakeup.set()
        return await event.future

    async def write_each(self, ops: Mapping[int, Sequence[Op[S]]]) -> dict[int, list[Any]]:
        """``write_many`` on several partitions at once; their results by partition."""
        items = list(ops.items())
        if len(items) == 1:
            partition, part = items[0]
            return {partition: await self.write_many(partition, part)}
        results = await asyncio.gather(*(self.write_many(p, part) for p, part in items))
        return {p: r for (p, _), r in zip(items, results, strict=True)}

    async def read(self, partition: int, fn: Callable[[S], R]) -> R | CoordinatorFailure:
        """``fn(shard)`` now, without queueing; ``fn`` must read the committed view."""
        ctx = self._state.partitions.get(partition)
        failure = unavailable(ctx)
        if failure is not None or ctx is None:
            return failure  # type: ignore[return-value]
        try:
            return fn(ctx.shard)
        except Exception:
            log.exception("%s partition %d: read failed", self._state.name, partition)
            return CoordinatorFailure(ErrorCode.unknown_server_error, "read failed")

    # ------------------------------------------------------------------------------------------

    async def run(self, ctx: PartitionState[S]) -> None:
        """The partition's executor task: drain the inbox whenever it is woken, until cancelled
        (or until a runtime bug fails the partition)."""
        while True:
            if not ctx.inbox:
                ctx.wakeup.clear()
                await ctx.wakeup.wait()
                continue
            try:
                self._drain(ctx)
            except Exception:  # a runtime bug: stop serving rather than diverge from the log
                log.exception("%s partition %d: executor failed", self._state.name, ctx.number)
                ctx.status = PartitionStatus.FAILED
                broken = CoordinatorFailure(ErrorCode.unknown_server_error, "coordinator failure")
                ctx.fail_pending(broken)
                ctx.fail_inbox(broken)
                return
            # Let the writers of this round and other partitions run before the next drain.
            await asyncio.sleep(0)

    def _drain(self, ctx: PartitionState[S]) -> None:
        """Run queued events, append their records as one batch, queue their responses."""
        if ctx.status is not PartitionStatus.ACTIVE:
            ctx.fail_inbox(unavailable(ctx) or CoordinatorFailure(
                ErrorCode.coordinator_not_available, "not active"))
            return
        now = self._state.clock_ms()
        base = ctx.log.log_end_offset
        batches = Batches()
        ran, end = self._run_events(ctx, now, base, batches)
        if end > base and not self._append(ctx, batches, now, base, ran):
            self._scheduler.arm(ctx)
            return
        for event, responses in ran:
            if event.future is not None:
                ctx.stats.writes += 1
                ctx.pending.append(Waiting(end, event.future, responses))
            else:
                log_failures(self._state.name, ctx.number, responses)
        if not self._state.fsync:
            self._committer.commit(ctx, end)
        else:
            ctx.release()
            self._committer.maybe_flush(ctx)
        self._scheduler.arm(ctx)

    def _run_events(
        self, ctx: PartitionState[S], now: int, offset: int, batches: Batches
    ) -> tuple[list[tuple[WriteEvent, list[Any]]], int]:
        """Take events off the inbox (up to the batch limit) and run their ops in order.
        Returns the events with their responses, and the offset after their records."""
        ran: list[tuple[WriteEvent, list[Any]]] = []
        limit = offset + self._state.max_batch_records
        while ctx.inbox and offset < limit:
            event = ctx.inbox.popleft()
            if event.admitted:
                ctx.slots.release()
            if event.shard_timer:
                ctx.shard_timer_queued = False
            if event.future is not None and event.future.done():
                continue  # the caller gave up before the op ran
            responses: list[Any] = []
            if event.marker is not None:
                response, offset = self._run_marker(ctx, event.marker, now, offset, batches)
                responses.append(response)
            elif event.txn is not None:
                pairs: list[tuple[bytes, bytes | None]] = []
                pid, epoch = event.txn
                replay = getattr(ctx.shard, "replay_transactional", None)
                for op in event.ops:
                    if replay is None:
                        response = CoordinatorFailure(ErrorCode.unknown_server_error,
                                                      "this coordinator has no transactions")
                    else:
                        response, offset = self._run_op(
                            ctx, ctx.shard, op, now, offset, pairs,
                            _transactional_replay(replay, pid, epoch))
                    responses.append(response)
                if pairs:
                    batches.close_plain(now)
                    batches.done.append(encode_batch(pairs, now, producer_id=pid,
                                                     producer_epoch=epoch, transactional=True))
            else:
                for op in event.ops:
                    response, offset = self._run_op(ctx, ctx.shard, op, now, offset,
                                                    batches.plain)
                    responses.append(response)
            ran.append((event, responses))
        return ran, offset

    def _run_marker(self, ctx: PartitionState[S], marker: TxnMarker, now: int, offset: int,
                    batches: Batches) -> tuple[Any, int]:
        """Check, encode and replay one end-transaction marker; (response, next offset)."""
        shard: Any = ctx.shard
        try:
            refused = shard.end_transaction_error(marker.producer_id, marker.producer_epoch)
        except Exception:
            log.exception("%s partition %d: end-transaction check failed", self._state.name, ctx.number)
            return CoordinatorFailure(ErrorCode.unknown_server_error, "operation failed"), offset
        if refused is not None:
            return refused, offset
        try:
            shard.replay_end_transaction(offset, marker.producer_id, marker.producer_epoch,
                                         marker.commit)
        except Exception:
            log.exception("%s partition %d: replaying an end-transaction marker failed",
                          self._state.name, ctx.number)
            shard.revert(offset)
            return CoordinatorFailure(ErrorCode.unknown_server_error, "replay failed"), offset
        batches.close_plain(now)
        batches.done.append(encode_end_txn_marker(
            marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit,
            now))
        return ErrorCode.none, offset + 1

    def _append(
        self,
        ctx: PartitionState[S],
        batches: Batches,
        now: int,
        base: int,
        ran: list[tuple[WriteEvent, list[Any]]],
    ) -> bool:
        """Append the drain's batches (one write); on failure revert this drain and fail its
        events (False)."""
        try:
            ctx.log.append(batches.data(now), now)
        except Exception as exc:
            # The log did not take the batch: undo this drain only (earlier appends stand).
            log.exception("%s partition %d: append failed", self._state.name, ctx.number)
            ctx.shard.revert(base)
            failed = CoordinatorFailure(ErrorCode.coordinator_not_available, f"append failed: {exc}")
            for event, responses in ran:
                finish(event.future, [failed] * len(responses))
            return False
        ctx.stats.appends += 1
        ctx.stats.records += ctx.log.log_end_offset - base
        return True

    def _run_op(
        self,
        ctx: PartitionState[S],
        shard: S,
        op: Op[S],
        now: int,
        offset: int,
        encoded: list[tuple[bytes, bytes | None]],
        replay: Callable[[int, Any, Any], None] | None = None,
    ) -> tuple[Any, int]:
        """Run one op, encode and replay its records (through ``replay``, by default
        ``shard.replay``). Returns (response, next offset)."""
        try:
            result = op(shard, now)
            pairs = [self._state.serde.encode(r) for r in result.records]
        except Exception:
            log.exception("%s partition %d: operation failed", self._state.name, ctx.number)
            return CoordinatorFailure(ErrorCode.unknown_server_error, "operation failed"), offset
        start = offset
        if result.replay_records:
            apply = shard.replay if replay is None else replay
            try:
                for record in result.records:
                    key, value = self._state.serde.key_value(record)
                    apply(offset, key, value)
                    offset += 1
            except Exception:
                log.exception("%s partition %d: replay failed", self._state.name, ctx.number)
                shard.revert(start)
                return CoordinatorFailure(ErrorCode.unknown_server_error, "replay failed"), start
        else:
            offset += len(pairs)
        encoded.extend(pairs)
        return result.response, offset


def _transactional_replay(replay: Callable[[int, int, int, Any, Any], None], producer_id: int,
                          producer_epoch: int) -> Callable[[int, Any, Any], None]:
    """``replay(offset, key, value)`` of a transactional write: the shard's
    ``replay_transactional`` with the producer's id and epoch."""
    def run(offset: int, key: Any, value: Any) -> None:
        replay(offset, producer_id, producer_epoch, key, value)

    return run
