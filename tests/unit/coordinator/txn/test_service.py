"""TransactionService over real ``__transaction_state`` logs, with fake marker writers: markers
after a durable Prepare, CONCURRENT_TRANSACTIONS meanwhile, retries, resume after a restart, and
the timeout abort through the runtime's timer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode as E

from broker.config import BrokerConfig
from coordinator.txn.service import CONSUMER_OFFSETS_TOPIC, TransactionService
from coordinator.group.placement import partition_for_group
from coordinator.txn.metadata import TxnMetadata, TxnState
from storage.segment_log import LogConfig, PartitionLog

PARTITIONS = 3
T0 = 1_700_000_000_000


class FakeMarkers:
    """Records every marker; ``gate`` holds them; ``fail`` answers errors first."""

    def __init__(self) -> None:
        self.written: list[tuple[str, int, int, int, bool]] = []
        self.gate: asyncio.Event | None = None
        self.fail: list[E] = []

    async def write_marker(self, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, coordinator_epoch: int, commit: bool) -> E:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            return self.fail.pop(0)
        self.written.append((topic, partition, producer_id, producer_epoch, commit))
        return E.none

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> E:
        return await self.write_marker(CONSUMER_OFFSETS_TOPIC, partition, producer_id,
                                       producer_epoch, coordinator_epoch, commit)


@asynccontextmanager
async def service(directory: Path, markers: FakeMarkers,
                  **overrides: Any) -> AsyncIterator[TransactionService]:
    config = BrokerConfig({"log.dirs": str(directory), **overrides})
    logs = [PartitionLog.open(directory / f"__transaction_state-{p}", LogConfig(), T0)
            for p in range(PARTITIONS)]
    pids = iter(range(5000, 6000))
    svc = TransactionService(
        clock_ms=lambda: time.time_ns() // 1_000_000, config_get=config.get,
        next_producer_id=lambda: next(pids), num_partitions=PARTITIONS,
        data_markers=markers, offset_markers=markers.complete_transaction)
    await svc.load(lambda p: logs[p])
    try:
        yield svc
    finally:
        await svc.close()
        for lg in logs:
            lg.close()


async def until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def state(svc: TransactionService, txn: str) -> TxnState:
    meta = svc.describe(txn)
    assert not isinstance(meta, E), meta
    return meta.state


async def test_commit_writes_every_marker_then_completes(tmp_path: Path) -> None:
    markers = FakeMarkers()
    markers.gate = asyncio.Event()
    async with service(tmp_path, markers, **{"transaction.end.wait.ms": 0}) as svc:
        out = await svc.init_producer_id("t1", 60_000, None)
        pid, epoch = out.producer_id, out.producer_epoch
        assert await svc.add_partitions("t1", pid, epoch, [("a", 0), ("a", 1)]) is E.none
        assert await svc.add_offsets("t1", pid, epoch, "group-1", 50) is E.none
        assert svc.verify_partition("t1", pid, epoch, "a", 1) is E.none
        assert svc.verify_partition("t1", pid, epoch, "a", 2) is E.transaction_abortable
        assert (await svc.end_txn("t1", pid, epoch, True)).error is E.none
        # Answered with the markers still held: the id is busy until they are written.
        assert state(svc, "t1") is TxnState.PREPARE_COMMIT
        assert await svc.add_partitions("t1", pid, epoch, [("a", 0)]) is E.concurrent_transactions
        assert (await svc.init_producer_id("t1", 60_000, None)).error is E.concurrent_transactions
        markers.gate.set()
        await until(lambda: state(svc, "t1") is TxnState.COMPLETE_COMMIT)
        group_p = partition_for_group("group-1", 50)
        assert sorted(markers.written) == [("__consumer_offsets", group_p, pid, epoch, True),
                                           ("a", 0, pid, epoch, True), ("a", 1, pid, epoch, True)]


async def test_retriable_marker_errors_are_retried(tmp_path: Path) -> None:
    markers = FakeMarkers()
    markers.fail = [E.kafka_storage_error, E.not_leader_or_follower]
    async with service(tmp_path, markers) as svc:
        out = await svc.init_producer_id("t2", 60_000, None)
        await svc.add_partitions("t2", out.producer_id, 0, [("a", 0)])
        assert (await svc.end_txn("t2", out.producer_id, 0, False)).error is E.none
        await until(lambda: state(svc, "t2") is TxnState.COMPLETE_ABORT)
        assert markers.written == [("a", 0, out.producer_id, 0, False)]


async def test_a_restart_resumes_the_markers_of_a_prepared_transaction(tmp_path: Path) -> None:
    markers = FakeMarkers()
    markers.gate = asyncio.Event()  # never set: the markers are never written before the stop
    async with service(tmp_path, markers, **{"transaction.end.wait.ms": 50}) as svc:
        out = await svc.init_producer_id("t3", 60_000, None)
        await svc.add_partitions("t3", out.producer_id, 0, [("b", 0)])
        assert (await svc.end_txn("t3", out.producer_id, 0, True)).error is E.none
        assert markers.written == []
    again = FakeMarkers()
    async with service(tmp_path, again) as svc:
        await until(lambda: state(svc, "t3") is TxnState.COMPLETE_COMMIT)
        assert again.written == [("b", 0, out.producer_id, 0, True)]


async def test_an_open_transaction_aborts_at_its_timeout(tmp_path: Path) -> None:
    markers = FakeMarkers()
    async with service(tmp_path, markers) as svc:
        out = await svc.init_producer_id("t4", 100, None)
        await svc.add_partitions("t4", out.producer_id, 0, [("c", 0)])
        await until(lambda: state(svc, "t4") is TxnState.COMPLETE_ABORT)
        assert markers.written == [("c", 0, out.producer_id, 1, False)]
        assert (await svc.end_txn("t4", out.producer_id, 0, True)).error is E.producer_fenced


async def test_timeouts_above_the_maximum_and_empty_ids_are_refused(tmp_path: Path) -> None:
    async with service(tmp_path, FakeMarkers(), **{"transaction.max.timeout.ms": 1000}) as svc:
        assert (await svc.init_producer_id("t5", 1001, None)).error is E.invalid_transaction_timeout
        assert (await svc.init_producer_id("t5", 0, None)).error is E.invalid_transaction_timeout
        assert (await svc.init_producer_id("", 100, None)).error is E.invalid_request
        assert (await svc.init_producer_id("x" * 32768, 100, None)).error is E.invalid_request
        assert (await svc.init_producer_id("t5", 1000, None)).error is E.none


async def test_list_filters_by_state_producer_and_duration(tmp_path: Path) -> None:
    async with service(tmp_path, FakeMarkers()) as svc:
        a = await svc.init_producer_id("la", 60_000, None)
        b = await svc.init_producer_id("lb", 60_000, None)
        await svc.add_partitions("la", a.producer_id, 0, [("x", 0)])
        listed = svc.list_transactions([], [])
        assert not isinstance(listed, E)
        assert [(m.transactional_id, m.state) for m in listed] == [
            ("la", TxnState.ONGOING), ("lb", TxnState.EMPTY)]
        only = svc.list_transactions([TxnState.ONGOING], [])
        assert not isinstance(only, E) and [m.transactional_id for m in only] == ["la"]
        by_pid = svc.list_transactions([], [b.producer_id])
        assert not isinstance(by_pid, E) and [m.transactional_id for m in by_pid] == ["lb"]
        # Kafka's duration filter: a transaction started within the duration is left out; an id
        # that never started one (start -1) is not (``listTransactionStates``).
        long_running = svc.list_transactions([], [], 60_000)
        assert not isinstance(long_running, E)
        assert [m.transactional_id for m in long_running] == ["lb"]
        assert svc.list_transactions([TxnState.ONGOING], [], 60_000) == []


async def test_the_next_transaction_waits_for_the_markers_instead_of_being_refused(
        tmp_path: Path) -> None:
    """Shoal's transaction.end.wait.ms: EndTxn answers once the Prepare record is durable (as
    Kafka), and the producer's next AddPartitions, sent while the markers are still held, waits
    for them and runs after CompleteCommit rather than answering CONCURRENT_TRANSACTIONS; the
    Complete record and the waiting requests' records are made durable by one fsync."""
    markers = FakeMarkers()
    markers.gate = asyncio.Event()
    async with service(tmp_path, markers, **{"transaction.end.wait.ms": 30_000}) as svc:
        out = await svc.init_producer_id("t6", 60_000, None)
        await svc.add_partitions("t6", out.producer_id, 0, [("a", 0), ("b", 0)])
        assert (await svc.end_txn("t6", out.producer_id, 0, True)).error is E.none
        assert markers.written == []
        assert state(svc, "t6") is TxnState.PREPARE_COMMIT
        nxt = asyncio.ensure_future(svc.add_partitions("t6", out.producer_id, 0, [("a", 0)]))
        late = asyncio.ensure_future(svc.add_partitions("t6", out.producer_id, 0, [("b", 0)]))
        await asyncio.sleep(0.05)
        assert not nxt.done() and not late.done()  # held while the markers are
        stats = svc.runtime.stats(svc.partition_for("t6"))
        assert stats is not None
        flushes = stats.flushes
        markers.gate.set()
        assert [await nxt, await late] == [E.none, E.none]
        assert stats.flushes == flushes + 1
        assert len(markers.written) == 2
        assert state(svc, "t6") is TxnState.ONGOING
        meta = svc.describe("t6")
        assert not isinstance(meta, E) and meta.partitions == {("a", 0), ("b", 0)}


