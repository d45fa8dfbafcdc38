"""``CoordinatorRuntime``: one serial executor per internal-topic partition, with group commit.

Concept (STYLE.md 1.3-1.5; Kafka ``CoordinatorRuntime``, ``CoordinatorEventProcessor``,
``SnapshottableCoordinator``): a coordinator (share coordinator, group coordinator) keeps one shard
per partition of its internal topic. The runtime owns, per partition, the shard, the partition's
log and an executor task, and runs every operation on that partition one at a time:

1. ``write(partition, op)`` queues ``op(shard, now_ms) -> CoordinatorResult(records, response)``.
   The executor drains whatever is queued, runs each op against the latest (possibly uncommitted)
   state and replays the op's records into the shard at the offsets the log will give them, so
   the next op sees them. All records of one drain go out as one record batch in one append.
2. Durability (``fsync=True``): an fsync of the log runs in a worker thread; appends made while it
   is in flight wait for the next one, so N concurrent writes cost far fewer than N fsyncs (group
   commit). When it completes, ``shard.commit(offset)`` moves the committed point and the
   responses of every op whose records are below it are released, in order. With ``fsync=False``
   a write commits as soon as it is in the page cache: a process crash loses nothing, a power
   loss may lose the tail (the broker's log flush policy still applies).
3. An op that produced no records still waits until everything appended before it is committed
   (its response may reflect uncommitted state).
4. Failure: if the append itself fails (the log is unchanged) the shard reverts to the offset the
   append started at and only that drain's ops fail (COORDINATOR_NOT_AVAILABLE). If an fsync
   fails, nothing after the committed offset counts as committed, ever: the shard reverts to the
   last committed offset, every waiting and queued op fails with KAFKA_STORAGE_ERROR, and the
   partition stops serving (FAILED; later requests get NOT_COORDINATOR). It is not reloaded from
   its log and the fsync is not retried: after a failed fsync the kernel may have dropped the
   pages, a second fsync can report success for them, and a reload would count records that may
   never reach the disk as committed (the log's directory goes offline and the broker shuts down,
   ``storage/log_dir.py``; the next start recovers what the disk holds). Failures are data: ops
   get a ``CoordinatorFailure``, never an exception.
5. ``read(partition, fn)`` runs ``fn(shard)`` at once; ``fn`` must use the shard's committed view.
6. Timers: ``schedule(partition, key, deadline_ms, op)`` runs ``op`` as a write when due (keyed,
   optionally repeating); a ``TimedShard``'s ``next_deadline()`` is armed after every drain and
   ``on_timer(now_ms)`` runs as a write. Timers are soft state (lost on unload).
7. Loading: ``load(partition, log)`` replays the log into a fresh shard in a worker thread;
   meanwhile requests get COORDINATOR_LOAD_IN_PROGRESS. A partition the runtime does not hold
   answers NOT_COORDINATOR.
8. Transactions (Kafka ``scheduleTransactionalWriteOperation``, ``scheduleTransactionCompletion``):
   ``write_transactional(partition, producer_id, producer_epoch, op)`` runs ``op`` like a write,
   but its records go out as a batch of their own with the producer's id and epoch and the
   transactional attribute, and replay through ``shard.replay_transactional``.
   ``complete_transaction(partition, producer_id, producer_epoch, coordinator_epoch, commit)``
   asks ``shard.end_transaction_error`` and, unless refused, appends an end-transaction control
   batch (COMMIT/ABORT marker) replayed through ``shard.replay_end_transaction``. A drain keeps
   appending everything in one write: the non-transactional records of consecutive events share
   one batch as before, and transactional ones and markers get their own batches in between.
   Reverts after a failed append or fsync undo them like any record.
9. Pruning: after a commit, at most every ``prune_interval_ms`` and only when the log has more
   than one segment, the log start offset moves up to ``shard.last_redundant_offset()`` (never
   past what is fsynced), deleting whole segments below it (Kafka prunes
   ``__share_group_state`` the same way, with DeleteRecords).

Invariants:
- only the executor of a partition runs ops and replays records for it; everything runs on the
  event loop thread, except fsync, pruning and loading, which touch only the log (thread-safe);
- the shard's replayed offsets equal the log's offsets (a drain reads the log end offset and
  appends synchronously, with no await in between);
- responses are released in append order, and never before the records they depend on commit;
- the inbox is bounded (``max_queued_writes`` per partition): writers wait for room.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kio.schema.errors import ErrorCode

from coordinator.runtime.loader import LoadSummary, load_shard
from coordinator.runtime.records import encode_batch, encode_end_txn_marker
from coordinator.runtime.result import CoordinatorResult
from coordinator.runtime.shard import RecordSerde, Shard
from coordinator.runtime.timer import Timer
from storage.log import PartitionLogLike

log = logging.getLogger("shoal.coordinator.runtime")

S = TypeVar("S", bound=Shard)
R = TypeVar("R")

Op = Callable[[S, int], CoordinatorResult[Any, Any]]

DEFAULT_MAX_QUEUED_WRITES = 10_000
DEFAULT_MAX_BATCH_RECORDS = 4_000
DEFAULT_PRUNE_INTERVAL_MS = 10_000
DEFAULT_IO_THREADS = 4
# Loading is CPU-bound Python (decode + replay): one thread avoids GIL contention between loads.
DEFAULT_LOAD_THREADS = 1


class PartitionStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class CoordinatorFailure:
    """Why an operation did not run or did not commit (returned as data, never raised)."""

    error: ErrorCode
    message: str


@dataclass(slots=True)
class PartitionStats:
    """Counters of one partition (for tests, benchmarks and logs)."""

    writes: int = 0  # write events (one ``write``/``write_many`` call each) that were run
    appends: int = 0
    records: int = 0
    flushes: int = 0
    flushed_writes: int = 0  # write events released by an fsync
    max_writes_per_flush: int = 0
    prunes: int = 0
    load_ms: float = 0.0
    load: LoadSummary | None = None


@dataclass(frozen=True, slots=True)
class _Marker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


@dataclass(slots=True)
class _Event:
    ops: Sequence[Op[Any]]
    future: asyncio.Future[list[Any]] | None  # None: internal (timer) event
    admitted: bool  # holds a slot of the bounded inbox
    shard_timer: bool = False
    txn: tuple[int, int] | None = None  # (producer id, epoch): a transactional write
    marker: _Marker | None = None  # an end-transaction marker (ops: none)


@dataclass(slots=True)
class _Batches:
    """What one drain appends: finished batches, then the open non-transactional one."""

    plain: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    done: list[bytes] = field(default_factory=list)

    def close_plain(self, now: int) -> None:
        if self.plain:
            self.done.append(encode_batch(self.plain, now))
            self.plain = []

    def data(self, now: int) -> bytes:
        if not self.done:
            return encode_batch(self.plain, now)
        self.close_plain(now)
        return b"".join(self.done)


@dataclass(slots=True)
class _Waiting:
    end_offset: int
    future: asyncio.Future[list[Any]] | None
    responses: list[Any]


@dataclass(eq=False)
class _Partition(Generic[S]):
    number: int
    log: PartitionLogLike
    shard: S
    slots: asyncio.Semaphore
    status: PartitionStatus = PartitionStatus.LOADING
    committed: int = 0
    inbox: deque[_Event] = field(default_factory=deque)
    pending: deque[_Waiting] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    flush_task: asyncio.Task[None] | None = None
    prune_task: asyncio.Task[None] | None = None
    load_task: asyncio.Task[None] | None = None
    timers: Timer[Hashable] = field(default_factory=Timer)
    timer_ops: dict[Hashable, tuple[Op[Any], int | None]] = field(default_factory=dict)
    timer_handle: asyncio.TimerHandle | None = None
    timer_deadline: int | None = None
    shard_timer_queued: bool = False
    last_prune_ms: int | None = None
    stats: PartitionStats = field(default_factory=PartitionStats)


class CoordinatorRuntime(Generic[S]):
    """Serial executors, group commit, loading, timers and pruning (see module doc)."""

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
        self._partitions: dict[int, _Partition[S]] = {}
        self._closed = False

    # ------------------------------------------------------------------------------------------
    # Introspection

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

    async def load(self, partition: int, log_: PartitionLogLike) -> LoadSummary | CoordinatorFailure:
        """Start serving ``partition``: replay ``log_`` into a fresh shard, then accept ops.

        Raises:
            ValueError: the partition is already held, or the runtime is closed.
        """
        if self._closed:
            raise ValueError("the runtime is closed")
        if partition in self._partitions:
            raise ValueError(f"partition {partition} is already loaded")
        ctx: _Partition[S] = _Partition(
            partition, log_, self._factory(partition), asyncio.Semaphore(self._max_queued)
        )
        self._partitions[partition] = ctx
        ctx.task = asyncio.get_running_loop().create_task(
            self._run(ctx), name=f"{self._name}-{partition}"
        )
        return await self._load_into(ctx)

    async def load_many(self, logs: Mapping[int, PartitionLogLike]) -> float:
        """``load`` every partition of ``logs`` in parallel; returns the wall time in ms.
        A partition that fails to load answers NOT_COORDINATOR (logged)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(self.load(p, lg) for p, lg in logs.items()))
        return (loop.time() - started) * 1000

    async def prune_all(self) -> None:
        """``prune`` every active partition now (in parallel)."""
        await asyncio.gather(*(self.prune(p) for p in self.partitions()))

    async def unload(self, partition: int) -> None:
        """Stop serving ``partition``: finish what is appended, fail the rest with NOT_COORDINATOR."""
        ctx = self._partitions.get(partition)
        if ctx is None:
            return
        await self._shutdown(ctx)
        del self._partitions[partition]

    async def close(self) -> None:
        """Unload every partition and stop the I/O threads. Logs stay open (their owner closes)."""
        if self._closed:
            return
        self._closed = True
        for number in list(self._partitions):
            await self.unload(number)
        self._pool.shutdown(wait=True)
        self._load_pool.shutdown(wait=True)

    async def _load_into(self, ctx: _Partition[S]) -> LoadSummary | CoordinatorFailure:
        ctx.status = PartitionStatus.LOADING
        loop = asyncio.get_running_loop()
        started = loop.time()
        shard = ctx.shard
        try:
            summary = await loop.run_in_executor(self._load_pool, load_shard, ctx.log, shard, self._serde)
        except Exception as exc:  # corrupt log or I/O error: stop serving, keep the data
            log.exception("%s partition %d: loading failed", self._name, ctx.number)
            ctx.status = PartitionStatus.FAILED
            return CoordinatorFailure(ErrorCode.not_coordinator, f"loading failed: {exc}")
        if ctx.status is not PartitionStatus.LOADING:  # closed meanwhile
            return CoordinatorFailure(ErrorCode.not_coordinator, "unloaded while loading")
        ctx.committed = summary.end_offset
        ctx.stats.load = summary
        ctx.stats.load_ms = (loop.time() - started) * 1000
        shard.on_loaded(self._clock_ms())
        ctx.status = PartitionStatus.ACTIVE
        self._arm_timer(ctx)
        log.debug("%s partition %d loaded: %d records in %.1f ms", self._name, ctx.number,
                  summary.records, ctx.stats.load_ms)
        return summary

    async def _shutdown(self, ctx: _Partition[S]) -> None:
        ctx.status = PartitionStatus.CLOSED
        if ctx.timer_handle is not None:
            ctx.timer_handle.cancel()
            ctx.timer_handle = None
        if ctx.task is not None:
            ctx.task.cancel()
            await asyncio.gather(ctx.task, return_exceptions=True)
        for task in (ctx.load_task, ctx.flush_task, ctx.prune_task):
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)
        if self._fsync and ctx.pending and ctx.pending[-1].end_offset > ctx.committed:
            # Appended but not yet fsynced: one last flush so their responses can still be sent.
            target = ctx.log.log_end_offset
            try:
                await asyncio.get_running_loop().run_in_executor(self._pool, ctx.log.sync_data)
            except OSError as exc:  # e.g. the log directory went offline: commit nothing more
                log.error("%s partition %d: final flush failed; records after offset %d stay "
                          "uncommitted: %s", self._name, ctx.number, ctx.committed, exc)
            except Exception:
                log.exception("%s partition %d: final flush failed", self._name, ctx.number)
            else:
                self._commit(ctx, target)
        closed = CoordinatorFailure(ErrorCode.not_coordinator, "the coordinator is shutting down")
        self._fail_pending(ctx, closed)
        self._fail_inbox(ctx, closed)
        ctx.shard.on_unloaded()

    # ------------------------------------------------------------------------------------------
    # Operations

    async def write(self, partition: int, op: Op[S]) -> Any:
        """Run ``op`` serially on ``partition``; its response once its records are committed,
        or a ``CoordinatorFailure``."""
        return (await self.write_many(partition, (op,)))[0]

    async def write_many(self, partition: int, ops: Sequence[Op[S]]) -> list[Any]:
        """Run ``ops`` back to back (each sees the records of the previous ones) as one event;
        their responses, or ``CoordinatorFailure`` per op, in order."""
        ctx = self._partitions.get(partition)
        failure = self._unavailable(ctx)
        if failure is not None or ctx is None:
            return [failure] * len(ops)
        await ctx.slots.acquire()
        failure = self._unavailable(ctx)
        if failure is not None:
            ctx.slots.release()
            return [failure] * len(ops)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        ctx.inbox.append(_Event(tuple(ops), future, admitted=True))
        ctx.wakeup.set()
        return await future

    async def write_transactional(self, partition: int, producer_id: int, producer_epoch: int,
                                  op: Op[S]) -> Any:
        """``write`` whose records form a transactional batch of ``producer_id`` at
        ``producer_epoch`` (module doc, 8); its response once committed, or a failure."""
        return (await self._submit(partition, _Event((op,), None, True,
                                                     txn=(producer_id, producer_epoch))))[0]

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> Any:
        """Append the end-transaction marker of ``producer_id`` (module doc, 8). Returns
        ``ErrorCode.none`` once it is committed, the shard's refusal, or a
        ``CoordinatorFailure``."""
        marker = _Marker(producer_id, producer_epoch, coordinator_epoch, commit)
        return (await self._submit(partition, _Event((), None, True, marker=marker)))[0]

    async def _submit(self, partition: int, event: _Event) -> list[Any]:
        ctx = self._partitions.get(partition)
        count = max(1, len(event.ops))
        failure = self._unavailable(ctx)
        if failure is not None or ctx is None:
            return [failure] * count
        await ctx.slots.acquire()
        failure = self._unavailable(ctx)
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
        ctx = self._partitions.get(partition)
        failure = self._unavailable(ctx)
        if failure is not None or ctx is None:
            return failure  # type: ignore[return-value]
        try:
            return fn(ctx.shard)
        except Exception:
            log.exception("%s partition %d: read failed", self._name, partition)
            return CoordinatorFailure(ErrorCode.unknown_server_error, "read failed")

    def schedule(
        self, partition: int, key: Hashable, deadline_ms: int, op: Op[S], *, repeat_ms: int | None = None
    ) -> bool:
        """Run ``op`` as a write on ``partition`` at ``deadline_ms`` (then every ``repeat_ms``).
        Replaces a pending timer with the same key. False if the partition is not held."""
        ctx = self._partitions.get(partition)
        if ctx is None or ctx.status is PartitionStatus.CLOSED:
            return False
        ctx.timers.schedule(key, deadline_ms)
        ctx.timer_ops[key] = (op, repeat_ms)
        self._arm_timer(ctx)
        return True

    def cancel(self, partition: int, key: Hashable) -> bool:
        """Disarm a timer; whether it was pending."""
        ctx = self._partitions.get(partition)
        if ctx is None:
            return False
        ctx.timer_ops.pop(key, None)
        return ctx.timers.cancel(key)

    def _unavailable(self, ctx: _Partition[S] | None) -> CoordinatorFailure | None:
        if ctx is None or ctx.status in (PartitionStatus.CLOSED, PartitionStatus.FAILED):
            return CoordinatorFailure(ErrorCode.not_coordinator, "this broker does not serve the partition")
        if ctx.status is PartitionStatus.LOADING:
            return CoordinatorFailure(ErrorCode.coordinator_load_in_progress, "the partition is loading")
        return None

    # ------------------------------------------------------------------------------------------
    # The executor

    async def _run(self, ctx: _Partition[S]) -> None:
        while True:
            if not ctx.inbox:
                ctx.wakeup.clear()
                await ctx.wakeup.wait()
                continue
            try:
                self._drain(ctx)
            except Exception:  # a runtime bug: stop serving rather than diverge from the log
                log.exception("%s partition %d: executor failed", self._name, ctx.number)
                ctx.status = PartitionStatus.FAILED
                broken = CoordinatorFailure(ErrorCode.unknown_server_error, "coordinator failure")
                self._fail_pending(ctx, broken)
                self._fail_inbox(ctx, broken)
                return
            # Let the writers of this round and other partitions run before the next drain.
            await asyncio.sleep(0)

    def _drain(self, ctx: _Partition[S]) -> None:
        """Run queued events, append their records as one batch, queue their responses."""
        if ctx.status is not PartitionStatus.ACTIVE:
            self._fail_inbox(ctx, self._unavailable(ctx) or CoordinatorFailure(
                ErrorCode.coordinator_not_available, "not active"))
            return
        now = self._clock_ms()
        base = ctx.log.log_end_offset
        batches = _Batches()
        ran, end = self._run_events(ctx, now, base, batches)
        if end > base and not self._append(ctx, batches, now, base, ran):
            self._arm_timer(ctx)
            return
        for event, responses in ran:
            if event.future is not None:
                ctx.stats.writes += 1
                ctx.pending.append(_Waiting(end, event.future, responses))
            else:
                _log_failures(self._name, ctx.number, responses)
        if not self._fsync:
            self._commit(ctx, end)
        else:
            self._release(ctx)
            self._maybe_flush(ctx)
        self._arm_timer(ctx)

    def _run_events(
        self, ctx: _Partition[S], now: int, offset: int, batches: _Batches
    ) -> tuple[list[tuple[_Event, list[Any]]], int]:
        """Take events off the inbox (up to the batch limit) and run their ops in order.
        Returns the events with their responses, and the offset after their records."""
        ran: list[tuple[_Event, list[Any]]] = []
        limit = offset + self._max_batch_records
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
                            lambda o, k, v, r=replay, p=pid, e=epoch: r(o, p, e, k, v))
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

    def _run_marker(self, ctx: _Partition[S], marker: _Marker, now: int, offset: int,
                    batches: _Batches) -> tuple[Any, int]:
        """Check, encode and replay one end-transaction marker; (response, next offset)."""
        shard: Any = ctx.shard
        try:
            refused = shard.end_transaction_error(marker.producer_id, marker.producer_epoch)
        except Exception:
            log.exception("%s partition %d: end-transaction check failed", self._name, ctx.number)
            return CoordinatorFailure(ErrorCode.unknown_server_error, "operation failed"), offset
        if refused is not None:
            return refused, offset
        try:
            shard.replay_end_transaction(offset, marker.producer_id, marker.producer_epoch,
                                         marker.commit)
        except Exception:
            log.exception("%s partition %d: replaying an end-transaction marker failed",
                          self._name, ctx.number)
            shard.revert(offset)
            return CoordinatorFailure(ErrorCode.unknown_server_error, "replay failed"), offset
        batches.close_plain(now)
        batches.done.append(encode_end_txn_marker(
            marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit,
            now))
        return ErrorCode.none, offset + 1

    def _append(
        self,
        ctx: _Partition[S],
        batches: _Batches,
        now: int,
        base: int,
        ran: list[tuple[_Event, list[Any]]],
    ) -> bool:
        """Append the drain's batches (one write); on failure revert this drain and fail its
        events (False)."""
        try:
            ctx.log.append(batches.data(now), now)
        except Exception as exc:
            # The log did not take the batch: undo this drain only (earlier appends stand).
            log.exception("%s partition %d: append failed", self._name, ctx.number)
            ctx.shard.revert(base)
            failed = CoordinatorFailure(ErrorCode.coordinator_not_available, f"append failed: {exc}")
            for event, responses in ran:
                _finish(event.future, [failed] * len(responses))
            return False
        ctx.stats.appends += 1
        ctx.stats.records += ctx.log.log_end_offset - base
        return True

    def _run_op(
        self,
        ctx: _Partition[S],
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
            pairs = [self._serde.encode(r) for r in result.records]
        except Exception:
            log.exception("%s partition %d: operation failed", self._name, ctx.number)
            return CoordinatorFailure(ErrorCode.unknown_server_error, "operation failed"), offset
        start = offset
        if result.replay_records:
            apply = shard.replay if replay is None else replay
            try:
                for record in result.records:
                    key, value = self._serde.key_value(record)
                    apply(offset, key, value)
                    offset += 1
            except Exception:
                log.exception("%s partition %d: replay failed", self._name, ctx.number)
                shard.revert(start)
                return CoordinatorFailure(ErrorCode.unknown_server_error, "replay failed"), start
        else:
            offset += len(pairs)
        encoded.extend(pairs)
        return result.response, offset

    # ------------------------------------------------------------------------------------------
    # Durability

    def _maybe_flush(self, ctx: _Partition[S]) -> None:
        if ctx.flush_task is not None or ctx.status is not PartitionStatus.ACTIVE:
            return
        target = ctx.log.log_end_offset
        if not ctx.pending and target <= ctx.committed:
            return
        # Records of internal (timer) events have no waiter but must still commit promptly: a
        # shard reports effects (e.g. a fenced member) and reads serve the committed view.
        if target <= ctx.committed:
            self._release(ctx)
            return
        ctx.flush_task = asyncio.get_running_loop().create_task(self._flush(ctx, target))

    async def _flush(self, ctx: _Partition[S], target: int) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, ctx.log.sync_data)
        except Exception as exc:
            log.exception("%s partition %d: fsync failed", self._name, ctx.number)
            ctx.flush_task = None
            if ctx.status is PartitionStatus.ACTIVE:
                self._on_flush_failure(ctx, exc)
            return
        ctx.flush_task = None
        ctx.stats.flushes += 1
        released = self._commit(ctx, target)
        ctx.stats.flushed_writes += released
        ctx.stats.max_writes_per_flush = max(ctx.stats.max_writes_per_flush, released)
        if ctx.status is PartitionStatus.ACTIVE:
            self._maybe_flush(ctx)

    def _commit(self, ctx: _Partition[S], offset: int) -> int:
        """Mark records below ``offset`` committed; returns the number of writes released."""
        if offset > ctx.committed:
            ctx.shard.commit(offset)
            ctx.committed = offset
        released = self._release(ctx)
        self._maybe_prune(ctx)
        return released

    def _release(self, ctx: _Partition[S]) -> int:
        released = 0
        pending = ctx.pending
        while pending and pending[0].end_offset <= ctx.committed:
            waiting = pending.popleft()
            _finish(waiting.future, waiting.responses)
            released += 1
        return released

    def _on_flush_failure(self, ctx: _Partition[S], exc: BaseException) -> None:
        """An fsync failed: fail everything not yet committed and stop serving (module doc, 4)."""
        log.error("%s partition %d: fsync failed (%s); records after offset %d are not committed, "
                  "their writers get KAFKA_STORAGE_ERROR and the partition stops serving until "
                  "the broker restarts (the fsync is never retried)", self._name, ctx.number, exc,
                  ctx.committed)
        ctx.status = PartitionStatus.FAILED
        ctx.shard.revert(ctx.committed)
        failed = CoordinatorFailure(ErrorCode.kafka_storage_error, f"fsync failed: {exc}")
        self._fail_pending(ctx, failed)
        self._fail_inbox(ctx, failed)
        if ctx.timer_handle is not None:
            ctx.timer_handle.cancel()
            ctx.timer_handle = None

    def _fail_pending(self, ctx: _Partition[S], failure: CoordinatorFailure) -> None:
        while ctx.pending:
            waiting = ctx.pending.popleft()
            _finish(waiting.future, [failure] * len(waiting.responses))

    def _fail_inbox(self, ctx: _Partition[S], failure: CoordinatorFailure) -> None:
        while ctx.inbox:
            event = ctx.inbox.popleft()
            if event.admitted:
                ctx.slots.release()
            if event.shard_timer:
                ctx.shard_timer_queued = False
            _finish(event.future, [failure] * max(1, len(event.ops)))

    # ------------------------------------------------------------------------------------------
    # Pruning

    async def prune(self, partition: int) -> int | None:
        """Prune ``partition`` now, whatever the interval: move its log start offset up to the
        shard's last redundant offset (within a segment too, so a later load reads less).
        Returns the new log start offset, or None if the partition is not active."""
        ctx = self._partitions.get(partition)
        if ctx is None or ctx.status is not PartitionStatus.ACTIVE:
            return None
        while ctx.prune_task is not None:
            await asyncio.gather(ctx.prune_task, return_exceptions=True)
        redundant = ctx.shard.last_redundant_offset()
        if redundant is not None and redundant > ctx.log.log_start_offset:
            ctx.prune_task = asyncio.get_running_loop().create_task(self._prune(ctx, redundant))
            await asyncio.gather(ctx.prune_task, return_exceptions=True)
        return ctx.log.log_start_offset

    def _maybe_prune(self, ctx: _Partition[S]) -> None:
        if ctx.prune_task is not None or ctx.status is not PartitionStatus.ACTIVE:
            return
        if ctx.log.segment_count < 2:
            return  # nothing could be deleted: the active segment always stays
        now = self._clock_ms()
        if ctx.last_prune_ms is not None and now - ctx.last_prune_ms < self._prune_interval_ms:
            return
        ctx.last_prune_ms = now
        redundant = ctx.shard.last_redundant_offset()
        if redundant is None or redundant <= ctx.log.log_start_offset:
            return
        ctx.prune_task = asyncio.get_running_loop().create_task(self._prune(ctx, redundant))

    async def _prune(self, ctx: _Partition[S], redundant: int) -> None:
        moved = False
        try:
            moved = await asyncio.get_running_loop().run_in_executor(
                self._pool, _prune_log, ctx.log, redundant
            )
        except Exception:
            log.exception("%s partition %d: pruning below %d failed; will retry", self._name,
                          ctx.number, redundant)
        ctx.prune_task = None
        if moved:
            ctx.stats.prunes += 1
            self._maybe_prune(ctx)  # commits made while this one ran did not start one

    # ------------------------------------------------------------------------------------------
    # Timers

    def _arm_timer(self, ctx: _Partition[S]) -> None:
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
        delay = max(0.0, (deadline - self._clock_ms()) / 1000)
        ctx.timer_handle = asyncio.get_running_loop().call_later(delay, self._on_timer, ctx)

    def _on_timer(self, ctx: _Partition[S]) -> None:
        ctx.timer_handle = None
        ctx.timer_deadline = None
        if ctx.status is not PartitionStatus.ACTIVE:
            return
        now = self._clock_ms()
        for key in ctx.timers.poll(now):
            entry = ctx.timer_ops.pop(key, None)
            if entry is None:
                continue
            op, repeat_ms = entry
            if repeat_ms is not None:
                ctx.timers.schedule(key, now + repeat_ms)
                ctx.timer_ops[key] = entry
            ctx.inbox.append(_Event((op,), None, admitted=False))
        next_deadline = getattr(ctx.shard, "next_deadline", None)
        if next_deadline is not None and not ctx.shard_timer_queued:
            due = next_deadline()
            if due is not None and due <= now:
                ctx.shard_timer_queued = True
                ctx.inbox.append(_Event((_shard_timer_op,), None, admitted=False, shard_timer=True))
        if ctx.inbox:
            ctx.wakeup.set()
        self._arm_timer(ctx)


def _shard_timer_op(shard: Any, now_ms: int) -> CoordinatorResult[Any, Any]:
    result: CoordinatorResult[Any, Any] = shard.on_timer(now_ms)
    return result


def _prune_log(lg: PartitionLogLike, redundant: int) -> bool:
    """Move the log start up to ``redundant`` (fsyncing first so it never passes durable data)."""
    if lg.recovery_point < redundant:
        lg.flush()
    target = min(redundant, lg.recovery_point)
    if target <= lg.log_start_offset:
        return False
    lg.delete_records_before(target)
    return True


def _finish(future: asyncio.Future[list[Any]] | None, responses: list[Any]) -> None:
    if future is not None and not future.done():
        future.set_result(responses)


def _log_failures(name: str, partition: int, responses: list[Any]) -> None:
    for response in responses:
        if isinstance(response, CoordinatorFailure):
            log.warning("%s partition %d: timer operation failed: %s", name, partition, response.message)
