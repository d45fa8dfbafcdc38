"""Failover time, stage by stage (issue 24): kill -9 of a partition leader to the first record
the new leader serves.

``bench/replication.py``'s failover step runs ``failover_run`` once; run alone, this module
starts etcd and 3 brokers (``bench/cluster_procs.py``, the brokers' defaults unless
``--override``) and repeats it::

    flock /tmp/shoal-bench.lock env PYTHONPATH=. .venv/bin/python -m bench.failover --runs 5

Each run: a new topic of 1 partition at replication factor 3 takes a record every ~20 ms
(acks=all, idempotent, bootstrapped from the two brokers that survive) while a ShareConsumer of
a new group reads it; once the consumer has records, and a random 0-2 s later (anywhere in the
victim's etcd renewal cycle), the partition's leader is killed with kill -9. Seconds from the kill to:

- ``lease_s``: etcd no longer holds the victim's registration (its lease lapsed; polled in
  etcd every 10 ms);
- ``left_view_s``: a surviving broker's DescribeCluster no longer lists the victim (etcd's
  watch reached it);
- ``new_leader_s``: that Metadata names another leader of the partition (the controller's
  election reached it);
- ``leading_s``: the new leader's log says it leads the partition (its log's clock);
- ``first_ack_s``: the producer's first acknowledgement of a record produced after the kill;
- ``seconds``: the consumer's first record produced after the kill (the figure; target <= 10 s
  with the default ``broker.session.timeout.ms``).

Then the victim is started again and the next run waits until every partition's ISR is full.
The summary gives each stage's median and max over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.cluster_procs import Etcd, Member, metadata, until

TARGET_FAILOVER_S = 10.0
# The kill comes at a random moment up to this long after the consumer has records: the
# default broker.heartbeat.interval.ms, so it lands anywhere in the victim's renewal cycle.
KILL_JITTER_S = 2.0
STAGES = ("lease_s", "left_view_s", "new_leader_s", "leading_s", "first_ack_s", "seconds")


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(30)
    until(f"topic {topic} in sync", lambda: _in_sync(admin, topic, rf), 60)


def _in_sync(admin: Any, topic: str, rf: int) -> bool:
    md = admin.list_topics(topic, timeout=5).topics.get(topic)
    return md is not None and bool(md.partitions) and all(
        p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values())


def all_in_sync(bootstrap: str) -> bool:
    """Every partition of every topic (internal ones included) led, with all replicas in sync."""
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
    return all(p.leader >= 0 and len(p.isrs) == len(p.replicas)
               for t in md.topics.values() for p in t.partitions.values())


def failover_run(boot: str, members: list[Member], topic: str, group: str,
                 etcd_endpoint: str | None = None, prefix: str = "/shoal",
                 timeout_s: float = 120.0) -> dict[str, Any]:
    """One kill -9 of ``topic``-0's leader (the topic is created here); the stages of the module
    doc, in seconds from the kill. The victim is left dead: the caller starts it again."""
    from confluent_kafka import Producer, ShareConsumer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    create_topic(boot, topic, 1, 3)
    admin = AdminClient({"bootstrap.servers": boot})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    victim = next(m for m in members if m.node_id == leader)
    others = ",".join(m.bootstrap for m in members if m is not victim)
    controller = metadata(members[0].bootstrap)[0]
    acked: list[float] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None and msg.value().startswith(b"after") and not acked:
            acked.append(time.monotonic())

    # SHOAL_BENCH_FAILOVER_DEBUG=topic,metadata,... : librdkafka's debug log on stderr, with
    # its wall-clock stamps (to see when each client asked whom).
    debug = {"debug": os.environ["SHOAL_BENCH_FAILOVER_DEBUG"]} \
        if os.environ.get("SHOAL_BENCH_FAILOVER_DEBUG") else {}
    prod = Producer({"bootstrap.servers": others, "acks": "all", "linger.ms": 0,
                     "enable.idempotence": True, "message.timeout.ms": 60000,
                     "on_delivery": delivered, "client.id": "failover-producer", **debug})
    cons = ShareConsumer({"bootstrap.servers": others, "group.id": group,
                          "client.id": "failover-consumer", **debug})
    cons.subscribe([topic])
    seq = got_before = 0
    rng = random.Random()
    kill_at: float | None = None
    killed_at: float | None = None
    killed_wall = 0.0
    first_after: float | None = None
    deadline = time.monotonic() + timeout_s
    probe = next(m for m in members if m is not victim)
    seen: dict[str, float] = {}
    stop = threading.Event()
    watchers = [threading.Thread(target=_watch_view, args=(probe.bootstrap, topic,
                                                           victim.node_id, seen, stop),
                                 name="failover-view", daemon=True)]
    if etcd_endpoint:
        key = f"{prefix}/brokers/{victim.node_id}".encode()
        watchers.append(threading.Thread(target=_watch_etcd, args=(etcd_endpoint, key, seen,
                                                                   stop),
                                         name="failover-etcd", daemon=True))
    try:
        while first_after is None and time.monotonic() < deadline:
            seq += 1
            stamp = b"after" if killed_at is not None else b"before"
            prod.produce(topic, stamp + b"-" + str(seq).encode(), partition=0)
            prod.poll(0)
            for m in cons.poll(0.02):
                if m.error() is not None:
                    continue
                if m.value().startswith(b"after"):
                    first_after = time.monotonic()
                else:
                    got_before += 1
            if kill_at is None and seq >= 100 and got_before:
                # A random moment in the victim's renewal cycle: the run's own steps take about
                # the same time each run, and would otherwise kill at about the same phase.
                kill_at = time.monotonic() + rng.uniform(0, KILL_JITTER_S)
            if killed_at is None and kill_at is not None and time.monotonic() >= kill_at:
                victim.kill9()
                killed_at, killed_wall = time.monotonic(), time.time()
                for w in watchers:
                    w.start()
        prod.flush(30)
    finally:
        stop.set()
        cons.close()
    if killed_at is not None:
        print(f"killed broker {victim.node_id} at {killed_wall:.3f} (wall)", file=sys.stderr,
              flush=True)
    if killed_at is None or first_after is None:
        return {"error": f"no record produced after the kill was delivered within "
                         f"{timeout_s:.0f} s", "killed": killed_at is not None}
    steps = {k: round(v - killed_at, 3) for k, v in seen.items()}
    if acked:
        steps["first_ack_s"] = round(acked[0] - killed_at, 3)
    lead_log = _log_time(members, topic, killed_wall, "leading at leader epoch")
    if lead_log is not None:
        steps["leading_s"] = round(lead_log - killed_wall, 3)
    secs = round(first_after - killed_at, 3)
    return {"seconds": secs, "target_s": TARGET_FAILOVER_S,
            "verdict": "met" if secs <= TARGET_FAILOVER_S else "missed",
            "killed_node": victim.node_id, "killed_controller": controller == victim.node_id,
            **steps}


def _watch_view(bootstrap: str, topic: str, victim: int, seen: dict[str, float],
                stop: threading.Event) -> None:
    """Poll broker ``bootstrap``'s metadata every 20 ms until it shows ``victim`` gone from
    the live brokers and ``topic``-0 led by another broker; note when each was first seen."""
    while not stop.is_set() and not {"left_view_s", "new_leader_s"} <= seen.keys():
        try:
            _, _, leaders = metadata(bootstrap, [topic], timeout=1)
            live = _live(bootstrap)
        except Exception:  # noqa: BLE001 - a busy broker: try again
            live, leaders = {victim}, {}
        now = time.monotonic()
        if victim not in live:
            seen.setdefault("left_view_s", now)
        if leaders.get(topic, {}).get(0, victim) not in (victim, -1):
            seen.setdefault("new_leader_s", now)
        stop.wait(0.02)


def _live(bootstrap: str) -> set[int]:
    """The live brokers in one broker's DescribeCluster answer (Metadata may list a broker that
    just left for a few seconds more: cluster/metadata.py)."""
    from client.blocking import open_connection
    from protocol import codec

    host, _, port = bootstrap.rpartition(":")
    m = codec.request_module(60, 0)
    with open_connection(host, int(port), 1, "bench-failover-probe") as conn:
        resp = conn.call(60, 0, m.DescribeClusterRequest(
            include_cluster_authorized_operations=False))
    return {int(b.broker_id) for b in resp.brokers}


def _watch_etcd(endpoint: str, key: bytes, seen: dict[str, float],
                stop: threading.Event) -> None:
    """Poll etcd every 10 ms until ``key`` (the victim's registration) is gone."""
    import aetcd

    host, _, port = endpoint.removeprefix("etcd://").rpartition(":")

    async def poll() -> None:
        client = aetcd.Client(host=host, port=int(port), timeout=2)
        await client.connect()
        try:
            while not stop.is_set():
                try:
                    if await client.get(key) is None:
                        seen.setdefault("lease_s", time.monotonic())
                        return
                except Exception:  # noqa: BLE001 - etcd busy: try again
                    pass
                await asyncio.sleep(0.01)
        finally:
            await client.close()

    asyncio.run(poll())


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _log_time(members: list[Member], topic: str, after_wall: float, text: str) -> float | None:
    """The wall time of the first line of any broker's log, after ``after_wall``, saying
    ``text`` about ``topic``-0."""
    best: float | None = None
    for m in members:
        try:
            lines = m.log_path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if f"{topic}-0: " not in line or text not in line:
                continue
            stamp = _STAMP.match(line)
            if stamp is None:
                continue
            t = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if t >= after_wall - 0.001 and (best is None or t < best):
                best = t
    return best


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and max of each stage over the runs that finished."""
    ok = [r for r in runs if "seconds" in r]
    out: dict[str, Any] = {"runs": len(runs), "finished": len(ok)}
    for k in STAGES:
        vals = [r[k] for r in ok if k in r]
        if vals:
            out[k] = {"median": round(statistics.median(vals), 3), "max": round(max(vals), 3),
                      "min": round(min(vals), 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                    help="a broker config for every broker")
    ap.add_argument("--out", type=Path, help="write the runs and the summary as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args(argv)
    if shutil.which("etcd") is None:
        print("etcd is not installed (make etcd installs Debian's etcd-server)")
        return 2
    overrides = dict(o.split("=", 1) for o in args.override)
    root = Path(tempfile.mkdtemp(prefix="shoal-failover-"))
    etcd = Etcd(root / "etcd", root / "etcd.log")
    etcd.start()
    secret = secrets.token_hex(16)
    members = [Member(root, i, etcd, secret, overrides) for i in range(1, 4)]
    runs: list[dict[str, Any]] = []
    run_id = secrets.token_hex(3)
    try:
        for m in members:
            m.start()
        boot = ",".join(m.bootstrap for m in members)
        until("3 live brokers", lambda: len(metadata(members[0].bootstrap)[1]) == 3)
        for i in range(args.runs):
            victim_before = {m.node_id: m.alive() for m in members}
            fig = failover_run(boot, members, f"failover-{run_id}-{i}",
                               f"failover-{run_id}-{i}", etcd.endpoint)
            runs.append(fig)
            print(f"run {i + 1}: " + ", ".join(f"{k}={fig[k]}" for k in (*STAGES, "error",
                                                                         "killed_node")
                                             if k in fig), flush=True)
            for m in members:
                if victim_before[m.node_id] and not m.alive():
                    m.start(60)
            until("every partition in sync again", lambda: all_in_sync(boot), 120, every=0.5)
    finally:
        for m in members:
            m.stop()
        etcd.stop()
        if args.keep:
            print(f"logs in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    summ = summary(runs)
    print(json.dumps(summ, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"overrides": overrides, "runs": runs,
                                        "summary": summ}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