async def test_a_request_that_waited_past_transaction_end_wait_ms_runs_alone(
        tmp_path: Path) -> None:
    """Markers held longer than transaction.end.wait.ms: the waiting request is answered
    CONCURRENT_TRANSACTIONS (the Kafka client retries), and runs once, not again after the
    markers; a caller that gave up leaves nothing behind to run."""
    markers = FakeMarkers()
    markers.gate = asyncio.Event()
    async with service(tmp_path, markers, **{"transaction.end.wait.ms": 50}) as svc:
        out = await svc.init_producer_id("t8", 60_000, None)
        await svc.add_partitions("t8", out.producer_id, 0, [("a", 0)])
        assert (await svc.end_txn("t8", out.producer_id, 0, True)).error is E.none
        assert await svc.add_partitions("t8", out.producer_id, 0, [("b", 0)]) is \
            E.concurrent_transactions
        gave_up = asyncio.ensure_future(svc.add_partitions("t8", out.producer_id, 0, [("c", 0)]))
        await asyncio.sleep(0.01)
        gave_up.cancel()
        markers.gate.set()
        await until(lambda: state(svc, "t8") is TxnState.COMPLETE_COMMIT)
        assert svc._after_markers == {}
        assert await svc.add_partitions("t8", out.producer_id, 0, [("d", 0)]) is E.none
        meta = svc.describe("t8")
        assert not isinstance(meta, E) and meta.partitions == {("d", 0)}


