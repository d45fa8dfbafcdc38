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

from coordinator.runtime.append import AppendMixin
from coordinator.runtime.commit import CommitMixin
from coordinator.runtime.load import LoadMixin
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
from coordinator.runtime.prune import PruneMixin
from coordinator.runtime.runtime_base import RuntimeBase
from coordinator.runtime.scheduling import SchedulingMixin

__all__ = ["DEFAULT_IO_THREADS", "DEFAULT_LOAD_THREADS", "DEFAULT_MAX_BATCH_RECORDS",
           "DEFAULT_MAX_QUEUED_WRITES", "DEFAULT_PRUNE_INTERVAL_MS", "CoordinatorFailure",
           "CoordinatorRuntime", "Op", "PartitionStats", "PartitionStatus", "R", "S"]


class CoordinatorRuntime(LoadMixin[S], AppendMixin[S], CommitMixin[S], PruneMixin[S],
                         SchedulingMixin[S], RuntimeBase[S]):
    """Serial executors, group commit, loading, timers and pruning (see module doc)."""
