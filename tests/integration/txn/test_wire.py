"""Transactions on the wire against a real broker (issue 15, the log side): Produce of
transactional and control batches, Fetch and ListOffsets with both isolation levels.

Producer ids come from the Kafka flow (InitProducerId with a transactional id,
AddPartitionsToTxn); the markers of the restart test are written into the data directory by
``TransactionalLog`` while the broker is down, then read by the real broker.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from broker.clock import SystemClock
from broker.config import BrokerConfig
from broker.log.append import append_partition
from broker.log.manager import LogManager
from broker.log.producer_state_manager import ProducerStateManager
from broker.log.topics import TopicRegistry
from broker.log.txn_log import TransactionalLog
from protocol import codec
from protocol.record_batch import TRANSACTIONAL_MASK, control_batch, iter_batches
from tests.integration.helpers import create_topic
from tests.integration.produce_helpers import init_producer_id
from tests.integration.rawclient import RawClient, request
from tests.unit.batches import make_batch

FETCH_V = 12
LIST_OFFSETS_V = 7
PRODUCE_V = 9


def _produce(c: RawClient, topic: str, records: bytes, txn_id: str | None = None) -> Any:
    m = c.request_module(0, PRODUCE_V)
    body = request(0, PRODUCE_V, transactional_id=txn_id, acks=-1,
                   timeout=timedelta(seconds=10), topic_data=(m.TopicProduceData(
                       name=topic, partition_data=(m.PartitionProduceData(index=0,
                                                                          records=records),)),))
    return c.call(0, PRODUCE_V, body).responses[0].partition_responses[0]


def _latest(c: RawClient, topic: str, isolation: int, timestamp: int = -1) -> int:
    m = c.request_module(2, LIST_OFFSETS_V)
    resp = c.call(2, LIST_OFFSETS_V, request(2, LIST_OFFSETS_V, replica_id=-1,
                                             isolation_level=isolation, topics=(
        m.ListOffsetsTopic(name=topic, partitions=(
            m.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                   timestamp=timestamp),)),)))
    p = resp.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none, p
    return int(p.offset)


def _fetch(c: RawClient, topic: str, offset: int, isolation: int) -> Any:
    m = codec.request_module(1, FETCH_V)
    body = m.FetchRequest(
        replica_id=-1, max_wait=timedelta(milliseconds=0), min_bytes=0, max_bytes=1 << 20,
        isolation_level=isolation, session_id=0, session_epoch=-1,
        topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")
    return c.call(1, FETCH_V, body).responses[0].partitions[0]


def _transactional_producer(c: RawClient, txn_id: str, topic: str) -> tuple[int, int]:
    """A producer id whose transactional batches ``topic``-0 takes, by the Kafka flow:
    InitProducerId with the transactional id, then AddPartitionsToTxn."""
    deadline = time.monotonic() + 20
    while True:
        r = c.call(22, 4, request(22, 4, transactional_id=txn_id,
                                  transaction_timeout=timedelta(seconds=60), producer_id=-1,
                                  producer_epoch=-1))
        if r.error_code == ErrorCode.none or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # coordinator loading
    assert r.error_code == ErrorCode.none, r
    pid, epoch = int(r.producer_id), int(r.producer_epoch)
    m = c.request_module(24, 3)
    while True:
        a = c.call(24, 3, request(24, 3, v3_and_below_transactional_id=txn_id,
                                  v3_and_below_producer_id=pid,
                                  v3_and_below_producer_epoch=epoch,
                                  v3_and_below_topics=(m.AddPartitionsToTxnTopic(
                                      name=topic, partitions=(0,)),)))
        code = a.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        if code == ErrorCode.none or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # CONCURRENT_TRANSACTIONS and the like
    assert code == ErrorCode.none, a
    return pid, epoch


def _bases(records: bytes | None) -> list[tuple[int, bool]]:
    return [(h.base_offset, h.is_control) for _, h in iter_batches(records or b"")]


def _batch(pid: int, epoch: int, seq: int, n: int, txn: bool, ts: int | None = None) -> bytes:
    ts = SystemClock().now_ms() if ts is None else ts
    return make_batch([(b"k", b"v%d" % i) for i in range(n)], timestamp_ms=ts,
                      attributes=TRANSACTIONAL_MASK if txn else 0, producer_id=pid,
                      producer_epoch=epoch, base_sequence=seq)


def test_produce_refuses_client_control_batches_and_fetch_stops_at_the_lso(broker,
                                                                           unique) -> None:
    topic = f"txw-{unique}"
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        pid, epoch = _transactional_producer(c, f"tx-{unique}", topic)
        other, other_epoch = init_producer_id(c)
        # A marker from a client: INVALID_RECORD, nothing appended.
        txn_id = f"tx-{unique}"
        r = _produce(c, topic, control_batch(pid, epoch, 0, True, SystemClock().now_ms()), txn_id)
        assert r.error_code == ErrorCode.invalid_record, r
        # A transactional batch needs the request's transactional id.
        r = _produce(c, topic, _batch(pid, epoch, 0, 2, txn=True))
        assert r.error_code == ErrorCode.transactional_id_authorization_failed, r
        assert _latest(c, topic, 0) == 0
        t0 = SystemClock().now_ms() - 60_000
        assert _produce(c, topic, _batch(other, other_epoch, 0, 2, False, t0)).base_offset == 0
        r = _produce(c, topic, _batch(pid, epoch, 0, 3, True, t0 + 1000), txn_id)  # txn: 2-4
        assert (r.error_code, r.base_offset) == (ErrorCode.none, 2), r
        r = _produce(c, topic, _batch(other, other_epoch, 2, 1, False, t0 + 2000))
        assert r.base_offset == 5
        # A retried transactional batch is a duplicate (idempotence rules still apply).
        r = _produce(c, topic, _batch(pid, epoch, 0, 3, True, t0 + 1000), txn_id)
        assert (r.error_code, r.base_offset) == (ErrorCode.none, 2), r
        # A plain batch of the producer inside its transaction: INVALID_TXN_STATE.
        r = _produce(c, topic, _batch(pid, epoch, 3, 1, txn=False))
        assert r.error_code == ErrorCode.invalid_txn_state, r

        assert _latest(c, topic, isolation=0) == 6
        assert _latest(c, topic, isolation=1) == 2  # the open transaction's first offset
        # Timestamp lookups answer only below the LSO under read_committed (Kafka): the open
        # transaction's records and what follows them are not answered.
        assert _latest(c, topic, isolation=1, timestamp=0) == 0
        assert _latest(c, topic, isolation=0, timestamp=t0 + 500) == 2
        assert _latest(c, topic, isolation=1, timestamp=t0 + 500) == -1
        assert _latest(c, topic, isolation=0, timestamp=-3) == 5  # max timestamp
        assert _latest(c, topic, isolation=1, timestamp=-3) == -1

        committed = _fetch(c, topic, 0, isolation=1)
        assert committed.error_code == ErrorCode.none
        assert (committed.high_watermark, committed.last_stable_offset) == (6, 2)
        assert _bases(committed.records) == [(0, False)]
        assert tuple(committed.aborted_transactions or ()) == ()
        assert _bases(_fetch(c, topic, 2, isolation=1).records) == []
        uncommitted = _fetch(c, topic, 0, isolation=0)
        assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (6, 6)
        assert _bases(uncommitted.records) == [(0, False), (2, False), (5, False)]


def test_read_committed_fetch_lists_aborted_transactions_after_a_restart(fresh_broker,
                                                                          unique) -> None:
    topic = f"txr-{unique}"
    fresh_broker.start()
    create_topic(fresh_broker.bootstrap, topic)
    fresh_broker.stop()
    # Write transactions and markers into the data directory as the broker would.
    data: Path = fresh_broker.data_dir
    meta = TopicRegistry(data).get(topic)
    assert meta is not None
    config = BrokerConfig({})
    clock = SystemClock()
    logs = LogManager(data, config, clock)
    logs.open_topic(meta)
    producers = ProducerStateManager(logs, config, clock)
    fake = SimpleNamespace(logs=logs, producers=producers, config=config, clock=clock,
                           topics=SimpleNamespace(get=lambda n: meta if n == topic else None),
                           producer_states=producers.states,
                           # Written offline: no coordinator, every partition counts as added.
                           transactions=SimpleNamespace(
                               verify_partition=lambda *_: ErrorCode.none),
                           metrics=SimpleNamespace(
                               produce_bytes=SimpleNamespace(inc=lambda *a: None),
                               produce_records=SimpleNamespace(inc=lambda *a: None)))
    txn = TransactionalLog(fake)  # type: ignore[arg-type]

    def send(pid: int, seq: int, n: int, transactional: bool = True) -> int:
        out = append_partition(fake, topic, {}, 0, _batch(pid, 0, seq, n, transactional),
                               transactional_id="tx" if transactional else None)
        assert out.error == ErrorCode.none, out
        return out.base_offset

    async def mark(pid: int, commit: bool) -> None:
        assert await txn.write_marker(topic, 0, pid, 0, 0, commit) == ErrorCode.none

    assert send(7001, 0, 2) == 0  # aborted: 0-1, ABORT at 4
    assert send(7002, 0, 2) == 2  # committed: 2-3, COMMIT at 5
    asyncio.run(mark(7001, commit=False))
    asyncio.run(mark(7002, commit=True))
    assert send(7003, 0, 1, transactional=False) == 6
    assert send(7001, 2, 2) == 7  # ongoing: 7-8
    producers.close()
    logs.close()

    fresh_broker.start()
    with RawClient(fresh_broker.bootstrap) as c:
        assert _latest(c, topic, isolation=0) == 9
        assert _latest(c, topic, isolation=1) == 7
        got = _fetch(c, topic, 0, isolation=1)
        assert (got.high_watermark, got.last_stable_offset) == (9, 7)
        assert _bases(got.records) == [(0, False), (2, False), (4, True), (5, True), (6, False)]
        assert [(a.producer_id, a.first_offset) for a in got.aborted_transactions] == [(7001, 0)]
        # From past the aborted transaction, it is not listed.
        later = _fetch(c, topic, 5, isolation=1)
        assert _bases(later.records) == [(5, True), (6, False)]
        assert tuple(later.aborted_transactions) == ()
        # read_uncommitted sees everything, no aborted list.
        assert len(_bases(_fetch(c, topic, 0, isolation=0).records)) == 6
    # A kill -9 and a restart: same answers from the replay.
    fresh_broker.kill()
    fresh_broker.start()
    with RawClient(fresh_broker.bootstrap) as c:
        assert _latest(c, topic, isolation=1) == 7
        got = _fetch(c, topic, 0, isolation=1)
        assert [(a.producer_id, a.first_offset) for a in got.aborted_transactions] == [(7001, 0)]


def test_a_commit_marker_wakes_a_parked_read_committed_fetch(broker, unique) -> None:
    topic = f"txwake-{unique}"
    create_topic(broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"w-{unique}",
                  "linger.ms": 0})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"wait for me", partition=0)
    p.flush(10)
    m = codec.request_module(1, FETCH_V)
    body = m.FetchRequest(
        replica_id=-1, max_wait=timedelta(seconds=8), min_bytes=1, max_bytes=1 << 20,
        isolation_level=1, session_id=0, session_epoch=-1,
        topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")
    with RawClient(broker.bootstrap, timeout=15) as c:
        c.send(1, FETCH_V, body)  # parked: the only record is past the LSO
        time.sleep(0.5)
        started = time.monotonic()
        p.commit_transaction(10)
        _, resp = c.receive(1, FETCH_V)
        waited = time.monotonic() - started
    part = resp.responses[0].partitions[0]
    assert waited < 4, waited  # woken by the marker, not by max_wait
    assert _bases(part.records) == [(0, False), (1, True)]
    assert part.last_stable_offset == part.high_watermark == 2
