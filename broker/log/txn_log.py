"""The transactional side of the partition logs (KIP-98): last stable offsets, aborted
transactions and end-transaction markers (``Broker.txn_log``; contract: txn_api.md, issue 15).

What a transaction leaves in a data partition: its transactional batches, then one control batch
(the COMMIT or ABORT marker) the transaction coordinator has written through ``write_marker``.
The per-partition producer state (``broker/log/producer_state.py``) knows each producer's ongoing
transaction; from it:

- the last stable offset (LSO) is the first offset of the oldest ongoing transaction, else the
  log end offset. read_committed fetches stop there (``broker/handlers/fetch.py``);
- an ABORT marker puts (producer id, first offset, marker offset, LSO) into the aborted-transaction
  index of the marker's segment (``storage/txn_index.py``), which read_committed fetches list so
  consumers drop that data.

Invariants: a marker is appended and observed in one step on the event loop (no other append of
the partition in between), so the producer state, the index and the log always agree; the LSO
never passes data of an ongoing transaction; ``PartitionLog.first_unstable_offset`` mirrors the
state's oldest ongoing transaction for the log cleaner (``storage/cleaner.py``), which never
cleans at or past it.

Durable markers: ``write_marker`` answers NONE only once the marker is synced (``sync_data``:
one fdatasync of the record data, as the coordinator logs' acknowledgement path does), whatever
the partition's flush policy; the coordinator writes its fsynced CompleteCommit/CompleteAbort
record only after every marker is answered. The indexes and the recovery point follow with the
next ``flush``: until then the marker lies past the recovery point, so crash recovery re-reads
(CRC-checks) it and the producer-state replay rebuilds its aborted-transaction index entry. Kafka gets the same order from replication (markers are
written with acks=all before the Complete record); a single copy on one disk needs the fsync.
Otherwise a power loss could keep a transaction's data (flushed by the scheduler or a segment
roll) without its marker while the coordinator, finding the transaction complete, never writes
it again: the partition's LSO would stop there for ever. The alternative, repairing on load, would
mean reading every data partition's open transactions against the coordinator's state at start-up
(across brokers once clustered); one fsync per partition per transaction, off the event loop,
costs less. The markers appended in one event-loop turn (the coordinator asks for all the markers
of a transaction in one turn; concurrent transactions' markers may join) are synced together,
each log once and all of them at the same time, one worker thread each (``_group_sync``):
overlapping syncs share the file system's journal commit and cache flush, where one after the
other each log waited for its own (4 x 256 KiB: 1.9 ms against 18.7 ms on the bench machine).
The sync also makes the transaction's data durable (it precedes the marker in the log); Produce
starts writing that data back as it arrives (``write_ahead``), so little is left for it.

Kafka classes this mirrors: ``UnifiedLog`` (``lastStableOffset``, ``collectAbortedTransactions``,
``appendAsLeader`` of markers), ``ProducerStateManager`` (behaviour only).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from broker.clock import Clock
from broker.log.manager import LogManager
from broker.log.producer_state_manager import ProducerStateManager
from broker.log.topics import TopicRegistry
from protocol.record_batch import control_batch
from storage.log import LogClosedError, PartitionLogLike

log = logging.getLogger("shoal.txn")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # offset of its ABORT marker


class TxnLogHost(Protocol):
    """What the transactional log needs of the broker (``Broker`` is one)."""

    logs: LogManager
    producers: ProducerStateManager
    topics: TopicRegistry
    clock: Clock


class TransactionalLog:
    """Transactions over the broker's partition logs and producer states."""

    def __init__(self, broker: TxnLogHost) -> None:
        self._broker = broker
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # built outside the broker (tests): no cleaner thread to serve
        self._loading: set[tuple[str, int]] = set()
        # Logs whose markers wait for the next group sync, and its outcome (``_group_sync``).
        self._to_sync: dict[tuple[str, int], PartitionLogLike] = {}
        self._synced: asyncio.Future[dict[tuple[str, int], OSError]] | None = None
        self._sync_tasks: set[asyncio.Task[None]] = set()
        # Logs whose transactional data waits for an early writeback (``write_ahead``).
        self._to_write: dict[tuple[str, int], PartitionLogLike] = {}
        self._writer: asyncio.Task[None] | None = None

    def cleaner_limit(self, topic: str, partition: int) -> int | None:
        """The log cleaner's bound for a partition (called from the cleaner thread): the first
        offset of its oldest ongoing transaction, None when there is none. While the
        partition's producer state is not loaded yet the answer is 0 (clean nothing) and a load
        is scheduled on the event loop, which owns that state."""
        if self._broker.producers.loaded(topic, partition):
            lg = self._broker.logs.get(topic, partition)
            return None if lg is None else lg.first_unstable_offset
        key = (topic, partition)
        if self._loop is not None and key not in self._loading:
            self._loading.add(key)
            self._loop.call_soon_threadsafe(self._load, key)
        return 0

    def _load(self, key: tuple[str, int]) -> None:
        self._loading.discard(key)
        try:
            self._broker.producers.states(*key)
        except OSError as exc:
            log.warning("%s-%d: loading the producer state for the log cleaner failed: %s",
                        *key, exc)

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """First offset of the oldest ongoing transaction in the partition (at least the log
        start offset), else the log end offset; -1 for a partition that does not exist.

        Raises:
            OSError: the partition's producer state could not be loaded (log directory offline).
        """
        lg = self._broker.logs.get(topic, partition)
        if lg is None:
            return -1
        first = self._broker.producers.states(topic, partition).first_unstable_offset()
        # Never below the log start (Kafka's UnifiedLog.updateFirstUnstableOffset): retention
        # or DeleteRecords may have removed the start of an open transaction.
        return lg.log_end_offset if first is None else max(first, lg.log_start_offset)

    def aborted_transactions(self, topic: str, partition: int, start: int,
                             end: int) -> list[AbortedTxn]:
        """Every aborted transaction whose [first_offset, last_offset] intersects
        [start, end), oldest first (from the segments' transaction indexes, no log read).

        Raises:
            OSError: the partition's producer state could not be loaded (log directory offline).
        """
        lg = self._broker.logs.get(topic, partition)
        if lg is None:
            return []
        # Loading the producer state finishes rebuilding the index after a crash.
        self._broker.producers.states(topic, partition)
        return [AbortedTxn(pid, first, last) for pid, first, last, _ in lg.aborted_txns(start, end)]

    async def write_marker(self, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, coordinator_epoch: int, commit: bool) -> ErrorCode:
        """Append a COMMIT (``commit``) or ABORT marker for the producer and end its ongoing
        transaction in the partition there.

        NONE when written, also when the producer had no ongoing transaction there (as Kafka);
        UNKNOWN_TOPIC_OR_PARTITION when the partition no longer exists; KAFKA_STORAGE_ERROR when
        the append or its fsync failed; INVALID_PRODUCER_EPOCH for an
        epoch below the producer's and TRANSACTION_COORDINATOR_FENCED for a coordinator epoch
        below the last marker's (a stale coordinator; nothing is written).
        """
        broker = self._broker
        topic_meta = broker.topics.get(topic)
        lg = broker.logs.get(topic, partition)
        if lg is None or topic_meta is None:
            return ErrorCode.unknown_topic_or_partition
        if topic_meta.internal:
            # Coordinator logs take their own markers (the group coordinator's
            # complete_transaction).
            log.error("refused a transaction marker for internal topic %s-%d (producer %d); "
                      "its coordinator writes its markers", topic, partition, producer_id)
            return ErrorCode.invalid_topic_exception
        try:
            states = broker.producers.states(topic, partition)
        except OSError as exc:
            log.warning("%s-%d: no transaction marker for producer %d: %s", topic, partition,
                        producer_id, exc)
            return ErrorCode.kafka_storage_error
        error = states.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if error != ErrorCode.none:
            log.warning("%s-%d: refused the %s marker of producer %d epoch %d (coordinator epoch "
                        "%d): %s", topic, partition, "COMMIT" if commit else "ABORT", producer_id,
                        producer_epoch, coordinator_epoch, error.name.upper())
            return error
        now = broker.clock.now_ms()
        data = control_batch(producer_id, producer_epoch, coordinator_epoch, commit, now)
        try:
            offset = lg.append(data, now).base_offset
        except LogClosedError:
            return ErrorCode.unknown_topic_or_partition  # deleted meanwhile
        except OSError as exc:  # LogDirOfflineError: the directory is offline now
            log.warning("%s-%d: appending the transaction marker of producer %d failed: %s",
                        topic, partition, producer_id, exc)
            return ErrorCode.kafka_storage_error
        done = states.observe_marker(producer_id, producer_epoch, coordinator_epoch, offset,
                                     commit, now)
        stable = states.first_unstable_offset()
        lg.first_unstable_offset = stable
        if done is not None and done.aborted:
            try:
                lg.add_aborted_txn((producer_id, done.first_offset, offset,
                                    offset + 1 if stable is None else stable))
            except OSError as exc:
                # The directory went offline; a restart rebuilds the index from the log.
                log.warning("%s-%d: indexing the aborted transaction of producer %d failed: %s",
                            topic, partition, producer_id, exc)
                return ErrorCode.kafka_storage_error
        broker.logs.appended(topic, partition)  # the LSO moved: wake read_committed fetches
        try:
            # Always synced, whatever the flush policy (module doc, "Durable markers").
            await self._group_sync(topic, partition, lg)
        except OSError as exc:
            log.warning("%s-%d: syncing the transaction marker of producer %d failed: %s",
                        topic, partition, producer_id, exc)
            return ErrorCode.kafka_storage_error
        rep = getattr(broker, "replication", None)
        if rep is not None and rep.tracks(topic, partition):
            # A replicated partition's marker counts once every in-sync replica has it, as an
            # acks=all write: else the coordinator sends it again (to the new leader, if any).
            code = await rep.wait_replicated(topic, partition, offset + 1,
                                             int(broker.config.get("request.timeout.ms")) / 1000)
            if code not in (ErrorCode.none, ErrorCode.not_enough_replicas_after_append):
                log.warning("%s-%d: the transaction marker of producer %d at offset %d was not "
                            "confirmed by the in-sync replicas (%s); the coordinator retries",
                            topic, partition, producer_id, offset, code.name.upper())
                return code
        return ErrorCode.none

    async def _group_sync(self, topic: str, partition: int, lg: PartitionLogLike) -> None:
        """``lg.sync_data()`` in a worker thread, shared with every other log whose marker was
        appended in this event-loop turn: each of them is synced once, all at the same time.

        Raises:
            OSError: this log's sync failed (its directory is offline now).
        """
        # Shielded: a cancelled caller must not cancel the others' sync.
        failed = (await asyncio.shield(self._queue_sync(topic, partition, lg))).get(
            (topic, partition))
        if failed is not None:
            raise failed

    def sync_ahead(self, topic: str, partition: int) -> None:
        """Start syncing a data partition whose transaction is about to end (the coordinator
        calls it as EndTxn arrives): its records reach the disk while the Prepare record is
        synced, so the marker's own sync later has little left to write. Only an early sync;
        no durability rule depends on it."""
        topic_meta = self._broker.topics.get(topic)
        lg = self._broker.logs.get(topic, partition)
        if lg is not None and topic_meta is not None and not topic_meta.internal:
            self._queue_sync(topic, partition, lg)

    def write_ahead(self, parts: list[tuple[str, int]]) -> None:
        """Start writing the transactional data just appended to these partitions to the disk
        (``start_writeback`` in a worker thread, one at a time; partitions appended meanwhile
        join the next): by the time EndTxn's Prepare record and the markers are synced, most of
        the transaction's data is on the disk already, so those syncs (which the producer waits
        for) have little left to write. Only an early write; no durability rule depends on it."""
        for key in parts:
            lg = self._broker.logs.get(*key)
            if lg is not None and hasattr(lg, "start_writeback"):
                self._to_write[key] = lg
        if self._to_write and self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_back(),
                                                                  name="txn-writeback")

    async def _write_back(self) -> None:
        try:
            while self._to_write:
                batch, self._to_write = self._to_write, {}
                await asyncio.to_thread(_start_writeback, batch)
        finally:
            self._writer = None

    def _queue_sync(self, topic: str, partition: int, lg: PartitionLogLike
                    ) -> asyncio.Future[dict[tuple[str, int], OSError]]:
        loop = asyncio.get_running_loop()
        if self._synced is None:
            self._synced = loop.create_future()
            loop.call_soon(self._start_sync)
        self._to_sync[(topic, partition)] = lg
        return self._synced

    def _start_sync(self) -> None:
        batch, done = self._to_sync, self._synced
        self._to_sync, self._synced = {}, None
        assert done is not None
        task = asyncio.get_running_loop().create_task(self._sync_batch(batch, done),
                                                      name="txn-marker-sync")
        self._sync_tasks.add(task)
        task.add_done_callback(self._sync_tasks.discard)

    @staticmethod
    async def _sync_batch(batch: dict[tuple[str, int], PartitionLogLike],
                          done: asyncio.Future[dict[tuple[str, int], OSError]]) -> None:
        def sync_one(lg: PartitionLogLike) -> OSError | None:
            try:
                lg.sync_data()
            except OSError as exc:
                return exc
            return None
        try:
            # Each log in its own worker thread: the file system commits the syncs that overlap
            # together (one journal commit and cache flush rather than one per log in a row).
            outs = await asyncio.gather(*(asyncio.to_thread(sync_one, lg)
                                          for lg in batch.values()))
            done.set_result({key: exc for key, exc in zip(batch, outs, strict=True)
                             if exc is not None})
        finally:
            done.cancel()  # cancelled (the loop is closing): so are its waiters; else a no-op


def _start_writeback(batch: dict[tuple[str, int], PartitionLogLike]) -> None:
    for (topic, partition), lg in batch.items():
        try:
            lg.start_writeback()  # type: ignore[attr-defined]
        except OSError as exc:  # the sync that follows reports a failing disk
            log.debug("%s-%d: early writeback of transactional data failed: %s", topic,
                      partition, exc)
