"""Produce answers the transaction coordinator's verification errors as Kafka's ReplicaManager
does (issue 25, section 4), against an in-process broker and its real coordinator.

A transactional batch that would begin the producer's transaction in a partition is verified with
the coordinator. A Java producer treats PRODUCER_FENCED in a Produce answer as fatal, where Kafka
answers INVALID_PRODUCER_EPOCH (abortable); producers below Produce v11 do not know
TRANSACTION_ABORTABLE (INVALID_TXN_STATE instead); and retriable coordinator errors become
NOT_ENOUGH_REPLICAS, which every producer retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from broker.app import Broker
from broker.config import BrokerConfig
from broker.log.append import verification_error
from broker.handlers import produce
from protocol.codec import request_module
from protocol.messages import make
from protocol.record_batch import TRANSACTIONAL_MASK

from tests.integration.rawclient import request
from tests.integration.txn.test_power_loss import CONFIGS, call, create
from tests.unit.batches import make_batch

TOPIC = "verify"


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), **CONFIGS,
                             "transaction.end.wait.ms": "0"}))
    await b.start()
    await create(b, TOPIC, 3)
    try:
        yield b
    finally:
        await b.stop()


async def send(b: Broker, txn: str, pid: int, epoch: int, partition: int, version: int,
               seq: int = 0) -> Any:
    records = make_batch([(b"k", b"v")], timestamp_ms=b.clock.now_ms(),
                         attributes=TRANSACTIONAL_MASK, producer_id=pid, producer_epoch=epoch,
                         base_sequence=seq)
    m = request_module(0, version)
    resp = await call(b, produce, version, request(
        0, version, transactional_id=txn, acks=-1, timeout=timedelta(seconds=5),
        topic_data=(make(m.TopicProduceData, name=TOPIC, partition_data=(make(
            m.PartitionProduceData, index=partition, records=records),)),)))
    return resp.responses[0].partition_responses[0]


async def begin(b: Broker, txn: str, *partitions: int) -> tuple[int, int]:
    got = await b.transactions.init_producer_id(txn, 60_000, None)
    assert got.error == E.none
    if partitions:
        assert await b.transactions.add_partitions(
            txn, got.producer_id, got.producer_epoch,
            [(TOPIC, p) for p in partitions]) == E.none
    return got.producer_id, got.producer_epoch


async def test_a_fenced_epoch_is_invalid_producer_epoch(broker: Broker) -> None:
    pid, old = await begin(broker, "fenced")
    _, new = await begin(broker, "fenced")  # a second instance fences the first
    assert new == old + 1
    for version in (9, 11, 12):
        got = await send(broker, "fenced", pid, old, 0, version)
        assert got.error_code == E.invalid_producer_epoch, (version, got)
        assert "fenced" in got.error_message


async def test_a_partition_not_added_is_abortable_from_v11_and_invalid_txn_state_before(
        broker: Broker) -> None:
    pid, epoch = await begin(broker, "not-added", 0)
    assert (await send(broker, "not-added", pid, epoch, 0, 9)).error_code == E.none
    older = await send(broker, "not-added", pid, epoch, 1, 9)
    assert older.error_code == E.invalid_txn_state
    assert "Partition was not added to the transaction" in older.error_message
    assert (await send(broker, "not-added", pid, epoch, 1, 11)).error_code == \
        E.transaction_abortable


async def test_retriable_coordinator_errors_are_not_enough_replicas(broker: Broker) -> None:
    tx = broker.transactions
    real = tx._data_markers
    release = asyncio.Event()

    class HeldMarkers:
        """The real marker writer, held until ``release`` (the markers take their time)."""

        async def write_marker(self, *args: Any) -> E:
            await release.wait()
            return await real.write_marker(*args)

    tx._data_markers = HeldMarkers()
    pid, epoch = await begin(broker, "concurrent", 0, 2)
    assert (await send(broker, "concurrent", pid, epoch, 0, 11)).error_code == E.none
    assert (await tx.end_txn("concurrent", pid, epoch, True)).error == E.none
    # The commit's markers are being written: the coordinator answers CONCURRENT_TRANSACTIONS.
    for version in (9, 11):
        got = await send(broker, "concurrent", pid, epoch, 2, version)
        assert got.error_code == E.not_enough_replicas, (version, got)
        assert "CONCURRENT_TRANSACTIONS" in got.error_message
    release.set()
    tx._data_markers = real

    pid, epoch = await begin(broker, "moved", 1)
    await tx.runtime.unload(tx.partition_for("moved"))  # no longer this broker's
    for version in (9, 11, 12):
        got = await send(broker, "moved", pid, epoch, 1, version)
        assert got.error_code == E.not_enough_replicas, (version, got)
        assert "NOT_COORDINATOR" in got.error_message


@pytest.mark.parametrize(("error", "version", "answer"), [
    (E.producer_fenced, 3, E.invalid_producer_epoch),
    (E.transaction_abortable, 10, E.invalid_txn_state),
    (E.transaction_abortable, 11, E.transaction_abortable),
    (E.coordinator_load_in_progress, 12, E.not_enough_replicas),
    (E.coordinator_not_available, 11, E.not_enough_replicas),
    (E.concurrent_transactions, 11, E.not_enough_replicas),
    (E.concurrent_transactions, 12, E.concurrent_transactions),
    (E.invalid_producer_id_mapping, 9, E.invalid_producer_id_mapping),
])
def test_the_translation_table(error: E, version: int, answer: E) -> None:
    assert verification_error(error, version)[0] == answer
