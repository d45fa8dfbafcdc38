"""Scenario ``replication`` (issue 24): what three copies cost, and how fast they take over.

``make bench-cluster`` runs it after scenario ``cluster`` (``python -m bench.run --only
replication`` alone). One real etcd and 3 brokers (``bench/cluster_procs.py``), then, with 1 KiB
records and N = 200,000 x ``--scale``:

1. **Produce**: one producer process (acks=all, idempotent, librdkafka's default batch size
   and linger) writes N records to a topic of 3 partitions at replication factor 1, then to one
   at 3, alternating twice (ABAB). Figures per factor: records/s (median of the rounds) and the
   p99 latency of a produce, from ``produce()`` to its delivery report; ``produce_ratio`` =
   RF 3 / RF 1 (target >= 0.5). librdkafka's idempotent producer keeps one Produce request in
   flight per broker whatever ``max.in.flight`` says (confluentinc/librdkafka#4989), so its rate
   is a batch per round trip: the replication round trips (leader -> followers -> leader) count
   in full, and a machine whose cores are busy elsewhere stretches every hop.
2. **Share-consume**: each of those topics' N records are consumed by 3 ShareConsumer
   processes (explicit ACCEPT) of a new group: records/s, ``consume_ratio`` (target >= 0.8).
3. **Failover** (``bench/failover.py``, which also runs it alone, repeated): a topic of 1
   partition at RF 3 takes a record every 20 ms (acks=all) while a ShareConsumer reads it; the
   partition's leader is killed with kill -9. Figure: seconds from the kill to the first record
   produced after it delivered by the consumer (target <= 10 s with the default
   ``broker.session.timeout.ms``), and where those seconds went: the victim's lease lapsing in
   etcd, a surviving broker's view losing it and naming the new leader, the producer's first
   acknowledgement after the kill.
4. **Catch-up**: a follower is stopped (SIGSTOP) while 1 GiB x ``--scale`` (at least 64 MiB) is
   produced to an RF 3 partition, then resumed (a stopped broker that comes back is the
   "restart" of the issue, without the session lapse): seconds until it is back in the ISR, and
   the MiB/s it copied.

The brokers keep their defaults except ``--override``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import clients, report
from bench.cluster_procs import Etcd, Member, in_sync, metadata, until
from bench.failover import TARGET_FAILOVER_S, create_topic, failover_run
from bench.procs import CTX, start_process
from bench.scenarios import Settings, System, _collect, _share_figures, run_share_consumers

BROKERS = 3
PARTITIONS = 3
RECORD = 1024
FULL = 200_000
TARGET_PRODUCE = 0.5
TARGET_CONSUME = 0.8


def latency_producer_worker(p: dict[str, Any], out: Any) -> None:
    """Produce ``count`` records (acks=all, idempotent); report the rate and the produce
    latencies (seconds, librdkafka's per-message latency from ``produce()`` to its delivery
    report, a sample of at most 20,000)."""
    try:
        from confluent_kafka import Producer

        lat: list[float] = []
        errors: list[str] = []
        every = max(1, p["count"] // 20_000)
        seen = [0]

        def done(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
                return
            seen[0] += 1
            if seen[0] % every == 0:
                lat.append(msg.latency())

        prod = Producer({"bootstrap.servers": p["bootstrap"], "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "compression.type": "none",
                         "on_delivery": done})
        prod.list_topics(p["topic"], timeout=30)
        value = os.urandom(RECORD)
        parts = p["partitions"]
        start = time.monotonic()
        i = 0
        while i < p["count"]:
            try:
                prod.produce(p["topic"], value, partition=i % parts)
                i += 1
            except BufferError:
                prod.poll(0.005)
            if i % 1000 == 0:
                prod.poll(0)
        left = prod.flush(300)
        end = time.monotonic()
        out.put({"ok": not left and not errors, "seconds": end - start, "latencies": lat,
                 "errors": errors[:3], "left": left})
    except Exception:  # noqa: BLE001 - reported to the parent
        out.put({"ok": False, "error": traceback.format_exc(limit=5)})


def _produce_round(bootstrap: str, topic: str, n: int,
                   partitions: int = PARTITIONS) -> dict[str, Any]:
    out = CTX.Queue()
    proc = start_process(latency_producer_worker, {"bootstrap": bootstrap, "topic": topic,
                                                   "count": n, "partitions": partitions}, out,
                         name="latency-producer")
    try:
        (res,) = _collect(out, 1, 600) or [{"ok": False, "error": "no report"}]
    finally:
        proc.join(10)
    if not res.get("ok"):
        raise RuntimeError(f"producer failed: {res}")
    lat = sorted(res["latencies"])
    return {"rate": round(n / res["seconds"], 1),
            "p50_ms": round(1000 * lat[len(lat) // 2], 2) if lat else None,
            "p99_ms": round(1000 * lat[int(len(lat) * 0.99)], 2) if lat else None}


def produce_and_consume(settings: Settings, boot: str, members: list[Member]) -> dict[str, Any]:
    n = settings.records(FULL)
    rounds: dict[int, list[dict[str, Any]]] = {1: [], 3: []}
    consumed: dict[int, list[float]] = {1: [], 3: []}
    system = System("replication", boot, clients.Admin(boot))
    try:
        for i, rf in enumerate((1, 3, 1, 3)):
            topic = settings.topic(f"rf{rf}-{i}")
            create_topic(boot, topic, PARTITIONS, rf)
            settings.log(f"  [replication] round {i + 1}: {n:,} records to RF {rf}")
            rounds[rf].append(_produce_round(boot, topic, n))
            results, _, t_go = run_share_consumers(
                system, topic, f"bench-{settings.run_id}-rf{rf}-{i}", 3, "explicit", n,
                60 + n / 2_000, bootstraps=[m.bootstrap for m in members])
            fig = _share_figures(results, n, t_go)
            if fig.get("rate"):
                consumed[rf].append(fig["rate"])
    finally:
        system.admin.close()
    out: dict[str, Any] = {"records": n, "partitions": PARTITIONS}
    for rf in (1, 3):
        out[f"rf{rf}"] = {
            "produce_rate": statistics.median(r["rate"] for r in rounds[rf]),
            "produce_p99_ms": statistics.median(r["p99_ms"] for r in rounds[rf]
                                                if r["p99_ms"] is not None),
            "produce_p50_ms": statistics.median(r["p50_ms"] for r in rounds[rf]
                                                if r["p50_ms"] is not None),
            "consume_rate": statistics.median(consumed[rf]) if consumed[rf] else None,
            "rounds": rounds[rf]}
    a, b = out["rf1"], out["rf3"]
    out["produce_ratio"] = round(b["produce_rate"] / a["produce_rate"], 3)
    out["produce_verdict"] = "met" if out["produce_ratio"] >= TARGET_PRODUCE else "missed"
    if a["consume_rate"] and b["consume_rate"]:
        out["consume_ratio"] = round(b["consume_rate"] / a["consume_rate"], 3)
        out["consume_verdict"] = "met" if out["consume_ratio"] >= TARGET_CONSUME else "missed"
    return out


def failover(settings: Settings, boot: str, members: list[Member],
             etcd_endpoint: str | None = None) -> dict[str, Any]:
    """One kill -9 of a partition leader (``bench/failover.py``), the victim started again."""
    topic = settings.topic("failover")
    try:
        return failover_run(boot, members, topic, f"bench-{settings.run_id}-failover",
                            etcd_endpoint)
    finally:
        for m in members:
            if not m.alive():
                m.start(60)


def catch_up(settings: Settings, boot: str, members: list[Member]) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient

    topic = settings.topic("catchup")
    create_topic(boot, topic, 1, 3)
    admin = AdminClient({"bootstrap.servers": boot})
    # A broker just restarted by the failover step may not know the new topic yet.
    part = until(f"{topic} in the metadata", lambda: admin.list_topics(
        topic, timeout=5).topics[topic].partitions.get(0), 60)
    follower = next(m for m in members if m.node_id != part.leader)
    leader = next(m for m in members if m.node_id == part.leader)
    size = max(64 << 20, int((1 << 30) * settings.scale))
    n = size // RECORD
    assert follower.proc is not None
    os.kill(follower.proc.pid, signal.SIGSTOP)
    try:
        settings.log(f"  [replication] {size >> 20} MiB to {topic} with broker "
                     f"{follower.node_id} stopped")
        _produce_round(",".join(m.bootstrap for m in members if m is not follower), topic, n,
                       partitions=1)
        # acks=all went on without it: it left the ISR after replica.lag.time.max.ms.
        until(f"broker {follower.node_id} out of the ISR",
              lambda: follower.node_id not in in_sync(leader.bootstrap, topic, 0), 120)
        behind = size >> 20
    finally:
        os.kill(follower.proc.pid, signal.SIGCONT)
    resumed = time.monotonic()
    # Asked of the leader: the resumed follower's own view is stale until its watch catches up.
    until(f"broker {follower.node_id} back in the ISR",
          lambda: follower.node_id in in_sync(leader.bootstrap, topic, 0), 600, every=0.05)
    secs = time.monotonic() - resumed
    return {"mib": behind, "seconds": round(secs, 2),
            "mib_per_s": round(behind / secs, 1) if secs else None}


def scenario_replication(settings: Settings, out_dir: Path, overrides: dict[str, str],
                         log: Callable[[str], None]) -> dict[str, Any]:
    if shutil.which("etcd") is None:
        return {"skipped": "etcd is not installed (make etcd installs Debian's etcd-server)"}
    root = settings.work_dir / "replication"
    etcd = Etcd(root / "etcd", out_dir / "etcd-replication.log")
    etcd.start()
    secret = secrets.token_hex(16)
    members = [Member(root, i, etcd, secret, overrides) for i in range(1, BROKERS + 1)]
    fig: dict[str, Any] = {"brokers": BROKERS, "overrides": overrides}
    try:
        for m in members:
            m.start()
        boot = ",".join(m.bootstrap for m in members)
        until("3 live brokers", lambda: len(metadata(members[0].bootstrap)[1]) == BROKERS)
        log(f"[replication] etcd + {BROKERS} brokers (pids {[m.pid for m in members]})")
        for key, fn in (("throughput", lambda: produce_and_consume(settings, boot, members)),
                        ("failover", lambda: failover(settings, boot, members,
                                                      etcd.endpoint)),
                        ("catch_up", lambda: catch_up(settings, boot, members))):
            try:
                fig[key] = fn()
            except Exception:  # noqa: BLE001 - reported, the other figures stand
                fig[key] = {"error": traceback.format_exc(limit=6)}
            log(f"  {key}: {brief_part(fig[key])}")
    finally:
        for m in members:
            m.stop()
        etcd.stop()
    errors = [k for k in ("throughput", "failover", "catch_up") if "error" in fig.get(k, {})]
    if errors:
        fig["error"] = "failed: " + ", ".join(errors)
    return fig


def brief_part(f: dict[str, Any]) -> str:
    if "error" in f:
        return f["error"].strip().splitlines()[-1]
    return ", ".join(f"{k}={v}" for k, v in f.items() if not isinstance(v, dict | list))


def brief(fig: dict[str, Any]) -> str:
    t = fig.get("throughput", {})
    return (f"produce RF3/RF1 {t.get('produce_ratio')} ({t.get('produce_verdict')}), consume "
            f"{t.get('consume_ratio')} ({t.get('consume_verdict')}), failover "
            f"{fig.get('failover', {}).get('seconds')} s, catch-up "
            f"{fig.get('catch_up', {}).get('mib_per_s')} MiB/s")


def _get(*path: str) -> Callable[[dict[str, Any]], Any]:
    def get(d: dict[str, Any]) -> Any:
        for k in ("replication", *path):
            if not isinstance(d, dict) or k not in d:
                return None
            d = d[k]
        return d
    return get


TITLE = (f"(replication) 3 brokers + etcd, {PARTITIONS} partitions, 1 KiB records: RF 3 vs RF 1, "
         "failover and catch-up")
REPORT_ROWS = [
    report.Row("replication", TITLE, "produce acks=all, RF 3", "rec/s",
               _get("throughput", "rf3", "produce_rate")),
    report.Row("replication", TITLE, "produce acks=all, RF 1", "rec/s",
               _get("throughput", "rf1", "produce_rate")),
    report.Row("replication", TITLE, "produce, RF 3 / RF 1", "ratio",
               _get("throughput", "produce_ratio"), (">=", TARGET_PRODUCE), digits=3),
    report.Row("replication", TITLE, "produce p99 latency, RF 3", "ms",
               _get("throughput", "rf3", "produce_p99_ms"), digits=1),
    report.Row("replication", TITLE, "produce p99 latency, RF 1", "ms",
               _get("throughput", "rf1", "produce_p99_ms"), digits=1),
    report.Row("replication", TITLE, "share-consume, RF 3", "rec/s",
               _get("throughput", "rf3", "consume_rate")),
    report.Row("replication", TITLE, "share-consume, RF 3 / RF 1", "ratio",
               _get("throughput", "consume_ratio"), (">=", TARGET_CONSUME), digits=3),
    report.Row("replication", TITLE, "kill -9 of a leader to a record served by the new one",
               "s", _get("failover", "seconds"), ("<=", TARGET_FAILOVER_S), digits=2),
    report.Row("replication", TITLE, "failover: kill -9 to the victim's lease lapsing (etcd)", "s",
               _get("failover", "lease_s"), digits=2),
    report.Row("replication", TITLE, "failover: kill -9 to the victim leaving the view", "s",
               _get("failover", "left_view_s"), digits=2),
    report.Row("replication", TITLE, "failover: kill -9 to the new leader in the metadata", "s",
               _get("failover", "new_leader_s"), digits=2),
    report.Row("replication", TITLE, "failover: kill -9 to the first acks=all ack after it", "s",
               _get("failover", "first_ack_s"), digits=2),
    report.Row("replication", TITLE, "stopped follower back in the ISR", "s",
               _get("catch_up", "seconds"), digits=2),
    report.Row("replication", TITLE, "catch-up copy rate", "MiB/s",
               _get("catch_up", "mib_per_s"), digits=1),
]
