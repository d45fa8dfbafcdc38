"""Transactions in the partition logs (issue 15): producer state (ongoing transactions, LSO),
the aborted-transaction index, ``TransactionalLog`` over a real on-disk log, and recovery.

A "crash" is a copy of the data directory taken while everything is open (what ``kill -9``
leaves: the page cache, nothing that close() does, so no snapshot at the log end).
"""

from __future__ import annotations

import asyncio
import errno
import sys
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.log.append import append_partition
from broker.log.manager import LogManager, partition_dir
from broker.log.producer_state import ProducerStates
from broker.log.producer_state_manager import ProducerStateManager
from broker.log.topics import Topic
from broker.log.txn_log import AbortedTxn, TransactionalLog
from storage import fileops, txn_index
from broker.clock import FakeClock
from broker.config import BrokerConfig
from protocol.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    control_batch,
    control_type,
    iter_batches,
    marker_coordinator_epoch,
    validate_batches,
)
from storage.producer_snapshot import decode, encode
from tests.unit.batches import make_batch

TOPIC = Topic("txns", uuid.UUID(int=7), 1)


# -- sans-IO producer state ----------------------------------------------------------------------


def test_a_transactional_batch_begins_a_transaction_and_its_marker_ends_it() -> None:
    s = ProducerStates()
    assert s.first_unstable_offset() is None
    assert s.check(1, 0, 0, 3, transactional=True).error == ErrorCode.none
    s.observe(1, 0, 0, 3, 10, 12, transactional=True)
    s.observe(2, 0, 0, 1, 13, 13)  # plain idempotent batch: no transaction
    s.observe(3, 0, 0, 2, 14, 15, transactional=True)
    s.observe(1, 0, 3, 1, 16, 16, transactional=True)  # same transaction goes on
    assert s.ongoing() == {1: 10, 3: 14}
    assert s.first_unstable_offset() == 10
    # A plain batch of a producer inside its transaction is INVALID_TXN_STATE (Kafka).
    assert s.check(1, 0, 4, 1).error == ErrorCode.invalid_txn_state
    assert s.check(1, 0, 4, 1, transactional=True).error == ErrorCode.none
    done = s.observe_marker(1, 0, 5, 17, commit=False)
    assert (done.producer_id, done.first_offset, done.last_offset, done.aborted) == (1, 10, 17,
                                                                                    True)
    assert s.first_unstable_offset() == 14
    assert s.observe_marker(3, 0, 5, 18, commit=True).aborted is False
    assert s.first_unstable_offset() is None
    # A marker for a producer with nothing ongoing ends nothing.
    assert s.observe_marker(1, 0, 5, 19, commit=True) is None
    # Sequences go on across transactions, as Kafka's producer continues them.
    assert s.check(1, 0, 4, 1, transactional=True).error == ErrorCode.none


def test_markers_are_fenced_by_producer_and_coordinator_epoch() -> None:
    s = ProducerStates()
    s.observe(1, 2, 0, 1, 0, 0, transactional=True)
    assert s.check_marker(1, 1, 0) == ErrorCode.invalid_producer_epoch
    assert s.check_marker(1, 2, 0) == ErrorCode.none
    s.observe_marker(1, 2, 4, 1, commit=True)
    assert s.check_marker(1, 2, 3) == ErrorCode.transaction_coordinator_fenced
    assert s.check_marker(99, 0, 0) == ErrorCode.none  # unknown producer: written, as Kafka
    # A bumped marker epoch (coordinator abort on timeout) becomes the producer's epoch.
    s.observe(1, 2, 1, 1, 2, 2, transactional=True)
    s.observe_marker(1, 3, 4, 3, commit=False)
    assert s.check(1, 2, 2, 1, transactional=True).error == ErrorCode.invalid_producer_epoch
    assert s.check(1, 3, 0, 1, transactional=True).error == ErrorCode.none


