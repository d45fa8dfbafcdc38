"""Scenario ``cluster`` (issue 23): a 3-broker cluster next to one broker, and its recovery.

``make bench-cluster`` (``python -m bench.run --only cluster``) starts, with its own data
directories and free ports:

1. **One broker** (no etcd; the baseline). A topic of 12 partitions, N x 1 KiB records produced
   ahead (N = 500,000 x ``--scale``), consumed by 6 ``confluent_kafka.ShareConsumer`` processes
   (explicit ACCEPT) of a new share group, as scenario b.
2. **A cluster**: a real etcd (``etcd`` on PATH, ``make etcd``) and 3 brokers (node ids 1-3),
   each with a PLAINTEXT client listener and an INTERNAL SASL_PLAINTEXT PLAIN listener on which
   they call each other as the super user ``broker`` (as ``tests/integration/cluster``'s
   ``Cluster``). The same workload; consumer i bootstraps from broker i mod 3.
3. **Recovery**: a probe share consumer reads a 12-partition topic; one broker (not the
   controller, not the probe group's coordinator when another is left) is killed with kill -9
   and started again at once from the same command line. Figures, from the kill: the restarted
   broker answering Metadata, Metadata of a surviving broker naming it leader of all its
   partitions again, a record produced to each of them acknowledged (acks=all), and one such
   record of each delivered by the probe ShareConsumer.
4. **Controller failover**: kill -9 of the controller's broker; from the kill, a surviving
   broker's Metadata naming another controller, and a topic created and led on every partition.
   The broker is started again afterwards.

Before each measured phase one share consumer of another group reads 1,200 records of another
topic (``warm_up``), so the one-off work of a cluster's first share group (internal topics
created and their coordinators loaded) is not billed to the measured records.

Every broker runs as ``python -m bench.cluster_broker`` (the plain broker plus counters on
/metrics, see that module), the baseline too. Figures (``results.json``, ``cluster``):

- ``single`` / ``cluster``: records/s (first record to the last, as scenario b), broker CPU s
  over that interval from ``/proc/<pid>/stat`` (summed over the 3 brokers), CPU per delivered
  record (us) and their ratio ``cpu_ratio`` (target: <= 1.2); also the brokers' idle CPU
  (measured for 3 s before the consumers start) and the same figures net of it;
- ``cluster.rpc``: from each broker's ``/metrics`` before and after the phase:
  ``shoal_inter_broker_requests_total{api="WriteShareGroupState"}`` by source and destination,
  acknowledgement batches (ShareAcknowledge and ShareFetch requests carrying acknowledgements,
  counted by the wrapper), share-state writes (``shoal_share_state_write_duration_seconds``
  count and mean), the WriteShareGroupState round trip (mean ms);
  ``write_rpcs_per_ack_batch``, ``keys_per_write_rpc``, and the batching check
  ``flushes_within_one_per_destination`` (the share of persister flushes that sent at most one
  WriteShareGroupState per destination broker; target 1.0) with the most seen;
- ``recovery`` and ``controller`` as above (seconds from the kill -9).

Session settings are the brokers' defaults (``broker.session.timeout.ms`` 9,000: a killed
broker's registration lapses after it, and a restarted one waits its old registration out),
so the recovery figures are what a default cluster shows. ``--override`` applies to every
broker of both phases.
"""

from __future__ import annotations

import queue
import secrets
import shutil
import subprocess
import sys
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import clients, report
from bench.procs import (
    CTX,
    Monitor,
    ShoalBroker,
    cpu_seconds,
    free_port,
    join_processes,
    start_process,
    track_popen,
    untrack_popen,
)
from bench.scenarios import Settings, System, _failed, _share_figures, produce, run_share_consumers

PARTITIONS = 12
CONSUMERS = 6
BROKERS = 3
TARGET_CPU_RATIO = 1.2
WRAPPER = ["-m", "bench.cluster_broker"]
WRITE = "WriteShareGroupState"
T = 60.0  # bound of every wait in the recovery phases
IDLE_S = 3.0  # idle CPU of the brokers measured over this long before consuming

Sample = tuple[str, dict[str, str], float]


# ---------------------------------------------------------------------------------------------
# /metrics text (pure helpers)


