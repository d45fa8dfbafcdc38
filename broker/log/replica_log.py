"""A follower's partition logs: appending the leader's batches and truncating divergent tails,
with the state the broker derives from a log kept as if the appends had been its own.

What a leader derives from its appends, besides the records (``broker/log/append.py`` for
produced batches, ``broker/log/txn_log.py`` for end-transaction markers):

- the idempotent-producer state (``broker/log/producer_state.py``), so a follower elected leader
  deduplicates retried batches and fences stale producer epochs;
- the ongoing transactions, hence the last stable offset and ``PartitionLog.
  first_unstable_offset`` (the log cleaner's bound);
- the aborted-transaction index (``.txnindex``, entry written when the ABORT marker is observed),
  which read_committed fetches list.

``ReplicaLog.append`` appends the leader's batches unchanged (``PartitionLog.append_as_follower``:
offsets and leader epochs kept, new epochs checkpointed) and then observes each batch in log
order exactly as the leader's appends did, so the derived state matches the leader's at every
offset; then it wakes the partition's watchers (long polls, on-append listeners).

``truncate_to`` / ``truncate_fully`` cut the log (``storage/log_replica.py``) and rewind the
derived state: producer-state snapshots past the new log end are deleted (durably, before any
later append can pass their offsets again), the in-memory state is dropped and rebuilt at once
from the newest remaining snapshot and the log after it (``ProducerStateManager``), which also
rebuilds the aborted-transaction index from there and sets ``first_unstable_offset``.

All on the event loop (the producer state is the loop's), like the leader's appends. Truncation
is blocking (fsyncs); ``truncate_to_async`` / ``truncate_fully_async`` do the file work in a
worker thread instead (the producer state is dropped first and rebuilt after, on the loop). Kafka classes this mirrors: ``UnifiedLog.appendAsFollower``,
``truncateTo``, ``truncateFullyAndStartAt`` with ``ProducerStateManager`` (behaviour only).
"""

from __future__ import annotations

import asyncio

from broker.log.manager import LogManager
from broker.log.producer_state import ProducerStates
from broker.log.producer_state_manager import ProducerStateManager
from protocol.record_batch import (
    CONTROL_COMMIT,
    control_type,
    iter_batches,
    marker_coordinator_epoch,
)
from storage.log import AppendResult
from storage.log_loader import fsync_dir
from storage.producer_snapshot import delete_snapshots, list_snapshots
from storage.segment_log import PartitionLog


class NoReplicaError(LookupError):
    """The partition has no log on this broker (not placed here, or deleted meanwhile)."""


