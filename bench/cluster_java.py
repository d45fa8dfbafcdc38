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
  partitions, in log batches of 500 records on both systems (``bench.cluster.PRE_PRODUCE``),
  and runs ``bench/java/ShareConsumeBench.java`` with 6 consumers (threads of one JVM) of a new
  share group, explicit ACCEPT of every record;
- per round, between the first record and the last first delivery: records/s and the brokers'
  CPU per delivered record (``/proc/<pid>/stat`` utime + stime, summed over the brokers), the
  ShareFetch, ShareAcknowledge and inter-broker requests; the report gives the median over the
  rounds of each, and the ratio of the medians (target <= 1.2).

Two comparisons tell where a cluster's extra CPU goes: ``--brokers 1`` makes the "cluster" a
single etcd member (cluster mode without a second process), and ``--control`` adds ``split``:
as many independent single brokers, no etcd, each taking its share of the partitions, the
consumers (a JVM each) and the records, all at once (the cluster's split of the work over
processes, without the cluster; ``split_cpu_ratio``); ``split1``, the same split with all the
consumers in one JVM as the cluster's are (the cluster's own mix of processes on the machine,
``split1_cpu_ratio``); and ``alone``: one of those brokers
taking its share with the others idle (``alone_cpu_ratio``). So the cluster's ratio splits into
three factors: ``alone`` / ``single``, what a broker costs per record at a third of the load;
``split`` / ``alone``, what three such processes cost when they run at once on this machine;
``cluster`` / ``split``, what the cluster itself adds (etcd, share-state RPCs, acknowledgements).

    .venv/bin/python -m bench.cluster_java --records 300000 --rounds 3 [--control] [--work DIR]

``SHOAL_BENCH_CLUSTER_PROFILE=DIR`` profiles every broker over each measured round, as in
``bench/cluster.py`` (cProfile; its file accumulates the rounds), ``SHOAL_BENCH_PYSPY=DIR``
samples them with py-spy (``bench/java_share.py``); ``--work DIR`` keeps the brokers' data
directories and logs.

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import java_share
from bench.cluster import (
    CONSUMERS,
    INTERNAL_RF1,
    PARTITIONS,
    PRE_PRODUCE,
    PROFILE_ENV,
    TARGET_CPU_RATIO,
)
from bench.cluster_procs import WRAPPER, Etcd, Member, metadata, until
from bench.procs import ShoalBroker, free_port

BROKERS = 3


class _PlainBroker(ShoalBroker):
    """A single broker (no etcd) through the counting wrapper, with its metrics endpoint."""

    def __init__(self, work: Path, name: str) -> None:
        self.name, self.metrics_port = name, free_port()
        super().__init__(work / name, work / f"{name}.log",
                         {"metrics.listen": f"127.0.0.1:{self.metrics_port}",
                          "metrics.render.cache.ms": "0"}, wrapper=WRAPPER)

    def target(self) -> java_share.Target:
        return java_share.Target(self.name, self.bootstrap, self.pid,
                                 f"http://127.0.0.1:{self.metrics_port}/metrics")


def _round(cp: str, target: java_share.Target, records: int, rate: float = 0) -> dict[str, Any]:
    target.topic = f"jcluster-{uuid.uuid4().hex[:8]}"
    java_share.produce(target.bootstrap, target.topic, records, PARTITIONS, PRE_PRODUCE)
    out = java_share.run_shape(cp, target, CONSUMERS, "explicit", records,
                               timeout=60 + records / 2_000, partitions=PARTITIONS, rate=rate)
    if out.get("fetches"):
        out["acknowledge_requests_per_fetch"] = round(
            out.get("acknowledge_requests", 0) / out["fetches"], 3)
        # Share-state RPCs and the rest the brokers sent each other, per ShareFetch.
        out["inter_broker_requests_per_fetch"] = round(
            out.get("inter_broker_requests", 0) / out["fetches"], 3)
    return out


