"""Scenario ``x`` (issue 15): transactional produce next to idempotent produce.

One ``confluent_kafka.Producer`` (acks=all, idempotent) writes N/5 1 KiB records to a 4-partition
topic as fast as it can; then a transactional producer writes the same count in transactions of
``TXN_RECORDS`` records (begin, produce, commit: AddPartitionsToTxn per new partition, EndTxn,
then the coordinator writes one COMMIT marker per partition and completes the transaction).
Figures: records/s of each, their ratio, transactions/s, and (local Shoal) the broker's CPU per
record in each run, from its ``/proc/<pid>/stat``. Each producer runs in the bench process (the
broker is the other process being measured), after one untimed warm-up batch of ``TXN_RECORDS``
(connections, metadata, producer id).
"""

from __future__ import annotations

import time
from typing import Any

from bench import report
from bench.procs import cpu_seconds

PARTITIONS = 4
TXN_RECORDS = 1_000
RECORD_SIZE = 1024
SHARE = 5  # N / SHARE records per producer (the transactional run is the slower one)


def _producer(bootstrap: str, **conf: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "batch.num.messages": 10_000, "queue.buffering.max.messages": 200_000,
                     **conf})


def _produce(p: Any, topic: str, n: int) -> None:
    value = b"x" * RECORD_SIZE
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)


def _broker_cpu(system: Any) -> float | None:
    """The local broker's CPU seconds so far (None for a remote broker)."""
    local = getattr(system, "local", None)
    return None if local is None or not local.alive() else cpu_seconds(local.pid)


def _us_per_record(c0: float | None, c1: float | None, n: int) -> float | None:
    return None if c0 is None or c1 is None else round((c1 - c0) / n * 1e6, 2)


def scenario_x(settings: Any, system: Any) -> dict[str, Any]:
    n = max(TXN_RECORDS * 2, settings.records() // SHARE)
    n -= n % TXN_RECORDS
    fig: dict[str, Any] = {"records": n, "txn_records": TXN_RECORDS, "partitions": PARTITIONS}

    topic = settings.topic("x-idempotent")
    system.admin.create_topic(topic, PARTITIONS)
    p = _producer(system.bootstrap, **{"enable.idempotence": True})
    _produce(p, topic, TXN_RECORDS)  # warm-up (connections, metadata, producer id): not timed
    assert p.flush(60) == 0, "idempotent warm-up records left unsent"
    t0, c0 = time.perf_counter(), _broker_cpu(system)
    _produce(p, topic, n)
    assert p.flush(120) == 0, "idempotent records left unsent"
    secs = time.perf_counter() - t0
    fig["idempotent_rate"] = round(n / secs)
    fig["idempotent_broker_us_per_record"] = _us_per_record(c0, _broker_cpu(system), n)

    topic = settings.topic("x-transactional")
    system.admin.create_topic(topic, PARTITIONS)
    p = _producer(system.bootstrap, **{"transactional.id": f"bench-{settings.run_id}-x"})
    p.init_transactions(30)
    p.begin_transaction()  # warm-up transaction: not timed
    _produce(p, topic, TXN_RECORDS)
    p.commit_transaction(60)
    t0, c0 = time.perf_counter(), _broker_cpu(system)
    for _ in range(0, n, TXN_RECORDS):
        p.begin_transaction()
        _produce(p, topic, TXN_RECORDS)
        p.commit_transaction(60)
    secs = time.perf_counter() - t0
    fig["broker_us_per_record"] = _us_per_record(c0, _broker_cpu(system), n)
    fig["rate"] = round(n / secs)
    fig["txn_per_s"] = round(n / TXN_RECORDS / secs, 1)
    fig["ratio"] = round(fig["rate"] / fig["idempotent_rate"], 2)
    return fig


def brief(fig: dict[str, Any]) -> str:
    return (f"transactional {fig.get('rate') or 0:,.0f} rec/s ({fig.get('txn_per_s')} txn/s of "
            f"{fig.get('txn_records')}), idempotent {fig.get('idempotent_rate') or 0:,.0f} rec/s, "
            f"ratio {fig.get('ratio')}")


def _g(key: str) -> Any:
    return lambda d: d.get("x", {}).get(key) if isinstance(d.get("x"), dict) else None


X_TITLE = (f"(x) transactional produce, {TXN_RECORDS:,} records per transaction, "
           f"{PARTITIONS} partitions")
REPORT_ROWS = [
    report.Row("x", X_TITLE, "transactional throughput", "rec/s", _g("rate")),
    report.Row("x", X_TITLE, "idempotent throughput (same producer settings)", "rec/s",
               _g("idempotent_rate")),
    report.Row("x", X_TITLE, "transactional / idempotent", "ratio", _g("ratio"), digits=2),
    report.Row("x", X_TITLE, "transactions", "txn/s", _g("txn_per_s"), digits=1),
    report.Row("x", X_TITLE, "broker CPU per record, transactional", "us",
               _g("broker_us_per_record"), digits=2),
    report.Row("x", X_TITLE, "broker CPU per record, idempotent", "us",
               _g("idempotent_broker_us_per_record"), digits=2),
]