class ReplicaLog:
    """Follower appends and truncation over the broker's logs and producer states."""

    def __init__(self, logs: LogManager, producers: ProducerStateManager) -> None:
        self._logs = logs
        self._producers = producers

    def _log(self, topic: str, partition: int) -> PartitionLog:
        lg = self._logs.get(topic, partition)
        if lg is None:
            raise NoReplicaError(f"{topic}-{partition} has no log on this broker; it is not "
                                 "placed here (or was deleted): stop replicating it")
        return lg

    def append(self, topic: str, partition: int,
               data: bytes | bytearray | memoryview) -> AppendResult:
        """Append batches fetched from the leader (whole v2 batches, starting at or after the log
        end offset) and derive the producer state, transactions and aborted-transaction index
        from them as the leader did.

        Raises:
            NoReplicaError: no log for the partition here.
            UnexpectedOffsetError: the batches do not continue the log (truncate first).
            CorruptRecordError: ``data`` is not a sequence of whole v2 batches.
            LogClosedError: the log was closed (deleted) meanwhile.
            LogDirOfflineError: a storage fault (the directory is offline now).
        """
        lg = self._log(topic, partition)
        now = self._producers.clock.now_ms()
        # Loaded before the append, so the load replays only what was there before.
        states = self._producers.states(topic, partition)
        view = data if isinstance(data, bytes | bytearray) else bytes(data)
        result = lg.append_as_follower(view, now)
        self._observe(lg, states, view, now)
        self._logs.appended(topic, partition)
        return result

    @staticmethod
    def _observe(lg: PartitionLog, states: ProducerStates, data: bytes | bytearray,
                 now: int) -> None:
        """What the leader's appends did after each batch, in log order."""
        txn = False
        for pos, h in iter_batches(data):
            if h.is_control:
                kind = control_type(data, pos)
                if kind is None:
                    continue  # not a marker Shoal knows (Kafka skips unknown control batches)
                txn = True
                done = states.observe_marker(h.producer_id, h.producer_epoch,
                                             marker_coordinator_epoch(data, pos), h.base_offset,
                                             kind == CONTROL_COMMIT, now)
                if done is not None and done.aborted:
                    stable = states.first_unstable_offset()
                    lg.add_aborted_txn((done.producer_id, done.first_offset, done.last_offset,
                                        done.last_offset + 1 if stable is None else stable))
            else:
                states.observe(h.producer_id, h.producer_epoch, h.base_sequence,
                               h.record_count, h.base_offset, h.last_offset, now,
                               h.is_transactional)
                txn = txn or h.is_transactional
        if txn:
            lg.first_unstable_offset = states.first_unstable_offset()

    def truncate_to(self, topic: str, partition: int, offset: int) -> int:
        """Remove the records at or after ``offset`` (``PartitionLog.truncate_to``: a batch
        holding ``offset`` goes whole) and rewind the derived state. Returns the new log end
        offset.

        Raises:
            NoReplicaError: no log for the partition here.
            ValueError: ``offset`` is negative.
            LogClosedError: the log was closed (deleted) meanwhile.
            LogDirOfflineError: a storage fault (the directory is offline now).
        """
        lg = self._log(topic, partition)
        if offset >= lg.log_end_offset:
            return lg.log_end_offset
        end = lg.truncate_to(offset)
        self._rewind(topic, partition, lg, end)
        return end

    def truncate_fully(self, topic: str, partition: int, start: int) -> None:
        """Empty the log and start it at ``start`` (``PartitionLog.truncate_fully_and_start_at``;
        a follower whose log ends below the leader's log start), with an empty producer state.

        Raises:
            as ``truncate_to``.
        """
        lg = self._log(topic, partition)
        lg.truncate_fully_and_start_at(start)
        # Every snapshot describes the old history, even one at ``start``.
        self._rewind(topic, partition, lg, -1)

    async def truncate_to_async(self, topic: str, partition: int, offset: int) -> int:
        """``truncate_to`` with the file work (truncation, fsyncs, snapshot deletion) in a
        worker thread, so the event loop is not blocked; the producer state is dropped before
        and rebuilt after on the loop.

        Raises:
            as ``truncate_to``.
        """
        lg = self._log(topic, partition)
        if offset >= lg.log_end_offset:
            return lg.log_end_offset
        self._producers.unload(topic, partition)
        end = await asyncio.to_thread(lg.truncate_to, offset)
        await asyncio.to_thread(self._drop_snapshots, topic, partition, lg, end)
        self._reload(topic, partition)
        return end

    async def truncate_fully_async(self, topic: str, partition: int, start: int) -> None:
        """``truncate_fully`` with the file work in a worker thread (as ``truncate_to_async``).

        Raises:
            as ``truncate_to``.
        """
        lg = self._log(topic, partition)
        self._producers.unload(topic, partition)
        await asyncio.to_thread(lg.truncate_fully_and_start_at, start)
        await asyncio.to_thread(self._drop_snapshots, topic, partition, lg, -1)
        self._reload(topic, partition)

    def _rewind(self, topic: str, partition: int, lg: PartitionLog, keep_upto: int) -> None:
        """Drop the snapshots past ``keep_upto`` (durably) and rebuild the producer state."""
        self._producers.unload(topic, partition)
        self._drop_snapshots(topic, partition, lg, keep_upto)
        self._reload(topic, partition)

    @staticmethod
    def _drop_snapshots(topic: str, partition: int, lg: PartitionLog, keep_upto: int) -> None:
        """Delete the producer-state snapshots past ``keep_upto`` (-1: all), durably: a stale
        snapshot must be gone before appends pass its offset again."""
        directory = lg.directory
        try:
            stale = [o for o in list_snapshots(directory) if o > keep_upto]
            if stale:
                delete_snapshots(directory, stale)
                fsync_dir(directory)
        except OSError as exc:
            raise lg.log_dir.fail(f"deleting the producer-state snapshots of {topic}-{partition} "
                                  f"past offset {keep_upto} in {directory}", exc) from exc

    def _reload(self, topic: str, partition: int) -> None:
        # Dropped again: a reader may have loaded it from the log mid-truncation.
        self._producers.unload(topic, partition)
        self._producers.states(topic, partition)  # rebuilt now: LSO and aborted index current
        self._logs.appended(topic, partition)  # waiting fetches see the new end
