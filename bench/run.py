"""Shoal's benchmark: ``make bench`` / ``python -m bench.run``.

Starts a fresh Shoal broker (own data dir and port), runs the scenarios against it with real
clients in separate processes (confluent_kafka Producer and ShareConsumer), stops it, and writes
``bench/results/<timestamp>/``: ``results.json`` (every figure), ``summary.md`` (the table, with
the targets met or missed) and PNG plots. The summary table is printed at the end.

Scenarios (1 KiB records, N = 500,000 x ``--scale``):

- ``a``  produce N records, acks=all (4 partitions, one producer process)
- ``b1`` share-consume N pre-produced records, 1 partition x 2 consumers, explicit acks
- ``b2`` ... 4 partitions x 1 consumer, implicit acks
- ``b3`` ... 1 partition x 8 consumers, explicit acks (members > partitions)
- ``b4`` ... 16 partitions x 4 consumers, implicit acks
- ``c``  end-to-end latency at 5,000 records/s with 2 share consumers (30 s x scale, at least 3 s)
- ``d``  footprint: cold start to first Metadata, idle RSS, RSS under (b) (Shoal only)
- ``e``  restart with 10,000 share-partitions of state (x scale; ``bench/share_state_restart.py``)
- ``f``  issue 7: this project's asyncio ``client.ShareConsumer`` next to ``confluent_kafka.ShareConsumer`` (1 partition, implicit)
- ``z``  issue 13: b1 against a broker with StandardAuthorizer and 1,000 ACLs vs one without,
  alternating rounds (``bench/authz_overhead.py``; budget: <= 5 % more broker CPU per record)
- ``g``  issue 8: records/s through a trivial PySpark streaming query on the ``shoal-share``
  source (``pipeline/``; 600,000 x scale records, at least 20,000, 32 partitions;
  ``bench/spark_source.py``). Skipped where pyspark or Java is missing (``make bench-spark``)
- ``h``  issue 12: hostile load on a broker of its own (wide ShareFetch and Fetch, forged batch,
  connection flood, slow reader, half-sent frames, 2,000 share sessions) while a control
  producer/consumer pair measures round trips (``bench/hostile.py``; ``make bench-hostile``)
- ``t``  issue 13: produce and share-consume over an SSL listener vs a PLAINTEXT one of the same
  broker (its own), with the SSL/plaintext ratio (``bench/tls.py``)
- ``r``  issue 15: share-consume the same transactional data (10% of the transactions aborted)
  with ``share.isolation.level=read_committed`` and ``read_uncommitted``, ABBA rounds, with the
  ratio (``bench/share_read_committed.py``; target >= 0.9)
- ``k``  issue 14: consumer-group consumption, 4 partitions x 2 ``confluent_kafka.Consumer``
  processes, ``group.protocol=classic`` then ``consumer`` (reported as not supported by a broker
  without ConsumerGroupHeartbeat): records/s and subscribe to first record
  (``bench/consumer_groups.py``; ``make bench-groups``)
- ``x``  issue 15: transactional produce (transactions of 1,000 records, 4 partitions) vs an
  idempotent producer, N/5 records each (``bench/transactions.py``)
- ``cluster``  issue 23: etcd + 3 brokers vs one broker, 12 partitions x 6 share consumers
  (explicit): records/s, broker CPU per record (target: <= 1.2x one broker), inter-broker
  share-state RPCs per acknowledgement batch, kill -9 recovery and controller failover times
  (``bench/cluster.py``; ``make bench-cluster``). Skipped where etcd is missing (``make etcd``)
- ``replication``  issue 24: etcd + 3 brokers, produce (acks=all) and share-consume at RF 3 vs
  RF 1 (targets >= 0.5x and >= 0.8x), kill -9 failover time (<= 10 s) and a follower's catch-up
  (``bench/replication.py``; ``make bench-cluster`` runs it after ``cluster``)

``--bootstrap [NAME=]HOST:PORT`` (repeatable) also runs a, b, c, f, g and k against an already
running Kafka-protocol broker (Apache Kafka with share groups enabled, for one), so the report
shows them side by side; ``--no-local`` skips the local Shoal broker. ``--profile`` records a
profile of the broker during (b) (py-spy when installed, else cProfile) and writes its top
functions.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    authz_overhead,
    cluster,
    consumer_groups,
    key_ordering,
    replication,
    report,
    scenarios,
    share_read_committed,
    tls,
    transactions,
)
from bench.clients import Admin
from bench.procs import (
    ROOT,
    Monitor,
    ShoalBroker,
    install_signal_cleanup,
    metadata_ok,
    remove_tree,
    split_hostport,
    stop_everything,
)
from bench.profiling import Profiler, choose
from bench.scenarios import SHARE_VARIANTS, Settings, ShareVariant, System, parse_shape

report.ROWS += (authz_overhead.REPORT_ROWS + cluster.REPORT_ROWS + consumer_groups.REPORT_ROWS
                + replication.REPORT_ROWS
                + key_ordering.REPORT_ROWS + share_read_committed.REPORT_ROWS
                + transactions.REPORT_ROWS)

ALL = ["a", "b1", "b2", "b3", "b4", "c", "d", "e", "f", "g", "k", "o", "r", "x", "h", "t", "z",
       "cluster", "replication"]
CLIENT_SIDE = {"a", "b1", "b2", "b3", "b4", "c", "f", "g", "k", "o", "r", "x"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.run",
                                 description="Shoal's benchmark (make bench)")
    ap.add_argument("--bootstrap", action="append", default=[], metavar="[NAME=]HOST:PORT",
                    help="also run the client-side scenarios (a, b, c, f, g) against this running "
                    "broker (repeatable)")
    ap.add_argument("--monitor", action="append", default=[], metavar="NAME=PID",
                    help="sample the CPU of the --bootstrap broker NAME's process PID (e.g. "
                    "Apache Kafka's, from /tmp/peer-kafka/peer.pid) for its broker CPU figures")
    ap.add_argument("--no-local", action="store_true",
                    help="do not start a Shoal broker (only the --bootstrap brokers; no d, e)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply record counts and durations (e.g. 0.02 for a quick run)")
    ap.add_argument("--only", default="", help="comma-separated scenarios: "
                    + ",".join(ALL) + " (b = b1..b4); default all")
    ap.add_argument("--profile", action="store_true",
                    help="profile the Shoal broker during scenario (b)")
    ap.add_argument("--profiler", choices=("cprofile", "py-spy"), default="cprofile",
                    help="cprofile (stdlib; the broker runs under a wrapper, profiling switched "
                    "on for (b) only) or py-spy (sampling, attaches by pid; needs py-spy)")
    ap.add_argument("--results-dir", type=Path, default=None,
                    help="where to write the report (default bench/results/<timestamp>)")
    ap.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                    help="broker config for the local Shoal broker (repeatable)")
    ap.add_argument("--no-settle", dest="settle", action="store_false",
                    help="do not flush dirty pages to disk before each scenario")
    ap.add_argument("--keep-topics", action="store_true",
                    help="leave the benchmark's topics on --bootstrap brokers")
    ap.add_argument("--shapes", default="", metavar="PxC{e|i}[,...]",
                    help="extra (b) variants, e.g. 1x4e,1x8i,16x1i (partitions x consumers, "
                    "explicit or implicit), run after the selected b1..b4, named b1x4e etc.")
    ap.add_argument("--warmup", action="store_true",
                    help="before the (b) variants, one untimed 1x8 explicit round on each "
                    "broker (a cold JVM broker spends several times its warm CPU per record)")
    args = ap.parse_args(argv)
    if args.scale <= 0:
        ap.error("--scale must be > 0")
    sel: list[str] = []
    for item in (x.strip() for x in args.only.split(",") if x.strip()):
        names = [k for k in ALL if k.startswith("b")] if item == "b" else [item]
        for n in names:
            if n not in ALL:
                ap.error(f"unknown scenario {n!r}; choose from {','.join(ALL)} or b")
            if n not in sel:
                sel.append(n)
    args.selected = [k for k in ALL if k in sel] if sel else list(ALL)
    for text in (x.strip() for x in args.shapes.split(",") if x.strip()):
        try:
            v = parse_shape(text)
        except ValueError as e:
            ap.error(str(e))
        SHARE_VARIANTS[v.name] = v
        CLIENT_SIDE.add(v.name)
        if v.name not in args.selected:
            args.selected.append(v.name)
    if args.no_local and not args.bootstrap:
        ap.error("--no-local needs at least one --bootstrap")
    return args


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _dirty_mb() -> float | None:
    """Dirty + Writeback pages, in MB (None where /proc/meminfo is missing)."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return (int(fields["Dirty"].split()[0]) + int(fields["Writeback"].split()[0])) / 1024
    except (OSError, KeyError, ValueError):
        return None


