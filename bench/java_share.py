"""Share-consume with Apache Kafka's Java client (issue 26): Shoal and Apache Kafka side by side.

``bench/java/ShareConsumeBench.java`` (kafka-clients 4.1.0 ``KafkaShareConsumer``, the jars of
``make java-clients``) is compiled with javac and run once per shape: 1 partition holding
``--records`` 1 KiB records, 1, 4 and 8 consumers (threads of one JVM) of a new share group
(``share.auto.offset.reset=earliest``), implicit and explicit (every record ACCEPTed, sent with
the next poll) acknowledgement, the client's default fetch settings (fetch.max.wait.ms 500,
fetch.min.bytes 1, fetch.max.bytes 50 MiB, max.poll.records 500).

Per shape and broker, between the first record received and the last first delivery:

- ``rate``: distinct records / seconds;
- ``cpu_us_per_record``: the broker process's own CPU time (utime + stime from
  ``/proc/<pid>/stat``, all threads) over that window, per record delivered in it;
- ``fetches_per_record`` and ``records_per_fetch``: ShareFetch requests over the window. From
  the broker for Shoal (``shoal_share_fetch_requests_total`` on its metrics endpoint) and for
  Kafka (JMX ``kafka.network:type=RequestMetrics,name=RequestsPerSec,request=ShareFetch``, read
  by attaching to the broker's JVM); ``client_fetches`` is the clients' own ``fetch-total``;
- ``empty_pct`` and ``parked_pct``: Shoal's ShareFetch answers without records and the requests
  that waited at least once (``shoal_share_fetch_empty_responses_total``,
  ``shoal_share_fetch_parked_total``); Kafka does not count these (its purgatory size is a
  gauge), so for it ``empty_poll_pct`` (the clients' polls that returned nothing) is the
  comparable figure, reported for both.

Rounds alternate the brokers shape by shape (Shoal, Kafka, Kafka, Shoal, ...) after one untimed
warm-up round on each (a cold JVM spends several times its warm CPU per record); the report gives
medians and the spread (min-max) of each figure.

    .venv/bin/python -m bench.java_share                       # Shoal only (its own broker)
    .venv/bin/python -m bench.java_share --kafka               # also ../shared/peer-kafka, started and stopped here
    .venv/bin/python -m bench.java_share --records 100000 --rounds 3 --shapes 4:explicit,8:explicit

``make bench-java`` runs it (``SCALE`` scales the records, ``KAFKA=1`` adds Apache Kafka).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.procs import PAGE_TICKS, ROOT, ShoalBroker, free_port, track_popen, untrack_popen
from bench.profiling import find_py_spy

SOURCE = Path(__file__).resolve().parent / "java" / "ShareConsumeBench.java"
SUMS = ROOT / "tests" / "integration" / "java" / "jars.sha256"
PEER = Path(os.environ.get("PEER_KAFKA_DIR", ROOT.parent / "shared" / "peer-kafka"))
if not PEER.is_dir():
    PEER = Path("/work/shared/peer-kafka")
PEER_PID = Path(os.environ.get("PEER_KAFKA_ROOT", "/tmp/peer-kafka")) / "peer.pid"
SHAPES = [(1, "implicit"), (1, "explicit"), (4, "implicit"), (4, "explicit"),
          (8, "implicit"), (8, "explicit")]
SHOAL_COUNTERS = ("shoal_share_fetch_requests_total", "shoal_share_fetch_empty_responses_total",
                  "shoal_share_fetch_parked_total", "shoal_share_acknowledge_requests_total",
                  "shoal_inter_broker_requests_total",
                  "shoal_share_acquisition_lock_timeouts_total",
                  "shoal_share_partition_acquired_records")


def cpu_seconds(pid: int) -> tuple[float, float, int] | None:
    """(user, system) CPU seconds and minor page faults of ``pid``, all its threads; None if
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) / PAGE_TICKS, int(fields[12]) / PAGE_TICKS, int(fields[7])


