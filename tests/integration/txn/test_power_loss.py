"""A power loss right after a transaction completed (issue 25, section 3).

The coordinator writes the COMMIT marker into the data partition, then the fsynced CompleteCommit
record. If the marker were only in the page cache, a power loss would keep the transaction's data
(flushed earlier, as the flush scheduler or a segment roll does) without its marker, while the
coordinator, finding CompleteCommit, never writes it again: the partition's LSO would stay at the
transaction's first offset for ever and read_committed consumers would stop there.

The power loss is simulated at the file layer (``storage.fileops``): ``PowerLossOps`` remembers,
for every file written since its last fsync, what it held at that fsync, and ``durable_image``
copies the data directory as the disk would hold it after losing power. A broker process started
on that copy must let read_committed consumers see the transaction.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.app import Broker
from broker.config import BrokerConfig
from broker.context import RequestContext
from broker.handlers import create_topics, produce
from protocol.codec import request_module
from protocol.messages import make
from protocol.record_batch import TRANSACTIONAL_MASK
from storage import fileops

from tests.conftest import BrokerProcess
from tests.integration.rawclient import request
from tests.integration.txn.test_transactions import consume_all, last_stable_offset
from tests.unit.batches import make_batch

CONFIGS = {"offsets.topic.num.partitions": "1",
           "share.coordinator.state.topic.num.partitions": "1",
           "transaction.state.log.num.partitions": "1"}


class PowerLossOps(fileops.FileOps):
    """Real writes, plus what each file written since its last sync held at that sync (by inode,
    so a rename keeps it)."""

    def __init__(self) -> None:
        self.synced: dict[tuple[int, int], bytes] = {}

    def _dirty(self, fd: int) -> None:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if key not in self.synced:
            self.synced[key] = os.pread(fd, st.st_size, 0) if st.st_size else b""

    def _clean(self, fd: int) -> None:
        st = os.fstat(fd)
        self.synced.pop((st.st_dev, st.st_ino), None)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        self._dirty(fd)
        return super().pwrite(fd, data, pos)

    def ftruncate(self, fd: int, length: int) -> None:
        self._dirty(fd)
        super().ftruncate(fd, length)

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self._clean(fd)

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        self._clean(fd)

    def durable_image(self, source: Path, target: Path) -> None:
        """Copy ``source`` to ``target`` as a power loss now would leave it: every file as of
        its last sync."""
        shutil.copytree(source, target)
        for path in source.rglob("*"):
            if not path.is_file():
                continue
            st = path.stat()
            kept = self.synced.get((st.st_dev, st.st_ino))
            if kept is not None:
                (target / path.relative_to(source)).write_bytes(kept)


async def call(b: Broker, module: Any, version: int, req: Any) -> Any:
    ctx = RequestContext(b, module.API_KEY, version, 1, "test", "127.0.0.1", 1)
    out = module.handle(ctx, req)
    return await out if asyncio.iscoroutine(out) or isinstance(out, asyncio.Future) else out


async def create(b: Broker, topic: str, partitions: int = 1) -> None:
    m = request_module(19, 7)
    created = await call(b, create_topics, 7, request(19, 7, topics=(make(
        m.CreatableTopic, name=topic, num_partitions=partitions, replication_factor=-1,
        assignments=(), configs=()),), timeout=timedelta(seconds=5), validate_only=False))
    assert created.topics[0].error_code == ErrorCode.none


async def _transaction(b: Broker, topic: str, txn: str, commit: bool = True,
                       values: tuple[bytes, ...] = (b"v0", b"v1", b"v2")) -> None:
    """Create ``topic`` (unless it exists) and commit (``commit``) or abort ``values`` in one
    transaction; the data is fsynced before the end (as the flush scheduler would do)."""
    if b.topics.get(topic) is None:
        await create(b, topic)
    tx = b.transactions
    got = await tx.init_producer_id(txn, 60_000, None)
    assert got.error == ErrorCode.none
    pid, epoch = got.producer_id, got.producer_epoch
    assert await tx.add_partitions(txn, pid, epoch, [(topic, 0)]) == ErrorCode.none
    records = make_batch([(b"k", v) for v in values],
                         timestamp_ms=b.clock.now_ms(), attributes=TRANSACTIONAL_MASK,
                         producer_id=pid, producer_epoch=epoch, base_sequence=0)
    pm = request_module(0, 9)
    resp = await call(b, produce, 9, request(0, 9, transactional_id=txn, acks=-1,
                                              timeout=timedelta(seconds=5), topic_data=(make(
        pm.TopicProduceData, name=topic, partition_data=(make(
            pm.PartitionProduceData, index=0, records=records),)),)))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    await b.logs.flush(topic, 0)
    assert (await tx.end_txn(txn, pid, epoch, commit)).error == ErrorCode.none
    complete = "CompleteCommit" if commit else "CompleteAbort"
    for _ in range(500):
        described = tx.describe(txn)
        if not isinstance(described, ErrorCode) and described.state.kafka_name == complete \
                and not tx.markers_pending():
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError(f"the transaction did not complete: {tx.describe(txn)}")
    lg = b.logs.get(topic, 0)
    assert lg is not None
    # Nothing left open: the records and the marker are below the LSO.
    assert b.txn_log.last_stable_offset(topic, 0) == lg.log_end_offset


async def test_a_committed_transaction_survives_a_power_loss(tmp_path: Path) -> None:
    data, after = tmp_path / "data", tmp_path / "after" / "data"
    ops = PowerLossOps()
    previous = fileops.use(ops)
    b = Broker(BrokerConfig({"log.dirs": str(data), **CONFIGS}))
    try:
        await b.start()
        try:
            await _transaction(b, "pl", "pl-txn")
            ops.durable_image(data, after)  # the power goes off here
        finally:
            await b.stop()
    finally:
        fileops.use(previous)
    restarted = BrokerProcess(after, CONFIGS)
    restarted.start()
    try:
        values = [v for _, _, v in consume_all(restarted.bootstrap, "pl", 1, "read_committed", 3)]
        assert values == [b"v0", b"v1", b"v2"]
        assert last_stable_offset(restarted.bootstrap, "pl") == 4
    finally:
        restarted.stop()


async def test_an_aborted_transaction_stays_aborted_after_a_power_loss(tmp_path: Path) -> None:
    """The ABORT marker is synced (its record data) before CompleteAbort, its aborted-transaction
    index entry is not: after the power loss the restart rebuilds that entry from the log, so
    read_committed consumers still skip the aborted records and read the committed ones after."""
    data, after = tmp_path / "data", tmp_path / "after" / "data"
    ops = PowerLossOps()
    previous = fileops.use(ops)
    b = Broker(BrokerConfig({"log.dirs": str(data), **CONFIGS}))
    try:
        await b.start()
        try:
            await _transaction(b, "pla", "pla-txn", commit=False, values=(b"a0", b"a1"))
            await _transaction(b, "pla", "pla-txn", values=(b"c0",))
            ops.durable_image(data, after)  # the power goes off here
        finally:
            await b.stop()
    finally:
        fileops.use(previous)
    restarted = BrokerProcess(after, CONFIGS)
    restarted.start()
    try:
        values = [v for _, _, v in consume_all(restarted.bootstrap, "pla", 1, "read_committed", 1)]
        assert values == [b"c0"]
        # 2 aborted records + ABORT marker + 1 record + COMMIT marker, nothing left open.
        assert last_stable_offset(restarted.bootstrap, "pla") == 5
    finally:
        restarted.stop()
