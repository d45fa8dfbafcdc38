"""Scenario (h): hostile load (issue 12, sections 1, 4 and 8).

A fresh Shoal broker of its own serves a control pair (a ``confluent_kafka`` producer and a
Fetch-based ``confluent_kafka`` consumer in one process, one record round trip every 20 ms)
while attack processes, built on raw sockets so that the bench's own event loop is never the
bottleneck, do the following one after the other, each holding what it opened until the end:

1. ``flood``: 3,000 idle connections;
2. ``half_sent``: 200 connections that send the size prefix of a 50 MB frame and 1 KiB of it,
   then stall;
3. ``slow_reader``: one connection pipelining 1,000 Fetch requests (1 MiB each) that never reads;
4. ``wide_fetch``: a Fetch listing 100,000 partitions (answered or timed out);
5. ``wide_share_fetch``: a ShareFetch opening a share session with 2,000,000 partitions (a
   12 MB frame; answered or timed out), then the session is closed (epoch -1);
6. ``forged_batch``: a Produce of a 69-byte batch that claims 2^31-1 records (the log end offset
   it leaves is reported);
7. ``element_counts`` (issue 25): every array of every advertised API at 30,000 entries, one
   request after the other (``bench/element_counts.py``; about 90 requests of up to 2 MB);
8. ``share_load``: 10 share groups of 200 members (ShareGroupHeartbeat from raw clients) and
   one share session each (ShareFetch, epoch 0): 2,000 sessions. Held means every join and
   every session open succeeded and, at the end, every member's heartbeat and every session's
   epoch-1 fetch still succeed.

Counts scale with ``--scale`` (with small minimums). Figures: the control pair's round trip
p50/p99 over the attack (and per step), the broker's RSS growth (peak during the attack minus
the baseline before it), whether a Metadata round trip succeeds at the end, each step's
outcome. Targets: control p99 <= 100 ms, RSS growth <= 200 MB, broker serving at the end.

Every step has a timeout; the attack processes close their sockets when told to stop and are
terminated if they do not; the broker is stopped in a ``finally`` block.

Modules: this one runs the scenario (topics, steps, windows, figures, verdicts);
``bench/hostile_attacks.py`` the attack processes, ``bench/hostile_control.py`` the control
pair and its percentiles, ``bench/hostile_frames.py`` the raw request frames and socket helpers.
With ``SHOAL_BENCH_LOOP_HOLD=<file>`` the broker runs under ``bench/loop_hold.py`` and each
step reports which APIs held the event loop longest (``loop_hold``).
"""

from __future__ import annotations

import datetime
import json
import os
import queue
import signal
import struct
import tempfile
import time
import uuid
from array import array
from pathlib import Path
from typing import Any

from bench.hostile_attacks import attack_worker, raise_nofile
from bench.hostile_control import control_figures, control_worker
from bench.hostile_frames import call, connect, entity, kio_frame, zigzag
from bench.procs import (
    CTX,
    Monitor,
    ShoalBroker,
    join_processes,
    metadata_ok,
    remove_tree,
    rss_bytes,
    start_process,
)

CONTROL_RATE = 50  # round trips per second
CONTROL_TIMEOUT_S = 10.0  # a control record not back within this counts as lost
BASELINE_S = 3.0
HOLD_S = 3.0
STEP_TIMEOUT_S = 90.0
TARGET_P99_MS = 100.0
TARGET_RSS_MB = 200.0
FULL = {"flood": 3000, "half_sent": 200, "slow_reader": 1000, "wide_fetch": 100_000,
        "wide_share_fetch": 2_000_000, "element_counts": 30_000, "members": 200, "groups": 10}
MINIMUM = {"flood": 10, "half_sent": 2, "slow_reader": 10, "wide_fetch": 100,
           "wide_share_fetch": 1000, "element_counts": 300, "members": 2, "groups": 10}


def counts(scale: float) -> dict[str, int]:
    return {k: max(MINIMUM[k], int(v * min(scale, 1.0))) if k != "groups" else v
            for k, v in FULL.items()}


# ---------------------------------------------------------------------------------------------
# The scenario


