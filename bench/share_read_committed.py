"""Scenario ``r`` (issue 15): share-consume transactional data with read_committed next to
read_uncommitted.

One transactional producer process (confluent_kafka, ``transactional.id``, acks=all) writes
N x 1 KiB records to a topic of 4 partitions, in transactions of 1,000 records spread over the
partitions; every 10th transaction is aborted, so each partition holds data batches, COMMIT and
ABORT markers and aborted batches. Then the same data is share-consumed by new share groups
(2 ShareConsumer processes, implicit acknowledgement, as b2), alternately with
``share.isolation.level=read_uncommitted`` (every data record, aborted ones included) and
``read_committed`` (the committed records only), in ABBA order so drift on a shared machine
falls on both alike. Figures: records/s per level (mean of its rounds, from the first record to
the last, as scenario b), log offsets gone through per second (N / that time: read_committed
reads the aborted batches too, so with 10% aborted its delivered rate is bounded by about 0.9 of
the same work), broker CPU per delivered record, and the read_committed / read_uncommitted
ratios (target: delivered records/s >= 0.9). N = 500,000 x ``--scale``.
"""

from __future__ import annotations

import statistics
import time
import traceback
from typing import Any

from bench import clients, report
from bench.procs import CTX, join_processes, start_process
from bench.scenarios import (
    Settings,
    System,
    _broker_share,
    _collect,
    _failed,
    _share_figures,
    run_share_consumers,
)

PARTITIONS = 4
CONSUMERS = 2
TXN_RECORDS = 1_000
ABORT_EVERY = 10
ORDER = ("read_uncommitted", "read_committed", "read_committed", "read_uncommitted")  # ABBA
TARGET_RATIO = 0.9


def txn_produce_worker(p: dict[str, Any], out: Any) -> None:
    """Produce ``count`` records in transactions of ``txn_records``; abort every
    ``abort_every``-th. Reports how many records were committed."""
    clients._watch_parent()
    try:
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": p["bootstrap"], "transactional.id": p["transactional_id"],
                **clients.THROUGHPUT_PRODUCER}
        conf.pop("delivery.report.only.error", None)
        prod = Producer(conf)
        prod.init_transactions(60)
        topic, count, parts = p["topic"], p["count"], p["partitions"]
        value = clients.payload(p["size"])
        start = time.monotonic()
        i = committed = txn = 0
        while i < count:
            n = min(p["txn_records"], count - i)
            prod.begin_transaction()
            for k in range(n):
                while True:
                    try:
                        prod.produce(topic, value, partition=(i + k) % parts)
                        break
                    except BufferError:
                        prod.poll(0.005)
            txn += 1
            # Every record is written before the end: abort_transaction would purge what is
            # still queued in the client, and the aborted data would never reach the log.
            if prod.flush(60):
                raise RuntimeError("records still unacknowledged after flush")
            if txn % p["abort_every"] == 0:
                prod.abort_transaction(60)
            else:
                prod.commit_transaction(60)
                committed += n
            i += n
        end = time.monotonic()
        out.put({"ok": True, "records": count, "committed": committed, "transactions": txn,
                 "t_start": start, "t_end": end})
    except Exception:  # noqa: BLE001 - reported to the parent
        out.put({"ok": False, "error": traceback.format_exc(limit=5)})