def parse_metrics(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition: (name, labels, value); comments skipped.

    Label values may hold escaped quotes and backslashes (``\\"``, ``\\\\``, ``\\n``).
    Raises ValueError on a line that is not a sample."""
    out: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels: dict[str, str] = {}
        brace = line.find("{")
        if brace < 0:
            name, _, rest = line.partition(" ")
        else:
            name, i = line[:brace], brace + 1
            while True:
                while i < len(line) and line[i] in " ,":
                    i += 1
                if i >= len(line):
                    raise ValueError(f"unterminated labels: {line!r}")
                if line[i] == "}":
                    i += 1
                    break
                eq = line.index("=", i)
                key = line[i:eq].strip()
                if line[eq + 1] != '"':
                    raise ValueError(f"unquoted label value: {line!r}")
                j, value = eq + 2, []
                while line[j] != '"':
                    if line[j] == "\\":
                        j += 1
                        value.append({"n": "\n"}.get(line[j], line[j]))
                    else:
                        value.append(line[j])
                    j += 1
                labels[key] = "".join(value)
                i = j + 1
            rest = line[i:]
        fields = rest.split()
        if not name or not fields:
            raise ValueError(f"not a sample: {line!r}")
        out.append((name, labels, float(fields[0])))
    return out


def metric_sum(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for n, lab, v in samples
               if n == name and all(lab.get(k) == want for k, want in labels.items()))


def metric_by(samples: list[Sample], name: str, label: str, **labels: str) -> dict[str, float]:
    """``name``'s samples matching ``labels``, summed per value of ``label``."""
    out: dict[str, float] = {}
    for n, lab, v in samples:
        if n == name and label in lab and all(lab.get(k) == w for k, w in labels.items()):
            out[lab[label]] = out.get(lab[label], 0.0) + v
    return out


def scrape(port: int) -> list[Sample]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return parse_metrics(r.read().decode())


# ---------------------------------------------------------------------------------------------
# Processes: etcd, cluster members


class Etcd:
    """One etcd process (Debian's etcd-server) with its own data dir, on loopback."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir, self.log_path = data_dir, log_path
        self.client_port, self.peer_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> None:
        url = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["etcd", "--name", "bench", "--data-dir", str(self.data_dir),
                 "--listen-client-urls", url, "--advertise-client-urls", url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"bench={peer}"], stdout=log, stderr=subprocess.STDOUT)
        track_popen(self.proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {self.log_path}")
            time.sleep(0.1)
        raise RuntimeError(f"etcd did not become healthy within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            untrack_popen(self.proc)


def member_configs(client_port: int, internal_port: int, secret: str) -> dict[str, str]:
    """Listeners of a cluster member: PLAINTEXT for clients, INTERNAL (SASL PLAIN) for brokers."""
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="broker" password="{secret}" user_broker="{secret}";')
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{internal_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": jaas,
        "super.users": "User:broker",
    }


class Member(ShoalBroker):
    """A cluster member (``--cluster``, ``--node-id``) run through the counting wrapper.

    ``start()`` (ShoalBroker's: Metadata on the PLAINTEXT port) works again after ``kill9()``,
    on the same data directory and ports."""

    def __init__(self, root: Path, node_id: int, etcd: Etcd, secret: str,
                 overrides: dict[str, str]) -> None:
        super().__init__(root / f"broker-{node_id}", root / f"broker-{node_id}.log",
                         wrapper=WRAPPER)
        self.node_id = node_id
        self.etcd = etcd
        self.metrics_port = free_port()
        self.overrides = {**member_configs(self.port, free_port(), secret),
                          "metrics.listen": f"127.0.0.1:{self.metrics_port}",
                          "metrics.render.cache.ms": "0", **overrides}

    def command(self) -> list[str]:
        cmd = [sys.executable, *WRAPPER, "broker", "--data-dir", str(self.data_dir),
               "--cluster", self.etcd.endpoint, "--node-id", str(self.node_id)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        untrack_popen(self.proc)


# ---------------------------------------------------------------------------------------------
# Raw Metadata / FindCoordinator (no client library: its reconnect backoff would blur timings)


def metadata(bootstrap: str, topics: list[str] | None = None, timeout: float = 2.0,
             ) -> tuple[int, set[int], dict[str, dict[int, int]]]:
    """(controller id, live broker ids, {topic: {partition: leader}}) from one broker."""
    from client.blocking import open_connection
    from protocol import codec

    host, _, port = bootstrap.rpartition(":")
    m = codec.request_module(3, 12)
    req = m.MetadataRequest(
        topics=None if topics is None else tuple(m.MetadataRequestTopic(topic_id=None, name=t)
                                                 for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with open_connection(host, int(port), timeout, "bench-cluster-probe") as conn:
        resp = conn.call(3, 12, req)
    leaders = {t.name: {int(p.partition_index): int(p.leader_id) for p in t.partitions}
               for t in resp.topics if not t.error_code}
    return int(resp.controller_id), {int(b.node_id) for b in resp.brokers}, leaders


def group_coordinator(bootstrap: str, group: str, timeout: float = 30.0) -> int:
    from client.blocking import open_connection
    from protocol import codec

    host, _, port = bootstrap.rpartition(":")
    m = codec.request_module(10, 4)
    deadline = time.monotonic() + timeout
    with open_connection(host, int(port), 5, "bench-cluster-probe") as conn:
        while True:
            resp = conn.call(10, 4, m.FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
            (coord,) = resp.coordinators
            if not coord.error_code:
                return int(coord.node_id)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no coordinator for group {group}: {coord.error_code}")
            time.sleep(0.2)


def _until(what: str, probe: Callable[[], Any], timeout: float = T, every: float = 0.05) -> Any:
    """Call ``probe`` until it returns something true (exceptions count as not yet)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            got = probe()
            if got:
                return got
        except Exception as exc:  # noqa: BLE001 - a broker still down answers nothing
            last = exc
        time.sleep(every)
    raise TimeoutError(f"{what} did not happen within {timeout:.0f} s (last error: {last!r})")


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
    pre = produce(settings, system, topic, n, PARTITIONS)
    group = f"bench-{settings.run_id}-{label}"
    warm = warm_up(settings, system, label, bootstraps)
    idle = idle_cpu(pids, IDLE_S)
    before = [scrape(p) for p in metrics_ports]
    monitors = [Monitor(pid) for pid in pids]
    others = {name: Monitor(pid) for name, pid in extra_pids.items()}
    try:
        results, _, t_go = run_share_consumers(system, topic, group, CONSUMERS, "explicit", n,
                                               30 + n / 2_000, bootstraps=bootstraps)
        fig = _share_figures(results, n, t_go)
        t0, t1 = fig.pop("t_first", None), fig.pop("t_last", None)
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
    after = [scrape(p) for p in metrics_ports]
    fig["rpc"] = rpc = rpc_figures(before, after)
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
    """One share consumer of another group reads a small topic first, so that the one-off work
    of a share group's first use (the internal topics created and their coordinators loaded on
    every broker: ``__share_group_state``, ``__consumer_offsets``) falls outside the measured
    phase, on one broker as on three."""
    topic, n = settings.topic(f"{label}-warmup"), 1_200
    system.admin.create_topic(topic, PARTITIONS)
    produce(settings, system, topic, n, PARTITIONS)
    started = time.monotonic()
    results, _, t_go = run_share_consumers(system, topic, f"bench-{settings.run_id}-{label}-warm",
                                           1, "explicit", n, 60, bootstraps=bootstraps)
    fig = _share_figures(results, n, t_go)
    return {"records": fig["records"], "seconds": round(time.monotonic() - started, 2)}


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
# Recovery


def probe_consumer_worker(p: dict[str, Any], stop: Any, out: Any) -> None:
    """A ShareConsumer (explicit ACCEPT) that reports (partition, value, monotonic time) of every
    record whose value starts with ``probe-``. Short reconnect backoffs, so that the figure is
    the broker's recovery rather than librdkafka's backoff (at most 10 s by default)."""
    clients._watch_parent()
    consumer = None
    try:
        from confluent_kafka import AcknowledgeType, ShareConsumer

        consumer = ShareConsumer({"bootstrap.servers": p["bootstrap"], "group.id": p["group"],
                                  "share.acknowledgement.mode": "explicit", "log_level": 3,
                                  "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200})
        consumer.subscribe([p["topic"]])
        while not stop.is_set():
            for msg in consumer.poll(0.1):
                if msg.error() is not None:
                    continue
                value = msg.value() or b""
                if value.startswith(b"probe-"):
                    out.put((msg.partition(), value, time.monotonic()))
                consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
        consumer.close()
        consumer = None
    except Exception:  # noqa: BLE001 - reported to the parent
        out.put((-1, traceback.format_exc(limit=5).encode(), time.monotonic()))


def _wait_delivered(out: Any, want: set[tuple[int, bytes]], seen: dict[tuple[int, bytes], float],
                    timeout: float) -> float:
    """Read the probe consumer's reports until every (partition, value) in ``want`` came;
    returns the time of the last one."""
    deadline = time.monotonic() + timeout
    while not want <= seen.keys():
        try:
            part, value, t = out.get(timeout=max(0.05, deadline - time.monotonic()))
        except queue.Empty as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(want - seen.keys())} probe records never delivered "
                                   f"within {timeout:.0f} s") from exc
            continue
        if part < 0:
            raise RuntimeError(f"probe consumer failed: {value.decode(errors='replace')}")
        seen.setdefault((part, value), t)
    return max(seen[k] for k in want)


def _produce_each(prod: Any, topic: str, parts: list[int], value: bytes, timeout: float) -> float:
    """Produce ``value`` to each partition (acks=all) until acknowledged; the time of the last
    acknowledgement."""
    acked: dict[int, float] = {}
    failed: list[int] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.partition()] = time.monotonic()
        else:
            failed.append(msg.partition())

    pending, deadline = list(parts), time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"produce to {topic} partitions {pending} not acknowledged")
        failed.clear()
        for part in pending:
            prod.produce(topic, value, partition=part, on_delivery=on_delivery)
        prod.flush(max(1.0, deadline - time.monotonic()))
        pending = [q for q in parts if q not in acked]
        if pending:
            time.sleep(0.05)
    return max(acked.values())


def recovery(settings: Settings, members: list[Member]) -> dict[str, Any]:
    """kill -9 of a broker and its restart: seconds from the kill to its partitions served."""
    from confluent_kafka import Producer

    boots = [m.bootstrap for m in members]
    admin = clients.Admin(",".join(boots))
    topic, group = settings.topic("recovery"), f"bench-{settings.run_id}-recovery"
    admin.create_topic(topic, PARTITIONS)
    admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"})
    admin.close()
    stop, out = CTX.Event(), CTX.Queue()
    proc = start_process(probe_consumer_worker, {"bootstrap": ",".join(boots), "group": group,
                                                 "topic": topic}, stop, out, name="probe")
    prod = Producer({"bootstrap.servers": ",".join(boots), "acks": "all", "linger.ms": 0,
                     "message.timeout.ms": 20_000, "reconnect.backoff.ms": 20,
                     "reconnect.backoff.max.ms": 200})
    seen: dict[tuple[int, bytes], float] = {}
    try:
        every = list(range(PARTITIONS))
        _produce_each(prod, topic, every, b"probe-before", T)
        _wait_delivered(out, {(p, b"probe-before") for p in every}, seen, T)
        controller, _, leaders = metadata(boots[0], [topic])
        coordinator = group_coordinator(boots[0], group)
        candidates = [m for m in members if m.node_id not in (controller, coordinator)] or \
            [m for m in members if m.node_id != controller]
        victim = candidates[-1]
        survivor = next(m for m in members if m is not victim)
        mine = sorted(p for p, leader in leaders[topic].items() if leader == victim.node_id)
        settings.log(f"  recovery: kill -9 of broker {victim.node_id} (leads partitions {mine}; "
                     f"controller {controller}, probe group coordinator {coordinator})")
        t_kill = time.monotonic()
        victim.kill9()
        victim.start(timeout=T)  # Metadata on its own port
        t_ready = time.monotonic()

        def led_again() -> bool:
            _, _, now = metadata(survivor.bootstrap, [topic])
            return all(now[topic][p] == victim.node_id for p in mine)

        _until(f"broker {victim.node_id} leading its partitions again", led_again)
        t_led = time.monotonic()
        t_acked = _produce_each(prod, topic, mine, b"probe-after", T)
        t_delivered = _wait_delivered(out, {(p, b"probe-after") for p in mine}, seen, T)
        fig = {"victim": victim.node_id, "victim_partitions": mine, "controller": controller,
               "probe_group_coordinator": coordinator,
               "restarted_answering_metadata_s": round(t_ready - t_kill, 3),
               "leader_again_s": round(t_led - t_kill, 3),
               "produce_acked_s": round(t_acked - t_kill, 3),
               "share_delivered_s": round(t_delivered - t_kill, 3)}
        fig["served_again_s"] = max(fig["leader_again_s"], fig["produce_acked_s"],
                                    fig["share_delivered_s"])
        return fig
    finally:
        stop.set()
        join_processes([proc], 15)
        prod.flush(1)


def controller_failover(settings: Settings, members: list[Member]) -> dict[str, Any]:
    """kill -9 of the controller's broker: seconds to a new controller and a created topic."""
    from confluent_kafka.admin import AdminClient, NewTopic

    controller, _, _ = metadata(members[0].bootstrap)
    victim = next(m for m in members if m.node_id == controller)
    others = [m for m in members if m is not victim]
    settings.log(f"  controller failover: kill -9 of broker {controller} (the controller)")
    t_kill = time.monotonic()
    victim.kill9()

    def new_controller() -> int | None:
        cid, _, _ = metadata(others[0].bootstrap)
        return cid if cid not in (controller, -1) else None

    elected = _until("a new controller", new_controller)
    t_elected = time.monotonic()
    topic = settings.topic("after-failover")
    admin = AdminClient({"bootstrap.servers": ",".join(m.bootstrap for m in others),
                         "reconnect.backoff.max.ms": 200})

    def created() -> bool:
        fut = admin.create_topics([NewTopic(topic, 4, 1)], operation_timeout=5,
                                  request_timeout=5)[topic]
        try:
            fut.result(10)
        except Exception as exc:  # noqa: BLE001 - TOPIC_ALREADY_EXISTS after a retry is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
        _, _, leaders = metadata(others[0].bootstrap, [topic])
        return len(leaders.get(topic, {})) == 4 and all(x >= 0 for x in leaders[topic].values())

    _until(f"topic {topic} created and led", created, every=0.1)
    t_created = time.monotonic()
    victim.start(timeout=T)
    t_back = time.monotonic()
    return {"old_controller": controller, "new_controller": elected,
            "new_controller_s": round(t_elected - t_kill, 3),
            "topic_created_s": round(t_created - t_kill, 3),
            "old_controller_restarted_s": round(t_back - t_created, 3)}


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
    # 2. etcd + 3 brokers
    etcd = Etcd(root / "etcd", out_dir / "etcd-cluster.log")
    etcd.start()
    secret = secrets.token_hex(16)
    members = [Member(root, i, etcd, secret, overrides) for i in range(1, BROKERS + 1)]
    try:
        for m in members:
            m.start()
        _until("3 live brokers", lambda: len(metadata(members[0].bootstrap)[1]) == BROKERS)
        log(f"[cluster] etcd + {BROKERS} brokers (pids {[m.pid for m in members]})")
        assert etcd.proc is not None
        fig["cluster"] = _throughput(settings, "cluster", [m.bootstrap for m in members],
                                     [m.pid for m in members], [m.metrics_port for m in members],
                                     {"etcd": etcd.proc.pid})
        log(f"  cluster: {_rate_line(fig['cluster'])}")
        for key, fn in (("recovery", recovery), ("controller", controller_failover)):
            try:
                fig[key] = fn(settings, members)
            except Exception:  # noqa: BLE001 - reported, the other figures stand
                fig[key] = {"error": traceback.format_exc(limit=6)}
            log(f"  {key}: {fig[key]}")
    finally:
        for m in members:
            m.stop()
        etcd.stop()
    s, c = fig["single"], fig["cluster"]
    if s.get("broker_cpu_us_per_record") and c.get("broker_cpu_us_per_record"):
        fig["cpu_ratio"] = round(c["broker_cpu_us_per_record"] / s["broker_cpu_us_per_record"], 3)
        fig["cpu_verdict"] = "met" if fig["cpu_ratio"] <= TARGET_CPU_RATIO else "missed"
    net_s, net_c = (s.get("broker_cpu_us_per_record_net_of_idle"),
                    c.get("broker_cpu_us_per_record_net_of_idle"))
    if net_s and net_c:
        fig["cpu_ratio_net_of_idle"] = round(net_c / net_s, 3)
    if s.get("rate") and c.get("rate"):
        fig["rate_ratio"] = round(c["rate"] / s["rate"], 3)
    fig["rate"] = c.get("rate")
    errors = [f"{k}: {fig[k]['error'].strip().splitlines()[-1]}"
              for k in ("single", "cluster", "recovery", "controller") if "error" in fig.get(k, {})]
    if errors:
        fig["error"] = "; ".join(errors)
    return fig


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
            f"{fig.get('cpu_verdict', 'n/a')}); WriteShareGroupState per ack batch "
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
