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

Parts: ``CoordinatorRuntime`` owns one of each collaborator and answers by delegating to them:
``PartitionLoader`` (``load.py``: load, unload, close), ``Executor`` (``append.py``: queue, run
and append ops; reads), ``Committer`` (``commit.py``: fsync, the ``replicated`` wait, commit),
``Pruner`` (``prune.py``) and ``Scheduler`` (``scheduling.py``: timers), over one
``RuntimeState`` (``runtime_state.py``: settings, pools, the partition table) and a
``PartitionState`` per partition (``partition.py``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, Generic

from coordinator.runtime.append import Executor
from coordinator.runtime.commit import Committer
from coordinator.runtime.load import PartitionLoader
from coordinator.runtime.loader import LoadSummary
from coordinator.runtime.partition import (
    DEFAULT_IO_THREADS,
    DEFAULT_LOAD_THREADS,
    DEFAULT_MAX_BATCH_RECORDS,
    DEFAULT_MAX_QUEUED_WRITES,
    DEFAULT_PRUNE_INTERVAL_MS,
    CoordinatorFailure,
    Op,
    PartitionStats,
    PartitionStatus,
    R,
    S,
)
from coordinator.runtime.prune import Pruner
from coordinator.runtime.runtime_state import RuntimeState
from coordinator.runtime.scheduling import Scheduler
from coordinator.runtime.shard import RecordSerde
from storage.log import PartitionLogLike

__all__ = ["DEFAULT_IO_THREADS", "DEFAULT_LOAD_THREADS", "DEFAULT_MAX_BATCH_RECORDS",
           "DEFAULT_MAX_QUEUED_WRITES", "DEFAULT_PRUNE_INTERVAL_MS", "CoordinatorFailure",
           "CoordinatorRuntime", "Op", "PartitionStats", "PartitionStatus", "R", "S"]


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
        self._state: RuntimeState[S] = RuntimeState(
            shard_factory, serde, clock_ms, fsync, prune_interval_ms, max_queued_writes,
            max_batch_records, name,
            concurrent.futures.ThreadPoolExecutor(io_threads, thread_name_prefix=f"{name}-io"),
            concurrent.futures.ThreadPoolExecutor(load_threads,
                                                  thread_name_prefix=f"{name}-load"))
        self._scheduler = Scheduler(self._state)
        self._pruner = Pruner(self._state)
        self._committer = Committer(self._state, self._pruner, self._scheduler)
        self._executor = Executor(self._state, self._committer, self._scheduler)
        self._loader = PartitionLoader(self._state, self._executor, self._committer,
                                       self._scheduler)

    @property
    def replicated(self) -> Callable[[int, int], Awaitable[bool]] | None:
        """Set by the host when its partitions are replicated: ``replicated(partition, offset)``
        returns once every in-sync replica has the log up to ``offset`` (True), or False when
        this broker stopped leading the partition. Writes are answered only after it."""
        return self._committer.replicated

    @replicated.setter
    def replicated(self, hook: Callable[[int, int], Awaitable[bool]] | None) -> None:
        self._committer.replicated = hook

    # ------------------------------------------------------------------------------------------
    # Reads

    @property
    def fsync(self) -> bool:
        return self._state.fsync

    def partitions(self) -> list[int]:
        return sorted(self._state.partitions)

    def status(self, partition: int) -> PartitionStatus | None:
        ctx = self._state.partitions.get(partition)
        return None if ctx is None else ctx.status

    def shard(self, partition: int) -> S | None:
        """The partition's shard (replayed state, committed or not), or None."""
        ctx = self._state.partitions.get(partition)
        return None if ctx is None else ctx.shard

    def stats(self, partition: int) -> PartitionStats | None:
        ctx = self._state.partitions.get(partition)
        return None if ctx is None else ctx.stats

    def committed_offset(self, partition: int) -> int | None:
        ctx = self._state.partitions.get(partition)
        return None if ctx is None else ctx.committed

    # ------------------------------------------------------------------------------------------
    # Loading (load.py)

    async def load(self, partition: int, log_: PartitionLogLike) -> LoadSummary | CoordinatorFailure:
        """Start serving ``partition``: replay ``log_`` into a fresh shard, then accept ops.

        Raises:
            ValueError: the partition is already held, or the runtime is closed.
        """
        return await self._loader.load(partition, log_)

    async def load_many(self, logs: Mapping[int, PartitionLogLike]) -> float:
        """``load`` every partition of ``logs`` in parallel; returns the wall time in ms.
        A partition that fails to load answers NOT_COORDINATOR (logged)."""
        return await self._loader.load_many(logs)

    async def unload(self, partition: int) -> None:
        """Stop serving ``partition``: finish what is appended, fail the rest with NOT_COORDINATOR."""
        await self._loader.unload(partition)

    async def close(self) -> None:
        """Unload every partition and stop the I/O threads. Logs stay open (their owner closes)."""
        await self._loader.close()

    # ------------------------------------------------------------------------------------------
    # Operations (append.py)

    async def write(self, partition: int, op: Op[S]) -> Any:
        """Run ``op`` serially on ``partition``; its response once its records are committed,
        or a ``CoordinatorFailure``."""
        return (await self._executor.write_many(partition, (op,)))[0]

    async def write_many(self, partition: int, ops: Sequence[Op[S]]) -> list[Any]:
        """Run ``ops`` back to back (each sees the records of the previous ones) as one event;
        their responses, or ``CoordinatorFailure`` per op, in order."""
        return await self._executor.write_many(partition, ops)

    async def write_each(self, ops: Mapping[int, Sequence[Op[S]]]) -> dict[int, list[Any]]:
        """``write_many`` on several partitions at once; their results by partition."""
        return await self._executor.write_each(ops)

    async def write_transactional(self, partition: int, producer_id: int, producer_epoch: int,
                                  op: Op[S]) -> Any:
        """``write`` whose records form a transactional batch of ``producer_id`` at
        ``producer_epoch`` (module doc, 8); its response once committed, or a failure."""
        return await self._executor.write_transactional(partition, producer_id, producer_epoch, op)

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> Any:
        """Append the end-transaction marker of ``producer_id`` (module doc, 8). Returns
        ``ErrorCode.none`` once it is committed, the shard's refusal, or a
        ``CoordinatorFailure``."""
        return await self._executor.complete_transaction(
            partition, producer_id, producer_epoch, coordinator_epoch, commit)

    async def read(self, partition: int, fn: Callable[[S], R]) -> R | CoordinatorFailure:
        """``fn(shard)`` now, without queueing; ``fn`` must read the committed view."""
        return await self._executor.read(partition, fn)

    # ------------------------------------------------------------------------------------------
    # Pruning (prune.py) and timers (scheduling.py)

    async def prune_all(self) -> None:
        """``prune`` every active partition now (in parallel)."""
        await self._pruner.prune_all()

    async def prune(self, partition: int) -> int | None:
        """Prune ``partition`` now, whatever the interval: move its log start offset up to the
        shard's last redundant offset (within a segment too, so a later load reads less).
        Returns the new log start offset, or None if the partition is not active."""
        return await self._pruner.prune(partition)

    def schedule(
        self, partition: int, key: Hashable, deadline_ms: int, op: Op[S], *, repeat_ms: int | None = None
    ) -> bool:
        """Run ``op`` as a write on ``partition`` at ``deadline_ms`` (then every ``repeat_ms``).
        Replaces a pending timer with the same key. False if the partition is not held."""
        return self._scheduler.schedule(partition, key, deadline_ms, op, repeat_ms=repeat_ms)

    def cancel(self, partition: int, key: Hashable) -> bool:
        """Disarm a timer; whether it was pending."""
        return self._scheduler.cancel(partition, key)