def scenario_r(settings: Settings, system: System) -> dict[str, Any]:
    n = settings.records()
    topic = settings.topic("txn")
    system.admin.create_topic(topic, PARTITIONS)
    out = CTX.Queue()
    timeout = 120 + n / 2_000
    proc = start_process(txn_produce_worker, {
        "bootstrap": system.bootstrap, "topic": topic, "count": n, "partitions": PARTITIONS,
        "size": 1024, "txn_records": TXN_RECORDS, "abort_every": ABORT_EVERY,
        "transactional_id": f"bench-{settings.run_id}-txn"}, out, name="txn-producer")
    try:
        results = _collect(out, 1, timeout)
    finally:
        join_processes([proc], 10)
    err = _failed(results, 1, "transactional producer")
    if err:
        raise RuntimeError(err)
    prod = results[0]
    committed = prod["committed"]
    fig: dict[str, Any] = {
        "records": n, "committed": committed, "partitions": PARTITIONS, "consumers": CONSUMERS,
        "txn_records": TXN_RECORDS, "abort_every": ABORT_EVERY, "topic": topic,
        "produce_rate": round(n / (prod["t_end"] - prod["t_start"]), 1), "rounds": []}
    for i, level in enumerate(ORDER):
        group = f"bench-{settings.run_id}-r{i}-{level}"
        target = committed if level == "read_committed" else n
        system.admin.set_group_configs(group, {"share.isolation.level": level})
        res, _, t_go = run_share_consumers(system, topic, group, CONSUMERS, "implicit", target,
                                           30 + target / 5_000)
        err = _failed(res, CONSUMERS, f"share consumer ({level})")
        one = _share_figures(res, target, t_go)
        one["level"] = level
        if one.get("seconds"):
            # Offsets of the log gone through per second: the same work for both levels (the
            # broker reads the aborted batches too), where ``rate`` counts delivered records.
            one["log_records_per_s"] = round(n / one["seconds"], 1)
        broker = _broker_share(system, f"r {level} {i}", one.pop("t_first", None),
                               one.pop("t_last", None))
        if broker is not None:
            one["broker"] = broker
            if broker.get("broker_cpu_s") and one["records"]:
                one["broker_cpu_us_per_record"] = round(
                    1e6 * broker["broker_cpu_s"] / one["records"], 2)
        if err:
            one["error"] = err
        elif not one["complete"]:
            one["error"] = f"{one['records']} of {target} records"
        settings.log(f"  r[{i}] {level}: {one.get('rate') or 0:,.0f} rec/s "
                     f"({one['records']} records)")
        fig["rounds"].append(one)
    for level in ("read_uncommitted", "read_committed"):
        rounds = [r for r in fig["rounds"] if r["level"] == level]
        rates = [r["rate"] for r in rounds if r.get("rate")]
        cpu = [r["broker_cpu_us_per_record"] for r in rounds if r.get("broker_cpu_us_per_record")]
        logs = [r["log_records_per_s"] for r in rounds if r.get("log_records_per_s")]
        fig[level] = {"rate": round(statistics.mean(rates), 1) if rates else None,
                      "log_records_per_s": round(statistics.mean(logs), 1) if logs else None,
                      "broker_cpu_us_per_record": round(statistics.mean(cpu), 2) if cpu else None,
                      "complete": all(r["complete"] for r in rounds)}
    ru, rc = fig["read_uncommitted"], fig["read_committed"]
    if ru["rate"] and rc["rate"]:
        fig["rate_ratio"] = round(rc["rate"] / ru["rate"], 3)
        fig["rate"] = rc["rate"]
    if ru["log_records_per_s"] and rc["log_records_per_s"]:
        fig["log_rate_ratio"] = round(rc["log_records_per_s"] / ru["log_records_per_s"], 3)
    if ru["broker_cpu_us_per_record"] and rc["broker_cpu_us_per_record"]:
        fig["cpu_ratio"] = round(rc["broker_cpu_us_per_record"] / ru["broker_cpu_us_per_record"],
                                 3)
    errors = [r["error"] for r in fig["rounds"] if r.get("error")]
    if errors:
        fig["error"] = errors[0]
    return fig


def brief(fig: dict[str, Any]) -> str:
    ru = fig.get("read_uncommitted", {}).get("rate") or 0
    rc = fig.get("read_committed", {}).get("rate") or 0
    return (f"read_committed {rc:,.0f} rec/s, read_uncommitted {ru:,.0f} rec/s, ratio "
            f"{fig.get('rate_ratio')} (per log offset x{fig.get('log_rate_ratio')}, broker CPU "
            f"per delivered record x{fig.get('cpu_ratio')}; "
            f"{fig.get('committed')} of {fig.get('records')} records committed)")


R_TITLE = (f"(r) share-consume transactional data, {PARTITIONS} partitions x {CONSUMERS} consumers "
           "(implicit), read_committed vs read_uncommitted")


def _get(*path: str) -> Any:
    def get(d: dict[str, Any]) -> Any:
        for k in path:
            if not isinstance(d, dict) or k not in d:
                return None
            d = d[k]
        return d
    return get


REPORT_ROWS = [
    report.Row("r", R_TITLE, "read_uncommitted (every data record)", "rec/s",
               _get("r", "read_uncommitted", "rate")),
    report.Row("r", R_TITLE, "read_committed (committed records)", "rec/s",
               _get("r", "read_committed", "rate")),
    report.Row("r", R_TITLE, "read_committed / read_uncommitted throughput", "ratio",
               _get("r", "rate_ratio"), (">=", TARGET_RATIO), digits=3),
    report.Row("r", R_TITLE, "read_committed / read_uncommitted log offsets gone through per second",
               "ratio", _get("r", "log_rate_ratio"), digits=3),
    report.Row("r", R_TITLE, "read_committed / read_uncommitted broker CPU per record", "ratio",
               _get("r", "cpu_ratio"), digits=3),
]
