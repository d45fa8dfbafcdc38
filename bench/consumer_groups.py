"""Scenario ``k`` (issue 14): consumer-group consumption, classic protocol and KIP-848.

N pre-produced 1 KiB records in 4 partitions (scenario a's topic when it ran), 2
``confluent_kafka.Consumer`` processes in one new group per protocol: ``group.protocol=classic``,
then ``group.protocol=consumer``. Both processes are created first and subscribe together; each
reads with ``consume()`` batches and commits as applications do (auto-commit, and a commit on
close). Figures per protocol:

- ``rate``: distinct records / (first record any consumer got to the moment the last distinct
  one arrived). A rebalance while the records are read (the second member joining after the first
  got every partition) is part of it, as for an application; records read twice after a
  rebalance (from the last committed offset) are reported as ``reread``, not counted twice.
- ``first_record_s``: subscribe() to the first record of any consumer; ``first_record_each_s``
  per consumer (the later one includes its join and the rebalance it causes).
- ``rate_incl_join``: distinct records / (subscribe to the last record).

A broker without KIP-848 (ApiVersions without ConsumerGroupHeartbeat, key 68, or a consumer that
gets only an "unsupported" error) is reported as ``not supported by this broker`` for that
protocol, not as an error. ``make bench-groups`` runs this scenario alone.

The local Shoal broker of ``make bench`` runs with ``group.initial.rebalance.delay.ms=300`` when
this scenario is selected. The default (Kafka's), 3 s, would hold every first record of a new
classic group for 3 s; 0 (Kafka's ``config/server.properties``) completes the first generation
with whichever member joins first, which then reads every partition until its next heartbeat
(3 s) lets the second in. 300 ms lets both members, started together, into the first generation.
"""

from __future__ import annotations

import socket
import struct
import time
import traceback
from typing import Any

from bench import clients, report
from bench.procs import CTX, join_processes, recv_exact, split_hostport, start_process

PARTITIONS = 4
CONSUMERS = 2
PROTOCOLS = ("classic", "consumer")
CONSUMER_GROUP_HEARTBEAT = 68
STALL_S = 30.0
NOT_SUPPORTED = "not supported by this broker"
BENCH_OVERRIDES = {"group.initial.rebalance.delay.ms": "300"}