def classpath() -> str:
    """The jars of ``make java-clients``; ``SHOAL_JAVA_LIBS`` names another directory, whose
    jars are all used when it lacks the pinned ones (e.g. Kafka's own libs/)."""
    libs = Path(os.environ.get("SHOAL_JAVA_LIBS", ROOT / ".venv" / "java-libs"))
    jars = [libs / n for n in SUMS.read_text().split()[1::2]]
    missing = [str(j) for j in jars if not j.is_file()]
    if missing and "SHOAL_JAVA_LIBS" in os.environ:
        jars = sorted(libs.glob("*.jar"))
        missing = [] if any(j.name.startswith("kafka-clients-") for j in jars) else missing
    if missing:
        raise RuntimeError(f"Kafka's Java clients are missing ({missing}); run `make java-clients`")
    return os.pathsep.join(map(str, jars))


def compile_program(classes: Path) -> str:
    """Compile the program into ``classes``; returns the classpath to run it with."""
    cp = classpath()
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("no JDK (javac); run `make java-clients`")
    built = subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", cp, str(SOURCE)],
                           check=False, capture_output=True, text=True, timeout=180)
    if built.returncode != 0:
        raise RuntimeError(f"javac failed:\n{built.stderr}")
    return os.pathsep.join([str(classes), cp])


class Target:
    """A broker under test: its bootstrap, its process id and how to read its counters.

    ``more`` adds brokers of the same cluster as (pid, metrics URL) pairs: their CPU and
    counters are summed with the first one's (``bench/cluster_java.py``)."""

    def __init__(self, name: str, bootstrap: str, pid: int, metrics_url: str | None,
                 more: list[tuple[int, str]] | None = None) -> None:
        self.name, self.bootstrap, self.pid, self.metrics_url = name, bootstrap, pid, metrics_url
        self.pids = [pid, *(p for p, _ in more or ())]
        self.metrics_urls = [] if metrics_url is None else [metrics_url,
                                                            *(u for _, u in more or ())]
        self.topic = ""
        self.profiled = False  # bench.profiled_broker: profile between "first" and "done"

    def cpu(self) -> tuple[float, float, int] | None:
        """``cpu_seconds`` summed over the target's broker processes; None if one is gone."""
        each = [cpu_seconds(pid) for pid in self.pids]
        if any(c is None for c in each):
            return None
        return (sum(c[0] for c in each if c), sum(c[1] for c in each if c),
                sum(c[2] for c in each if c))

    def counters(self) -> dict[str, float]:
        if not self.metrics_urls:
            return {}
        out = dict.fromkeys(SHOAL_COUNTERS, 0.0)
        for url in self.metrics_urls:
            with urllib.request.urlopen(url, timeout=10) as resp:
                text = resp.read().decode()
            for line in text.splitlines():
                name = line.split("{", 1)[0].split(" ", 1)[0]
                if name in out:
                    out[name] += float(line.rsplit(" ", 1)[1])
        return out