def _split_round(cp: str, targets: list[java_share.Target], records: int,
                 n: int | None = None, rate: float = 0) -> dict[str, Any]:
    """The control: the same workload split over independent single brokers, run at once
    (each its own topic of PARTITIONS / n partitions, CONSUMERS / n consumers in a JVM of its
    own, records / n records); the brokers' CPU per record and the rates, summed. With ``n``
    greater than the targets, only their shares run (``alone``: one share, the rest idle)."""
    n = n or len(targets)
    share = records // n
    share -= share % (PARTITIONS // n)

    def one(target: java_share.Target) -> dict[str, Any]:
        target.topic = f"jsplit-{uuid.uuid4().hex[:8]}"
        java_share.produce(target.bootstrap, target.topic, share, PARTITIONS // n, PRE_PRODUCE)
        return java_share.run_shape(cp, target, CONSUMERS // n, "explicit", share,
                                    timeout=60 + share / 2_000, partitions=PARTITIONS // n,
                                    rate=rate / n)

    with ThreadPoolExecutor(n) as pool:
        each = list(pool.map(one, targets))
    cpu = [r.get("cpu_us_per_record") for r in each]
    out: dict[str, Any] = {"complete": all(r.get("complete") for r in each),
                           "records": sum(r.get("records", 0) for r in each), "each": each}
    if out["complete"] and all(c is not None for c in cpu):
        out["cpu_us_per_record"] = sum(c for c in cpu if c is not None) / len(each)  # equal shares
        out["rate"] = sum(r["rate"] for r in each)
        out["fetches"] = sum(r["fetches"] for r in each)
        out["records_per_fetch"] = out["records"] / max(out["fetches"], 1)
        out["acknowledge_requests"] = sum(r.get("acknowledge_requests", 0) for r in each)
    return out


def _split_one_jvm_round(cp: str, targets: list[java_share.Target], records: int,
                         rate: float = 0) -> dict[str, Any]:
    """The control with the cluster's process mix: the workload split over the independent
    brokers as in ``_split_round``, but all CONSUMERS in one JVM (consumer i reads broker
    i % n), as the cluster's consumers are; the brokers' CPU summed per delivered record."""
    n = len(targets)
    share = records // n
    share -= share % (PARTITIONS // n)
    topic = f"jsplit1-{uuid.uuid4().hex[:8]}"
    for t in targets:
        java_share.produce(t.bootstrap, topic, share, PARTITIONS // n, PRE_PRODUCE)
    first = targets[0]
    assert first.metrics_url is not None
    both = java_share.Target("split1", first.bootstrap, first.pid, first.metrics_url,
                             [(t.pid, t.metrics_url or "") for t in targets[1:]])
    both.topic, both.profiled = topic, first.profiled
    return java_share.run_shape(cp, both, CONSUMERS, "explicit", share * n,
                                timeout=60 + records / 2_000, partitions=PARTITIONS // n,
                                rate=rate, bootstraps=[t.bootstrap for t in targets])


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get("complete") and r.get(key) is not None]
    return statistics.median(values) if values else None


def run(records: int, rounds: int, work: Path, log: Any = print,
        brokers: int = BROKERS, control: bool = False, rate: float = 0) -> dict[str, Any]:
    """Start both systems, alternate the rounds, return the figures. ``brokers=1`` makes the
    "cluster" one etcd member: the cluster-mode code paths without a second process.
    ``control`` adds two systems: ``split``, ``brokers`` independent single brokers that
    share the workload (``_split_round``), i.e. the cluster's split of the work over processes
    without the cluster; and ``alone``, the first of them taking its share by itself."""
    with tempfile.TemporaryDirectory() as classes:
        cp = java_share.compile_program(Path(classes))
        single = _PlainBroker(work, "single")
        split = [_PlainBroker(work, f"split-{i}") for i in range(brokers if control else 0)]
        etcd = Etcd(work / "etcd", work / "etcd.log")
        secret = secrets.token_hex(16)  # the inter-broker password, the same on every member
        members = [Member(work, i, etcd, secret, dict(INTERNAL_RF1))
                   for i in range(1, brokers + 1)]
        try:
            for b in (single, *split):
                b.start()
            etcd.start()
            for m in members:
                m.start()
            until(f"{brokers} live brokers",
                  lambda: len(metadata(members[0].bootstrap)[1]) == brokers)
            systems = {
                "single": single.target(),
                "cluster": java_share.Target(
                    "cluster", ",".join(m.bootstrap for m in members), members[0].pid,
                    f"http://127.0.0.1:{members[0].metrics_port}/metrics",
                    [(m.pid, f"http://127.0.0.1:{m.metrics_port}/metrics")
                     for m in members[1:]])}
            splits = [b.target() for b in split]
            for target in [*systems.values(), *splits]:  # cluster_broker.py: profile on signals
                target.profiled = bool(os.environ.get(PROFILE_ENV))
            names = ["single", "cluster", *(["split", "split1", "alone"] if control else [])]
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}

            def one_round(name: str, n: int) -> dict[str, Any]:
                paced = rate if n == records else 0  # warm-up rounds run unpaced
                if name == "split":
                    return _split_round(cp, splits, n, rate=paced)
                if name == "split1":
                    return _split_one_jvm_round(cp, splits, n, rate=paced)
                if name == "alone":
                    return _split_round(cp, splits[:1], n, len(splits), rate=paced)
                return _round(cp, systems[name], n, paced)

            for name in names:  # untimed: warm paths, first group
                log(f"[cluster-java] warm-up round on {name}")
                one_round(name, max(records // 10, 12_000))
            order = [n for i in range(rounds)
                     for n in (names if i % 2 == 0 else names[::-1])]
            for name in order:
                got = one_round(name, records)
                runs[name].append(got)
                log(f"[cluster-java] {name}: {got.get('rate') or 0:,.0f} rec/s, broker CPU "
                    f"{got.get('cpu_us_per_record') or 0:.2f} us/record, "
                    f"{got.get('records_per_fetch') or 0:.0f} records per ShareFetch, "
                    f"{got.get('acknowledge_requests', 0):.0f} ShareAcknowledge, "
                    f"{got.get('inter_broker_requests', 0):.0f} inter-broker requests")
        finally:
            for m in members:
                m.stop()
            etcd.stop()
            for b in (single, *split):
                b.stop()
    fig: dict[str, Any] = {"records": records, "rounds": rounds, "rate": rate or None,
                           "partitions": PARTITIONS,
                           "consumers": CONSUMERS, "brokers": brokers, "client": "java",
                           "target_cpu_ratio": TARGET_CPU_RATIO, "runs": runs}
    for name in runs:
        fig[name] = {key: _median(runs[name], key) for key in (
            "rate", "cpu_us_per_record", "records_per_fetch", "fetches_per_record",
            "acknowledge_requests_per_fetch", "inter_broker_requests_per_fetch", "empty_pct")}
    s, c = fig["single"]["cpu_us_per_record"], fig["cluster"]["cpu_us_per_record"]
    if s and c:
        fig["cpu_ratio"] = round(c / s, 3)
        fig["cpu_verdict"] = "met" if fig["cpu_ratio"] <= TARGET_CPU_RATIO else "missed"
    if fig["single"]["rate"] and fig["cluster"]["rate"]:
        fig["rate_ratio"] = round(fig["cluster"]["rate"] / fig["single"]["rate"], 3)
    if control and s and fig["split"]["cpu_us_per_record"]:
        fig["split_cpu_ratio"] = round(fig["split"]["cpu_us_per_record"] / s, 3)
    if control and s and fig["split1"]["cpu_us_per_record"]:
        fig["split1_cpu_ratio"] = round(fig["split1"]["cpu_us_per_record"] / s, 3)
    if control and s and fig["alone"]["cpu_us_per_record"]:
        fig["alone_cpu_ratio"] = round(fig["alone"]["cpu_us_per_record"] / s, 3)
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--scale", type=float, default=None,
                    help="records = 300,000 x SCALE (overrides --records)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--brokers", type=int, default=BROKERS,
                    help="cluster members (1: cluster mode on one broker, for comparison)")
    ap.add_argument("--control", action="store_true",
                    help="also run the workload split over as many independent brokers, and "
                         "one of its shares alone")
    ap.add_argument("--rate", type=float, default=0,
                    help="pace the consumers to this many records/s in all (default: as fast "
                         "as they go), to compare the systems at one offered load")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep the brokers' data and logs here (default: a temporary directory)")
    args = ap.parse_args()
    records = int(300_000 * args.scale) if args.scale else args.records
    records -= records % PARTITIONS
    started = time.monotonic()
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        fig = run(records, args.rounds, args.work, brokers=args.brokers,
                  control=args.control, rate=args.rate)
    else:
        with tempfile.TemporaryDirectory(prefix="shoal-cluster-java-") as work:
            fig = run(records, args.rounds, Path(work), brokers=args.brokers,
                      control=args.control, rate=args.rate)
    fig["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps({k: v for k, v in fig.items() if k != "runs"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(fig, indent=1))


if __name__ == "__main__":
    main()
