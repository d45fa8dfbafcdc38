"""Chaos soak: 30 kill -9s of random brokers (the controller among them) under load.

Three brokers and etcd (tests/integration/cluster/conftest.py). An idempotent ``acks=all``
producer writes to ``chaos-in``; a share group (two explicit-mode ShareConsumers), a consumer
group and a consume-transform-produce transactional pipeline (to ``chaos-out``) read it. Then,
CHAOS_KILLS times (30), a broker chosen with the seeded random generator (every sixth time the
current controller) is killed with SIGKILL, restarted from its own command line after a random
pause, and the next round starts once it is registered again. With replication factor 1 a
killed broker's partitions, share state and coordinators are offline until its restart; with 3
they fail over.

What a user would notice, checked at the end against the logs (tests/chaos/invariants.py):
every acknowledged produce is readable where it was acknowledged and nothing is in the log
twice; every record is delivered to the share group until its ACCEPT is confirmed, none is
delivered again after that, delivery counts never go down; the consumer group's confirmed
commits are kept; the transactional output holds each input exactly once. The longest time
each partition went without an acknowledged produce is printed and written to a JSON report
(CHAOS_REPORT, else chaos-report.json in the test's tmp dir). CHAOS_SEED repeats a run.
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.invariants import (
    DELIVERY_LIMIT,
    committed_or_why,
    ends,
    longest_gaps,
    read_log,
    share_offsets,
    stable_ends,
    violations,
)
from tests.chaos.load import (
    CONSUMER_GROUP,
    EOS_GROUP,
    IN,
    OUT,
    SHARE_GROUP,
    EosWorker,
    GroupWorker,
    Journal,
    ProducerWorker,
    ShareWorker,
    Worker,
)
from tests.integration.cluster.conftest import Cluster
from tests.integration.cluster.net_cluster import wait_for
from tests.integration.cluster.probe import metadata
from tests.integration.share_helpers import set_group_configs

IN_PARTITIONS, OUT_PARTITIONS = 6, 3
KILLS = int(os.environ.get("CHAOS_KILLS") or 30)
DRAIN = float(os.environ.get("CHAOS_DRAIN_S") or 240)  # liveness deadline after the chaos
RATE = 40  # records/s produced: enough to see every outage, light on a shared 2-core machine

REPLICATION = [1, 3]
# Hung clients (load.HANG_S) a run may replace before it counts as failed.
MAX_CLIENT_RESTARTS = 3


def _restart(cluster: Cluster, node_id: int) -> None:
    """Start a killed broker again (new ports once if another process took its own)."""
    b = cluster.brokers[node_id - 1]
    try:
        b.start()
    except RuntimeError as exc:
        if "already in use" not in str(exc):
            raise
        cluster._choose_ports(b, node_id)
        b.start()


def _registered(cluster: Cluster, node_id: int) -> bool:
    """Whether a live broker other than ``node_id`` lists it (it is back in the cluster)."""
    for i, b in enumerate(cluster.brokers, start=1):
        if i != node_id and b.alive():
            seen = metadata(b.bootstrap, [])
            return seen is not None and node_id in seen.brokers
    return False


def _addresses(cluster: Cluster) -> dict[int, str]:
    return {i: b.bootstrap for i, b in enumerate(cluster.brokers, start=1) if b.alive()}


def _controller(cluster: Cluster) -> int:
    seen = wait_for(lambda: metadata(cluster.bootstrap.split(",")[0], []), 30,
                    "no broker answered Metadata")
    return seen.controller


def _chaos(cluster: Cluster, rng: random.Random, kills: int,
           done: list[dict[str, object]]) -> None:
    """``kills`` rounds of kill -9, pause, restart, wait for registration, pause; each round
    is added to ``done`` as it ends."""
    for n in range(kills):
        controller = _controller(cluster)
        victim = controller if n % 6 == 2 else rng.randint(1, len(cluster.brokers))
        down = rng.uniform(0.3, 2.0)
        cluster.brokers[victim - 1].kill()
        time.sleep(down)
        _restart(cluster, victim)
        wait_for(lambda: _registered(cluster, victim), 60,
                 f"round {n}: broker {victim} did not register again after its restart")
        done.append({"round": n, "node": victim, "was_controller": victim == controller,
                     "down_s": round(down, 2)})
        print(f"chaos round {n}: killed broker {victim}"
              f"{' (controller)' if victim == controller else ''}, down {down:.1f} s")
        time.sleep(rng.uniform(0.3, 1.5))


class Supervisor(threading.Thread):
    """Replaces a worker whose client hung (``Worker.hung``) with a fresh one, in place in
    ``workers``, and notes why in ``Journal.client_restarts``; until ``halt()``."""

    def __init__(self, journal: Journal, workers: list[Worker]) -> None:
        super().__init__(daemon=True, name="supervisor")
        self.journal, self.workers = journal, workers
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(5):
            for i, w in enumerate(self.workers):
                why = w.hung()
                if why is None:
                    continue
                w.abandon()
                fresh = w.clone()
                fresh.start()
                self.workers[i] = fresh
                with self.journal.lock:
                    self.journal.client_restarts.append(why)
                print(f"chaos: replaced a hung client: {why}")

    def halt(self) -> None:
        self._halt.set()
        self.join(30)


def _drained(j: Journal, bootstrap: str, target: set[str], last_check: list[float]) -> bool:
    """Whether every reader is done with ``target`` (checked against the brokers every 3 s)."""
    with j.lock:
        share_done = target <= j.share_accept_sent
        group_done = target <= j.group_seen
    if not (share_done and group_done) or time.monotonic() - last_check[0] < 3:
        return False
    last_check[0] = time.monotonic()
    share = share_offsets(bootstrap, SHARE_GROUP, IN, IN_PARTITIONS)
    end = ends(bootstrap, IN, IN_PARTITIONS)
    # A stable read of a group whose transaction is open waits for it: not drained yet.
    return (not isinstance(share, str) and all(lag == 0 for _, lag in share.values())
            and committed_or_why(bootstrap, EOS_GROUP, IN, IN_PARTITIONS) == end
            and committed_or_why(bootstrap, CONSUMER_GROUP, IN, IN_PARTITIONS) == end)


def _unaccepted(j: Journal, target: set[str]) -> dict[str, list[int]]:
    """A few records not ACCEPTed yet, with the delivery counts they were delivered with."""
    with j.lock:
        return {v: j.share_deliveries.get(v, []) for v in sorted(target - j.share_accept_sent)[:5]}


# A soak still running after this long is frozen (see test_chaos_soak_keeps_every_promise).
FREEZE_S = 960


@pytest.mark.chaos
@pytest.mark.timeout(900)
@pytest.mark.parametrize("rf", REPLICATION)
def test_chaos_soak_keeps_every_promise(chaos_cluster: Cluster, seed: int, report_path: Path,
                                        rf: int) -> None:
    cluster = chaos_cluster
    # The timeout mark needs the main thread to run Python; a client library call that waits
    # while holding the GIL freezes the whole process (it happened: see EosWorker.step). This
    # watchdog thread of the interpreter's own needs no GIL: it prints every thread's stack
    # and ends the process, so CI fails with the reason instead of waiting for its own limit.
    faulthandler.dump_traceback_later(FREEZE_S, exit=True)
    try:
        _soak(cluster, seed, report_path, rf)
    finally:
        faulthandler.cancel_dump_traceback_later()


def _soak(cluster: Cluster, seed: int, report_path: Path, rf: int) -> None:
    rng = random.Random(seed)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(IN, IN_PARTITIONS, rf),
                                  NewTopic(OUT, OUT_PARTITIONS, rf)]).values():
        f.result(30)
    set_group_configs(cluster.brokers[0].bootstrap, SHARE_GROUP, {
        "share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "10000",
        "share.delivery.count.limit": str(DELIVERY_LIMIT)})

    j = Journal()
    producer = ProducerWorker(j, cluster.bootstrap, IN_PARTITIONS, RATE)
    readers: list[Worker] = [ShareWorker(j, cluster.bootstrap, i, seed) for i in range(2)]
    readers += [GroupWorker(j, cluster.bootstrap), EosWorker(j, cluster.bootstrap,
                                                             OUT_PARTITIONS)]
    workers = [producer, *readers]
    for w in workers:
        w.start()
    supervisor = Supervisor(j, workers)
    supervisor.start()
    run: dict[str, object] = {"seed": seed, "replication_factor": rf, "rounds": []}
    began = time.monotonic()
    chaos_from = chaos_to = began
    try:
        wait_for(lambda: len(j.acked) >= 200 and j.share_confirmed and j.group_seen
                 and j.eos_transactions, 120, "the load did not get going before the chaos "
                 f"(acked {len(j.acked)}, share confirmed {len(j.share_confirmed)}, group "
                 f"saw {len(j.group_seen)}, transactions {j.eos_transactions})")
        chaos_from = time.monotonic()
        _chaos(cluster, rng, KILLS, run["rounds"])  # type: ignore[arg-type]
        chaos_to = time.monotonic()
        producer.stop(150)
        target = set(read_log(cluster.bootstrap, IN, IN_PARTITIONS).values())
        last_check = [0.0]
        wait_for(lambda: _drained(j, cluster.bootstrap, target, last_check), DRAIN,
                 f"the readers did not finish {len(target)} records after the chaos (share "
                 f"ACCEPTed {len(target & j.share_accept_sent)}, not yet: "
                 f"{_unaccepted(j, target)}, share offsets (start, lag) "
                 f"{share_offsets(cluster.bootstrap, SHARE_GROUP, IN, IN_PARTITIONS)}, group "
                 f"saw {len(target & j.group_seen)} and committed "
                 f"{committed_or_why(cluster.bootstrap, CONSUMER_GROUP, IN, IN_PARTITIONS)}, "
                 f"EOS committed "
                 f"{committed_or_why(cluster.bootstrap, EOS_GROUP, IN, IN_PARTITIONS)}; {IN} ends "
                 f"{ends(cluster.bootstrap, IN, IN_PARTITIONS)}, last stable offsets "
                 f"{stable_ends(_addresses(cluster), IN, IN_PARTITIONS)}; stuck client calls: "
                 f"{[w.stuck() for w in workers if w.stuck()]})", interval=1)
    finally:
        supervisor.halt()
        for w in reversed(workers):
            w.stop()
        chaos_to = max(chaos_to, chaos_from)
        _report(j, run, report_path, chaos_from, chaos_to, began)

    assert j.crashes == [], j.crashes
    assert len(j.client_restarts) <= MAX_CLIENT_RESTARTS, j.client_restarts
    assert run["controller_kills"] >= min(1, KILLS // 6), "the controller was never killed"
    bad = violations(j, cluster.bootstrap, IN_PARTITIONS, OUT_PARTITIONS)
    assert bad == [], f"seed {seed}:\n" + "\n".join(bad)


def _report(j: Journal, run: dict[str, object], path: Path, chaos_from: float,
            chaos_to: float, began: float) -> None:
    """Complete ``run`` with the figures and write it to ``path`` (JSON); print it too.
    Written whether the soak passed or not, so a failure comes with its figures."""
    rounds: list[dict[str, object]] = run["rounds"]  # type: ignore[assignment]
    run.update({
        "kills": len(rounds),
        "controller_kills": sum(1 for r in rounds if r["was_controller"]),
        "chaos_seconds": round(chaos_to - chaos_from, 1),
        "total_seconds": round(time.monotonic() - began, 1),
        "acknowledged": len(j.acked),
        "share_deliveries": sum(len(c) for c in j.share_deliveries.values()),
        "share_accept_outcome_unknown": len(j.share_accept_sent - j.share_confirmed),
        "eos_transactions": j.eos_transactions,
        "eos_slowest_transaction": j.eos_slowest,
        "longest_unavailability_s": longest_gaps(j, chaos_from, chaos_to),
        "client_errors": dict(j.client_errors.most_common(30)),
        "crashes": j.crashes,
        "client_restarts": j.client_restarts})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run, indent=2))
    print(f"chaos report ({path}):\n" + json.dumps(
        {k: v for k, v in run.items() if k != "rounds"}, indent=2))