def produce(bootstrap: str, topic: str, n: int, partitions: int = 1,
            config: dict[str, Any] | None = None) -> None:
    """Create ``topic`` and write record i to partition i % ``partitions`` (``config``:
    producer settings over the defaults here)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    time.sleep(0.5)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                  "batch.num.messages": 10000, **(config or {})})
    value = b"x" * 1024
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0


def new_group(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


def run_shape(cp: str, target: Target, consumers: int, mode: str, records: int,
              timeout: float = 180, partitions: int = 1, rate: float = 0,
              bootstraps: list[str] | None = None) -> dict[str, Any]:
    """One run of the Java program against ``target``; the figures of that run. ``rate``
    (records/s over the consumers, 0 for as fast as they go) paces the consumers.
    ``bootstraps``: independent brokers (not a cluster) holding ``records / n`` records each;
    consumer i reads from broker i % n (``-Dbootstraps``, ShareConsumeBench.java)."""
    group = f"jbench-{uuid.uuid4().hex[:8]}"
    for bootstrap in bootstraps or [target.bootstrap]:
        new_group(bootstrap, group)
    # SHOAL_BENCH_JAVA_OPTS: more JVM options, e.g. -Dstall.ms=45000 (ShareConsumeBench.java).
    cmd = [shutil.which("java") or "java", "-XX:+UseSerialGC", "-Xss512k",
           *os.environ.get("SHOAL_BENCH_JAVA_OPTS", "").split(),
           f"-Dpartitions={partitions}", f"-Drate={rate}",
           *([f"-Dbootstraps={','.join(bootstraps)}"] if bootstraps else []), "-cp", cp,
           "ShareConsumeBench", target.bootstrap, target.topic, group, str(consumers), mode,
           str(records), str(timeout)]
    if target.metrics_url is None:  # Apache Kafka: its counters through JMX
        cmd.append(str(target.pid))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    track_popen(proc)  # type: ignore[arg-type]
    marks: dict[str, tuple[float, float | None, dict[str, float], int]] = {}
    spies: list[subprocess.Popen[bytes]] = []
    result: dict[str, Any] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            ev = json.loads(line)
            if ev["event"] in ("first", "done"):
                marks[ev["event"]] = (time.monotonic(), target.cpu(),
                                      target.counters(), ev["records"])
                spies = _py_spy(target, spies, ev["event"])
                if target.profiled:
                    for pid in target.pids:
                        os.kill(pid, signal.SIGUSR1 if ev["event"] == "first" else signal.SIGUSR2)
            elif ev["event"] == "result":
                result = ev
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        untrack_popen(proc)  # type: ignore[arg-type]
    if result and "done" in marks and ("first" not in marks or not result["complete"]):
        # Stalled (no record for 20 s, see ShareConsumeBench) or timed out: reported apart,
        # left out of the medians.
        k_end = marks["done"][2]
        return {"complete": False, "records": result["records"], "rate": None,
                "ack_failures": result.get("ack_failures", 0),
                "ack_failure_lines": _ack_failure_lines(proc),
                "empty_poll_pct": 100 * result["empty_polls"] / max(result["polls"], 1),
                # A stall with records still acquired waits for their acquisition locks.
                "acquired_at_stall": k_end.get("shoal_share_partition_acquired_records"),
                "lock_timeouts": k_end.get("shoal_share_acquisition_lock_timeouts_total")}
    if not result or "first" not in marks or "done" not in marks:
        err = proc.stderr.read()[-3000:] if proc.stderr else ""
        raise RuntimeError(f"{target.name} {consumers}x{mode}: no result (exit {proc.returncode})"
                           f", marks {sorted(marks)}, result {result}:\n{err}")
    (t0, c0, k0, r0), (t1, c1, k1, r1) = marks["first"], marks["done"]
    n = max(r1 - r0, 1)
    out: dict[str, Any] = {
        "records": result["records"], "complete": result["complete"],
        "rate": result["rate"], "redelivered": result["delivered"] - result["records"],
        "incl_join_s": result["incl_join_seconds"],
        "ack_failures": result.get("ack_failures", 0),  # the client's commit callback
        "ack_failure_lines": _ack_failure_lines(proc) if result.get("ack_failures") else [],
        "empty_poll_pct": 100 * result["empty_polls"] / max(result["polls"], 1),
        "client_fetches": result["client"].get("fetch-total"),
        "client_fetch_latency_avg_ms": _avg(result["client"].get("fetch-latency-avg"), consumers),
    }
    if c0 is not None and c1 is not None:
        user, system = c1[0] - c0[0], c1[1] - c0[1]
        out["cpu_us_per_record"] = 1e6 * (user + system) / n
        out["sys_pct_of_cpu"] = 100 * system / max(user + system, 1e-9)
        out["page_faults_per_record"] = (c1[2] - c0[2]) / n
        out["broker_cpu_pct"] = 100 * (user + system) / max(t1 - t0, 1e-9)
    if k0:
        d = {k: k1[k] - k0[k] for k in k0}
        fetches = d["shoal_share_fetch_requests_total"]
        out["empty_pct"] = 100 * d["shoal_share_fetch_empty_responses_total"] / max(fetches, 1)
        out["parked_pct"] = 100 * d["shoal_share_fetch_parked_total"] / max(fetches, 1)
        out["acknowledge_requests"] = d["shoal_share_acknowledge_requests_total"]
        out["inter_broker_requests"] = d["shoal_inter_broker_requests_total"]  # a cluster's
        out["lock_timeouts"] = d["shoal_share_acquisition_lock_timeouts_total"]
    else:
        jmx = result.get("jmx", {})
        fetches = sum(v for k, v in jmx.items()
                      if "RequestMetrics" in k and "name=RequestsPerSec" in k
                      and "request=ShareFetch" in k)
        out["jmx"] = {k: v for k, v in jmx.items() if v}
    out["fetches"] = fetches
    out["fetches_per_record"] = fetches / n
    out["records_per_fetch"] = n / max(fetches, 1)
    return out


def _ack_failure_lines(proc: subprocess.Popen[str]) -> list[str]:
    """The "ack failure" lines ShareConsumeBench wrote on stderr (it writes at most 20)."""
    text = proc.stderr.read() if proc.stderr else ""
    return [line for line in text.splitlines() if line.startswith("ack failure")]


def _py_spy(target: Target, spies: list[subprocess.Popen[bytes]],
            event: str) -> list[subprocess.Popen[bytes]]:
    """With ``SHOAL_BENCH_PYSPY=DIR``: sample every broker of ``target`` with py-spy from the
    first record ("first") to the last ("done"), into ``DIR/<name>-<pid>.txt`` (raw format,
    one line per distinct stack with its sample count; a later round overwrites)."""
    out_dir = os.environ.get("SHOAL_BENCH_PYSPY")
    if not out_dir:
        return spies
    if event == "first":
        exe = find_py_spy() or "py-spy"
        return [subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", "250",
                                  "--nonblocking", "--format", "raw", "--function", "-o",
                                  os.path.join(out_dir, f"{target.name}-{pid}.txt")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for pid in target.pids]
    for spy in spies:
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
    return []


def _avg(total: float | None, consumers: int) -> float | None:
    return None if total is None else total / consumers


def start_kafka() -> Target:
    done = subprocess.run([str(PEER / "start.sh")], check=False, capture_output=True, text=True,
                          timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"peer-kafka did not start:\n{done.stderr[-3000:]}")
    pid = int(PEER_PID.read_text().split()[0])
    return Target("kafka", "127.0.0.1:19092", pid, None)


def stop_kafka() -> None:
    subprocess.run([str(PEER / "stop.sh")], check=False, capture_output=True, timeout=120)


FIGURES = ("rate", "cpu_us_per_record", "sys_pct_of_cpu", "page_faults_per_record", "fetches_per_record", "records_per_fetch", "empty_pct",
           "parked_pct", "empty_poll_pct", "broker_cpu_pct", "redelivered")


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread (min, max) of each figure over the rounds."""
    out: dict[str, Any] = {"rounds": len(runs), "stalled": sum(not r["complete"] for r in runs)}
    runs = [r for r in runs if r["complete"]]
    for f in FIGURES:
        vals = [r[f] for r in runs if r.get(f) is not None]
        if vals:
            out[f] = statistics.median(vals)
            out[f + "_range"] = [min(vals), max(vals)]
    return out