def api_versions(bootstrap: str, timeout: float = 5.0) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions v0 answer: api key -> (min, max) (a raw socket, no client).

    Raises:
        OSError: no answer.
    """
    host, port = split_hostport(bootstrap)
    client = b"shoal-bench"
    req = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(req)) + req)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        body = recv_exact(s, size)
    _corr, error, count = struct.unpack_from(">ihi", body, 0)
    if error:
        raise OSError(f"ApiVersions answered error {error}")
    out = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", body, 10 + 6 * i)
        out[key] = (lo, hi)
    return out


def group_consume_worker(p: dict[str, Any], progress: Any, ready: Any, go: Any, stop: Any,
                         out: Any) -> None:
    """One ``confluent_kafka.Consumer`` of the group (``p['protocol']``).

    ``progress[partition]`` (shared) is the next offset not yet read by any consumer; the
    consumer whose batch brings their sum to ``p['target']`` sets ``stop``."""
    clients._watch_parent()  # noqa: SLF001 - the bench's own helper
    consumer = None
    try:
        from confluent_kafka import Consumer

        errors: list[str] = []

        def on_error(err: Any) -> None:
            if len(errors) < 100:
                errors.append(f"{err.name()}: {err.str()}")

        conf = {"bootstrap.servers": p["bootstrap"], "group.id": p["group"],
                "group.protocol": p["protocol"], "client.id": f"bench-group-{p['index']}",
                "auto.offset.reset": "earliest", "error_cb": on_error, "log_level": 3}
        consumer = Consumer(conf)
        with ready.get_lock():
            ready.value += 1
        if not go.wait(120):
            raise TimeoutError("never told to start")
        t_sub = time.monotonic()
        consumer.subscribe([p["topic"]])
        deadline = t_sub + p["timeout"]
        target = p["target"]
        records = reread = 0
        t_first = t_last = None
        parts = len(progress)
        while not stop.is_set() and time.monotonic() < deadline:
            msgs = consumer.consume(10_000, 0.1)
            if not msgs:
                continue
            now = time.monotonic()
            high = [-1] * parts
            got = 0
            for msg in msgs:
                if msg.error() is not None:
                    if len(errors) < 100:
                        errors.append(str(msg.error()))
                    continue
                got += 1
                part, off = msg.partition(), msg.offset()
                if off > high[part]:
                    high[part] = off
            if not got:
                continue
            if t_first is None:
                t_first = now
            with progress.get_lock():
                fresh = 0
                for part in range(parts):
                    if high[part] + 1 > progress[part]:
                        fresh += high[part] + 1 - progress[part]
                        progress[part] = high[part] + 1
                done = sum(progress[:]) >= target
            records += got
            reread += got - fresh
            if fresh:
                t_last = now
            if done:
                stop.set()
        assignment = sorted(tp.partition for tp in consumer.assignment())
        try:
            consumer.commit(asynchronous=False)
        except Exception:  # noqa: BLE001 - nothing to commit, or the group moved on
            pass
        consumer.close()
        consumer = None
        out.put({"ok": True, "index": p["index"], "records": records, "reread": reread,
                 "t_sub": t_sub, "t_first": t_first, "t_last": t_last, "errors": errors[:5],
                 "assignment": assignment})
    except Exception:  # noqa: BLE001 - reported to the parent
        out.put({"ok": False, "index": p.get("index"), "error": traceback.format_exc(limit=5)})
    finally:
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass


def _unsupported(errors: list[str]) -> bool:
    text = " ".join(errors).lower()
    return "unsupported" in text or "not supported" in text


def run_protocol(bootstrap: str, topic: str, group: str, protocol: str, n: int,
                 timeout: float) -> dict[str, Any]:
    """Two consumer processes of ``protocol`` read ``n`` records of ``topic``; the figures."""
    progress = CTX.Array("q", PARTITIONS)
    ready = CTX.Value("i", 0)
    go, stop, out = CTX.Event(), CTX.Event(), CTX.Queue()
    procs = []
    try:
        for i in range(CONSUMERS):
            p = {"bootstrap": bootstrap, "group": group, "topic": topic, "protocol": protocol,
                 "index": i, "target": n, "timeout": timeout}
            procs.append(start_process(group_consume_worker, p, progress, ready, go, stop, out,
                                       name=f"group-consumer-{protocol}-{i}"))
        deadline = time.monotonic() + 60
        while ready.value < CONSUMERS and time.monotonic() < deadline:
            if not all(pr.is_alive() for pr in procs):
                break
            time.sleep(0.02)
        go.set()
        end = time.monotonic() + timeout + 5
        last, last_change = -1, time.monotonic()
        while not stop.is_set() and time.monotonic() < end:
            if not any(pr.is_alive() for pr in procs):
                break
            total = sum(progress[:])
            now = time.monotonic()
            if total != last:
                last, last_change = total, now
            elif now - last_change > STALL_S:
                break
            stop.wait(0.05)
        stop.set()
        results = []
        wait_until = time.monotonic() + 30
        while len(results) < CONSUMERS and time.monotonic() < wait_until:
            try:
                results.append(out.get(timeout=max(0.1, wait_until - time.monotonic())))
            except Exception:  # noqa: BLE001 - queue.Empty: a process reported nothing
                break
    finally:
        stop.set()
        join_processes(procs, 15)
    ok = sorted((r for r in results if r.get("ok")), key=lambda r: r["index"])
    bad = [r["error"] for r in results if not r.get("ok")]
    distinct = sum(progress[:])
    errors = [e for r in ok for e in r["errors"]]
    fig: dict[str, Any] = {"protocol": protocol, "group": group, "records": distinct,
                           "target_records": n, "complete": distinct >= n,
                           "reread": sum(r["reread"] for r in ok),
                           "per_consumer": [r["records"] for r in ok],
                           "assignments": [r["assignment"] for r in ok]}
    if errors:
        fig["first_errors"] = errors[:3]
    firsts = [r["t_first"] for r in ok if r["t_first"] is not None]
    lasts = [r["t_last"] for r in ok if r["t_last"] is not None]
    subs = [r["t_sub"] for r in ok]
    if firsts and lasts and subs:
        t_sub, t_first, t_last = min(subs), min(firsts), max(lasts)
        fig["first_record_s"] = round(t_first - t_sub, 3)
        fig["first_record_each_s"] = [round(r["t_first"] - r["t_sub"], 3)
                                      if r["t_first"] is not None else None for r in ok]
        fig["seconds"] = round(t_last - t_first, 3)
        fig["rate"] = round(distinct / (t_last - t_first), 1) if t_last > t_first else None
        fig["rate_incl_join"] = round(distinct / (t_last - t_sub), 1)
        fig["t_first"], fig["t_last"] = t_first, t_last  # the broker's share (scenario_k)
    if bad:
        fig["error"] = f"group consumer: {bad[0]}"
    elif len(ok) < CONSUMERS:
        fig["error"] = f"{CONSUMERS - len(ok)} of {CONSUMERS} consumers reported nothing"
    elif not distinct and _unsupported(errors):
        return {"protocol": protocol, "skipped": NOT_SUPPORTED, "client_errors": errors[:3]}
    elif not fig["complete"]:
        fig["error"] = (f"gave up (no progress for {STALL_S:.0f} s or {timeout:.0f} s in all) "
                        f"with {distinct} of {n} records; client errors: {errors[:2]}")
    return fig


def scenario_k(settings: Any, system: Any) -> dict[str, Any]:
    """(k) consume N records with a 2-member group per protocol (classic, consumer)."""
    from bench import scenarios

    topic, n, pre = scenarios.dataset(settings, system, PARTITIONS)
    try:
        apis = api_versions(system.bootstrap)
    except OSError as exc:
        apis = {}
        settings.log(f"  (k) ApiVersions failed ({exc}); trying both protocols")
    fig: dict[str, Any] = {"partitions": PARTITIONS, "consumers": CONSUMERS, "topic": topic,
                           "record_bytes": scenarios.RECORD_SIZE}
    if pre is not None:
        fig["pre_produce"] = pre
    timeout = 30 + n / 5_000
    errors = []
    for protocol in PROTOCOLS:
        if protocol == "consumer" and apis and CONSUMER_GROUP_HEARTBEAT not in apis:
            fig[protocol] = {"protocol": protocol, "skipped": NOT_SUPPORTED,
                             "why": "ApiVersions has no ConsumerGroupHeartbeat (key 68)"}
            settings.log(f"  (k) {protocol}: {NOT_SUPPORTED} (no ApiVersions key 68)")
            continue
        group = f"bench-{settings.run_id}-k-{protocol}"
        settings.log(f"  (k) {protocol}: {CONSUMERS} consumers, {n:,} records")
        res = run_protocol(system.bootstrap, topic, group, protocol, n, timeout)
        broker = scenarios._broker_share(system, f"k-{protocol}", res.pop("t_first", None),
                                         res.pop("t_last", None))
        if broker is not None:
            res["broker"] = broker
        fig[protocol] = res
        if "error" in res:
            errors.append(f"{protocol}: {res['error']}")
        settings.log(f"  (k) {protocol}: {brief_protocol(res)}")
    if errors:
        fig["error"] = "; ".join(errors)
    return fig


def brief_protocol(res: dict[str, Any]) -> str:
    if "skipped" in res:
        return str(res["skipped"])
    if res.get("rate") is None:
        return "no figures" + (f" ({res['error'].splitlines()[-1]})" if "error" in res else "")
    return (f"{res['rate']:,.0f} rec/s, first record {res.get('first_record_s')} s "
            f"(per consumer {res.get('first_record_each_s')}), {res.get('reread')} reread")


def brief(fig: dict[str, Any]) -> str:
    return "; ".join(f"{p} {brief_protocol(fig[p])}" for p in PROTOCOLS if p in fig)


def _row_value(protocol: str, key: str) -> Any:
    """A figure of one protocol's run, or the reason it did not run ("not supported ...")."""
    def read(d: dict[str, Any]) -> Any:
        res = d.get("k", {}).get(protocol) if isinstance(d.get("k"), dict) else None
        if not isinstance(res, dict):
            return None
        return res["skipped"] if "skipped" in res else res.get(key)
    return read


K_TITLE = (f"(k) consumer-group consume, {PARTITIONS} partitions x {CONSUMERS} consumers "
           "(confluent_kafka.Consumer)")
REPORT_ROWS = [row for protocol in PROTOCOLS for row in (
    report.Row("k", K_TITLE, f"group.protocol={protocol}: throughput", "rec/s",
               _row_value(protocol, "rate"), (">=", 150_000)),
    report.Row("k", K_TITLE, f"group.protocol={protocol}: subscribe to first record", "s",
               _row_value(protocol, "first_record_s"), ("<=", 1.0), digits=3))]
