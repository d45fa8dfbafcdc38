"""Transaction protocol v2 (KIP-890 part 2) on the wire, as Kafka 4.x Java producers use it when
the broker advertises ``transaction.version`` 2: no AddPartitionsToTxn (Produce v12 adds the
partition), and EndTxn v5 bumps the epoch at the end of every transaction, answering the epoch of
the next one; a batch of the epoch before is then fenced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from broker.app import Broker
from broker.clock import SystemClock
from broker.config import BrokerConfig
from broker.handlers import produce
from protocol.codec import request_module
from protocol.messages import make
from protocol.record_batch import TRANSACTIONAL_MASK
from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, request
from tests.integration.txn.test_power_loss import CONFIGS, call, create
from tests.integration.txn.test_transactions import (
    consume_all,
    describe,
    last_stable_offset,
    wait_state,
)
from tests.unit.batches import make_batch


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("tv2") / "data",
                      {"transaction.state.log.num.partitions": "1"})
    b.start()
    yield b
    b.stop()


def produce12(c: RawClient, txn: str, topic: str, partition: int, pid: int, epoch: int,
              seq: int, value: bytes) -> Any:
    records = make_batch([(None, value)], timestamp_ms=SystemClock().now_ms(),
                         attributes=TRANSACTIONAL_MASK, producer_id=pid, producer_epoch=epoch,
                         base_sequence=seq)
    m = c.request_module(0, 12)
    resp = c.call(0, 12, request(0, 12, transactional_id=txn, acks=-1,
                                 timeout=timedelta(seconds=10), topic_data=(m.TopicProduceData(
                                     name=topic, partition_data=(m.PartitionProduceData(
                                         index=partition, records=records),)),)))
    return resp.responses[0].partition_responses[0]


def end5(c: RawClient, txn: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    r = c.call(26, 5, request(26, 5, transactional_id=txn, producer_id=pid,
                              producer_epoch=epoch, committed=commit))
    return int(r.error_code), int(r.producer_id), int(r.producer_epoch)


def test_transaction_version_2_is_advertised(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as c:
        r = c.call(18, 3, request(18, 3, client_software_name="t", client_software_version="1"))
        finalized = {f.name: (f.min_version_level, f.max_version_level)
                     for f in r.finalized_features}
        supported = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
        assert finalized["transaction.version"] == (2, 2)
        assert supported["transaction.version"] == (0, 2)
        ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
        assert ranges[26] == (0, 5) and ranges[0][1] >= 12


def test_produce_adds_the_partition_and_endtxn_bumps_the_epoch(broker: BrokerProcess) -> None:
    topic, txn = "tv2-flow", "tv2-flow"
    create_topic(broker.bootstrap, topic, 2)
    with RawClient(broker.bootstrap) as c:
        init = c.call(22, 5, request(22, 5, transactional_id=txn,
                                     transaction_timeout=timedelta(seconds=60), producer_id=-1,
                                     producer_epoch=-1))
        assert init.error_code == E.none
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        # No AddPartitionsToTxn: Produce v12 puts the partition in the transaction.
        got = produce12(c, txn, topic, 0, pid, epoch, 0, b"committed")
        assert got.error_code == E.none, got
        state = describe(c, txn)
        assert state.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic, [0])]
        assert last_stable_offset(broker.bootstrap, topic) == 0
        assert end5(c, txn, pid, epoch, True) == (E.none, pid, epoch + 1)
        assert wait_state(c, txn, "CompleteCommit").producer_epoch == epoch + 1
        assert last_stable_offset(broker.bootstrap, topic) == 2  # the record and its marker
        assert end5(c, txn, pid, epoch, True) == (E.none, pid, epoch + 1)  # a retry
        # The next transaction, at the new epoch; the old epoch is fenced (abortable for it).
        assert produce12(c, txn, topic, 1, pid, epoch, 5, b"zombie").error_code == \
            E.invalid_producer_epoch
        assert produce12(c, txn, topic, 1, pid, epoch + 1, 0, b"aborted").error_code == E.none
        assert end5(c, txn, pid, epoch + 1, False) == (E.none, pid, epoch + 2)
        assert wait_state(c, txn, "CompleteAbort").producer_epoch == epoch + 2
        # An abort needs no transaction in version 2.
        assert end5(c, txn, pid, epoch + 2, False) == (E.none, pid, epoch + 3)
        assert wait_state(c, txn, "CompleteAbort").producer_epoch == epoch + 3
        assert end5(c, txn, pid, epoch + 3, True)[0] == E.invalid_txn_state
    assert [v for _, _, v in consume_all(broker.bootstrap, topic, 2, "read_committed", 1)] == \
        [b"committed"]


async def test_the_next_transaction_waits_for_the_previous_ones_markers(tmp_path: Path) -> None:
    """EndTxn answered before the markers are written (transaction.end.wait.ms=0, as Kafka): a
    producer that starts its next transaction in a partition still holding the previous one
    (its marker not written yet) gets CONCURRENT_TRANSACTIONS (retriable; Produce v12 keeps it),
    never a batch counted in the previous transaction. In-process, to hold the markers."""
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), **CONFIGS,
                             "transaction.end.wait.ms": "0"}))
    await b.start()
    try:
        await create(b, "next", 1)
        tx = b.transactions
        real = tx._data_markers
        release = asyncio.Event()

        class HeldMarkers:
            async def write_marker(self, *args: Any) -> E:
                await release.wait()
                return await real.write_marker(*args)

        tx._data_markers = HeldMarkers()
        got = await tx.init_producer_id("next", 60_000, None)
        pid, epoch = got.producer_id, got.producer_epoch
        assert (await send_to(b, "next", pid, epoch, b"first")).error_code == E.none
        assert (await tx.end_txn("next", pid, epoch, True, tv2=True)).producer_epoch == epoch + 1
        early = await send_to(b, "next", pid, epoch + 1, b"second")
        assert early.error_code == E.concurrent_transactions, early
        release.set()
        for _ in range(500):
            later = await send_to(b, "next", pid, epoch + 1, b"second")
            if later.error_code != E.concurrent_transactions:
                break
            await asyncio.sleep(0.01)
        assert (later.error_code, later.base_offset) == (E.none, 2)  # after the COMMIT marker
        assert (await tx.end_txn("next", pid, epoch + 1, True, tv2=True)).error == E.none
        for _ in range(500):
            if b.txn_log.last_stable_offset("next", 0) == 4:
                break
            await asyncio.sleep(0.01)
        assert b.txn_log.last_stable_offset("next", 0) == 4
    finally:
        await b.stop()


async def send_to(b: Broker, txn: str, pid: int, epoch: int, value: bytes) -> Any:
    records = make_batch([(None, value)], timestamp_ms=b.clock.now_ms(),
                         attributes=TRANSACTIONAL_MASK, producer_id=pid, producer_epoch=epoch,
                         base_sequence=0)
    m = request_module(0, 12)
    resp = await call(b, produce, 12, request(
        0, 12, transactional_id=txn, acks=-1, timeout=timedelta(seconds=5),
        topic_data=(make(m.TopicProduceData, name=txn, partition_data=(make(
            m.PartitionProduceData, index=0, records=records),)),)))
    return resp.responses[0].partition_responses[0]
