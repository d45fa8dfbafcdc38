"""The cluster scenario's CPU comparison (issue 23) with Apache Kafka's Java share consumer.

``bench/cluster.py`` compares three brokers with one on ``confluent_kafka.ShareConsumer``s.
librdkafka fetches from one broker at a time and acknowledges the records of the other brokers
with ShareAcknowledge requests of their own, so on a cluster it sends about twice the requests
per record that it sends to one broker, and the brokers' CPU per record follows the requests.
Kafka's own ``KafkaShareConsumer`` (the reference client) keeps a ShareFetch open to every
broker leading its partitions and piggybacks each broker's acknowledgements on the next
ShareFetch to it. This module measures the same comparison with that client:

- one broker (no etcd), and etcd with three brokers (the internal topics at one replica, as
  ``bench/cluster.py``'s RF 1 cluster), all started once and kept running;
- rounds alternate the systems (one, three, three, one, ...) after one untimed round on each.
  Each round produces N x 1 KiB records (record i to partition i % 12) into a new topic of 12
  partitions, in log batches of 500 records on both systems (``PRODUCER``), and runs ``bench/java/ShareConsumeBench.java`` with 6 consumers (threads of one
  JVM) of a new share group, explicit ACCEPT of every record;
- per round, between the first record and the last first delivery: records/s and the brokers'
  CPU per delivered record (``/proc/<pid>/stat`` utime + stime, summed over the three), the
  ShareFetch and ShareAcknowledge requests per record; the report gives the median over the
  rounds of each, and the ratio of the medians (target <= 1.2).

    .venv/bin/python -m bench.cluster_java --records 300000 --rounds 3

``SHOAL_BENCH_CLUSTER_PROFILE=DIR`` profiles every broker over each measured round, as in
``bench/cluster.py`` (a broker's file holds its last round).

``make bench-cluster`` runs it after the cluster scenario. Needs etcd (``make etcd``) and the
Java clients (``make java-clients``).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import java_share
from bench.cluster import CONSUMERS, INTERNAL_RF1, PARTITIONS, PROFILE_ENV, TARGET_CPU_RATIO
from bench.cluster_procs import WRAPPER, Etcd, Member, metadata, until
from bench.procs import ShoalBroker, free_port

BROKERS = 3


# Log batches of the same size on both systems. Left to linger alone, a producer writing to
# three brokers sends smaller batches (about 640 records of 1 KiB against 950 to one broker),
# and the share path's cost goes per batch: acquisitions, acknowledgements and state writes.
PRODUCER = {"batch.num.messages": 500, "linger.ms": 200}


def _round(cp: str, target: java_share.Target, records: int) -> dict[str, Any]:
    target.topic = f"jcluster-{uuid.uuid4().hex[:8]}"
    java_share.produce(target.bootstrap, target.topic, records, PARTITIONS, PRODUCER)
    out = java_share.run_shape(cp, target, CONSUMERS, "explicit", records,
                               timeout=60 + records / 2_000, partitions=PARTITIONS)
    if out.get("fetches"):
        out["acknowledge_requests_per_fetch"] = round(
            out.get("acknowledge_requests", 0) / out["fetches"], 3)
    return out


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get("complete") and r.get(key) is not None]
    return statistics.median(values) if values else None


def run(records: int, rounds: int, work: Path, log: Any = print) -> dict[str, Any]:
    """Start both systems, alternate the rounds, return the figures."""
    with tempfile.TemporaryDirectory() as classes:
        cp = java_share.compile_program(Path(classes))
        single_metrics = free_port()
        single = ShoalBroker(work / "single", work / "single.log",
                             {"metrics.listen": f"127.0.0.1:{single_metrics}",
                              "metrics.render.cache.ms": "0"}, wrapper=WRAPPER)
        etcd = Etcd(work / "etcd", work / "etcd.log")
        secret = secrets.token_hex(16)  # the inter-broker password, the same on every member
        members = [Member(work, i, etcd, secret, dict(INTERNAL_RF1))
                   for i in range(1, BROKERS + 1)]
        try:
            single.start()
            etcd.start()
            for m in members:
                m.start()
            until("3 live brokers", lambda: len(metadata(members[0].bootstrap)[1]) == BROKERS)
            systems = {
                "single": java_share.Target(
                    "single", single.bootstrap, single.pid,
                    f"http://127.0.0.1:{single_metrics}/metrics"),
                "cluster": java_share.Target(
                    "cluster", ",".join(m.bootstrap for m in members), members[0].pid,
                    f"http://127.0.0.1:{members[0].metrics_port}/metrics",
                    [(m.pid, f"http://127.0.0.1:{m.metrics_port}/metrics")
                     for m in members[1:]])}
            for target in systems.values():  # bench/cluster_broker.py profiles on signals
                target.profiled = bool(os.environ.get(PROFILE_ENV))
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
            for name, target in systems.items():  # untimed: warm paths, first group
                log(f"[cluster-java] warm-up round on {name}")
                _round(cp, target, max(records // 10, 12_000))
            order = [n for i in range(rounds)
                     for n in (("single", "cluster") if i % 2 == 0 else ("cluster", "single"))]
            for name in order:
                got = _round(cp, systems[name], records)
                runs[name].append(got)
                log(f"[cluster-java] {name}: {got.get('rate') or 0:,.0f} rec/s, broker CPU "
                    f"{got.get('cpu_us_per_record') or 0:.2f} us/record, "
                    f"{got.get('records_per_fetch') or 0:.0f} records per ShareFetch, "
                    f"{got.get('acknowledge_requests', 0):.0f} ShareAcknowledge")
        finally:
            for m in members:
                m.stop()
            etcd.stop()
            single.stop()
    fig: dict[str, Any] = {"records": records, "rounds": rounds, "partitions": PARTITIONS,
                           "consumers": CONSUMERS, "brokers": BROKERS, "client": "java",
                           "target_cpu_ratio": TARGET_CPU_RATIO, "runs": runs}
    for name in runs:
        fig[name] = {key: _median(runs[name], key) for key in (
            "rate", "cpu_us_per_record", "records_per_fetch", "fetches_per_record",
            "acknowledge_requests_per_fetch", "empty_pct")}
    s, c = fig["single"]["cpu_us_per_record"], fig["cluster"]["cpu_us_per_record"]
    if s and c:
        fig["cpu_ratio"] = round(c / s, 3)
        fig["cpu_verdict"] = "met" if fig["cpu_ratio"] <= TARGET_CPU_RATIO else "missed"
    if fig["single"]["rate"] and fig["cluster"]["rate"]:
        fig["rate_ratio"] = round(fig["cluster"]["rate"] / fig["single"]["rate"], 3)
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--scale", type=float, default=None,
                    help="records = 300,000 x SCALE (overrides --records)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    records = int(300_000 * args.scale) if args.scale else args.records
    records -= records % PARTITIONS
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shoal-cluster-java-") as work:
        fig = run(records, args.rounds, Path(work))
    fig["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps({k: v for k, v in fig.items() if k != "runs"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(fig, indent=1))


if __name__ == "__main__":
    main()