def _create_topic(addr: tuple[str, int], name: str, partitions: int) -> uuid.UUID:
    with connect(addr, 30) as s:
        t = entity(19, 7, "CreatableTopic", name=name, num_partitions=partitions,
                    replication_factor=1, assignments=(), configs=())
        resp = call(s, 19, 7, kio_frame(19, 7, 1, topics=(t,),
                                          timeout=datetime.timedelta(seconds=30),
                                          validate_only=False))
        if int(resp.topics[0].error_code) != 0:
            raise RuntimeError(f"CreateTopics {name}: {resp.topics[0].error_code}")
        return resp.topics[0].topic_id


def _fill(addr: tuple[str, int], topic: str, mb: int) -> None:
    """Append ``mb`` MiB of 64 KiB records to partition 0 (the slow reader's data)."""
    import crc32c

    from bench.clients import payload

    value = payload(64 * 1024)
    with connect(addr, 30) as s:
        for i in range(mb * 16 // 8):
            recs = bytearray()
            for d in range(8):
                rec = (b"\x00\x00" + zigzag(d) + b"\x01" + zigzag(len(value)) + value
                       + b"\x00")
                recs += zigzag(len(rec)) + rec
            after = struct.pack(">hiqqqhii", 0, 7, 0, 0, -1, -1, -1, 8) + bytes(recs)
            batch = struct.pack(">qiibI", 0, 9 + len(after), 0, 2, crc32c.crc32c(after)) + after
            part = entity(0, 9, "PartitionProduceData", index=0, records=batch)
            data = entity(0, 9, "TopicProduceData", name=topic, partition_data=(part,))
            resp = call(s, 0, 9, kio_frame(0, 9, i + 1, transactional_id=None, acks=1,
                                             timeout=datetime.timedelta(seconds=10),
                                             topic_data=(data,)))
            code = resp.responses[0].partition_responses[0].error_code
            if int(code) != 0:
                raise RuntimeError(f"filling {topic}: {code}")


def _wait_report(out: Any, proc: Any, timeout: float, step: str) -> dict[str, Any]:
    """The next report on ``out``; an error if ``proc`` died without one or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return dict(out.get(timeout=0.5))
        except queue.Empty:
            if not proc.is_alive():
                try:
                    return dict(out.get(timeout=1.0))
                except queue.Empty:
                    return {"ok": False, "kind": step,
                            "error": f"the {step} process exited ({proc.exitcode}) without a report"}
    return {"ok": False, "kind": step, "error": f"no report within {timeout:.0f} s"}


def _loop_hold(pid: int, path: Path) -> dict[str, Any]:
    """The broker's loop-hold figures since the step started (bench/loop_hold.py): the ten
    APIs that held the loop longest, GC pauses and the loop lag."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_mtime_ns != before:
            break
        time.sleep(0.05)
    try:
        got = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"error": f"no loop-hold figures from the broker: {exc}"}
    got["apis"] = dict(list(got["apis"].items())[:10])
    return got


STEPS = ["flood", "half_sent", "slow_reader", "wide_fetch", "wide_share_fetch",
         "forged_batch", "element_counts", "share_load"]