def table(summary: dict[str, dict[str, Any]], systems: list[str]) -> str:
    head = ("| shape | broker | rec/s | broker CPU us/rec | of it sys % | page faults/rec | ShareFetch/rec | rec/ShareFetch | "
            "empty % | parked % | empty polls % | stalled runs |")
    lines = [head, "|" + "---|" * 12]
    for shape, per in summary.items():
        for s in systems:
            r = per.get(s)
            if r is None:
                continue
            lines.append(
                f"| {shape} | {s} | {_f(r, 'rate', 0)} | {_f(r, 'cpu_us_per_record', 2)} | "
                f"{_f(r, 'sys_pct_of_cpu', 0)} | {_f(r, 'page_faults_per_record', 2)} | "
                f"{_f(r, 'fetches_per_record', 4)} | {_f(r, 'records_per_fetch', 1)} | "
                f"{_f(r, 'empty_pct', 1)} | {_f(r, 'parked_pct', 1)} | "
                f"{_f(r, 'empty_poll_pct', 1)} | {r['stalled']} |")
        if all(per.get(s, {}).get("rate") for s in ("kafka", "shoal")):
            ratio = per["shoal"].get("cpu_us_per_record", 0) / max(
                per["kafka"].get("cpu_us_per_record", 1e-9), 1e-9)
            rate = per["shoal"]["rate"] / max(per["kafka"]["rate"], 1e-9)
            lines.append(f"| {shape} | shoal / kafka | {rate:.2f}x | {ratio:.2f}x | | | | | | | | |")
    return "\n".join(lines)


def _f(r: dict[str, Any], key: str, digits: int) -> str:
    v = r.get(key)
    if v is None:
        return "-"
    lo, hi = r.get(key + "_range", [v, v])
    spread = f" ({lo:,.{digits}f}-{hi:,.{digits}f})" if r.get("rounds", 1) > 1 else ""
    return f"{v:,.{digits}f}{spread}"