SETTLE = True  # set from --no-settle
WARMUP = False  # set from --warmup


def _settle() -> dict[str, Any]:
    """Flush the page cache's dirty data before a scenario.

    Scenarios (a) and (b) write gigabytes; the kernel writes them back for a while afterwards.
    Without this, a later scenario's fsyncs queue behind that writeback and (c)'s latency
    measures the previous scenario's disk backlog rather than the broker at 5k rec/s.
    """
    if not SETTLE:
        return {}
    before = _dirty_mb()
    started = time.monotonic()
    os.sync()
    took = time.monotonic() - started
    if before is not None and before > 32:
        _log(f"  settle: flushed {before:,.0f} MB of dirty pages in {took:.1f} s")
    return {"settle_dirty_mb": None if before is None else round(before, 1),
            "settle_s": round(took, 2)}


def _attempt(fn: Callable[[], dict[str, Any]], label: str) -> dict[str, Any]:
    settled = _settle()
    started = time.monotonic()
    try:
        fig = fn()
    except Exception:  # noqa: BLE001 - one scenario's failure is reported, the run goes on
        fig = {"error": traceback.format_exc(limit=6)}
    fig["wall_s"] = round(time.monotonic() - started, 1)
    fig.update(settled)
    if "error" in fig:
        _log(f"  {label}: ERROR {fig['error'].strip().splitlines()[-1]}")
    return fig


