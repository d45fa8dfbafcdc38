"""Unmodified Kafka clients produce to and read from the broker (issue 2, must-show 1 and 2).

Each record carries a distinct key, value, header and timestamp, and every one is compared after
reading back, so a byte lost or reordered anywhere in the path fails the test.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from tests.integration.helpers import create_topic

N = 100_000
BASE_TS = 1_700_000_000_000


def expected(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]], int]:
    return (f"k{i}".encode(), f"value-{i}-".encode() * 3, [("h", f"{i}".encode())], BASE_TS + i)


def produce_confluent(bootstrap: str, topic: str, partitions: int, compression: str) -> dict[int, list[int]]:
    """Produce N records round-robin over partitions; returns partition -> record ids in offset order."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "compression.type": compression, "linger.ms": 20, "batch.num.messages": 5000})
    acked: dict[int, dict[int, int]] = {i: {} for i in range(partitions)}
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
            return
        acked[msg.partition()][msg.offset()] = int(msg.key()[1:])  # type: ignore[attr-defined]

    for i in range(N):
        k, v, h, ts = expected(i)
        while True:
            try:
                p.produce(topic, v, k, partition=i % partitions, headers=h, timestamp=ts,
                          on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:3]
    return {part: [ids[o] for o in sorted(ids)] for part, ids in acked.items()}


def consume_confluent(bootstrap: str, topic: str, partitions: int, count: int) -> dict[int, list]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "readback", "enable.auto.commit": False,
                  "fetch.max.bytes": 5_000_000})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: dict[int, list] = {p: [] for p in range(partitions)}
    total = 0
    deadline = time.monotonic() + 120
    try:
        while total < count and time.monotonic() < deadline:
            for msg in c.consume(10_000, timeout=1.0):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    continue
                got[msg.partition()].append(
                    (msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]))
                total += 1
    finally:
        c.close()
    assert total == count
    return got


def check_readback(acked: dict[int, list[int]], got: dict[int, list]) -> None:
    for part, ids in acked.items():
        records = got[part]
        assert [r[0] for r in records] == list(range(len(ids))), "offsets must be dense from 0"
        for (offset, key, value, headers, ts), i in zip(records, ids):
            k, v, h, t = expected(i)
            assert (key, value, headers, ts) == (k, v, h, t), f"record at {part}/{offset}"


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_producer_and_consumer_round_trip(broker, unique, compression: str) -> None:
    topic = f"rt-{compression}-{unique}"
    create_topic(broker.bootstrap, topic, 2)
    acked = produce_confluent(broker.bootstrap, topic, 2, compression)
    assert sum(len(v) for v in acked.values()) == N
    check_readback(acked, consume_confluent(broker.bootstrap, topic, 2, N))


async def _aiokafka_read(bootstrap: str, topic: str, partitions: int, count: int) -> dict[int, list]:
    from aiokafka import AIOKafkaConsumer, TopicPartition as ATP

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                         auto_offset_reset="earliest", max_partition_fetch_bytes=2_000_000)
    await c.start()
    try:
        c.assign([ATP(topic, p) for p in range(partitions)])
        got: dict[int, list] = {p: [] for p in range(partitions)}
        total = 0
        deadline = time.monotonic() + 120
        while total < count and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=1000, max_records=20_000)
            for tp, msgs in batch.items():
                for msg in msgs:
                    got[tp.partition].append((msg.offset, msg.key, msg.value,
                                              [(k, v) for k, v in msg.headers], msg.timestamp))
                    total += 1
        assert total == count
        return got
    finally:
        await c.stop()


async def test_aiokafka_producer_and_both_consumers_round_trip(broker, unique) -> None:
    from aiokafka import AIOKafkaProducer

    topic = f"aio-{unique}"
    create_topic(broker.bootstrap, topic, 2)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                                enable_idempotence=True, linger_ms=20, compression_type="gzip",
                                max_batch_size=256 * 1024)
    await producer.start()
    acked: dict[int, dict[int, int]] = {0: {}, 1: {}}
    try:
        futures = []
        for i in range(N):
            k, v, h, ts = expected(i)
            futures.append((i, await producer.send(topic, v, key=k, partition=i % 2, headers=h,
                                                   timestamp_ms=ts)))
        for i, fut in futures:
            md = await asyncio.wait_for(fut, 60)
            acked[md.partition][md.offset] = i
    finally:
        await producer.stop()
    ids = {p: [d[o] for o in sorted(d)] for p, d in acked.items()}
    check_readback(ids, await _aiokafka_read(broker.bootstrap, topic, 2, N))
    check_readback(ids, await asyncio.to_thread(consume_confluent, broker.bootstrap, topic, 2, N))


async def test_aiokafka_consumer_reads_confluent_zstd(broker, unique) -> None:
    topic = f"zstd-aio-{unique}"
    await asyncio.to_thread(create_topic, broker.bootstrap, topic, 1)
    acked = await asyncio.to_thread(produce_confluent, broker.bootstrap, topic, 1, "zstd")
    check_readback(acked, await _aiokafka_read(broker.bootstrap, topic, 1, N))


KCAT = shutil.which("kcat")


@pytest.mark.skipif(KCAT is None, reason="kcat is installed by `make test`; run it that way")
def test_kcat_metadata_produce_consume(broker, unique) -> None:
    topic = f"kcat-{unique}"
    create_topic(broker.bootstrap, topic, 1)
    lines = "".join(f"key{i}:line {i}\n" for i in range(500))
    subprocess.run([KCAT, "-b", broker.bootstrap, "-P", "-t", topic, "-K", ":"], input=lines.encode(),
                   check=True, timeout=30)
    meta = subprocess.run([KCAT, "-b", broker.bootstrap, "-L"], capture_output=True, check=True,
                          timeout=30).stdout.decode()
    assert f'topic "{topic}" with 1 partitions' in meta
    assert "1 brokers" in meta
    out = subprocess.run([KCAT, "-b", broker.bootstrap, "-C", "-t", topic, "-e", "-f", "%k=%s@%o\n"],
                         capture_output=True, check=True, timeout=30).stdout.decode()
    assert out.splitlines() == [f"key{i}=line {i}@{i}" for i in range(500)]