def run(targets: list[Target], cp: str, records: int, rounds: int,
        shapes: list[tuple[int, str]], partitions: int = 1) -> dict[str, Any]:
    for t in targets:
        t.topic = f"jbench-{uuid.uuid4().hex[:8]}"
        produce(t.bootstrap, t.topic, records, partitions)
    for t in targets:  # untimed warm-up: JIT, first share group, internal topics
        run_shape(cp, t, 4, "explicit", records, partitions=partitions)
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for consumers, mode in shapes:
        shape = f"{partitions}x{consumers} {mode}"
        raw[shape] = {t.name: [] for t in targets}
        for i in range(rounds):
            order = targets if i % 2 == 0 else list(reversed(targets))
            for t in order:
                r = run_shape(cp, t, consumers, mode, records, partitions=partitions)
                raw[shape][t.name].append(r)
                if not r["complete"]:
                    print(f"  {shape} {t.name}: stalled at {r['records']:,} records "
                          "(client livelock, left out)", flush=True)
                    continue
                print(f"  {shape} {t.name}: {r['rate']:,.0f} rec/s, "
                      f"{r.get('cpu_us_per_record', 0):.2f} us/rec, "
                      f"{r['records_per_fetch']:.1f} rec/fetch", flush=True)
    summary = {shape: {name: summarize(rs) for name, rs in per.items()}
               for shape, per in raw.items()}
    return {"records": records, "rounds": rounds, "summary": summary, "runs": raw}


def parse_shapes(text: str) -> list[tuple[int, str]]:
    out = []
    for part in text.split(","):
        n, _, mode = part.partition(":")
        out.append((int(n), mode or "explicit"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies --records")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default="", help="e.g. 1:implicit,8:explicit (default: all six)")
    ap.add_argument("--partitions", type=int, default=1,
                    help="partitions of the topic (records spread round-robin); default 1")
    ap.add_argument("--kafka", action="store_true",
                    help="also run against Apache Kafka 4.1.0 (peer-kafka, started and stopped)")
    ap.add_argument("--kafka-running", action="store_true",
                    help="also run against the peer-kafka broker already running (not stopped)")
    ap.add_argument("--no-shoal", action="store_true", help="only Apache Kafka")
    ap.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                    help="broker config for the Shoal broker (repeatable)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="environment variable for the Shoal broker (repeatable)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--profile", type=Path, metavar="PSTATS",
                    help="run Shoal under cProfile (bench.profiled_broker), on between each run's "
                    "first record and its last; write the cumulative stats here")
    args = ap.parse_args()
    records = max(2_000, int(args.records * args.scale))
    shapes = parse_shapes(args.shapes) if args.shapes else SHAPES
    tmp = Path(tempfile.mkdtemp(prefix="shoal-bench-java-"))
    cp = compile_program(tmp / "classes")
    targets: list[Target] = []
    broker = None
    try:
        if not args.no_shoal:
            mport = free_port()
            overrides = {"metrics.listen": f"127.0.0.1:{mport}", "metrics.render.cache.ms": "0"}
            overrides.update(o.split("=", 1) for o in args.override)  # type: ignore[misc]
            env = dict(e.split("=", 1) for e in args.env)
            profile = args.profile is not None
            broker = ShoalBroker(
                tmp / "data", tmp / "broker.log", overrides,
                wrapper=["-m", "bench.profiled_broker"] if profile else None,
                env={**env, "SHOAL_BENCH_PROFILE": str(args.profile.resolve())} if profile
                else env)
            broker.start()
            shoal = Target("shoal", broker.bootstrap, broker.pid,
                           f"http://127.0.0.1:{mport}/metrics")
            shoal.profiled = profile
            targets.append(shoal)
        if args.kafka:
            targets.append(start_kafka())
        elif args.kafka_running:
            targets.append(Target("kafka", "127.0.0.1:19092",
                                  int(PEER_PID.read_text().split()[0]), None))
        res = run(targets, cp, records, args.rounds, shapes, args.partitions)
    finally:
        if broker is not None:
            broker.stop()
        if args.kafka:
            stop_kafka()
    res["table"] = table(res["summary"], [t.name for t in targets])
    print(f"\nKafkaShareConsumer, {args.partitions} partition(s), {records:,} x 1 KiB, medians of {args.rounds} "
          "alternating rounds (min-max)\n")
    print(res["table"])
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    if args.profile is not None and args.profile.exists():
        import pstats

        pstats.Stats(str(args.profile)).sort_stats("tottime").print_stats(30)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