async def test_a_prepare_reported_while_the_previous_task_completes_still_gets_its_markers(
        tmp_path: Path) -> None:
    """The next transaction's Prepare can commit before the previous marker task has finished
    (it still awaits its Complete record): its markers are written after that task, not lost."""
    markers = FakeMarkers()
    async with service(tmp_path, markers, **{"transaction.end.wait.ms": 0}) as svc:
        out = await svc.init_producer_id("t7", 60_000, None)
        pid = out.producer_id
        shard = svc.runtime.shard(svc.partition_for("t7"))
        assert shard is not None
        first = TxnMetadata("t7", pid, 0, 60_000, TxnState.PREPARE_COMMIT,
                            frozenset({("a", 0)}), 1, 1)
        second = TxnMetadata("t7", pid, 0, 60_000, TxnState.PREPARE_ABORT,
                             frozenset({("b", 0)}), 2, 2)
        markers.gate = asyncio.Event()
        svc._on_prepared(shard.partition, first)
        svc._on_prepared(shard.partition, second)
        svc._on_prepared(shard.partition, second)  # reported twice: written once
        markers.gate.set()
        await until(lambda: svc.markers_pending() == 0)
        assert markers.written == [("a", 0, pid, 0, True), ("b", 0, pid, 0, False)]


async def test_a_request_taken_with_the_complete_record_is_answered_by_it_whatever_its_caller(
        tmp_path: Path) -> None:
    """Once the markers are written, the id's waiting requests are taken into the Complete
    record's event: a caller that gives up then leaves its request to run there once (not
    taken back), and every other caller gets its own request's answer. A chaos soak lost a
    transaction's completion to this: the taken-back entry shifted the answers by one."""
    markers = FakeMarkers()
    markers.gate = asyncio.Event()
    async with service(tmp_path, markers, **{"transaction.end.wait.ms": 30_000}) as svc:
        out = await svc.init_producer_id("t9", 60_000, None)
        await svc.add_partitions("t9", out.producer_id, 0, [("a", 0)])
        assert (await svc.end_txn("t9", out.producer_id, 0, True)).error is E.none
        stale = asyncio.ensure_future(svc.add_partitions("t9", out.producer_id, 7, [("x", 0)]))
        good = asyncio.ensure_future(svc.add_partitions("t9", out.producer_id, 0, [("b", 0)]))
        await until(lambda: len(svc._after_markers.get("t9", ())) == 2)
        markers.gate.set()
        while "t9" in svc._after_markers:  # until taken: the event is then under way
            await asyncio.sleep(0)
        stale.cancel()
        assert await good is E.none
        await until(lambda: state(svc, "t9") is TxnState.ONGOING)
        meta = svc.describe("t9")
        assert not isinstance(meta, E) and meta.partitions == {("b", 0)}
        # The markers' task completed: a new transaction ends and completes as usual.
        assert (await svc.end_txn("t9", out.producer_id, 0, True)).error is E.none
        await until(lambda: state(svc, "t9") is TxnState.COMPLETE_COMMIT)