def scenario_h(scale: float, work_dir: Path, log_path: Path, overrides: dict[str, str],
               log: Any = print, steps: list[str] | None = None) -> dict[str, Any]:
    """(h) hostile load against a fresh broker; returns the figures (see the module doc).
    ``steps``: a subset of ``STEPS`` to run (all by default)."""
    limits = raise_nofile()  # the broker inherits the raised soft limit
    n = counts(scale)
    data = Path(tempfile.mkdtemp(prefix="shoal-bench-hostile-", dir=work_dir))
    hold_file = os.environ.get("SHOAL_BENCH_LOOP_HOLD")  # per-API loop hold (bench/loop_hold.py)
    broker = ShoalBroker(data / "data", log_path, overrides,
                         wrapper=["-m", "bench.loop_hold"] if hold_file else None)
    fig: dict[str, Any] = {"scale": scale, "counts": n, "nofile_limit": list(limits),
                           "control_rate": CONTROL_RATE, "steps": {},
                           "targets": {"control_p99_ms": TARGET_P99_MS,
                                       "rss_growth_mb": TARGET_RSS_MB}}
    stops: list[Any] = []
    procs: list[Any] = []
    monitor = None
    try:
        broker.start()
        addr = ("127.0.0.1", broker.port)
        monitor = Monitor(broker.pid)
        _create_topic(addr, "hostile-control", 1)
        data_id = _create_topic(addr, "hostile-data", 4)
        _create_topic(addr, "hostile-forged", 1)
        _fill(addr, "hostile-data", 8)
        out, ctl_out = CTX.Queue(), CTX.Queue()
        ready, ctl_stop = CTX.Event(), CTX.Event()
        ctl = start_process(control_worker, {"bootstrap": broker.bootstrap,
                                             "topic": "hostile-control", "rate": CONTROL_RATE},
                            ctl_out, ready, ctl_stop, name="hostile-control")
        procs.append(ctl)
        if not ready.wait(60):
            raise RuntimeError("the control pair did not complete a round trip within 60 s")
        time.sleep(0.5)
        t_base = time.monotonic()
        time.sleep(BASELINE_S)
        base_rss = rss_bytes(broker.pid) or 0
        t_attack = time.monotonic()
        common = {"host": addr[0], "port": addr[1], "timeout": STEP_TIMEOUT_S,
                  "topic": "hostile-data", "topic_id": str(data_id)}
        per_step = {"flood": {"n": n["flood"]}, "half_sent": {"n": n["half_sent"]},
                    "slow_reader": {"n": n["slow_reader"]},
                    "wide_fetch": {"n": n["wide_fetch"]},
                    "wide_share_fetch": {"n": n["wide_share_fetch"]},
                    "forged_batch": {"topic": "hostile-forged"},
                    "element_counts": {"n": n["element_counts"]},
                    "share_load": {"groups": n["groups"], "members": n["members"]}}
        windows: dict[str, tuple[float, float]] = {}
        share_stop = share_proc = None
        for step in (steps or STEPS):
            stop = CTX.Event()
            stops.append(stop)
            if step == "share_load":
                share_stop = stop
            log(f"  h: {step} {per_step[step]}")
            if hold_file:
                os.kill(broker.pid, signal.SIGUSR1)
            t0 = time.monotonic()
            proc = start_process(attack_worker, step, {**common, **per_step[step]}, out, stop,
                                 name=f"hostile-{step}")
            procs.append(proc)
            if step == "share_load":
                share_proc = proc
            res = _wait_report(out, proc, STEP_TIMEOUT_S + 60, step)
            windows[step] = (t0, time.monotonic())
            res.pop("kind", None)
            res.pop("phase", None)
            fig["steps"][step] = res
            if hold_file:
                res["loop_hold"] = _loop_hold(broker.pid, Path(hold_file))
            if not proc.is_alive() and not res.get("ok"):
                log(f"  h: {step} failed: {str(res.get('error', '')).strip().splitlines()[-1:]}")
        time.sleep(HOLD_S)
        t_verify = time.monotonic()
        if share_stop is not None and share_proc is not None:
            share_stop.set()
            final = _wait_report(out, share_proc, STEP_TIMEOUT_S, "share_load")
            final.pop("kind", None)
            if final.get("ok"):
                if "loop_hold" in fig["steps"]["share_load"]:
                    final["loop_hold"] = fig["steps"]["share_load"]["loop_hold"]
                fig["steps"]["share_load"] = final
            else:
                fig["steps"]["share_load"]["verify"] = final.get("error")
        t_end = time.monotonic()
        peak = max((r for t, r, _ in monitor.timeline if t_attack <= t <= t_end), default=0)
        fig["serving_at_end"] = metadata_ok(*addr, timeout=10)
        ctl_stop.set()
        for stop in stops:
            stop.set()
        ctl_res = ctl_out.get(timeout=60)
        if not ctl_res.get("ok"):
            raise RuntimeError(f"control pair: {ctl_res.get('error')}")
        sent, rtt = array("d"), array("d")
        sent.frombytes(ctl_res["sent"])
        rtt.frombytes(ctl_res["rtt_ms"])
        end = time.monotonic()
        fig["control_baseline"] = control_figures(list(sent), list(rtt), t_base, t_attack, end)
        fig["control"] = control_figures(list(sent), list(rtt), t_attack, t_verify, end)
        for step, (a, b) in windows.items():
            fig["steps"][step]["control"] = control_figures(list(sent), list(rtt), a, b, end)
            fig["steps"][step]["window_s"] = round(b - a, 2)
            inside = [r for t, r, _ in monitor.timeline if a <= t <= b]
            if inside:  # what the broker held while this step was being set up
                fig["steps"][step]["rss_peak_mb"] = round(max(inside) / 2**20, 1)
        fig["rss_baseline_mb"] = round(base_rss / 2**20, 1)
        fig["rss_peak_mb"] = round(peak / 2**20, 1)
        fig["rss_growth_mb"] = round((peak - base_rss) / 2**20, 1)
        fig["rss_end_mb"] = monitor.rss_mb()
        fig["attack_s"] = round(t_verify - t_attack, 1)
        share = fig["steps"].get("share_load", {})
        fig["share_load_held"] = share.get("held")
        counts_step = fig["steps"].get("element_counts")
        if counts_step is not None:  # issue 25: its own control p99 and RSS growth
            counts_step["control_behind"] = control_behind(
                list(sent), list(rtt), counts_step.pop("windows", []), end)
            counts_step["rss_growth_mb"] = round(
                counts_step.get("rss_peak_mb", base_rss / 2**20) - base_rss / 2**20, 1)
        p99 = fig["control"]["p99_ms"]
        fig["verdicts"] = {
            "control_p99": "PASS" if p99 is not None and p99 <= TARGET_P99_MS else "FAIL",
            "rss_growth": "PASS" if fig["rss_growth_mb"] <= TARGET_RSS_MB else "FAIL",
            "serving_at_end": "PASS" if fig["serving_at_end"] else "FAIL",
            "share_load_held": "PASS" if share.get("held") or "share_load" not in
            (steps or STEPS) else "FAIL",
        }
        if counts_step is not None:
            c99 = counts_step["control"]["p99_ms"]
            fig["verdicts"]["element_counts_control_p99"] = (
                "PASS" if c99 is not None and c99 <= TARGET_P99_MS else "FAIL")
            fig["verdicts"]["element_counts_rss_growth"] = (
                "PASS" if counts_step["rss_growth_mb"] <= TARGET_RSS_MB else "FAIL")
        fig["serving"] = 1 if fig["serving_at_end"] else 0
        fig["held"] = 1 if share.get("held") else 0
    finally:
        for stop in stops:
            stop.set()
        join_processes(procs, 30)
        if monitor is not None:
            monitor.close()
        fig["broker_alive_at_end"] = broker.alive()
        fig["broker_exit_code"] = broker.stop()
        remove_tree(data)
    return fig


