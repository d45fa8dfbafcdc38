"""Scenario ``cluster`` (issue 23): a 3-broker cluster next to one broker, and its recovery.

``make bench-cluster`` (``python -m bench.run --only cluster``) starts, with its own data
directories and free ports:

1. **One broker** (no etcd; the baseline). A topic of 12 partitions, N x 1 KiB records produced
   ahead (N = 500,000 x ``--scale``) in log batches of 500 records on both systems
   (``PRE_PRODUCE``), consumed by 6 ``confluent_kafka.ShareConsumer`` processes (explicit
   ACCEPT) of a new share group, as scenario b.
2. **A cluster**: a real etcd (``etcd`` on PATH, ``make etcd``) and 3 brokers (node ids 1-3),
   each with a PLAINTEXT client listener and an INTERNAL SASL_PLAINTEXT PLAIN listener on which
   they call each other as the super user ``broker`` (as ``tests/integration/cluster``'s
   ``Cluster``). The same workload; consumer i bootstraps from broker i mod 3. The internal
   topics have one replica each here (``INTERNAL_RF1``), as issue 23's cluster has ("every
   partition has one replica"; the data topic has one too): one broker keeps no copies, so this
   is the like-for-like comparison (``cluster``, ``cpu_ratio``).
2b. The same cluster afresh with the internal topics at their default replication factor (3,
   issue 24): every broker also follows the others' ``__share_group_state`` and
   ``__consumer_offsets`` partitions and a share-state write waits for the followers
   (``cluster_rf3``, ``cpu_ratio_rf3``; throughput phase only). Skipped when ``--override``
   already sets those replication factors.
3. **Recovery**: a probe share consumer reads a 12-partition topic; one broker (not the
   controller, not the probe group's coordinator when another is left) is killed with kill -9
   and started again at once from the same command line. Figures, from the kill: the restarted
   broker answering Metadata, Metadata of a surviving broker naming it leader of all its
   partitions again, a record produced to each of them acknowledged (acks=all), and one such
   record of each delivered by the probe ShareConsumer.
4. **Controller failover**: kill -9 of the controller's broker; from the kill, a surviving
   broker's Metadata naming another controller, and a topic created and led on every partition.
   The broker is started again afterwards.

Before each measured phase six share consumers of another group, bootstrapped as the measured
ones, read 1,200 records of another topic (``warm_up``), so the one-off work of a cluster's
first share group (internal topics created, their coordinators and the codecs of the clients'
API versions loaded on every broker) is not billed to the measured records.

Every broker runs as ``python -m bench.cluster_broker`` (the plain broker plus counters on
/metrics, see that module), the baseline too. Modules: this one runs the scenario and the
throughput phases; ``bench/cluster_procs.py`` etcd, the members and the raw probes,
``bench/cluster_recovery.py`` phases 3 and 4, ``bench/metrics_text.py`` the /metrics parsing. Figures (``results.json``, ``cluster``):

- ``single`` / ``cluster``: records/s (first record to the last, as scenario b), broker CPU s
  over that interval from ``/proc/<pid>/stat`` (summed over the 3 brokers), CPU per delivered
  record (us) and their ratio ``cpu_ratio`` (target: <= 1.2); also the brokers' idle CPU
  (measured for 3 s before the consumers start) and the same figures net of it;
- ``whole_phase`` of each: broker CPU from the consumers' release to SETTLE_S after the last
  one closed (group joins, share sessions, the last acknowledgements and their share-state writes
  included), net of the idle CPU over that time, per delivered record; its ratio
  ``cpu_ratio_whole_phase`` (and ``_rf3``). The first-to-last-record window of one broker is
  about 0.1 s at scale 0.1, a few ticks of /proc's 10 ms CPU clock, and leaves the last
  acknowledgements' writes out; this window is seconds long and bills both systems the same
  work;
- ``cluster.rpc``: from each broker's ``/metrics`` before and after the phase:
  ``shoal_inter_broker_requests_total{api="WriteShareGroupState"}`` by source and destination,
  acknowledgement batches (ShareAcknowledge and ShareFetch requests carrying acknowledgements,
  counted by the wrapper), ShareFetch requests that parked (waited for records) and that were
  answered empty, share-state writes (``shoal_share_state_write_duration_seconds``
  count and mean), the WriteShareGroupState round trip (mean ms);
  ``write_rpcs_per_ack_batch``, ``keys_per_write_rpc``, and the batching check
  ``flushes_within_one_per_destination`` (the share of persister flushes that sent at most one
  WriteShareGroupState per destination broker; target 1.0) with the most seen;
- ``recovery`` and ``controller`` as above (seconds from the kill -9), on the RF 1 cluster.

``SHOAL_BENCH_CLUSTER_THROUGHPUT_ONLY=1`` skips phases 3 and 4 (a quicker before/after of the
CPU figures). ``SHOAL_BENCH_CLUSTER_PROFILE=DIR`` in the environment profiles every broker (cProfile) over
each measured phase into ``DIR/broker-<pid>.pstats`` (the phases log their pids); the CPU
figures of such a run are inflated by the profiler.

Session settings are the brokers' defaults (``broker.session.timeout.ms`` 6,000: a killed
broker's registration lapses after it, and a restarted one waits its old registration out),
so the recovery figures are what a default cluster shows. ``--override`` applies to every
broker of both phases.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import clients, report
from bench.cluster_procs import WRAPPER, Etcd, Member, metadata, until
from bench.cluster_recovery import controller_failover, recovery
from bench.metrics_text import Sample, metric_by, metric_sum, scrape
from bench.procs import PAGE_TICKS, Monitor, ShoalBroker, cpu_seconds, free_port
from bench.scenarios import Settings, System, _failed, _share_figures, produce, run_share_consumers

PARTITIONS = 12
CONSUMERS = 6
BROKERS = 3
TARGET_CPU_RATIO = 1.2
WRITE = "WriteShareGroupState"
PROFILE_ENV = "SHOAL_BENCH_CLUSTER_PROFILE"  # a directory: cProfile each broker's measured phase
# Set (to anything): the throughput phases only, no recovery/controller phases (a quicker A/B).
THROUGHPUT_ONLY_ENV = "SHOAL_BENCH_CLUSTER_THROUGHPUT_ONLY"
IDLE_S = 3.0
SETTLE_S = 0.5  # after the last consumer closed, before the whole phase's CPU is read
# Log batches of the same size on one broker and on three. Left to linger alone, a producer
# writing to three brokers sends smaller batches (about 640 records of 1 KiB against 950 to one
# broker), and the share path's cost goes per batch (acquisitions, acknowledgements, state
# writes): the comparison would bill the cluster for the producer's batching.
PRE_PRODUCE = {"batch.num.messages": 500, "linger.ms": 200}
# The internal topics at one replica each: the cluster of issue 23 ("every partition has one
# replica"); their defaults are 3 (issue 24), measured as ``cluster_rf3`` next to it.
INTERNAL_RF1 = {"offsets.topic.replication.factor": "1",
                "share.coordinator.state.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1"}  # idle CPU of the brokers measured over this long before consuming


# ---------------------------------------------------------------------------------------------
# Throughput (both systems)


def _throughput(settings: Settings, label: str, bootstraps: list[str], pids: list[int],
                metrics_ports: list[int], extra_pids: dict[str, int]) -> dict[str, Any]:
    """Create the topic, produce N records, share-consume them with 6 consumers; figures."""
    n = settings.records()
    system = System(label, ",".join(bootstraps), clients.Admin(",".join(bootstraps)))
    topic = settings.topic(f"{label}-p{PARTITIONS}")
    system.admin.create_topic(topic, PARTITIONS)
    settings.log(f"  [{label}] pre-producing {n:,} records into {PARTITIONS} partitions")
    pre = produce(settings, system, topic, n, PARTITIONS, config=PRE_PRODUCE)
    group = f"bench-{settings.run_id}-{label}"
    warm = warm_up(settings, system, label, bootstraps)
    idle = idle_cpu(pids, IDLE_S)
    before = [scrape(p) for p in metrics_ports]
    counts0 = [proc_counts(pid) for pid in pids]
    monitors = [Monitor(pid) for pid in pids]
    others = {name: Monitor(pid) for name, pid in extra_pids.items()}
    profiling = bool(os.environ.get(PROFILE_ENV))
    settings.log(f"  [{label}] measuring: consumers start, broker pids {pids}")
    if profiling:  # see bench/cluster_broker.py
        for pid in pids:
            os.kill(pid, signal.SIGUSR1)
    try:
        results, _, t_go = run_share_consumers(system, topic, group, CONSUMERS, "explicit", n,
                                               30 + n / 2_000, bootstraps=bootstraps)
        closed = [r["t_closed"] for r in results if r.get("t_closed")]
        fig = _share_figures(results, n, t_go)
        t0, t1 = fig.pop("t_first", None), fig.pop("t_last", None)
        if fig["records"] and closed:
            # From the consumers' release to SETTLE_S after the last one closed.
            w1 = max(closed) + SETTLE_S
            time.sleep(max(0.0, w1 - time.monotonic()))
            whole = [m.between(f"{label}-whole", t_go, w1) for m in monitors]
            cpus = [m.windows[-1].cpu_s for m in monitors]
            if whole and all(c is not None for c in cpus):
                net = sum(c for c in cpus if c is not None) - idle * (w1 - t_go)
                fig["whole_phase"] = {
                    "seconds": round(w1 - t_go, 2), "broker_cpu_s": round(net, 3),
                    "broker_cpu_us_per_record": round(1e6 * net / fig["records"], 2)}
        if t0 is not None and t1 is not None:
            per = [m.between(label, t0, t1) for m in monitors]
            # The windows' own CPU seconds: the summaries round to 10 ms, too coarse here.
            cpu = [m.windows[-1].cpu_s for m in monitors]
            fig["broker_cpu_s_each"] = [None if c is None else round(c, 3) for c in cpu]
            if all(c is not None for c in cpu):
                total = sum(c for c in cpu if c is not None)
                fig["broker_cpu_s"] = round(total, 3)
                if fig["records"]:
                    fig["broker_cpu_us_per_record"] = round(1e6 * total / fig["records"], 2)
                    # What the brokers burn with nothing to do (etcd session, timers) over the
                    # same interval, taken out: the per-record cost proper.
                    net = total - idle * (t1 - t0)
                    fig["broker_cpu_us_per_record_net_of_idle"] = round(
                        1e6 * net / fig["records"], 2)
            fig["broker_rss_peak_mb_each"] = [w.get("rss_peak_mb") for w in per]
            for name, mon in others.items():
                fig[f"{name}_cpu_s"] = mon.between(name, t0, t1).get("broker_cpu_s")
    finally:
        for mon in [*monitors, *others.values()]:
            mon.close()
        if profiling:
            for pid in pids:
                os.kill(pid, signal.SIGUSR2)
    # Per broker over the whole phase (to the scrape): CPU by user/system and by thread, and
    # context switches; with the records, the per-record split of where the CPU went.
    fig["proc_each"] = [counts_delta(c0, proc_counts(pid)) for c0, pid in zip(counts0, pids)]
    after = [scrape(p) for p in metrics_ports]
    fig["rpc"] = rpc = rpc_figures(before, after)
    if sum(rpc["share_fetch_bytes"]):
        # Above the record size: whole batches sent to a consumer that acquired part of them.
        rpc["share_fetch_bytes_per_record"] = round(sum(rpc["share_fetch_bytes"])
                                                    / fig["records"], 1)
    if sum(rpc["share_fetch_requests"]):
        rpc["records_per_share_fetch"] = round(fig["records"] / sum(rpc["share_fetch_requests"]),
                                               1)
    fig["broker_idle_cpu_s_per_s"] = round(idle, 4)
    fig["warm_up"] = warm
    fig.update(topic=topic, group=group, partitions=PARTITIONS, consumers=CONSUMERS,
               mode="explicit", brokers=len(bootstraps),
               pre_produce={"rate": pre["rate"], "seconds": pre["seconds"]})
    err = _failed(results, CONSUMERS, "share consumer")
    if err:
        fig["error"] = err
    elif not fig["complete"]:
        fig["error"] = f"gave up with {fig['records']} of {n} records"
    system.admin.close()
    return fig


def warm_up(settings: Settings, system: System, label: str, bootstraps: list[str],
            ) -> dict[str, Any]:
    """As many share consumers as the measured phase, of another group and bootstrapped the
    same way, read a small topic first, so that the one-off work of a share group's first use
    (the internal topics created and their coordinators loaded on every broker:
    ``__share_group_state``, ``__consumer_offsets``; and each broker's first request of every
    API and version the clients use, whose codec is loaded then) falls outside the measured
    phase, on one broker as on three. With one consumer, only the broker it bootstrapped from
    had answered Metadata and the others loaded that codec in the measured phase (a profile:
    ~40 ms of one broker's CPU, 10% of the phase at scale 0.1)."""
    topic, n = settings.topic(f"{label}-warmup"), 1_200
    system.admin.create_topic(topic, PARTITIONS)
    produce(settings, system, topic, n, PARTITIONS)
    started = time.monotonic()
    results, _, t_go = run_share_consumers(system, topic, f"bench-{settings.run_id}-{label}-warm",
                                           CONSUMERS, "explicit", n, 60, bootstraps=bootstraps)
    fig = _share_figures(results, n, t_go)
    return {"records": fig["records"], "seconds": round(time.monotonic() - started, 2)}


def proc_counts(pid: int) -> dict[str, float]:
    """What a broker process has spent so far, for the phase's deltas: user and system CPU
    seconds, voluntary and involuntary context switches, and CPU seconds by thread name
    (``event_loop``: the main thread; ``python``: Python's other threads, the executors of the
    coordinator fsyncs and the off-loop encodes and decodes; grpc's threads: the etcd client)."""
    out: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out["user_s"], out["system_s"] = int(fields[11]) / PAGE_TICKS, int(fields[12]) / PAGE_TICKS
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                    name, value = line.split(":")
                    out[name] = float(value)
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                text = f.read()
            comm = text[text.index("(") + 1:text.rindex(")")].rstrip("0123456789_-")
            if task == str(pid):
                comm = "event_loop"  # the main thread; Python's own threads are all "python"
            t = text.rsplit(")", 1)[1].split()
            key = f"thread_cpu_s:{comm or 'other'}"
            out[key] = out.get(key, 0.0) + (int(t[11]) + int(t[12])) / PAGE_TICKS
    except (OSError, ValueError, IndexError):
        pass  # the process ended: what was read stands
    return out


def counts_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """``after - before`` per key (threads that started during the phase count from zero)."""
    return {k: round(v - before.get(k, 0.0), 3) for k, v in sorted(after.items())}


def idle_cpu(pids: list[int], seconds: float) -> float:
    """CPU seconds per second the processes use together while nothing is asked of them."""
    t0, c0 = time.monotonic(), [cpu_seconds(p) or 0.0 for p in pids]
    time.sleep(seconds)
    t1, c1 = time.monotonic(), [cpu_seconds(p) or 0.0 for p in pids]
    return (sum(c1) - sum(c0)) / (t1 - t0)


def rpc_figures(before: list[list[Sample]], after: list[list[Sample]]) -> dict[str, Any]:
    """Per-phase request counts from each broker's /metrics (after - before), and the ratios."""
    def delta(name: str, **labels: str) -> list[float]:
        return [metric_sum(a, name, **labels) - metric_sum(b, name, **labels)
                for b, a in zip(before, after, strict=True)]

    write_by_dest: list[dict[str, float]] = []
    for b, a in zip(before, after, strict=True):
        x = metric_by(a, "shoal_inter_broker_requests_total", "node", api=WRITE)
        y = metric_by(b, "shoal_inter_broker_requests_total", "node", api=WRITE)
        write_by_dest.append({k: v - y.get(k, 0.0) for k, v in sorted(x.items())})
    acks = delta("shoal_bench_share_acknowledge_with_acks_total")
    ack_requests = delta("shoal_share_acknowledge_requests_total")
    fetch_acks = delta("shoal_bench_share_fetch_with_acks_total")
    fetches = delta("shoal_share_fetch_requests_total")
    parked = delta("shoal_share_fetch_parked_total")
    empty = delta("shoal_share_fetch_empty_responses_total")
    fetch_bytes = delta("shoal_share_fetch_bytes_total")
    writes = delta("shoal_share_state_write_duration_seconds_count")
    flushes = delta("shoal_bench_state_flushes_total", op="WRITE")
    over = delta("shoal_bench_state_flush_over_one_total", op="WRITE")
    flush_reqs = delta("shoal_bench_state_flush_requests_total", op="WRITE")
    flush_keys = delta("shoal_bench_state_flush_keys_total", op="WRITE")
    most = max((metric_sum(a, "shoal_bench_state_flush_max_per_destination", op="WRITE")
                for a in after), default=0.0)
    rpc_s = delta("shoal_inter_broker_request_seconds_sum", api=WRITE)
    rpc_n = delta("shoal_inter_broker_request_seconds_count", api=WRITE)
    write_s = delta("shoal_share_state_write_duration_seconds_sum")
    rpcs = sum(sum(d.values()) for d in write_by_dest)
    batches = sum(acks) + sum(fetch_acks)
    out: dict[str, Any] = {
        "write_rpcs_by_source_and_destination": write_by_dest,
        "write_rpcs": rpcs, "share_acknowledge_requests": ack_requests,
        "share_acknowledge_with_acks": acks,
        "share_fetch_requests": fetches, "share_fetch_with_acks": fetch_acks,
        "share_fetch_parked": parked, "share_fetch_empty": empty,
        "share_fetch_bytes": fetch_bytes,
        "ack_batches": batches, "share_state_writes": writes,
        "persister_write_flushes": sum(flushes), "persister_write_requests": sum(flush_reqs),
        "most_writes_to_one_destination_in_a_flush": most,
    }
    if sum(rpc_n):
        out["write_rpc_mean_ms"] = round(1000 * sum(rpc_s) / sum(rpc_n), 2)
    if sum(writes):
        out["share_state_write_mean_ms"] = round(1000 * sum(write_s) / sum(writes), 2)
    if batches:
        out["write_rpcs_per_ack_batch"] = round(rpcs / batches, 3)
        out["share_state_writes_per_ack_batch"] = round(sum(writes) / batches, 3)
    if rpcs:
        out["keys_per_write_rpc"] = round(sum(flush_keys) / rpcs, 3)
    if sum(flushes):
        out["flushes_within_one_per_destination"] = round(1 - sum(over) / sum(flushes), 4)
    return out


# ---------------------------------------------------------------------------------------------
# The scenario


def scenario_cluster(settings: Settings, out_dir: Path, overrides: dict[str, str],
                     log: Callable[[str], None]) -> dict[str, Any]:
    if shutil.which("etcd") is None:
        return {"skipped": "etcd is not installed (make etcd installs Debian's etcd-server)"}
    fig: dict[str, Any] = {"records": settings.records(), "partitions": PARTITIONS,
                           "consumers": CONSUMERS, "brokers": BROKERS,
                           "overrides": overrides, "target_cpu_ratio": TARGET_CPU_RATIO}
    root = settings.work_dir / "cluster"
    # 1. one broker, same wrapper, same workload
    single_metrics = free_port()
    single = ShoalBroker(root / "single", out_dir / "broker-cluster-single.log",
                         {"metrics.listen": f"127.0.0.1:{single_metrics}",
                          "metrics.render.cache.ms": "0", **overrides}, wrapper=WRAPPER)
    single.start()
    log(f"[cluster] one broker (pid {single.pid}): {settings.records():,} records, "
        f"{PARTITIONS} partitions x {CONSUMERS} consumers, explicit")
    try:
        fig["single"] = _throughput(settings, "single", [single.bootstrap], [single.pid],
                                    [single_metrics], {})
    finally:
        single.stop()
    log(f"  single: {_rate_line(fig['single'])}")
    # 2. etcd + 3 brokers, internal topics at RF 1 (the shape: one replica each), with
    # the recovery phases; 3. the same at the internal topics' default RF (3), throughput only.
    rf1 = {**INTERNAL_RF1, **overrides}
    _cluster(settings, root / "rf1", out_dir, rf1, log, fig, "cluster",
             recover=not os.environ.get(THROUGHPUT_ONLY_ENV))
    if any(overrides.get(k, "3") != "1" for k in INTERNAL_RF1):
        _cluster(settings, root / "rf3", out_dir, overrides, log, fig, "cluster_rf3",
                 recover=False)
    s, c = fig["single"], fig["cluster"]
    if s.get("broker_cpu_us_per_record") and c.get("broker_cpu_us_per_record"):
        fig["cpu_ratio"] = round(c["broker_cpu_us_per_record"] / s["broker_cpu_us_per_record"], 3)
        fig["cpu_verdict"] = "met" if fig["cpu_ratio"] <= TARGET_CPU_RATIO else "missed"
    whole_s, whole_c, whole_c3 = (x.get("whole_phase", {}).get("broker_cpu_us_per_record")
                                  for x in (s, c, fig.get("cluster_rf3", {})))
    if whole_s and whole_c:
        fig["cpu_ratio_whole_phase"] = round(whole_c / whole_s, 3)
    if whole_s and whole_c3:
        fig["cpu_ratio_whole_phase_rf3"] = round(whole_c3 / whole_s, 3)
    net_s, net_c = (s.get("broker_cpu_us_per_record_net_of_idle"),
                    c.get("broker_cpu_us_per_record_net_of_idle"))
    if net_s and net_c:
        fig["cpu_ratio_net_of_idle"] = round(net_c / net_s, 3)
    if s.get("rate") and c.get("rate"):
        fig["rate_ratio"] = round(c["rate"] / s["rate"], 3)
    c3 = fig.get("cluster_rf3", {})
    if s.get("broker_cpu_us_per_record") and c3.get("broker_cpu_us_per_record"):
        fig["cpu_ratio_rf3"] = round(
            c3["broker_cpu_us_per_record"] / s["broker_cpu_us_per_record"], 3)
    fig["rate"] = c.get("rate")
    errors = [f"{k}: {fig[k]['error'].strip().splitlines()[-1]}"
              for k in ("single", "cluster", "cluster_rf3", "recovery", "controller")
              if "error" in fig.get(k, {})]
    if errors:
        fig["error"] = "; ".join(errors)
    return fig


def _cluster(settings: Settings, root: Path, out_dir: Path, overrides: dict[str, str],
             log: Callable[[str], None], fig: dict[str, Any], key: str, recover: bool) -> None:
    """etcd + 3 brokers with ``overrides``: the throughput phase into ``fig[key]``, then (with
    ``recover``) the recovery and controller phases."""
    etcd = Etcd(root / "etcd", out_dir / f"etcd-{key}.log")
    etcd.start()
    secret = secrets.token_hex(16)
    members = [Member(root, i, etcd, secret, overrides) for i in range(1, BROKERS + 1)]
    try:
        for m in members:
            m.start()
        until("3 live brokers", lambda: len(metadata(members[0].bootstrap)[1]) == BROKERS)
        rf = {k: overrides.get(k, "3") for k in INTERNAL_RF1}
        log(f"[{key}] etcd + {BROKERS} brokers (pids {[m.pid for m in members]}), internal "
            f"topics' replication factors {rf}")
        assert etcd.proc is not None
        fig[key] = _throughput(settings, key, [m.bootstrap for m in members],
                               [m.pid for m in members], [m.metrics_port for m in members],
                               {"etcd": etcd.proc.pid})
        fig[key]["internal_replication_factors"] = rf
        log(f"  {key}: {_rate_line(fig[key])}")
        phases: tuple[tuple[str, Callable[[], dict[str, Any]]], ...] = (
            ("recovery", lambda: recovery(settings, members, PARTITIONS)),
            ("controller", lambda: controller_failover(settings, members))) if recover else ()
        for name, fn in phases:
            try:
                fig[name] = fn()
            except Exception:  # noqa: BLE001 - reported, the other figures stand
                fig[name] = {"error": traceback.format_exc(limit=6)}
            log(f"  {name}: {fig[name]}")
    finally:
        for m in members:
            m.stop()
        etcd.stop()


def _rate_line(f: dict[str, Any]) -> str:
    rpc = f.get("rpc", {})
    return (f"{f.get('rate') or 0:,.0f} rec/s, broker CPU {f.get('broker_cpu_us_per_record')} "
            f"us/record ({f.get('records')} records); WriteShareGroupState RPCs "
            f"{rpc.get('write_rpcs')}, per ack batch {rpc.get('write_rpcs_per_ack_batch')}")


def brief(fig: dict[str, Any]) -> str:
    c, s = fig.get("cluster", {}), fig.get("single", {})
    rpc, rec, ctl = c.get("rpc", {}), fig.get("recovery", {}), fig.get("controller", {})
    return (f"3 brokers {c.get('rate') or 0:,.0f} rec/s vs 1 broker {s.get('rate') or 0:,.0f}; "
            f"broker CPU per record x{fig.get('cpu_ratio')} (target <= {TARGET_CPU_RATIO}: "
            f"{fig.get('cpu_verdict', 'n/a')}; internal topics at RF 3: "
            f"x{fig.get('cpu_ratio_rf3')}); WriteShareGroupState per ack batch "
            f"{rpc.get('write_rpcs_per_ack_batch')}, flushes within one per destination "
            f"{rpc.get('flushes_within_one_per_destination')}; kill -9 to served again "
            f"{rec.get('served_again_s')} s; new controller {ctl.get('new_controller_s')} s, "
            f"topic created {ctl.get('topic_created_s')} s")


TITLE = (f"(cluster) 3 brokers + etcd vs 1 broker: {PARTITIONS} partitions x {CONSUMERS} share "
         "consumers, explicit")


def _get(*path: str) -> Callable[[dict[str, Any]], Any]:
    def get(d: dict[str, Any]) -> Any:
        for k in ("cluster", *path):
            if not isinstance(d, dict) or k not in d:
                return None
            d = d[k]
        return d
    return get


REPORT_ROWS = [
    report.Row("cluster", TITLE, "3 brokers", "rec/s", _get("cluster", "rate")),
    report.Row("cluster", TITLE, "1 broker", "rec/s", _get("single", "rate")),
    report.Row("cluster", TITLE, "broker CPU per record, 3 brokers summed", "us",
               _get("cluster", "broker_cpu_us_per_record"), digits=1),
    report.Row("cluster", TITLE, "broker CPU per record, 1 broker", "us",
               _get("single", "broker_cpu_us_per_record"), digits=1),
    report.Row("cluster", TITLE, "CPU per record, 3 brokers / 1 broker", "ratio",
               _get("cpu_ratio"), ("<=", TARGET_CPU_RATIO), digits=3),
    report.Row("cluster", TITLE, "the same net of the brokers' idle CPU", "ratio",
               _get("cpu_ratio_net_of_idle"), digits=3),
    report.Row("cluster", TITLE, "CPU per record over the whole phase (joins to the last "
               "acknowledgement), 3 brokers / 1 broker", "ratio", _get("cpu_ratio_whole_phase"),
               digits=3),
    report.Row("cluster", TITLE, "3 brokers, internal topics at RF 3", "rec/s",
               _get("cluster_rf3", "rate")),
    report.Row("cluster", TITLE, "CPU per record, 3 brokers with internal topics at RF 3 / 1 "
               "broker", "ratio", _get("cpu_ratio_rf3"), digits=3),
    report.Row("cluster", TITLE, "share-state write as the share-partition leader waits, 3 "
               "brokers", "ms", _get("cluster", "rpc", "share_state_write_mean_ms"), digits=2),
    report.Row("cluster", TITLE, "share-state write as the share-partition leader waits, 1 "
               "broker", "ms", _get("single", "rpc", "share_state_write_mean_ms"), digits=2),
    report.Row("cluster", TITLE, "WriteShareGroupState RPCs per acknowledgement batch", "RPCs",
               _get("cluster", "rpc", "write_rpcs_per_ack_batch"), digits=3),
    report.Row("cluster", TITLE, "share-partition writes per WriteShareGroupState RPC", "keys",
               _get("cluster", "rpc", "keys_per_write_rpc"), digits=2),
    report.Row("cluster", TITLE, "flushes with <= 1 WriteShareGroupState per destination",
               "ratio", _get("cluster", "rpc", "flushes_within_one_per_destination"),
               (">=", 1.0), digits=4),
    report.Row("cluster", TITLE, "kill -9 of a broker to its partitions served after restart",
               "s", _get("recovery", "served_again_s"), digits=2),
    report.Row("cluster", TITLE, "kill -9 of the controller to a new controller", "s",
               _get("controller", "new_controller_s"), digits=2),
    report.Row("cluster", TITLE, "kill -9 of the controller to a topic created", "s",
               _get("controller", "topic_created_s"), digits=2),
]
