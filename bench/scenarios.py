"""The benchmark's scenarios (see ``bench/run.py`` for the list). Each returns a dict of figures.

Client-side scenarios (a, b*, c, g) take a :class:`System` and run against any Kafka-protocol
broker. Broker-side ones (d, e) start Shoal processes of their own and only apply to Shoal.
"""

from __future__ import annotations

import queue
import re
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import clients
from bench.procs import (
    CTX,
    ROOT,
    Monitor,
    ShoalBroker,
    join_processes,
    remove_tree,
    rss_bytes,
    start_process,
    track_popen,
    untrack_popen,
)

RECORD_SIZE = 1024
FULL_RECORDS = 500_000
LATENCY_RATE = 5_000
LATENCY_SECONDS = 30.0
COLD_START_RUNS = 3
IDLE_WAIT_S = 2.0
RESTART_SHARE_PARTITIONS = 10_000
STALL_S = 30.0  # a share-consume run without a new record for this long is given up


@dataclass(frozen=True)
class ShareVariant:
    name: str
    partitions: int
    consumers: int
    mode: str

    @property
    def title(self) -> str:
        return f"{self.partitions}p x {self.consumers}c {self.mode}"


SHARE_VARIANTS = {
    "b1": ShareVariant("b1", 1, 2, "explicit"),
    "b2": ShareVariant("b2", 4, 1, "implicit"),
    "b3": ShareVariant("b3", 1, 8, "explicit"),
    "b4": ShareVariant("b4", 16, 4, "implicit"),
}
A_PARTITIONS = 4  # scenario (a)'s topic is reused as b2's data set


def parse_shape(text: str) -> ShareVariant:
    """``PxC`` + ``e``/``i`` (e.g. ``1x4e``: 1 partition x 4 consumers, explicit) as an extra
    (b) variant named ``b1x4e`` (``bench.run --shapes``)."""
    body, mode = text[:-1], {"e": "explicit", "i": "implicit"}.get(text[-1:])
    parts, _, consumers = body.partition("x")
    if mode is None or not parts.isdigit() or not consumers.isdigit():
        raise ValueError(f"shape {text!r}: want PxC plus e or i, e.g. 1x4e or 16x2i")
    return ShareVariant(f"b{text}", int(parts), int(consumers), mode)


@dataclass
class System:
    """A broker the client-side scenarios run against."""

    name: str
    bootstrap: str
    admin: clients.Admin
    local: ShoalBroker | None = None
    monitor: Monitor | None = None
    datasets: dict[int, tuple[str, int]] = field(default_factory=dict)  # partitions -> topic, n


@dataclass
class Settings:
    scale: float
    run_id: str
    work_dir: Path
    log: Callable[[str], None]

    def records(self, full: int = FULL_RECORDS) -> int:
        return max(200, int(full * self.scale))

    def topic(self, label: str) -> str:
        return f"bench-{self.run_id}-{label}"


def _broker_share(system: System, name: str, t0: float | None, t1: float | None,
                  ) -> dict[str, Any] | None:
    """The broker's RSS and CPU over a client-measured interval (local Shoal only)."""
    if system.monitor is None or t0 is None or t1 is None:
        return None
    return system.monitor.between(name, t0, t1)