def _brief(key: str, fig: dict[str, Any]) -> str:
    if "skipped" in fig:
        return f"skipped: {fig['skipped']}"
    if "error" in fig and "rate" not in fig and "p99_ms" not in fig:
        return "error"
    if key == "c":
        return (f"p50 {fig.get('p50_ms')} ms, p99 {fig.get('p99_ms')} ms, "
                f"p99.9 {fig.get('p999_ms')} ms ({fig.get('received')} records)")
    if key == "d":
        return f"cold start {fig.get('cold_start_s')} s, idle RSS {fig.get('idle_rss_mb')} MB"
    if key == "t":
        return tls.brief(fig)
    if key == "e":
        return f"load clean {fig.get('clean_load_ms')} ms, crash {fig.get('crash_load_ms')} ms"
    if key == "f":
        ours = fig.get("client.ShareConsumer", {}).get("rate") or 0
        theirs = fig.get("confluent_kafka.ShareConsumer", {}).get("rate") or 0
        return f"client.ShareConsumer {ours:,.0f} rec/s, confluent_kafka.ShareConsumer {theirs:,.0f} rec/s"
    if key == "h":
        from bench import hostile

        return hostile.summary_line(fig)
    if key == "z":
        return (f"authorization on/off: throughput x{fig.get('rate_ratio')}, broker CPU per "
                f"record x{fig.get('cpu_ratio')} ({fig.get('overhead_pct')} %); checks "
                f"{fig.get('check_us_per_request_on')} vs {fig.get('check_us_per_request_off')} "
                f"us per share request, estimated overhead {fig.get('estimated_overhead_pct')} % "
                f"({fig.get('acls')} ACLs, {fig.get('rounds')} rounds)")
    if key == "k":
        return consumer_groups.brief(fig)
    if key == "cluster":
        return cluster.brief(fig)
    if key == "replication":
        return replication.brief(fig)
    if key == "o":
        return key_ordering.brief(fig)
    if key == "r":
        return share_read_committed.brief(fig)
    if key == "x":
        return transactions.brief(fig)
    if key == "g":
        return (f"{fig.get('rate') or 0:,.0f} rec/s after the first micro-batch, "
                f"{fig.get('rate_overall') or 0:,.0f} rec/s overall ({fig.get('records')} records "
                f"in {fig.get('batches')} batches, first batch {fig.get('first_batch_s')} s, "
                f"Spark start {fig.get('spark_startup_s')} s)")
    broker = fig.get("broker", {})
    extra = f", broker CPU {broker['broker_cpu_pct']}%" if broker.get("broker_cpu_pct") else ""
    if broker.get("broker_cpu_s") and fig.get("records"):
        extra += f", {1e6 * broker['broker_cpu_s'] / fig['records']:.2f} us/record"
    return f"{fig.get('rate', 0) or 0:,.0f} rec/s ({fig.get('records')} records{extra})"


