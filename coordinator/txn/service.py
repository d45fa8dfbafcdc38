"""``TransactionService``: the transaction coordinator over ``__transaction_state`` (KIP-98).

Concept (Kafka ``TransactionCoordinator``, ``TransactionStateManager``,
``TransactionMarkerChannelManager``; STYLE.md 1.6): one ``TxnShard`` (``coordinator/txn/shard.py``)
per ``__transaction_state`` partition, driven by a ``CoordinatorRuntime`` that runs each
partition's ops one at a time, appends their records and answers once they are durable. A
transactional id lives on partition ``abs(hashCode(id)) % transaction.state.log.num.partitions``
(the topic's actual count), as Kafka places it.

Markers: when a PrepareCommit/PrepareAbort record is durable (EndTxn, a fenced re-init, a
timeout) the shard reports it and an owned task writes one marker per partition of the
transaction: data partitions through ``broker.log.txn_log.write_marker``, ``__consumer_offsets``
partitions (AddOffsetsToTxn) through ``broker.share_groups.complete_transaction`` (a cluster
member's writer sends those of partitions led elsewhere to their leaders, one WriteTxnMarkers
per broker, ``broker/txn_remote.py``; this module only sees the answers); retriable
failures are retried with a backoff (up to ``MARKER_RETRY_MAX_MS``); then CompleteCommit/
CompleteAbort is written. Meanwhile a request of the id waits for the markers, up to
``transaction.end.wait.ms`` (Shoal's own), and is then run after the Complete record (they share
its fsync); past that wait, or with 0, it is answered CONCURRENT_TRANSACTIONS as in Kafka
(clients retry after a backoff). After
a crash, loading finds the transaction still prepared and the markers are written again (a marker
written twice is harmless: the second finds no ongoing transaction there, as in Kafka).

Timers: each Ongoing transaction aborts at start + transaction.timeout.ms (the shard's deadline
timer; Kafka instead looks for timed-out transactions every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``, which is accepted and unused);
ids idle for ``transactional.id.expiration.ms`` are removed by a sweep every
``transaction.remove.expired.transaction.cleanup.interval.ms``.

Runtime failures become Kafka's codes as ``TransactionStateManager.appendTransactionToLog`` maps
them: a storage error is NOT_COORDINATOR (the client finds the coordinator again and retries).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from coordinator.group.placement import partition_for_group
from coordinator.host import CoordinatorHost, TopicView
from coordinator.runtime.loop import (
    CoordinatorFailure,
    CoordinatorRuntime,
    Op,
    PartitionStatus,
)
from coordinator.runtime.result import CoordinatorResult
from coordinator.txn.metadata import PREPARED, TopicPartition, TxnMetadata, TxnState
from coordinator.txn.records import TxnRecordSerde
from coordinator.txn.shard import ProducerIdAndEpoch, TxnShard
from storage.log import PartitionLogLike

log = logging.getLogger("shoal.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
# segment.bytes of __transaction_state when we create it (Kafka: transaction.state.log.segment.
# bytes, 100 MiB); pruning deletes whole segments, so this bounds the redundant bytes kept.
TXN_SEGMENT_BYTES = 1024 * 1024
MARKER_RETRY_MIN_MS = 50
MARKER_RETRY_MAX_MS = 5_000
_EXPIRE_TIMER = "expire-transactional-ids"
# The __transaction_state key holds the id as an int16-length string (flexible requests can carry
# longer ones): a longer id is refused up front rather than failing its write.
MAX_TRANSACTIONAL_ID_BYTES = 0x7FFF

# Marker write answers meaning "try again later" (contract in /work/briefs/txn_api.md, and Kafka's
# TransactionMarkerRequestCompletionHandler).
RETRIABLE_MARKER_ERRORS = frozenset({
    ErrorCode.kafka_storage_error, ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower, ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out,
})


class DataMarkerWriter(Protocol):
    """``broker.log.txn_log``'s marker writer (t-log)."""

    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int, commit: bool) -> Awaitable[ErrorCode]: ...


