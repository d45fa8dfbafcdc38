"""Scenario ``t`` (issue 13): produce and share-consume throughput over TLS next to plaintext.

One fresh broker serves two listeners, ``PLAINTEXT`` and ``SSL`` (a server certificate made at
run time with trustme; no client certificate), so both runs share the process, data directory
and machine state. For each listener: a producer process sends N x 1 KiB records (acks=all,
4 partitions, as scenario a), then one ShareConsumer process (implicit acknowledgement, as b2)
consumes them from a new topic and group. The listeners take turns in ABBA order (PLAINTEXT,
SSL, SSL, PLAINTEXT) so that drift on a shared machine (page cache, writeback, other load)
falls on both alike; dirty pages are synced before each measured phase. The figures are the
mean records/s per listener and the SSL/PLAINTEXT ratio (1.0 = TLS costs nothing). The clients are ``bench/clients.py``'s workers with the
listener's security settings. N = 500,000 x ``--scale`` (at least 2,000), as scenarios a and b.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import clients
from bench.procs import CTX, ShoalBroker, free_port, join_processes, remove_tree, start_process
from bench.scenarios import (
    A_PARTITIONS,
    RECORD_SIZE,
    STALL_S,
    Settings,
    _collect,
    _failed,
    _share_figures,
)

FULL_RECORDS = 500_000  # as the other throughput scenarios (settings.records())
PROTOCOLS = ("PLAINTEXT", "SSL")
ORDER = ("PLAINTEXT", "SSL", "SSL", "PLAINTEXT")  # ABBA


class _TwoListenerBroker(ShoalBroker):
    """A ShoalBroker serving PLAINTEXT on ``port`` and SSL on ``ssl_port``."""

    def __init__(self, data_dir: Path, log_path: Path, certs: Path) -> None:
        self.ssl_port = free_port()
        super().__init__(data_dir, log_path, overrides={
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "server.pem")})
        self.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{self.port},"
                                       f"SSL://127.0.0.1:{self.ssl_port}")

    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index("--listen")
        return cmd[:i] + cmd[i + 2:]  # listeners come from the override


def _certs(where: Path) -> Path:
    import trustme

    where.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(where / "server.pem"))
    return where


def _produce(bootstrap: str, config: dict[str, Any], topic: str, n: int) -> dict[str, Any]:
    out = CTX.Queue()
    timeout = 60 + n / 2_000
    proc = start_process(clients.produce_worker, {
        "bootstrap": bootstrap, "topic": topic, "count": n, "partitions": A_PARTITIONS,
        "size": RECORD_SIZE, "index": 0, "timeout": timeout, "config": config}, out,
        name="tls-producer")
    try:
        results = _collect(out, 1, timeout + 30)
    finally:
        join_processes([proc], 10)
    problem = _failed(results, 1, "producer")
    if problem:
        raise RuntimeError(problem)
    r = results[0]
    return {"records": n, "seconds": round(r["seconds"], 3),
            "rate": round(n / r["seconds"], 1) if r["seconds"] > 0 else None}


def _consume(bootstrap: str, config: dict[str, Any], topic: str, group: str,
             n: int) -> dict[str, Any]:
    counter, ready, seen = CTX.Value("q", 0), CTX.Value("i", 0), CTX.Array("q", 1)
    go, stop, out = CTX.Event(), CTX.Event(), CTX.Queue()
    timeout = 60 + n / 1_000
    proc = start_process(clients.share_consume_worker, {
        "bootstrap": bootstrap, "group": group, "topic": topic, "mode": "implicit",
        "index": 0, "target": n, "timeout": timeout, "config": config},
        counter, ready, seen, go, stop, out, name="tls-share-consumer")
    try:
        deadline = time.monotonic() + 60
        while ready.value < 1 and proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        t_go = time.monotonic()
        go.set()
        last, last_change = -1, time.monotonic()
        while not stop.is_set() and proc.is_alive() and time.monotonic() < t_go + timeout:
            if counter.value != last:
                last, last_change = counter.value, time.monotonic()
            elif time.monotonic() - last_change > STALL_S:
                break
            stop.wait(0.02)
        stop.set()
        results = _collect(out, 1, 30)
    finally:
        stop.set()
        join_processes([proc], 15)
    problem = _failed(results, 1, "share consumer")
    if problem:
        raise RuntimeError(problem)
    fig = _share_figures(results, n, t_go)
    return {k: fig.get(k) for k in ("records", "complete", "seconds", "rate", "join_s")}


def scenario_t(settings: Settings, log: Any) -> dict[str, Any]:
    """Run scenario t on a broker of its own; returns its figures."""
    n = max(2_000, int(FULL_RECORDS * settings.scale))
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-tls-", dir=settings.work_dir))
    broker = _TwoListenerBroker(work / "data", work / "broker.log", _certs(work / "certs"))
    fig: dict[str, Any] = {"records": n, "record_size": RECORD_SIZE,
                           "partitions": A_PARTITIONS, "consumers": 1}
    try:
        broker.start()
        admin = clients.Admin(broker.bootstrap)
        bootstraps = {"PLAINTEXT": (broker.bootstrap, {}),
                      "SSL": (f"127.0.0.1:{broker.ssl_port}",
                              {"security.protocol": "SSL",
                               "ssl.ca.location": str(work / "certs" / "ca.pem")})}
        runs: dict[str, list[dict[str, Any]]] = {p: [] for p in PROTOCOLS}
        for i, protocol in enumerate(ORDER):
            bootstrap, config = bootstraps[protocol]
            topic = settings.topic(f"tls-{protocol.lower()}-{i}")
            group = f"{topic}-group"
            admin.create_topic(topic, A_PARTITIONS)
            admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"})
            log(f"  (t) {protocol} ({i + 1}/{len(ORDER)}): produce {n:,} records, then "
                "share-consume them")
            os.sync()
            produced = _produce(bootstrap, config, topic, n)
            os.sync()
            runs[protocol].append({"produce": produced,
                                   "share_consume": _consume(bootstrap, config, topic, group, n)})
        admin.close()
        for protocol, got in runs.items():
            fig[protocol] = {kind: {
                "rate": _mean([r[kind].get("rate") for r in got]),
                "runs": [r[kind] for r in got]} for kind in ("produce", "share_consume")}
        for kind in ("produce", "share_consume"):
            plain = fig["PLAINTEXT"][kind].get("rate") or 0
            tls = fig["SSL"][kind].get("rate") or 0
            fig[f"{kind}_ssl_ratio"] = round(tls / plain, 3) if plain else None
    finally:
        broker.stop()
        remove_tree(work)
    return fig


def _mean(rates: list[Any]) -> float | None:
    values = [r for r in rates if r]
    return round(statistics.fmean(values), 1) if len(values) == len(rates) else None


def brief(fig: dict[str, Any]) -> str:
    """One line for the bench log and summary."""
    if "PLAINTEXT" not in fig or "SSL" not in fig:
        return "error"

    def rate(protocol: str, kind: str) -> str:
        return f"{fig[protocol][kind].get('rate') or 0:,.0f}"

    return (f"produce {rate('SSL', 'produce')} rec/s over SSL vs {rate('PLAINTEXT', 'produce')} "
            f"plaintext (x{fig.get('produce_ssl_ratio')}), share-consume "
            f"{rate('SSL', 'share_consume')} vs {rate('PLAINTEXT', 'share_consume')} "
            f"(x{fig.get('share_consume_ssl_ratio')}); {fig['records']:,} records")

