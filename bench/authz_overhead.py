"""Scenario (z), issue 13: what ACL authorization costs share consumption.

Runs b1 (share-consume N pre-produced records, 1 partition x 2 consumers, explicit acks) against
two fresh brokers, alternately, ``ROUNDS`` times each:

* ``off``: no ``authorizer.class.name`` (authorization off: the handlers' checks are skipped);
* ``on``: Kafka's StandardAuthorizer name with 1,000 ACLs stored before start: 990 shaped like a
  real deployment for other principals (``bench/acl_authorize.py``) plus the ALLOWs User:ANONYMOUS
  (every client here) needs, PREFIXED on the benchmark's topics and groups (READ, WRITE, CREATE,
  DESCRIBE on ``bench-`` topics; READ, ALTER_CONFIGS on ``bench-`` groups), and a few DENYs on
  other resources. Every ShareFetch/ShareAcknowledge then asks GROUP READ and TOPIC READ.

The figures are the median of the rounds: records/s seen by the consumers, and broker CPU time
per record (less sensitive to client-side noise on a shared machine). ``overhead_pct`` is the
CPU-per-record increase, the issue's budget being 5 %. Both swing by more than 5 % from run to
run on a busy machine, so the scenario also measures the checks themselves: the time one
ShareFetch/ShareAcknowledge spends authorizing (GROUP READ plus TOPIC READ of its session's
topic, through the same ``RequestContext`` calls, on the same 1,000 ACLs) and the requests per
record the broker served (its ``/metrics``); ``estimated_overhead_pct`` is their product over the
broker CPU per record with authorization off.

    .venv/bin/python -m bench.run --only z --scale 0.2
    .venv/bin/python -m bench.authz_overhead --scale 0.2      # the same, standalone
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import urllib.request
import uuid
from types import SimpleNamespace
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import report, scenarios
from bench.acl_authorize import make_acls
from bench.clients import Admin
from bench.procs import Monitor, ShoalBroker, free_port, remove_tree
from bench.scenarios import SHARE_VARIANTS, Settings, System
from broker.authz import ANONYMOUS, DefaultAuthorizer, DenialLog, Operation, Resource, ResourceType
from broker.clock import FakeClock
from broker.context import RequestContext
from broker.handlers.share_fetch import _refused_topics
from broker.metrics import LabelledCounter
from protocol.acl_types import AclBinding, AclOperation, AclPermissionType, PatternType
from protocol.acl_types import ResourceType as AclType
from broker.security.acl_store import AclStore
from broker.security.authorizer import AclAuthorizer
from broker.security.setup import AclSeam

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACLS = 1_000
ROUNDS = 3
ANON = "User:ANONYMOUS"


Z_TITLE = "(z) share-consume b1 with StandardAuthorizer and 1,000 ACLs vs authorization off"
REPORT_ROWS = [
    report.Row("z", Z_TITLE, "throughput, authorization on / off", "ratio",
               report._g("z", "rate_ratio"), digits=3),
    report.Row("z", Z_TITLE, "broker CPU per record, on / off", "ratio",
               report._g("z", "cpu_ratio"), ("<=", 1.05), digits=3),
    report.Row("z", Z_TITLE, "checks' cost x share requests per record / CPU per record", "%",
               report._g("z", "estimated_overhead_pct"), ("<=", 5), digits=2),
]


def bench_acls(total: int = ACLS) -> list[AclBinding]:
    """``total`` ACLs: what the benchmark's ANONYMOUS clients need, and others' noise."""
    def anon(rtype: AclType, op: AclOperation, name: str = "bench-",
             pattern: PatternType = PatternType.PREFIXED,
             permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
        return AclBinding(rtype, name, pattern, ANON, "*", op, permission)

    needed = [anon(AclType.TOPIC, op) for op in (AclOperation.READ, AclOperation.WRITE,
                                                 AclOperation.CREATE, AclOperation.DESCRIBE)]
    needed += [anon(AclType.GROUP, op) for op in (AclOperation.READ, AclOperation.ALTER_CONFIGS)]
    needed += [anon(AclType.TOPIC, AclOperation.ALL, f"secret-{i}", PatternType.LITERAL,
                    AclPermissionType.DENY) for i in range(4)]
    others = {b for b in make_acls(total * 2, random.Random(13))}
    noise = sorted(others - set(needed))[:total - len(needed)]
    return needed + noise


def check_cost_us(calls: int = 200_000) -> dict[str, float]:
    """Microseconds one share request spends authorizing (GROUP READ, then TOPIC READ of a
    one-topic session), with authorization off and with the 1,000 ACLs; best of 3."""
    topic = SimpleNamespace(name="bench-z-p1")
    session = {(uuid.uuid4(), 0): None}
    out = {}
    for mode, authorizer in (("off", DefaultAuthorizer()),
                             ("on", AclSeam(AclAuthorizer(acls=bench_acls())))):
        broker = SimpleNamespace(
            authorizer=authorizer, denials=DenialLog(), clock=FakeClock(),
            topics=SimpleNamespace(by_id=lambda _id: topic),
            metrics=SimpleNamespace(authorization_denied=LabelledCounter(
                "denied_total", "", ("operation", "resource_type"))))
        ctx = RequestContext(broker, 78, 1, 1, "bench", "127.0.0.1", 1,  # type: ignore[arg-type]
                             ANONYMOUS)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(calls):
                ctx.authorized(Operation.READ, Resource(ResourceType.GROUP, "bench-z-b1"))
                _refused_topics(ctx, session, {})
            best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        out[mode] = round(best, 3)
    return out


def _share_requests(metrics_port: int) -> int | None:
    """ShareFetch + ShareAcknowledge requests the broker answered (from its /metrics)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    total = 0
    for line in text.splitlines():
        if line.startswith(("shoal_share_fetch_requests_total ",
                            "shoal_share_acknowledge_requests_total ")):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def _one(settings: Settings, mode: str, index: int, out_dir: Path) -> dict[str, Any]:
    data = settings.work_dir / f"z-{mode}-{index}"
    metrics_port = free_port()
    overrides: dict[str, str] = {"metrics.listen": f"127.0.0.1:{metrics_port}"}
    if mode == "on":
        AclStore(data).write(bench_acls())
        overrides["authorizer.class.name"] = STANDARD
    broker = ShoalBroker(data, out_dir / f"broker-z-{mode}-{index}.log", overrides)
    broker.start()
    monitor = Monitor(broker.pid)
    try:
        system = System(f"z-{mode}", broker.bootstrap, Admin(broker.bootstrap), local=broker,
                        monitor=monitor)
        variant = SHARE_VARIANTS["b1"]
        sub = Settings(settings.scale, f"{settings.run_id}-z{mode}{index}", settings.work_dir,
                       settings.log)
        fig = scenarios.scenario_b(sub, system, variant)
        requests = _share_requests(metrics_port)
        system.admin.close()
    finally:
        monitor.close()
        broker.stop()
        remove_tree(data)
    cpu = fig.get("broker", {}).get("broker_cpu_s")
    records = fig.get("records") or 0
    return {"rate": fig.get("rate"), "records": records, "error": fig.get("error"),
            "broker_cpu_s": cpu, "share_requests": requests,
            "cpu_us_per_record": round(cpu / records * 1e6, 2) if cpu and records else None}