OffsetMarkerWriter = Callable[[int, int, int, int, bool], Awaitable[ErrorCode]]


# ``_after_complete``'s answer for an op it did not run: the caller runs it alone.
_RUN_ALONE = object()


def _runtime_error(failure: CoordinatorFailure) -> ErrorCode:
    if failure.error in (ErrorCode.kafka_storage_error,):
        return ErrorCode.not_coordinator
    return failure.error


class TransactionService:
    """Transactions of every id, on ``num_partitions`` runtime partitions (see module doc)."""

    def __init__(
        self,
        *,
        clock_ms: Callable[[], int],
        config_get: Callable[[str], Any],
        next_producer_id: Callable[[], int],
        num_partitions: int,
        data_markers: DataMarkerWriter,
        offset_markers: OffsetMarkerWriter,
        fsync: bool = True,
    ) -> None:
        """``data_markers`` writes the markers of data partitions (``broker/log/txn_log.py``),
        ``offset_markers`` those of ``__consumer_offsets`` partitions (the group coordinator's
        ``complete_transaction``).

        Raises:
            ValueError: ``num_partitions`` is not positive.
        """
        if num_partitions <= 0:
            raise ValueError("num_partitions must be positive")
        self._clock_ms = clock_ms
        self._get = config_get
        self._next_pid = next_producer_id
        self.num_partitions = num_partitions
        self._data_markers = data_markers
        self._offset_markers = offset_markers
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            self._new_shard, TxnRecordSerde(), clock_ms=clock_ms, fsync=fsync,
            name="txn-coordinator")
        self._markers: dict[str, asyncio.Task[None]] = {}
        # Per transaction whose markers are being written: done once they all are.
        self._written: dict[str, asyncio.Future[None]] = {}
        self._marking: dict[str, TxnMetadata] = {}  # the transaction each task completes
        # Per transaction whose markers are being written: the ops of the id's requests waiting
        # for them, run right after its Complete record, in its event (``_write``).
        self._after_markers: dict[str, list[tuple[Op[TxnShard], asyncio.Future[Any]]]] = {}
        self._closed = False
        self.load_ms: float | None = None

    def _new_shard(self, partition: int) -> TxnShard:
        return TxnShard(partition, on_prepared=self._on_prepared,
                        max_record_bytes=int(self._get("message.max.bytes")))

    # ------------------------------------------------------------------ lifecycle

    async def load(self, log_for: Callable[[int], PartitionLogLike],
                   partitions: Iterable[int] | None = None) -> float:
        """Load every partition, or those of ``partitions`` (a cluster member loads the ones it
        leads), in parallel and arm their id-expiration sweep; returns the ms."""
        chosen = list(range(self.num_partitions) if partitions is None else partitions)
        self.load_ms = await self.runtime.load_many({p: log_for(p) for p in chosen})
        interval = int(self._get("transaction.remove.expired.transaction.cleanup.interval.ms"))
        first = self._clock_ms() + interval
        for p in chosen:
            self.runtime.schedule(p, _EXPIRE_TIMER, first, self._expire_op, repeat_ms=interval)
        return self.load_ms

    async def close(self) -> None:
        """Stop writing markers (a restart resumes them) and stop the runtime."""
        self._closed = True
        tasks = list(self._markers.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._markers.clear()
        await self.runtime.close()

    # ------------------------------------------------------------------ placement and reads

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of ``transactional_id`` (Kafka's rule)."""
        return partition_for_group(transactional_id, self.num_partitions)

    def _served(self, transactional_id: str) -> TxnShard | ErrorCode:
        p = self.partition_for(transactional_id)
        status = self.runtime.status(p)
        shard = self.runtime.shard(p)
        if status is PartitionStatus.LOADING:
            return ErrorCode.coordinator_load_in_progress
        if status is not PartitionStatus.ACTIVE or shard is None:
            return ErrorCode.not_coordinator
        return shard

    def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         topic: str, partition: int) -> ErrorCode:
        """Whether (topic, partition) is in the producer's ongoing transaction (the contract
        with Produce): NONE, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
        CONCURRENT_TRANSACTIONS (markers pending), TRANSACTION_ABORTABLE (not added),
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        if not transactional_id:
            return ErrorCode.invalid_request
        shard = self._served(transactional_id)
        if isinstance(shard, ErrorCode):
            return shard
        return shard.verify(transactional_id, producer_id, producer_epoch, (topic, partition))

    def describe(self, transactional_id: str) -> TxnMetadata | ErrorCode:
        """The committed state of the id, or TRANSACTIONAL_ID_NOT_FOUND / a coordinator error."""
        if not transactional_id:
            return ErrorCode.invalid_request
        shard = self._served(transactional_id)
        if isinstance(shard, ErrorCode):
            return shard
        meta = shard.committed(transactional_id)
        if meta is None or meta.state is TxnState.DEAD:
            return ErrorCode.transactional_id_not_found
        return meta

    def list_transactions(self, states: Iterable[TxnState], producer_ids: Iterable[int],
             min_duration_ms: int = -1) -> list[TxnMetadata] | ErrorCode:
        """ListTransactions (Kafka ``listTransactionStates``): committed states matching every
        filter given (empty filters match all; ``min_duration_ms`` >= 0 keeps transactions
        running longer than it). COORDINATOR_LOAD_IN_PROGRESS while a partition loads."""
        wanted_states = frozenset(states)
        wanted_pids = frozenset(producer_ids)
        now = self._clock_ms()
        out: list[TxnMetadata] = []
        for p in self.runtime.partitions():
            status = self.runtime.status(p)
            if status is PartitionStatus.LOADING:
                return ErrorCode.coordinator_load_in_progress
            shard = self.runtime.shard(p)
            if status is not PartitionStatus.ACTIVE or shard is None:
                continue
            for meta in shard.committed_all():
                if meta.state is TxnState.DEAD:
                    continue
                if wanted_pids and meta.producer_id not in wanted_pids:
                    continue
                if wanted_states and meta.state not in wanted_states:
                    continue
                if min_duration_ms >= 0 and now - meta.start_ms <= min_duration_ms:
                    continue
                out.append(meta)
        return sorted(out, key=lambda m: m.transactional_id)

    # ------------------------------------------------------------------ write RPCs

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> ProducerIdAndEpoch:
        """InitProducerId with a transactional id (the handler has authorized it)."""
        if not transactional_id or len(transactional_id.encode()) > MAX_TRANSACTIONAL_ID_BYTES:
            return ProducerIdAndEpoch(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= int(self._get("transaction.max.timeout.ms")):
            return ProducerIdAndEpoch(ErrorCode.invalid_transaction_timeout)
        new_pid = self._next_pid
        out = await self._write(transactional_id, lambda shard, now: shard.init_producer_id(
            transactional_id, timeout_ms, expected, now, new_pid))
        if isinstance(out, ErrorCode):
            return ProducerIdAndEpoch(out)
        if out.error is ErrorCode.none:
            log.info("transactional id %s: producer id %d epoch %d (on %s-%d)", transactional_id,
                     out.producer_id, out.producer_epoch, TRANSACTION_STATE_TOPIC,
                     self.partition_for(transactional_id))
        return out  # type: ignore[no-any-return]

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition],
                             client_tv: int | None = None) -> ErrorCode:
        """AddPartitionsToTxn (and AddOffsetsToTxn's ``__consumer_offsets`` partition);
        ``client_tv=2``: added implicitly by a transaction-version-2 producer (Produce v12,
        TxnOffsetCommit v5)."""
        if not transactional_id:
            return ErrorCode.invalid_request
        parts = frozenset(partitions)
        out = await self._write(transactional_id, lambda shard, now: shard.add_partitions(
            transactional_id, producer_id, producer_epoch, parts, now, client_tv))
        if out is ErrorCode.unknown_server_error:
            log.warning("transactional id %s: adding %d partition(s) would make its %s record "
                        "larger than message.max.bytes; refused (end the transaction sooner or "
                        "raise message.max.bytes)", transactional_id, len(parts),
                        TRANSACTION_STATE_TOPIC)
        return out  # type: ignore[no-any-return]

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str, offsets_partitions: int,
                          client_tv: int | None = None) -> ErrorCode:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        p = partition_for_group(group_id, offsets_partitions)
        return await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                         ((CONSUMER_OFFSETS_TOPIC, p),), client_tv)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool, tv2: bool = False) -> ProducerIdAndEpoch:
        """EndTxn (``tv2``: v5, transaction version 2, which bumps the epoch and answers the
        next transaction's producer id and epoch; ``TxnShard.end_txn_v2``).

        Answered once PrepareCommit/PrepareAbort is durable, as Kafka: the markers follow, and
        the producer's next request waits for them (``_write``) rather than meeting
        CONCURRENT_TRANSACTIONS and backing off."""
        if not transactional_id:
            return ProducerIdAndEpoch(ErrorCode.invalid_request)
        self._sync_ahead(transactional_id)
        new_pid = self._next_pid
        out = await self._write(transactional_id, lambda shard, now: shard.end_txn_v2(
            transactional_id, producer_id, producer_epoch, commit, now, new_pid) if tv2 else
            shard.end_txn(transactional_id, producer_id, producer_epoch, commit, now))
        if isinstance(out, ErrorCode):
            return ProducerIdAndEpoch(out)
        return out  # type: ignore[no-any-return]

    def _sync_ahead(self, transactional_id: str) -> None:
        """Let the data partitions of the id's ongoing transaction start syncing while its
        Prepare record is written (a marker writer that offers ``sync_ahead``,
        ``broker/log/txn_log.py``): the markers' syncs then have little left to write."""
        ahead: Callable[[str, int], None] | None = getattr(self._data_markers, "sync_ahead", None)
        shard = self.runtime.shard(self.partition_for(transactional_id))
        if ahead is None or shard is None:
            return
        meta = shard.txns.get(transactional_id)
        if meta is None or meta.state is not TxnState.ONGOING:
            return
        for topic, partition in meta.partitions:
            if topic != CONSUMER_OFFSETS_TOPIC:
                ahead(topic, partition)

    async def _write(self, transactional_id: str, op: Op[TxnShard]) -> Any:
        """Run a client's op on the id's partition. While the markers of the id's previous
        transaction are being written the op first waits for them, up to
        ``transaction.end.wait.ms``: once they are, ``_complete`` runs it right after the
        Complete record, in the same event, so the op sees the transaction complete and both
        records share one append and one fsync. Past the wait the op runs alone, sees the
        Prepare state and answers CONCURRENT_TRANSACTIONS."""
        out: Any = _RUN_ALONE
        written = self._written.get(transactional_id)
        if written is not None and not written.done():
            wait_ms = int(self._get("transaction.end.wait.ms"))
            if wait_ms > 0:
                out = await self._after_complete(transactional_id, op, wait_ms)
        if out is _RUN_ALONE:
            out = await self.runtime.write(self.partition_for(transactional_id), op)
        if isinstance(out, CoordinatorFailure):
            log.debug("transactional id %s: %s", transactional_id, out.message)
            return _runtime_error(out)
        return out

    async def _after_complete(self, transactional_id: str, op: Op[TxnShard],
                              wait_ms: int) -> Any:
        """Queue ``op`` to run after the Complete record of the id's transaction (``_complete``)
        and wait for its outcome, at most ``wait_ms``; ``_RUN_ALONE`` when it was not taken (the
        wait ran out, or the markers' task ended without a Complete record)."""
        entry = (op, asyncio.get_running_loop().create_future())
        queue = self._after_markers.setdefault(transactional_id, [])
        queue.append(entry)
        try:
            await asyncio.wait([entry[1]], timeout=wait_ms / 1000)
        finally:
            # Not taken (``_complete`` takes the id's whole queue out of ``_after_markers``
            # before running it): never run twice, never run for a cancelled caller. A taken
            # entry runs in the Complete record's event whatever its caller does now.
            if self._after_markers.get(transactional_id) is queue and entry in queue:
                queue.remove(entry)
                if not queue and self._after_markers.get(transactional_id) is queue:
                    del self._after_markers[transactional_id]
                entry[1].cancel()
        if entry[1].cancelled():
            return _RUN_ALONE
        return await entry[1]  # taken: its outcome follows the Complete record's commit

    def _expire_op(self, shard: TxnShard, now_ms: int) -> CoordinatorResult[Any, Any]:
        result = shard.expire_transactional_ids(
            now_ms, int(self._get("transactional.id.expiration.ms")))
        if result.records:
            log.info("%s-%d: removing %d transactional id(s) idle for transactional.id."
                     "expiration.ms", TRANSACTION_STATE_TOPIC, shard.partition, len(result.records))
        return result

    # ------------------------------------------------------------------ markers

    def _on_prepared(self, partition: int, meta: TxnMetadata) -> None:
        """A Prepare record is durable (or was found on load): write its markers."""
        if self._closed:
            return
        txn_id = meta.transactional_id
        running = self._markers.get(txn_id)
        if running is not None and running.done():
            running = None
        if running is not None and self._marking.get(txn_id) == meta:
            return  # the same transaction: the running task completes it
        loop = asyncio.get_running_loop()
        written: asyncio.Future[None] = loop.create_future()
        # The previous transaction's task may still be waiting for its Complete record to
        # commit (the next Prepare can commit in the same fsync): this one runs after it.
        task = loop.create_task(self._complete(partition, meta, written, after=running),
                                name=f"txn-markers-{txn_id}")
        self._markers[txn_id] = task
        self._marking[txn_id] = meta
        self._written[txn_id] = written
        task.add_done_callback(functools.partial(self._forget, txn_id))

    def _forget(self, txn_id: str, task: asyncio.Task[None]) -> None:
        if self._markers.get(txn_id) is task:
            del self._markers[txn_id]
            self._marking.pop(txn_id, None)
            written = self._written.pop(txn_id, None)
            if written is not None and not written.done():
                written.cancel()
            for _, waiter in self._after_markers.pop(txn_id, []):
                waiter.cancel()  # not taken: its caller runs the op alone

    async def _complete(self, partition: int, meta: TxnMetadata, written: asyncio.Future[None],
                        after: asyncio.Task[None] | None = None) -> None:
        if after is not None:
            await asyncio.wait([after])
        commit = meta.state is TxnState.PREPARE_COMMIT
        pending = set(meta.partitions)
        delay = MARKER_RETRY_MIN_MS
        attempts = 0
        while True:
            if pending:
                done = await asyncio.gather(*(self._marker(tp, meta, commit) for tp in sorted(pending)))
                pending = {tp for tp, ok in zip(sorted(pending), done, strict=True) if not ok}
            if not pending:
                if not written.done():
                    written.set_result(None)
                # The id's requests that waited for the markers run right after the Complete
                # record, in its event: one append and one fsync for all (``_write``).
                waiting = tuple(self._after_markers.pop(meta.transactional_id, ()))
                outs = await self.runtime.write_many(partition, [
                    lambda shard, now: shard.complete(meta.transactional_id, meta.producer_id,
                                                      meta.producer_epoch, meta.state, now),
                    *(op for op, _ in waiting)])
                for (_, waiter), result in zip(waiting, outs[1:], strict=True):
                    if not waiter.done():
                        waiter.set_result(result)
                out = outs[0]
                if not isinstance(out, CoordinatorFailure):
                    if out is ErrorCode.none:
                        log.debug("transaction of %s (producer %d epoch %d) %s",
                                  meta.transactional_id, meta.producer_id, meta.producer_epoch,
                                  "committed" if commit else "aborted")
                    return
                if out.error is ErrorCode.not_coordinator:
                    return  # unloaded or failed: the next load resumes the markers
            attempts += 1
            if attempts in (10, 100) or attempts % 1000 == 0:
                log.warning("transaction of %s (producer %d epoch %d): markers still not written "
                            "after %d attempts to %s; retrying", meta.transactional_id,
                            meta.producer_id, meta.producer_epoch, attempts,
                            ", ".join(f"{t}-{p}" for t, p in sorted(pending)) or TRANSACTION_STATE_TOPIC)
            await asyncio.sleep(delay / 1000)
            delay = min(delay * 2, MARKER_RETRY_MAX_MS)

    async def _marker(self, tp: TopicPartition, meta: TxnMetadata, commit: bool) -> bool:
        """Write one marker; True when it is done (written, or nothing left to write)."""
        topic, partition = tp
        try:
            if topic == CONSUMER_OFFSETS_TOPIC:
                error = await self._offset_markers(partition, meta.producer_id,
                                                   meta.producer_epoch, 0, commit)
            else:
                error = await self._data_markers.write_marker(
                    topic, partition, meta.producer_id, meta.producer_epoch, 0, commit)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("writing the %s marker of %s on %s-%d failed; will retry",
                          "commit" if commit else "abort", meta.transactional_id, topic, partition)
            return False
        if error is ErrorCode.none or error is ErrorCode.unknown_topic_or_partition:
            return True
        if error in RETRIABLE_MARKER_ERRORS:
            return False
        log.error("the %s marker of %s (producer %d epoch %d) on %s-%d was refused with %s; "
                  "giving up on that partition", "commit" if commit else "abort",
                  meta.transactional_id, meta.producer_id, meta.producer_epoch, topic, partition,
                  error.name)
        return True

    def markers_pending(self) -> int:
        """Transactions whose markers are being written (tests, metrics)."""
        return len(self._markers)


# ---------------------------------------------------------------------------------------------
# Opening: __transaction_state, the runtime and the service


def ensure_txn_topic(host: CoordinatorHost) -> TopicView:
    """``__transaction_state`` with ``transaction.state.log.num.partitions`` partitions."""
    configs: dict[str, Any] = {"retention.ms": -1, "retention.bytes": -1,
                               "segment.bytes": TXN_SEGMENT_BYTES}
    return host.ensure_internal_topic(TRANSACTION_STATE_TOPIC,
                                      "transaction.state.log.num.partitions", configs)


async def open_transactions(host: CoordinatorHost, *, data_markers: DataMarkerWriter,
                            offset_markers: OffsetMarkerWriter) -> TransactionService:
    """Create or open ``__transaction_state``, load every partition and return the service.
    ``data_markers`` and ``offset_markers`` write its markers (see ``TransactionService``);
    markers of prepared transactions resume once loaded."""
    topic = ensure_txn_topic(host)

    service = TransactionService(
        clock_ms=host.clock.now_ms, config_get=host.config.get,
        next_producer_id=host.next_producer_id, num_partitions=topic.partitions,
        data_markers=data_markers, offset_markers=offset_markers)

    load_ms = await service.load(
        lambda p: host.log_for(TRANSACTION_STATE_TOPIC, p),
        [p for p in range(topic.partitions) if host.leads(TRANSACTION_STATE_TOPIC, p)])
    runtime = service.runtime
    shards = [s for p in runtime.partitions() if (s := runtime.shard(p)) is not None]
    ids = sum(len(s.txns) for s in shards)
    prepared = sum(1 for s in shards for m in s.txns.values() if m.state in PREPARED)
    log.info("transaction coordinator loaded %d partition(s) of %s (%d transactional ids, %d "
             "completing) in %.0f ms", len(runtime.partitions()), TRANSACTION_STATE_TOPIC, ids, prepared,
             load_ms)
    return service