def test_an_epoch_bump_keeps_the_ongoing_transaction_and_expiry_spares_it() -> None:
    s = ProducerStates()
    s.observe(1, 0, 0, 1, 5, 5, now_ms=0, transactional=True)
    s.observe(2, 0, 0, 1, 6, 6, now_ms=0)
    s.observe(1, 1, 0, 1, 7, 7, now_ms=0, transactional=True)
    assert s.ongoing() == {1: 5}
    assert s.expire(now_ms=10_000, expiration_ms=1_000) == 1  # only the idle producer 2
    assert s.ongoing() == {1: 5} and len(s) == 1


def test_snapshot_carries_ongoing_transactions_and_coordinator_epochs() -> None:
    s = ProducerStates()
    s.observe(1, 0, 0, 2, 0, 1, transactional=True)
    s.observe(2, 3, 0, 1, 2, 2, transactional=True)
    s.observe_marker(2, 3, 7, 3, commit=True)
    entries = decode(encode(s.to_snapshot()))
    again = ProducerStates.from_snapshot(entries)
    assert again.ongoing() == {1: 0}
    assert again.first_unstable_offset() == 0
    assert again.check_marker(2, 3, 6) == ErrorCode.transaction_coordinator_fenced
    assert again.to_snapshot() == s.to_snapshot()


def test_control_batches_are_kafka_markers() -> None:
    for commit, kind in ((True, CONTROL_COMMIT), (False, CONTROL_ABORT)):
        data = control_batch(42, 3, 9, commit, 1_700_000_000_000)
        (h,) = validate_batches(data, 1 << 20)  # CRC, counts
        assert h.attributes == TRANSACTIONAL_MASK | CONTROL_MASK
        assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (42, 3, -1,
                                                                                      1)
        assert control_type(data) == kind
        assert marker_coordinator_epoch(data) == 9
        # Key: version 0 + type; value: version 0 + coordinator epoch (Kafka's layout).
        assert data.endswith(b"\x0c\x00\x00\x00\x00\x00\x09\x00")
        assert (b"\x08\x00\x00\x00" + bytes([kind])) in data
    assert control_type(make_batch([(b"k", b"v")])) is None


def test_txn_index_files_read_back_their_longest_whole_prefix(tmp_path: Path) -> None:
    path = txn_index.txn_index_path(tmp_path, 0)
    txn_index.write_file(path, [(1, 0, 5, 6), (2, 3, 9, 10)])
    assert txn_index.read_file(path) == [(1, 0, 5, 6), (2, 3, 9, 10)]
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01")  # torn tail
    assert txn_index.read_file(path) == [(1, 0, 5, 6), (2, 3, 9, 10)]
    idx = txn_index.TxnIndex.load(tmp_path, [0])
    assert idx.collect(0, 100) == [(1, 0, 5, 6), (2, 3, 9, 10)]
    assert idx.collect(6, 9) == [(2, 3, 9, 10)]  # marker 5 is before the range
    assert idx.collect(0, 3) == [(1, 0, 5, 6)]  # txn 2 begins at 3
    assert idx.truncate_from(9) == 1
    assert txn_index.read_file(path) == [(1, 0, 5, 6)]


# -- TransactionalLog over a real on-disk log ----------------------------------------------------


class _Metrics:
    def __getattr__(self, name: str) -> Any:
        return SimpleNamespace(inc=lambda *a: None)