def _collect(out: Any, n: int, timeout: float) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(results) < n:
        try:
            results.append(out.get(timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            break
    return results


def _failed(results: list[dict[str, Any]], expected: int, what: str) -> str | None:
    bad = [r["error"] for r in results if not r.get("ok")]
    if bad:
        return f"{what}: {bad[0]}"
    if len(results) < expected:
        return f"{what}: {expected - len(results)} of {expected} processes reported nothing"
    return None


# ---------------------------------------------------------------------------------------------
# Producing


def produce(settings: Settings, system: System, topic: str, count: int, partitions: int,
            producers: int = 1, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """``producers`` processes share ``count`` records; returns the aggregate rate. ``config``:
    producer settings over ``clients.THROUGHPUT_PRODUCER``."""
    out = CTX.Queue()
    share = [count // producers + (1 if i < count % producers else 0) for i in range(producers)]
    timeout = 60 + count / 2_000
    procs = [start_process(clients.produce_worker,
                           {"bootstrap": system.bootstrap, "topic": topic, "count": share[i],
                            "partitions": partitions, "size": RECORD_SIZE, "index": i,
                            "timeout": timeout, "config": config or {}}, out,
                           name=f"producer-{i}")
             for i in range(producers)]
    try:
        results = _collect(out, producers, timeout + 30)
    finally:
        join_processes(procs, 10)
    err = _failed(results, producers, "producer")
    if err:
        raise RuntimeError(err)
    t0 = min(r["t_start"] for r in results)
    t1 = max(r["t_end"] for r in results)
    secs = t1 - t0
    return {"records": count, "record_bytes": RECORD_SIZE, "partitions": partitions,
            "producers": producers, "t_start": t0, "t_end": t1, "seconds": round(secs, 3),
            "rate": round(count / secs, 1),
            "mb_per_s": round(count * RECORD_SIZE / secs / 2**20, 2),
            "errors": sum(r["errors"] for r in results),
            "producer_config": {**clients.THROUGHPUT_PRODUCER, **(config or {})}}


def scenario_a(settings: Settings, system: System) -> dict[str, Any]:
    """(a) produce N x 1 KiB records, acks=all, to a topic with A_PARTITIONS partitions."""
    n = settings.records()
    topic = settings.topic(f"p{A_PARTITIONS}")
    system.admin.create_topic(topic, A_PARTITIONS)
    res = produce(settings, system, topic, n, A_PARTITIONS)
    system.datasets[A_PARTITIONS] = (topic, n)
    broker = _broker_share(system, "a", res.pop("t_start"), res.pop("t_end"))
    if broker is not None:
        res["broker"] = broker
    res["topic"] = topic
    return res


def dataset(settings: Settings, system: System, partitions: int) -> tuple[str, int, dict | None]:
    """A topic with ``partitions`` partitions holding N records (produced once per run)."""
    if partitions in system.datasets:
        topic, n = system.datasets[partitions]
        return topic, n, None
    n = settings.records()
    topic = settings.topic(f"p{partitions}")
    system.admin.create_topic(topic, partitions)
    settings.log(f"  [{system.name}] pre-producing {n:,} records into {partitions} partition(s)")
    res = produce(settings, system, topic, n, partitions)
    _broker_share(system, f"produce p{partitions}", res["t_start"], res["t_end"])
    system.datasets[partitions] = (topic, n)
    return topic, n, {"rate": res["rate"], "seconds": res["seconds"]}


# ---------------------------------------------------------------------------------------------
# Share consuming


def run_share_consumers(system: System, topic: str, group: str, consumers: int,
                        mode: str, target: int, timeout: float, latency: bool = False,
                        during: Callable[[Any, Any], dict[str, Any] | None] | None = None,
                        bootstraps: list[str] | None = None,
                        ) -> tuple[list[dict[str, Any]], dict[str, Any] | None, float]:
    """Start ``consumers`` ShareConsumer processes on ``group``, release them together, wait
    until ``target`` first deliveries (or ``timeout``). ``during(seen, stop)`` runs in the parent
    once they are released (the latency producer). Consumer i bootstraps from
    ``bootstraps[i % len(bootstraps)]`` when given (spread over a cluster's brokers), else from
    ``system.bootstrap``. Returns (results, during's result, t_go)."""
    system.admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"})
    counter, ready = CTX.Value("q", 0), CTX.Value("i", 0)
    seen = CTX.Array("q", consumers)
    go, stop, out = CTX.Event(), CTX.Event(), CTX.Queue()
    procs = []
    extra = None
    try:
        for i in range(consumers):
            boot = bootstraps[i % len(bootstraps)] if bootstraps else system.bootstrap
            p = {"bootstrap": boot, "group": group, "topic": topic, "mode": mode,
                 "index": i, "target": target, "timeout": timeout, "latency": latency}
            procs.append(start_process(clients.share_consume_worker, p, counter, ready, seen,
                                       go, stop, out, name=f"share-consumer-{i}"))
        deadline = time.monotonic() + 60
        while ready.value < consumers:
            if time.monotonic() > deadline or not all(p.is_alive() for p in procs):
                break
            time.sleep(0.02)
        t_go = time.monotonic()
        go.set()
        if during is not None:
            extra = during(seen, stop)
        end = t_go + timeout + 5
        last, last_change = -1, time.monotonic()
        while not stop.is_set() and time.monotonic() < end:
            if not any(p.is_alive() for p in procs):
                break
            now = time.monotonic()
            if counter.value != last:
                last, last_change = counter.value, now
            elif now - last_change > STALL_S:  # no new record for a while: give up early
                break
            stop.wait(0.02)
        stop.set()
        results = _collect(out, consumers, 30)
    finally:
        stop.set()
        join_processes(procs, 15)
    return results, extra, t_go


def _share_figures(results: list[dict[str, Any]], target: int, t_go: float) -> dict[str, Any]:
    ok = [r for r in results if r.get("ok")]
    records = sum(r["records"] for r in ok)
    firsts = [r["t_first"] for r in ok if r["t_first"] is not None]
    lasts = [r["t_last"] for r in ok if r["t_last"] is not None]
    fig: dict[str, Any] = {"records": records, "target_records": target,
                           "complete": records >= target,
                           "redelivered": sum(r["redelivered"] for r in ok),
                           "errors": sum(r["errors"] for r in ok),
                           "per_consumer": [r["records"]
                                            for r in sorted(ok, key=lambda r: r["index"])]}
    first_errors = [r["first_error"] for r in ok if r.get("first_error")]
    if first_errors:
        fig["first_error"] = first_errors[0]
    if firsts and lasts:
        t_first, t_last = min(firsts), max(lasts)
        fig["t_first"], fig["t_last"] = t_first, t_last
        fig["seconds"] = round(t_last - t_first, 3)
        fig["rate"] = round(records / (t_last - t_first), 1) if t_last > t_first else None
        fig["join_s"] = round(t_first - t_go, 3)
        fig["rate_incl_join"] = round(records / (t_last - t_go), 1)
        fig["mb_per_s"] = (round(fig["rate"] * RECORD_SIZE / 2**20, 2)
                           if fig["rate"] is not None else None)
    return fig


def scenario_b(settings: Settings, system: System, variant: ShareVariant) -> dict[str, Any]:
    """(b) share-consume N pre-produced records with a fresh share group (reset earliest)."""
    topic, n, pre = dataset(settings, system, variant.partitions)
    group = f"bench-{settings.run_id}-{variant.name}"
    timeout = 30 + n / 5_000
    results, _, t_go = run_share_consumers(system, topic, group, variant.consumers,
                                           variant.mode, n, timeout)
    err = _failed(results, variant.consumers, "share consumer")
    fig = _share_figures(results, n, t_go)
    fig.update(partitions=variant.partitions, consumers=variant.consumers, mode=variant.mode,
               topic=topic, group=group)
    if pre is not None:
        fig["pre_produce"] = pre
    broker = _broker_share(system, variant.name, fig.pop("t_first", None),
                           fig.pop("t_last", None))
    if broker is not None:
        fig["broker"] = broker
    if err:
        fig["error"] = err
    elif not fig["complete"]:
        fig["error"] = (f"gave up (no progress for {STALL_S:.0f} s or {timeout:.0f} s in all) "
                        f"with {fig['records']} of {n} records")
    return fig


# ---------------------------------------------------------------------------------------------
# End-to-end latency


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def scenario_c(settings: Settings, system: System) -> tuple[dict[str, Any], list[float]]:
    """(c) fixed-rate produce, 2 share consumers; latency from produce() to poll() return."""
    duration = max(3.0, LATENCY_SECONDS * settings.scale)
    consumers, partitions, mode = 2, 1, "implicit"
    topic = settings.topic("lat")
    system.admin.create_topic(topic, partitions)
    group = f"bench-{settings.run_id}-c"
    target = int(LATENCY_RATE * duration)
    warmup_min, warmup_max = (2.0 if settings.scale >= 1 else 1.0), 20.0
    timeout = warmup_max + duration + 20
    prod_out = CTX.Queue()

    def producer(seen: Any, _stop: Any) -> dict[str, Any]:
        p = {"bootstrap": system.bootstrap, "topic": topic, "rate": LATENCY_RATE,
             "duration": duration, "size": RECORD_SIZE, "partitions": partitions,
             "consumers": consumers, "warmup_min": warmup_min, "warmup_max": warmup_max}
        proc = start_process(clients.latency_produce_worker, p, seen, prod_out,
                             name="latency-producer")
        try:
            res = _collect(prod_out, 1, warmup_max + duration + 60)
        finally:
            join_processes([proc], 10)
        if not res or not res[0].get("ok"):
            raise RuntimeError(f"latency producer: {res[0]['error'] if res else 'no result'}")
        return res[0]

    results, prod, _t_go = run_share_consumers(system, topic, group, consumers, mode, target,
                                               timeout, latency=True, during=producer)
    err = _failed(results, consumers, "share consumer")
    lat = array("q")
    for r in results:
        if r.get("ok") and r.get("latencies_ns"):
            lat.frombytes(r["latencies_ns"])
    ms = sorted(v / 1e6 for v in lat)
    fig: dict[str, Any] = {
        "rate_target": LATENCY_RATE, "measured_seconds": duration, "consumers": consumers,
        "partitions": partitions, "mode": mode, "record_bytes": RECORD_SIZE,
        "produced": prod["measured"] if prod else None,
        "received": len(ms), "missing": (prod["measured"] - len(ms)) if prod else None,
        "achieved_rate": (round(prod["achieved_rate"], 1)
                          if prod and prod["achieved_rate"] else None),
        "warmup_s": round(prod["warmup_s"], 2) if prod else None,
        "warmup_all_consumers": prod["warmup_all_consumers"] if prod else None,
        "producer_config": clients.LATENCY_PRODUCER,
        "per_consumer": [r["records"] for r in sorted((r for r in results if r.get("ok")),
                                                       key=lambda r: r["index"])],
    }
    if ms:
        fig.update(p50_ms=round(percentile(ms, 50), 3), p99_ms=round(percentile(ms, 99), 3),
                   p999_ms=round(percentile(ms, 99.9), 3), max_ms=round(ms[-1], 3),
                   mean_ms=round(statistics.fmean(ms), 3))
        step = max(1, len(ms) // 400)
        fig["cdf_ms"] = [round(v, 3) for v in ms[::step]] + [round(ms[-1], 3)]
    broker = _broker_share(system, "c", prod["t_measure"] if prod else None,
                           prod["t_end"] if prod else None)
    if broker is not None:
        fig["broker"] = broker
    if err:
        fig["error"] = err
    elif fig["missing"]:
        fig["error"] = f"{fig['missing']} measured records never delivered within {timeout:.0f}s"
    return fig, ms


# ---------------------------------------------------------------------------------------------
# Footprint (Shoal only)


def scenario_d_cold(settings: Settings, log_path: Path,
                    overrides: dict[str, str]) -> dict[str, Any]:
    """(d) cold start to first successful Metadata (fresh data dir each time), then idle RSS."""
    times = []
    idle_rss = None
    for i in range(COLD_START_RUNS):
        data = Path(tempfile.mkdtemp(prefix="shoal-bench-cold-", dir=settings.work_dir))
        b = ShoalBroker(data / "data", log_path, overrides)
        try:
            times.append(b.start(timeout=30))
            if i == COLD_START_RUNS - 1:
                ready_rss = rss_bytes(b.pid)
                time.sleep(IDLE_WAIT_S)
                idle_rss = rss_bytes(b.pid)
        finally:
            b.stop()
            remove_tree(data)
    return {"cold_start_s": round(statistics.median(times), 3),
            "cold_start_runs_s": [round(t, 3) for t in times],
            "rss_at_ready_mb": round(ready_rss / 2**20, 1) if ready_rss else None,
            "idle_rss_mb": round(idle_rss / 2**20, 1) if idle_rss else None,
            "idle_wait_s": IDLE_WAIT_S}


# ---------------------------------------------------------------------------------------------
# Restart with share state (Shoal only): bench/share_state_restart.py, run as it is


# One line per restart, e.g. "restart after crash #2: loaded 10000 share-partitions (110000
# records) from 50 partitions in 1801 ms (broker start 1851 ms)"; the script may repeat restarts.
_LOAD_RE = re.compile(r"restart after (clean stop|crash)(?: #\d+)?: loaded (\d+) share-partitions "
                      r"\((\d+) records\).*? in (\d+) ms(?: \(broker start (\d+) ms\))?")


def scenario_e(settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    script = ROOT / "bench" / "share_state_restart.py"
    cmd = [sys.executable, str(script)]
    keys = RESTART_SHARE_PARTITIONS
    if settings.scale < 1:
        side = max(10, round((RESTART_SHARE_PARTITIONS * settings.scale) ** 0.5))
        keys = side * side
        cmd += ["--groups", str(side), "--partitions", str(side)]
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-restart-", dir=settings.work_dir))
    cmd += ["--dir", str(work)]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    track_popen(proc)  # type: ignore[arg-type]
    try:
        stdout, _ = proc.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
        raise RuntimeError("bench/share_state_restart.py did not finish within 400 s") from None
    finally:
        untrack_popen(proc)  # type: ignore[arg-type]
        remove_tree(work)
    text = stdout.decode(errors="replace")
    fig: dict[str, Any] = {"share_partitions": keys, "script": "bench/share_state_restart.py",
                           "script_seconds": round(time.monotonic() - started, 1),
                           "output": text.strip().splitlines()[-8:]}
    runs: dict[str, list[tuple[int, int | None]]] = {"clean": [], "crash": []}
    for m in _LOAD_RE.finditer(text):
        kind = "clean" if m.group(1) == "clean stop" else "crash"
        runs[kind].append((int(m.group(4)), int(m.group(5)) if m.group(5) else None))
        fig[f"{kind}_records"] = int(m.group(3))
        fig["share_partitions"] = int(m.group(2))
    for kind, got in runs.items():  # the median when the script restarts more than once
        if got:
            fig[f"{kind}_load_ms"] = round(statistics.median(ms for ms, _ in got))
            fig[f"{kind}_load_runs_ms"] = [ms for ms, _ in got]
            starts = [s for _, s in got if s is not None]
            if starts:
                fig[f"{kind}_broker_start_ms"] = round(statistics.median(starts))
    if proc.returncode != 0:
        fig["error"] = f"exit status {proc.returncode}: {' | '.join(fig['output'][-3:])}"
    elif "clean_load_ms" not in fig:
        fig["error"] = "could not read the script's output (format changed?)"
    log(f"  restart: {' | '.join(fig['output'][-3:])}")
    return fig


# ---------------------------------------------------------------------------------------------
# Spark share source (issue 8): bench/spark_source.py


def scenario_g(settings: Settings, system: System, records: int | None = None,
               partitions: int | None = None, record_locks: int | None = None,
               **query: Any) -> dict[str, Any]:
    """(g) records/s through a trivial Spark streaming query on the ``shoal-share`` source.

    Skipped (``{"skipped": reason}``) where pyspark or Java is missing. ``query`` goes to
    :func:`bench.spark_source.run` (max_records, spark_partitions, poll_timeout_ms,
    options).
    """
    from bench import spark_source as g

    reason = g.unavailable()
    if reason:
        return {"skipped": reason}
    n = records if records is not None else max(g.MIN_RECORDS,
                                                 settings.records(g.FULL_RECORDS))
    partitions = partitions or g.PARTITIONS
    record_locks = g.RECORD_LOCKS if record_locks is None else record_locks
    topic = settings.topic(f"spark-p{partitions}")
    group = f"bench-{settings.run_id}-g"
    system.admin.create_topic(topic, partitions)
    settings.log(f"  [{system.name}] pre-producing {n:,} records into {partitions} partitions")
    pre = produce(settings, system, topic, n, partitions)
    configs = {"share.auto.offset.reset": "earliest"}
    if record_locks:
        configs["share.partition.max.record.locks"] = str(record_locks)
    try:
        system.admin.set_group_configs(group, configs)
    except RuntimeError:  # a broker with a lower ceiling: its default lock limit, noted
        if not record_locks:
            raise
        system.admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"})
        record_locks = 0
    fig = g.run(system.bootstrap, topic, group, n, **query)
    fig.update(partitions=partitions, record_locks=record_locks or "broker default",
               topic=topic, group=group, record_bytes=RECORD_SIZE,
               pre_produce={"rate": pre["rate"], "seconds": pre["seconds"]})
    broker = _broker_share(system, "g", fig.pop("t_steady_start", None), fig.pop("t_end", None))
    if broker is not None:
        fig["broker"] = broker
    if "error" not in fig and not fig.get("complete"):
        fig["error"] = f"the query ended with {fig.get('records')} of {n} records"
    return fig