def run_client_scenarios(settings: Settings, system: System, selected: list[str],
                         profiler: Profiler | None) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if "a" in selected:
        _log(f"[{system.name}] (a) produce {settings.records():,} records, acks=all")
        res["a"] = _attempt(lambda: scenarios.scenario_a(settings, system), "a")
        _log(f"  a: {_brief('a', res['a'])}")
    b_keys = [k for k in selected if k in SHARE_VARIANTS]
    # Pre-produce the data sets first so that a profile of (b) holds only share consumption.
    for k in b_keys:
        if SHARE_VARIANTS[k].partitions not in system.datasets:
            try:
                scenarios.dataset(settings, system, SHARE_VARIANTS[k].partitions)
            except Exception:  # noqa: BLE001 - scenario_b reports it again
                _log(f"  pre-produce for {k} failed: {traceback.format_exc(limit=3)}")
    if b_keys and WARMUP:
        v = ShareVariant("warmup", 1, 8, "explicit")
        _log(f"[{system.name}] untimed warm-up: share-consume {settings.records():,} records, "
             f"{v.title}")
        res["warmup"] = _attempt(functools.partial(scenarios.scenario_b, settings, system, v),
                                 "warmup")
        _log(f"  warmup: {_brief('warmup', res['warmup'])}")
    if b_keys and profiler is not None:
        profiler.start()
    try:
        for k in b_keys:
            v = SHARE_VARIANTS[k]
            _log(f"[{system.name}] ({k}) share-consume {settings.records():,} records, {v.title}")
            res[k] = _attempt(functools.partial(scenarios.scenario_b, settings, system, v), k)
            _log(f"  {k}: {_brief(k, res[k])}")
    finally:
        if b_keys and profiler is not None:
            profiler.stop()
    if "c" in selected:
        _log(f"[{system.name}] (c) end-to-end latency at {scenarios.LATENCY_RATE:,} rec/s")

        def c() -> dict[str, Any]:
            fig, _ = scenarios.scenario_c(settings, system)
            return fig

        res["c"] = _attempt(c, "c")
        _log(f"  c: {_brief('c', res['c'])}")
    if "f" in selected:
        # Issue 7: the project's asyncio client next to confluent-kafka on one scenario.
        from bench import client_share

        n = settings.records() // 2
        _log(f"[{system.name}] (f) client.ShareConsumer vs confluent_kafka.ShareConsumer, "
             f"{n:,} records, 1 partition x 1 consumer, implicit")
        res["f"] = _attempt(lambda: client_share.run(system.bootstrap, n, 1), "f")
        _log(f"  f: {_brief('f', res['f'])}")
    if "g" in selected:
        # Issue 8: a trivial Spark streaming query on the shoal-share source (pipeline/).
        from bench import spark_source

        n = max(spark_source.MIN_RECORDS, settings.records(spark_source.FULL_RECORDS))
        _log(f"[{system.name}] (g) Spark share source, trivial query (noop sink), {n:,} records, "
             f"{spark_source.PARTITIONS} partitions")
        res["g"] = _attempt(lambda: scenarios.scenario_g(settings, system), "g")
        _log(f"  g: {_brief('g', res['g'])}")
    if "k" in selected:
        # Issue 14: consumer groups, classic and KIP-848 (bench/consumer_groups.py).
        _log(f"[{system.name}] (k) consumer-group consume {settings.records():,} records, "
             f"{consumer_groups.PARTITIONS} partitions x {consumer_groups.CONSUMERS} consumers, "
             f"group.protocol {' and '.join(consumer_groups.PROTOCOLS)}")
        res["k"] = _attempt(lambda: consumer_groups.scenario_k(settings, system), "k")
        _log(f"  k: {_brief('k', res['k'])}")
    if "o" in selected:
        # Issue 16: per-key ordering next to none (bench/key_ordering.py).
        _log(f"[{system.name}] (o) share.ordering=key vs none, {settings.records():,} records, "
             f"{key_ordering.KEYS:,} keys, 1 partition x {key_ordering.CONSUMERS} consumers")
        res["o"] = _attempt(lambda: key_ordering.scenario_o(settings, system), "o")
        _log(f"  o: {_brief('o', res['o'])}")
    if "r" in selected:
        # Issue 15: share groups on transactional data (bench/share_read_committed.py).
        _log(f"[{system.name}] (r) share-consume {settings.records():,} transactional records, "
             f"read_committed vs read_uncommitted")
        res["r"] = _attempt(lambda: share_read_committed.scenario_r(settings, system), "r")
        _log(f"  r: {_brief('r', res['r'])}")
    if "x" in selected:
        # Issue 15: transactional produce vs idempotent (bench/transactions.py).
        n = max(transactions.TXN_RECORDS * 2, settings.records() // transactions.SHARE)
        _log(f"[{system.name}] (x) transactional produce, ~{n:,} records in transactions of "
             f"{transactions.TXN_RECORDS:,}, vs idempotent")
        res["x"] = _attempt(lambda: transactions.scenario_x(settings, system), "x")
        _log(f"  x: {_brief('x', res['x'])}")
    return res


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    global SETTLE, WARMUP
    SETTLE, WARMUP = args.settle, args.warmup
    install_signal_cleanup()
    t_start = time.monotonic()
    run_id = time.strftime("%Y%m%d-%H%M%S")
    out_dir: Path = args.results_dir or ROOT / "bench" / "results" / run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    settings = Settings(scale=args.scale, run_id=run_id, work_dir=work_dir, log=_log)
    overrides = dict(o.split("=", 1) for o in args.override)
    if "k" in args.selected:  # see bench/consumer_groups.py: Kafka's server.properties value
        overrides = {**consumer_groups.BENCH_OVERRIDES, **overrides}
    selected = args.selected
    local = not args.no_local
    profile_kind = choose(args.profiler) if args.profile else None
    try:
        import confluent_kafka

        ck = f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"
    except ImportError:
        ck = "?"
    dirty = _git("status", "--porcelain")
    meta: dict[str, Any] = {
        "run_id": run_id, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "scale": args.scale, "records": settings.records(),
        "record_bytes": scenarios.RECORD_SIZE, "selected": selected,
        "cpus": os.cpu_count(), "load_start": _loadavg(), "python": platform.python_version(),
        "platform": platform.platform(), "confluent_kafka": ck,
        "shoal_commit": _git("rev-parse", "--short", "HEAD"),
        "shoal_worktree_dirty": bool(dirty) if dirty is not None else None,
        "profile": profile_kind, "shoal_overrides": overrides, "argv": sys.argv[1:],
        "settle": args.settle,
    }
    results: dict[str, Any] = {"meta": meta, "systems": []}
    _log(f"scale {args.scale}: {settings.records():,} records per scenario; scenarios "
         f"{','.join(selected)}; results in {out_dir}")
    try:
        if local:
            shoal: dict[str, Any] = {"name": "shoal", "description": "local, fresh data dir",
                                     "scenarios": {}}
            results["systems"].append(shoal)
            if "d" in selected:
                _log(f"(d) cold start x {scenarios.COLD_START_RUNS}, idle RSS")
                shoal["scenarios"]["d"] = _attempt(
                    lambda: scenarios.scenario_d_cold(settings, out_dir / "broker-cold.log",
                                                      overrides), "d")
                _log(f"  d: {_brief('d', shoal['scenarios']['d'])}")
            if CLIENT_SIDE & set(selected):
                run_local(settings, shoal, selected, overrides, out_dir, profile_kind, results)
            if "e" in selected:
                _log("(e) restart with share state: bench/share_state_restart.py")
                shoal["scenarios"]["e"] = _attempt(lambda: scenarios.scenario_e(settings, _log),
                                                   "e")
            if "h" in selected:
                from bench import hostile

                _log("(h) hostile load on a broker of its own: bench/hostile.py")
                shoal["scenarios"]["h"] = _attempt(lambda: hostile.scenario_h(
                    settings.scale, settings.work_dir, out_dir / "broker-hostile.log", overrides,
                    _log), "h")
                _log(f"  h: {_brief('h', shoal['scenarios']['h'])}")
            if "t" in selected:
                _log("(t) TLS vs plaintext: bench/tls.py")
                shoal["scenarios"]["t"] = _attempt(lambda: tls.scenario_t(settings, _log), "t")
                _log(f"  t: {_brief('t', shoal['scenarios']['t'])}")
            if "z" in selected:
                _log("(z) authorization overhead on b1: bench/authz_overhead.py")
                shoal["scenarios"]["z"] = _attempt(
                    lambda: authz_overhead.run(settings, out_dir, log=_log), "z")
                _log(f"  z: {_brief('z', shoal['scenarios']['z'])}")
            if "cluster" in selected:
                _log("(cluster) etcd + 3 brokers vs one broker, recovery: bench/cluster.py")
                shoal["scenarios"]["cluster"] = _attempt(
                    lambda: cluster.scenario_cluster(settings, out_dir, overrides, _log),
                    "cluster")
                _log(f"  cluster: {_brief('cluster', shoal['scenarios']['cluster'])}")
            if "replication" in selected:
                _log("(replication) RF 3 vs RF 1, failover and catch-up: bench/replication.py")
                shoal["scenarios"]["replication"] = _attempt(
                    lambda: replication.scenario_replication(settings, out_dir, overrides, _log),
                    "replication")
                _log(f"  replication: {_brief('replication', shoal['scenarios']['replication'])}")
        for item in args.bootstrap:
            name, sep, addr = item.rpartition("=")
            name = name if sep else f"broker@{addr}"
            ext: dict[str, Any] = {"name": name, "bootstrap": addr,
                                   "description": f"running at {addr}", "scenarios": {}}
            results["systems"].append(ext)
            if not CLIENT_SIDE & set(selected):
                continue
            try:
                host, port = split_hostport(addr)
                if not metadata_ok(host, port, timeout=5):
                    raise RuntimeError(f"no Kafka broker answers Metadata at {addr}")
                pid = dict(m.split("=", 1) for m in args.monitor).get(name)
                system = System(name, addr, Admin(addr),
                                monitor=Monitor(int(pid)) if pid else None)
                ext["scenarios"] = run_client_scenarios(settings, system, selected, None)
                if not args.keep_topics:
                    system.admin.delete_created()
                system.admin.close()
            except Exception:  # noqa: BLE001
                ext["error"] = traceback.format_exc(limit=4)
                _log(f"[{name}] ERROR {ext['error'].strip().splitlines()[-1]}")
    finally:
        stop_everything()
        remove_tree(work_dir)
    meta["load_end"] = _loadavg()
    meta["wall_s"] = round(time.monotonic() - t_start, 1)
    md = report.write(results, out_dir)
    print()
    print(md, flush=True)
    print(f"Report written to {out_dir}", flush=True)
    failed = [f"{s['name']}/{k}" for s in results["systems"]
              for k, v in s["scenarios"].items() if isinstance(v, dict) and "error" in v]
    failed += [s["name"] for s in results["systems"] if "error" in s]
    if failed:
        print(f"Scenarios with errors: {', '.join(failed)}", file=sys.stderr, flush=True)
        return 1
    return 0


def run_local(settings: Settings, shoal: dict[str, Any], selected: list[str],
              overrides: dict[str, str], out_dir: Path, profile_kind: str | None,
              results: dict[str, Any]) -> None:
    """Start the fresh Shoal broker, run a/b/c against it, stop it."""
    prof_file = settings.work_dir / "profile_b.pstats"
    wrapper = ["-m", "bench.profiled_broker"] if profile_kind == "cprofile" else None
    env = {"SHOAL_BENCH_PROFILE": str(prof_file)} if wrapper else None
    broker = ShoalBroker(settings.work_dir / "data", out_dir / "broker.log", overrides,
                         wrapper=wrapper, env=env)
    ready = broker.start()
    shoal["bootstrap"] = broker.bootstrap
    shoal["broker_pid"] = broker.pid
    shoal["ready_s"] = round(ready, 3)
    _log(f"Shoal broker pid {broker.pid} on {broker.bootstrap}, ready in {ready:.2f} s")
    monitor = Monitor(broker.pid)
    profiler = None
    try:
        time.sleep(1.0)
        shoal["rss_before_load_mb"] = monitor.rss_mb()
        system = System("shoal", broker.bootstrap, Admin(broker.bootstrap), local=broker,
                        monitor=monitor)
        if profile_kind and any(k in SHARE_VARIANTS for k in selected):
            profiler = Profiler(profile_kind, broker.pid, out_dir, prof_file)
        shoal["scenarios"].update(run_client_scenarios(settings, system, selected, profiler))
        time.sleep(1.0)
        shoal["rss_after_load_mb"] = monitor.rss_mb()
        system.admin.close()
    finally:
        monitor.close()
        code = broker.stop()
        shoal["broker_exit_code"] = code
    if profiler is not None:
        try:
            if profile_kind == "cprofile" and prof_file.exists():
                (out_dir / "profile_b.pstats").write_bytes(prof_file.read_bytes())
                profiler.cprofile_file = out_dir / "profile_b.pstats"
            results["profile"] = profiler.finish()
            _log(f"profile of (b) written to {out_dir / 'profile_top.txt'}")
        except Exception:  # noqa: BLE001
            results["profile"] = {"error": traceback.format_exc(limit=4)}
    # RSS under (b) for scenario (d), and the RSS timeline for the plot.
    rss = [r for w in monitor.windows if w.name in SHARE_VARIANTS for _, r, _ in w.samples]
    if "d" in shoal["scenarios"] and rss:
        shoal["scenarios"]["d"]["rss_under_b_peak_mb"] = round(max(rss) / 2**20, 1)
        shoal["scenarios"]["d"]["rss_under_b_mean_mb"] = round(statistics.fmean(rss) / 2**20, 1)
    tl = monitor.timeline
    step = max(1, len(tl) // 1500)
    shoal["rss_timeline"] = [(round(t - monitor.t0, 2), round(r / 2**20, 1))
                             for t, r, _ in tl[::step]]
    shoal["windows"] = [{"name": w.name, "t0": round(w.start - monitor.t0, 2),
                         "t1": round(w.end - monitor.t0, 2)} for w in monitor.windows]


if __name__ == "__main__":
    sys.exit(main())