@dataclass
class Node:
    """One broker's worth of logs, producer state and transactional log over a data directory
    (the produce handler's own partition code appends)."""

    data: Path
    clock: FakeClock
    logs: LogManager
    producers: ProducerStateManager
    txn: TransactionalLog
    broker: Any

    @classmethod
    def open(cls, data: Path, clock: FakeClock, segment_bytes: int = 1024,
             coordinator: Any = None) -> Node:
        config = BrokerConfig({"log.segment.bytes": str(segment_bytes)})
        logs = LogManager(data, config, clock)
        logs.open_topic(TOPIC)
        producers = ProducerStateManager(logs, config, clock)
        broker = SimpleNamespace(
            logs=logs, producers=producers, config=config, clock=clock, metrics=_Metrics(),
            topics=SimpleNamespace(get=lambda name: TOPIC if name == TOPIC.name else None),
            producer_states=producers.states)
        # Without a coordinator under test, one that has every partition in the transaction.
        broker.transactions = coordinator or SimpleNamespace(
            verify_partition=lambda *_: ErrorCode.none)
        txn = TransactionalLog(broker)  # type: ignore[arg-type]
        return cls(data, clock, logs, producers, txn, broker)

    @property
    def log(self) -> Any:
        lg = self.logs.get(TOPIC.name, 0)
        assert lg is not None
        return lg

    def produce(self, pid: int, epoch: int, seq: int, n: int = 2, txn: bool = True,
                txn_id: str | None = "tx") -> tuple[ErrorCode, int]:
        data = make_batch([(b"k%d" % i, b"v" * 60) for i in range(n)],
                          timestamp_ms=self.clock.now_ms(),
                          attributes=TRANSACTIONAL_MASK if txn else 0, producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq)
        out = append_partition(self.broker, TOPIC.name, {}, 0, data,
                               transactional_id=txn_id if txn else None)
        return out.error, out.base_offset

    def marker(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> ErrorCode:
        return asyncio.run(self.txn.write_marker(TOPIC.name, 0, pid, epoch, coordinator_epoch,
                                                 commit))

    def lso(self) -> int:
        return self.txn.last_stable_offset(TOPIC.name, 0)

    def aborted(self, start: int = 0, end: int | None = None) -> list[AbortedTxn]:
        return self.txn.aborted_transactions(TOPIC.name, 0, start,
                                             self.log.log_end_offset if end is None else end)

    def ongoing(self) -> dict[int, int]:
        return self.producers.states(TOPIC.name, 0).ongoing()

    def close(self) -> None:
        self.producers.close()
        self.logs.close()

    def crash_copy(self, to: Path) -> Path:
        shutil.copytree(self.data, to)
        return to


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_lso_aborted_list_and_markers_on_a_real_log(tmp_path: Path, clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock)
    assert node.produce(1, 0, 0) == (ErrorCode.none, 0)  # txn of 1 at 0-1
    assert node.produce(9, 0, 0, n=1, txn=False) == (ErrorCode.none, 2)  # plain idempotent
    assert node.produce(2, 0, 0) == (ErrorCode.none, 3)  # txn of 2 at 3-4
    assert node.lso() == 0
    assert node.marker(1, 0, commit=False) == ErrorCode.none  # ABORT at 5
    assert node.lso() == 3
    assert node.aborted() == [AbortedTxn(1, 0, 5)]
    assert node.marker(2, 0, commit=True) == ErrorCode.none  # COMMIT at 6
    assert node.lso() == node.log.log_end_offset == 7
    assert node.aborted() == [AbortedTxn(1, 0, 5)]
    assert node.aborted(6, 7) == []
    # The markers are in the log as control batches, offsets 5 and 6.
    data = node.log.read(5, 1 << 20).data
    kinds = [(h.base_offset, h.is_control, control_type(data, pos))
             for pos, h in iter_batches(data)]
    assert kinds == [(5, True, CONTROL_ABORT), (6, True, CONTROL_COMMIT)]
    # A marker for a producer with nothing ongoing is written anyway (Kafka), a stale one not.
    assert node.marker(1, 0, commit=True) == ErrorCode.none
    assert node.marker(1, 0, commit=True, coordinator_epoch=-5) == \
        ErrorCode.transaction_coordinator_fenced
    node.close()


class _CountingSyncs(fileops.FileOps):
    """Real file calls; counts data syncs, and fails them with EIO once ``fail`` is set."""

    def __init__(self) -> None:
        self.syncs = 0
        self.fail = False

    def fdatasync(self, fd: int) -> None:
        if self.fail:
            raise OSError(errno.EIO, "injected I/O error")
        self.syncs += 1
        super().fdatasync(fd)


def test_markers_written_in_one_turn_share_one_sync(tmp_path: Path, clock: FakeClock) -> None:
    """Two transactions end together on one partition: both markers are answered NONE only once
    synced, and one data sync covers both; a sync that fails answers KAFKA_STORAGE_ERROR to
    every marker it covered."""
    node = Node.open(tmp_path / "data", clock, segment_bytes=1 << 20)
    assert node.produce(1, 0, 0)[0] == ErrorCode.none
    assert node.produce(2, 0, 0)[0] == ErrorCode.none
    ops = _CountingSyncs()
    previous = fileops.use(ops)
    try:
        async def both(commit: bool) -> list[ErrorCode]:
            return list(await asyncio.gather(
                node.txn.write_marker(TOPIC.name, 0, 1, 0, 0, commit),
                node.txn.write_marker(TOPIC.name, 0, 2, 0, 0, commit)))

        assert asyncio.run(both(True)) == [ErrorCode.none, ErrorCode.none]
        assert ops.syncs == 1
        assert node.lso() == node.log.log_end_offset == 6
        assert node.produce(1, 0, 2)[0] == ErrorCode.none
        assert node.produce(2, 0, 2)[0] == ErrorCode.none
        ops.fail = True
        assert asyncio.run(both(False)) == [ErrorCode.kafka_storage_error] * 2
    finally:
        fileops.use(previous)
    node.close()


def test_sync_ahead_makes_the_data_durable_before_the_marker(tmp_path: Path,
                                                             clock: FakeClock) -> None:
    """EndTxn's early sync: the transaction's records are synced before any marker is written
    (so the marker's own sync has only the marker left); an unknown partition is ignored."""
    node = Node.open(tmp_path / "data", clock, segment_bytes=1 << 20)
    assert node.produce(1, 0, 0)[0] == ErrorCode.none
    ops = _CountingSyncs()
    previous = fileops.use(ops)
    try:
        async def ahead() -> None:
            node.txn.sync_ahead(TOPIC.name, 0)
            node.txn.sync_ahead("no-such-topic", 0)
            while ops.syncs == 0:
                await asyncio.sleep(0.01)

        asyncio.run(asyncio.wait_for(ahead(), 10))
        assert ops.syncs == 1
        assert node.marker(1, 0, commit=True) == ErrorCode.none
        assert node.lso() == node.log.log_end_offset == 3
    finally:
        fileops.use(previous)
    node.close()


class _CountingWritebacks(_CountingSyncs):
    """Counts early writebacks too (real ones), and fails them with EIO once ``fail_wb`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.writebacks = 0
        self.fail_wb = False

    def start_writeback(self, fd: int) -> None:
        self.writebacks += 1
        if self.fail_wb:
            raise OSError(errno.EIO, "injected I/O error")
        super().start_writeback(fd)


def test_write_ahead_starts_writing_transactional_data_and_promises_nothing(
        tmp_path: Path, clock: FakeClock) -> None:
    """Produce's early writeback of transactional data: it runs off the event loop, syncs
    nothing (the marker still makes its own sync before it is answered), and a writeback the
    kernel refuses takes nothing offline (the sync that follows is what reports a disk)."""
    node = Node.open(tmp_path / "data", clock, segment_bytes=1 << 20)
    assert node.produce(1, 0, 0)[0] == ErrorCode.none
    ops = _CountingWritebacks()
    previous = fileops.use(ops)
    try:
        async def ahead(n: int) -> None:
            node.txn.write_ahead([(TOPIC.name, 0), ("no-such-topic", 0)])
            while ops.writebacks < n:
                await asyncio.sleep(0.01)

        asyncio.run(asyncio.wait_for(ahead(1), 10))
        assert (ops.writebacks, ops.syncs) == (1, 0)
        ops.fail_wb = True
        asyncio.run(asyncio.wait_for(ahead(2), 10))
        assert node.marker(1, 0, commit=True) == ErrorCode.none
        assert ops.syncs == 1
        assert node.lso() == node.log.log_end_offset == 3
    finally:
        fileops.use(previous)
    node.close()


def test_produce_rules_for_transactional_batches(tmp_path: Path, clock: FakeClock) -> None:
    asked: list[tuple[Any, ...]] = []
    allowed = {("tx", 1, 0, TOPIC.name, 0)}

    class Coordinator:
        def verify_partition(self, *args: Any) -> ErrorCode:
            asked.append(args)
            return ErrorCode.none if args in allowed else ErrorCode.invalid_txn_state

    node = Node.open(tmp_path / "data", clock, coordinator=Coordinator())
    # Not in the producer's transaction: refused, nothing appended.
    assert node.produce(2, 0, 0) == (ErrorCode.invalid_txn_state, -1)
    assert node.log.log_end_offset == 0
    assert node.produce(1, 0, 0) == (ErrorCode.none, 0)
    assert node.produce(1, 0, 2) == (ErrorCode.none, 2)  # ongoing: no second question
    assert asked == [("tx", 2, 0, TOPIC.name, 0), ("tx", 1, 0, TOPIC.name, 0)]
    # Idempotence still applies: a retried batch is a duplicate, a gap is out of order.
    assert node.produce(1, 0, 2) == (ErrorCode.none, 2)
    assert node.produce(1, 0, 9)[0] == ErrorCode.out_of_order_sequence_number
    # Plain batch inside the transaction, lower epoch, no transactional id, no producer id.
    assert node.produce(1, 0, 4, txn=False)[0] == ErrorCode.invalid_txn_state
    assert node.produce(1, 0, 4, txn_id=None)[0] == \
        ErrorCode.transactional_id_authorization_failed
    assert node.produce(-1, -1, -1)[0] == ErrorCode.invalid_record
    assert node.log.log_end_offset == 4
    node.close()


def test_a_client_cannot_produce_a_control_batch(tmp_path: Path, clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock)
    out = append_partition(node.broker, TOPIC.name, {}, 0,
                           control_batch(1, 0, 0, False, clock.now_ms()), transactional_id="tx")
    assert out.error == ErrorCode.invalid_record
    assert node.log.log_end_offset == 0
    node.close()


def test_retention_deletes_the_txn_index_with_its_segment(tmp_path: Path,
                                                         clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock, segment_bytes=1024)
    seq = 0
    for _ in range(9):
        assert node.produce(1, 0, seq, 4)[0] == ErrorCode.none
        seq += 4
        assert node.marker(1, 0, commit=False) == ErrorCode.none
    part = partition_dir(tmp_path / "data", TOPIC.name, 0)
    files = sorted(p.name for p in part.glob("*.txnindex"))
    assert len(files) >= 3 and len(node.aborted()) == 9
    first_kept = node.log._segments[2].base_offset  # noqa: SLF001
    node.log.delete_records_before(first_kept)
    left = sorted(p.name for p in part.glob("*.txnindex"))
    assert left == [f for f in files if int(f[:20]) >= first_kept]
    assert all(a.last_offset >= first_kept for a in node.aborted(first_kept))
    assert len(node.aborted(first_kept)) == len(node.aborted(0))
    node.close()


def _scenario(node: Node) -> None:
    """Transactions of three producers spread over several segments, some left open."""
    seqs = {1: 0, 2: 0, 3: 0}

    def send(pid: int, n: int = 2) -> None:
        assert node.produce(pid, 0, seqs[pid], n)[0] == ErrorCode.none
        seqs[pid] += n

    for round_ in range(5):
        send(1)
        send(2)
        send(1, 3)
        assert node.marker(1, 0, commit=round_ % 2 == 0) == ErrorCode.none
        send(3)
        assert node.marker(2, 0, commit=False) == ErrorCode.none
        if round_ < 4:
            assert node.marker(3, 0, commit=True) == ErrorCode.none
    send(2)  # left ongoing, with producer 3's


def _state(node: Node) -> tuple[int, list[AbortedTxn], dict[int, int]]:
    return node.lso(), node.aborted(), node.ongoing()


def test_sigkill_recovery_rebuilds_ongoing_lso_and_aborted_list(tmp_path: Path,
                                                                clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock)
    _scenario(node)
    assert node.log.segment_count > 3
    live = _state(node)
    assert live[0] < node.log.log_end_offset and len(live[1]) == 7 and set(live[2]) == {2, 3}
    # Crash: no snapshot at the log end, the active segment's tail past the recovery point.
    crashed = Node.open(node.crash_copy(tmp_path / "crashed"), clock)
    assert crashed.log.recovered_from is not None
    assert _state(crashed) == live
    # Wipe every transaction index: the replay after a crash rebuilds what recovery re-read.
    wiped_dir = node.crash_copy(tmp_path / "wiped")
    for p in partition_dir(wiped_dir, TOPIC.name, 0).glob("*.txnindex"):
        p.unlink()
    for p in partition_dir(wiped_dir, TOPIC.name, 0).glob("recovery-point.checkpoint"):
        p.unlink()  # recovery re-reads the whole log
    wiped = Node.open(wiped_dir, clock)
    assert _state(wiped) == live
    # And after a clean shutdown (snapshot at the log end, nothing replayed).
    node.close()
    again = Node.open(tmp_path / "data", clock)
    assert again.log.recovered_from is None
    assert _state(again) == live
    for n in (crashed, wiped, again):
        n.close()


def test_a_marker_cut_off_by_crash_recovery_leaves_no_index_entry(tmp_path: Path,
                                                                  clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock, segment_bytes=1 << 20)
    assert node.produce(1, 0, 0)[0] == ErrorCode.none
    assert node.marker(1, 0, commit=False) == ErrorCode.none
    copy = node.crash_copy(tmp_path / "torn")
    seg = partition_dir(copy, TOPIC.name, 0) / f"{0:020d}.log"
    with open(seg, "r+b") as f:  # tear the marker batch
        f.truncate(seg.stat().st_size - 5)
    torn = Node.open(copy, clock)
    assert torn.log.log_end_offset == 2
    assert torn.aborted() == [] and torn.ongoing() == {1: 0} and torn.lso() == 0
    node.close()
    torn.close()


# -- property: replay equals the live state ------------------------------------------------------

_OPS = st.lists(st.tuples(st.sampled_from(["txn", "plain", "commit", "abort"]),
                          st.integers(1, 3), st.integers(1, 4)), min_size=1, max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, crash=st.booleans())
def test_replay_of_any_txn_sequence_matches_the_live_state(ops: list[tuple[str, int, int]],
                                                           crash: bool) -> None:
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp:
        node = Node.open(Path(tmp) / "data", clock, segment_bytes=1024)
        seqs: dict[int, int] = {}
        for op, pid, n in ops:
            if op in ("txn", "plain"):
                seq = seqs.get(pid, 0)
                err, _ = node.produce(pid, 0, seq, n, txn=op == "txn")
                if err == ErrorCode.none:
                    seqs[pid] = seq + n
                else:
                    assert err == ErrorCode.invalid_txn_state and op == "plain"
            else:
                assert node.marker(pid, 0, commit=op == "commit") == ErrorCode.none
        live = _state(node)
        # The live aborted list is what the operations aborted, in order.
        if crash:
            other = Node.open(node.crash_copy(Path(tmp) / "crashed"), clock)
            node.close()
        else:
            node.close()
            other = Node.open(Path(tmp) / "data", clock)
        assert _state(other) == live
        other.close()


# -- the log cleaner -----------------------------------------------------------------------------

COMPACT = Topic("txc", uuid.UUID(int=8), 1, {"cleanup.policy": "compact",
                                             "delete.retention.ms": "1000"})


def _batches(lg: Any) -> list[tuple[int, int, bool, int, list[tuple[bytes | None, bytes | None]]]]:
    """(base offset, producer id, control, attributes, [(key, value)]) of every batch."""
    from tests.unit.storage.test_cleaner import decode

    out = []
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        r = lg.read(offset, 1 << 20)
        if not r.data:
            break
        for pos, h in iter_batches(r.data):
            raw = r.data[pos:pos + h.total_size]
            recs = [(k, v) for _, k, v, _ in decode(raw)]
            out.append((h.base_offset, h.producer_id, h.is_control, h.attributes, recs))
        offset = r.next_offset
    return out


def _compact_scenario(node: Node, clock: FakeClock) -> int:
    """An aborted and a committed transaction, then fillers over several segments with an open
    transaction among them (returned: its offset). Flushed, so the sealed part is cleanable."""
    lg = node.log

    def put(pid: int, seq: int, recs: list[tuple[bytes, bytes]], txn: bool) -> int:
        data = make_batch(recs, timestamp_ms=clock.now_ms(),
                          attributes=TRANSACTIONAL_MASK if txn else 0, producer_id=pid,
                          producer_epoch=0, base_sequence=seq)
        out = append_partition(node.broker, COMPACT.name, COMPACT.configs, 0, data,
                               transactional_id="tx" if txn else None)
        assert out.error == ErrorCode.none, out
        return out.base_offset

    put(3, 0, [(b"k3", b"old")], txn=False)  # 0
    put(1, 0, [(b"k1", b"aborted"), (b"k3", b"aborted")], txn=True)  # 1-2
    put(2, 0, [(b"k2", b"committed")], txn=True)  # 3
    assert node.marker(1, 0, commit=False) == ErrorCode.none  # 4
    assert node.marker(2, 0, commit=True) == ErrorCode.none  # 5
    for i in range(8):  # fill and roll segments
        put(5, i, [(b"f%d" % i, b"x" * 150)], txn=False)
    open_at = put(4, 0, [(b"k4", b"open")], txn=True)  # ongoing, must not be cleaned
    for i in range(8, 20):
        put(5, i, [(b"f%d" % i, b"x" * 150)], txn=False)
    lg.flush()
    assert lg.segment_count > 3 and lg.first_unstable_offset == open_at
    assert node.aborted() == [AbortedTxn(1, 1, 4)]
    return open_at


def test_cleaner_drops_aborted_data_then_its_marker_after_delete_retention(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    from storage.cleaner import clean, cleanable

    monkeypatch.setattr(sys.modules[__name__], "TOPIC", COMPACT)
    node = Node.open(tmp_path / "data", clock)
    lg = node.log
    open_at = _compact_scenario(node, clock)

    now = clock.now_ms()
    assert cleanable(lg, now, 0) is None  # state not loaded yet: nothing
    c = cleanable(lg, now, lg.first_unstable_offset)
    assert c is not None and c.first_uncleanable <= open_at  # nothing at or past the open txn
    clean(c, now, 1 << 20)
    batches = _batches(lg)
    by_offset = {b[0]: b for b in batches}
    assert 1 not in by_offset  # the aborted data is gone ...
    assert by_offset[0][4] == [(b"k3", b"old")]  # ... and did not hide the older k3
    assert by_offset[3][4] == [(b"k2", b"committed")]
    # The ABORT marker stays (with a delete horizon: no data of its transaction is left) and so
    # does its index entry; the COMMIT marker of a transaction with data stays as it was.
    assert by_offset[4][2] and by_offset[4][3] & 0x40
    assert by_offset[5][2] and not by_offset[5][3] & 0x40
    assert node.aborted() == [AbortedTxn(1, 1, 4)]
    # On disk: the cleaned segment's index took the entry (LSO 3 then: producer 2 was open).
    assert txn_index.read_file(txn_index.txn_index_path(lg.directory, 0)) == [(1, 1, 4, 3)]
    assert open_at in by_offset  # the ongoing transaction's batch is untouched

    # After delete.retention.ms the next pass drops the marker and its index entry.
    clock.advance(1001)
    now = clock.now_ms()
    c = cleanable(lg, now, lg.first_unstable_offset)
    assert c is not None
    clean(c, now, 1 << 20)
    by_offset = {b[0]: b for b in _batches(lg)}
    assert 4 not in by_offset and 5 in by_offset
    assert node.aborted() == []
    # The state survives a restart (the index files were swapped with the segments).
    node.close()
    again = Node.open(tmp_path / "data", clock)
    assert again.aborted() == [] and again.lso() == open_at
    again.close()


@pytest.mark.parametrize("stage", ["cleaned", "committed", "installed"])
def test_a_crash_during_a_cleaned_swap_keeps_the_txn_index(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    from storage.cleaner import clean, cleanable

    monkeypatch.setattr(sys.modules[__name__], "TOPIC", COMPACT)
    node = Node.open(tmp_path / "data", clock)
    open_at = _compact_scenario(node, clock)

    class Crash(Exception):
        pass

    def fault(s: str) -> None:
        if s == stage:
            raise Crash(s)

    node.log.swap_fault = fault
    c = cleanable(node.log, clock.now_ms(), node.log.first_unstable_offset)
    assert c is not None
    with pytest.raises(Crash):
        clean(c, clock.now_ms(), 1 << 20)
    crashed = Node.open(node.crash_copy(tmp_path / "crashed"), clock)
    part = partition_dir(tmp_path / "crashed", COMPACT.name, 0)
    assert not [n.name for n in part.iterdir() if n.name.endswith((".cleaned", ".swap",
                                                                   ".deleted"))]
    # Swapped in or not, the aborted transaction is still indexed (its marker is kept) ...
    assert crashed.aborted() == [AbortedTxn(1, 1, 4)] and crashed.lso() == open_at
    assert txn_index.read_file(txn_index.txn_index_path(part, 0)) == [(1, 1, 4, 3)]
    # ... and a later pass finishes the job.
    clock.advance(1001)
    c = cleanable(crashed.log, clock.now_ms(), crashed.log.first_unstable_offset)
    assert c is not None
    clean(c, clock.now_ms(), 1 << 20)
    clock.advance(1001)
    c = cleanable(crashed.log, clock.now_ms(), crashed.log.first_unstable_offset)
    assert c is not None
    clean(c, clock.now_ms(), 1 << 20)
    assert crashed.aborted() == []
    node.close()
    crashed.close()


def test_an_aborted_txn_begun_below_the_log_start_keeps_its_entry_through_a_replay(
        tmp_path: Path, clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock)
    assert node.produce(1, 0, 0) == (ErrorCode.none, 0)
    seq = 0
    while node.log.segment_count < 4:
        assert node.produce(9, 0, seq, txn=False)[0] == ErrorCode.none
        seq += 2
    assert node.marker(1, 0, commit=False) == ErrorCode.none
    marker = node.log.log_end_offset - 1
    node.log.delete_records_before(node.log._segments[1].base_offset)  # noqa: SLF001
    assert node.aborted(node.log.log_start_offset) == [AbortedTxn(1, 0, marker)]
    copy = node.crash_copy(tmp_path / "crashed")
    part = partition_dir(copy, TOPIC.name, 0)
    for snap in part.glob("*.snapshot"):
        snap.unlink()  # no state knows where the transaction began
    (part / "recovery-point.checkpoint").unlink(missing_ok=True)
    crashed = Node.open(copy, clock)
    assert crashed.aborted(crashed.log.log_start_offset) == [AbortedTxn(1, 0, marker)]
    node.close()
    crashed.close()


def test_the_lso_never_falls_below_the_log_start(tmp_path: Path, clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock)
    assert node.produce(1, 0, 0) == (ErrorCode.none, 0)  # open transaction from 0
    seq = 0
    while node.log.segment_count < 3:
        assert node.produce(9, 0, seq, txn=False)[0] == ErrorCode.none
        seq += 2
    assert node.lso() == 0
    start = node.log.delete_records_before(node.log._segments[1].base_offset)  # noqa: SLF001
    assert start > 0 and node.lso() == start
    node.close()