def control_behind(sent: list[float], rtt: list[float], windows: list[Any], end: float,
                   top: int = 12) -> dict[str, Any]:
    """Which big requests the control pair waited behind: per request (``key/path`` with its
    sent/answered times) the slowest control round trip that overlapped it, and how many of
    those took over half the p99 target; the ``top`` worst, slowest first."""
    rows: list[tuple[float, str, int]] = []
    for name, a, b in windows:
        worst, over = 0.0, 0
        for ts, ms in zip(sent, rtt, strict=True):
            if ts >= b:
                break
            took = (end - ts) * 1000 if ms < 0 else ms
            if ts + took / 1000 > a:
                worst = max(worst, took)
                over += took > TARGET_P99_MS / 2
        rows.append((worst, name, over))
    rows.sort(reverse=True)
    return {name: {"max_ms": round(worst, 1), "over_half_target": over}
            for worst, name, over in rows[:top]}


def summary_line(fig: dict[str, Any]) -> str:
    c = fig.get("control", {})
    return (f"control p50 {c.get('p50_ms')} ms, p99 {c.get('p99_ms')} ms "
            f"({c.get('lost')} lost), RSS growth {fig.get('rss_growth_mb')} MB, serving at end "
            f"{fig.get('serving_at_end')}, share load held {fig.get('share_load_held')}"
            + _counts_summary(fig))


def _counts_summary(fig: dict[str, Any]) -> str:
    step = fig.get("steps", {}).get("element_counts")
    if not step or "control" not in step:
        return ""
    return (f"; element counts: control p99 {step['control'].get('p99_ms')} ms, RSS growth "
            f"{step.get('rss_growth_mb')} MB over {step.get('requests')} requests")


if __name__ == "__main__":  # python -m bench.hostile [scale]: the scenario alone, JSON out
    import sys

    from bench.procs import install_signal_cleanup, stop_everything

    install_signal_cleanup()
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    try:
        # python -m bench.hostile [scale] [step,step...]: e.g. ``1 element_counts``
        chosen = sys.argv[2].split(",") if len(sys.argv) > 2 else None
        result = scenario_h(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0, work,
                            work / "broker.log", {}, steps=chosen)
        print(json.dumps(result, indent=2, default=str))
    finally:
        stop_everything()
        remove_tree(work)