def run(settings: Settings, out_dir: Path, rounds: int = ROUNDS,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Alternate off/on b1 runs; medians and the on/off ratios."""
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for i in range(rounds):
        for mode in ("off", "on"):
            r = _one(settings, mode, i, out_dir)
            runs[mode].append(r)
            log(f"  z round {i + 1}/{rounds} authorization {mode}: "
                f"{r['rate'] or 0:,.0f} rec/s, {r['cpu_us_per_record']} us broker CPU/record"
                + (f" ERROR {r['error']}" if r["error"] else ""))

    def median(mode: str, key: str) -> float | None:
        values = [r[key] for r in runs[mode] if r.get(key) and not r.get("error")]
        return round(statistics.median(values), 2) if values else None

    fig: dict[str, Any] = {"acls": ACLS, "rounds": rounds, "variant": "b1",
                           "records": settings.records(), "runs": runs}
    for mode in ("off", "on"):
        fig[f"rate_{mode}"] = median(mode, "rate")
        fig[f"cpu_us_per_record_{mode}"] = median(mode, "cpu_us_per_record")
    if fig["rate_off"] and fig["rate_on"]:
        fig["rate_ratio"] = round(fig["rate_on"] / fig["rate_off"], 3)
    if fig["cpu_us_per_record_off"] and fig["cpu_us_per_record_on"]:
        ratio = fig["cpu_us_per_record_on"] / fig["cpu_us_per_record_off"]
        fig["cpu_ratio"] = round(ratio, 3)
        fig["overhead_pct"] = round(100 * (ratio - 1), 1)
        fig["within_5pct"] = ratio <= 1.05
    cost = check_cost_us()
    fig["check_us_per_request_off"], fig["check_us_per_request_on"] = cost["off"], cost["on"]
    served = [(r["share_requests"], r["records"]) for rs in runs.values() for r in rs
              if r.get("share_requests") and r.get("records")]
    if served and fig["cpu_us_per_record_off"]:
        per_record = sum(q for q, _ in served) / sum(n for _, n in served)
        fig["share_requests_per_record"] = round(per_record, 5)
        extra = (cost["on"] - cost["off"]) * per_record
        fig["estimated_overhead_pct"] = round(100 * extra / fig["cpu_us_per_record_off"], 3)
    errors = [r["error"] for rs in runs.values() for r in rs if r.get("error")]
    if errors:
        fig["error"] = errors[0]
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.2)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-z-"))
    try:
        settings = Settings(args.scale, time.strftime("%Y%m%d-%H%M%S"), work, print)
        fig = run(settings, work, args.rounds)
    finally:
        remove_tree(work)
    fig.pop("runs")
    print(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
