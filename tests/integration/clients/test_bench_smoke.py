"""Smoke test of ``make bench``: a tiny run (scenarios a and b1) against its own fresh broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import child_env

ROOT = Path(__file__).resolve().parents[3]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in \
        Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "results"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--scale", "0.01", "--only", "a,b1",
         "--results-dir", str(out)],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert elapsed < 60, f"smoke run took {elapsed:.0f}s"

    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["scale"] == 0.01
    (shoal,) = doc["systems"]
    assert shoal["name"] == "shoal"
    assert not _alive(shoal["broker_pid"]), "the benchmark left its broker running"
    a, b1 = shoal["scenarios"]["a"], shoal["scenarios"]["b1"]
    n = doc["meta"]["records"]
    assert n == 5000

    assert "error" not in a, a
    assert a["records"] == n and a["errors"] == 0
    assert 100 < a["rate"] < 10_000_000 and a["seconds"] > 0

    assert "error" not in b1, b1
    assert b1["complete"] and b1["records"] == n
    assert len(b1["per_consumer"]) == 2 and sum(b1["per_consumer"]) == n
    assert b1["errors"] == 0 and b1["mode"] == "explicit"
    assert 100 < b1["rate"] < 10_000_000
    assert 0 < b1["broker"]["rss_peak_mb"] < 1024

    statuses = {(t["scenario"], t["status"]) for t in doc["targets"]}
    assert {s for s, _ in statuses} == {"a", "b1"}
    assert all(st in ("met", "missed") for _, st in statuses)

    md = (out / "summary.md").read_text()
    assert "| (a) produce, acks=all" in md and "| (b1) share-consume 1 partition" in md
    assert ">= 150,000" in md and ">= 100,000" in md
    assert "(b1) share-consume" in proc.stdout  # the summary table is printed
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (out / "throughput.png").stat().st_size > 1000


def test_spark_scenario_figures_and_skip(tmp_path: Path) -> None:
    """Scenario g (not run here: a JVM start costs ~10 s): its rate arithmetic and a skip."""
    from bench import report, spark_source

    def batch(i: int, at: str, ms: int, rows: int) -> dict[str, object]:
        return {"batchId": i, "timestamp": at, "batchDuration": ms, "numInputRows": rows,
                "durationMs": {"latestOffset": 10, "addBatch": ms - 30, "walCommit": 10,
                               "commitOffsets": 10}}

    # start() at wall 1000.0 = monotonic 50.0; batch 0 ends 6 s later, the query 4 s after that.
    wall0 = 1_000.0
    progress = [batch(0, "1970-01-01T00:16:40.500Z", 5_500, 30_000),
                batch(1, "1970-01-01T00:16:46.000Z", 1_000, 30_000),
                batch(2, "1970-01-01T00:16:47.000Z", 2_500, 10_000)]
    fig = spark_source.figures(progress, 70_000, 50.0, 60.0, wall0)
    assert fig["complete"] and fig["batches"] == 3 and fig["records"] == 70_000
    assert fig["first_batch_s"] == 6.0 and fig["steady_records"] == 40_000
    # The rate ends with the last batch: the quiet polls that end AvailableNow are not counted.
    assert fig["rate"] == 11_428.6 and fig["rate_overall"] == 7_000.0
    assert fig["final_poll_s"] == 0.5 and fig["mean_batch_records"] == 23_333
    assert fig["phase_mean_ms"]["walCommit"] == 10.0

    doc = {"meta": {"run_id": "t", "scale": 1.0, "records": 1, "record_bytes": 1024, "cpus": 2,
                    "load_start": "0"},
           "systems": [{"name": "shoal", "description": "d",
                        "scenarios": {"g": {"skipped": "pyspark not installed"}}}]}
    md = report.write(doc, tmp_path)
    assert "skipped: pyspark not installed" in md and md.count("skipped:") == 1
    assert doc["targets"] == [] and "error" not in md


def test_hostile_scenario_smoke(tmp_path: Path) -> None:
    """Scenario h at scale 0.01 (30 idle connections, a 20,000-partition ShareFetch, ...)."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--scale", "0.01", "--only", "h",
         "--results-dir", str(out)],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads((out / "results.json").read_text())
    h = doc["systems"][0]["scenarios"]["h"]
    assert "error" not in h, h
    assert set(h["steps"]) == {"flood", "half_sent", "slow_reader", "wide_fetch",
                               "wide_share_fetch", "forged_batch", "share_load",
                               "element_counts"}
    assert all(st.get("ok") for st in h["steps"].values()), h["steps"]
    assert h["steps"]["flood"]["opened"] == 30 and h["steps"]["half_sent"]["opened"] == 2
    assert h["steps"]["share_load"]["members_joined"] == 20
    # Which big requests the control pair waited behind, named by API key and array path.
    behind = h["steps"]["element_counts"]["control_behind"]
    assert behind and all("/" in name and "max_ms" in v for name, v in behind.items())
    assert h["control"]["round_trips"] > 0 and h["control"]["p99_ms"] is not None
    assert h["serving_at_end"] is True and h["broker_alive_at_end"] is True
    assert h["broker_exit_code"] is not None  # stopped by the scenario
    assert set(h["verdicts"]) == {"control_p99", "rss_growth", "serving_at_end",
                                  "share_load_held", "element_counts_control_p99",
                                  "element_counts_rss_growth"}
    assert all(v in ("PASS", "FAIL") for v in h["verdicts"].values())
    assert {t["figure"] for t in doc["targets"] if t["scenario"] == "h"} >= {
        "control round trip p99", "broker RSS growth"}
    assert "## Hostile load (h), shoal" in (out / "summary.md").read_text()


def test_hostile_wide_frames_match_kio() -> None:
    """The hand-written wide frames of scenario h decode to what kio would encode."""
    import uuid

    from bench import hostile_frames as hostile
    from protocol import codec

    tid = uuid.uuid4()
    share = codec.decode_request(hostile.wide_share_fetch_frame(5, "g", "m", tid, 3)[4:])
    assert (share.api_key, share.api_version, share.correlation_id) == (78, 1, 5)
    assert share.body.share_session_epoch == 0 and share.body.forgotten_topics_data == ()
    (topic,) = share.body.topics
    assert topic.topic_id == tid and [p.partition_index for p in topic.partitions] == [0, 1, 2]
    fetch = codec.decode_request(hostile.wide_fetch_frame(6, "t", 3)[4:]).body
    assert [p.partition for p in fetch.topics[0].partitions] == [0, 1, 2]
    assert fetch.topics[0].topic == "t" and fetch.rack_id == ""
    close = codec.decode_request(hostile.close_share_session_frame(7, "g", "m")[4:]).body
    assert close.share_session_epoch == -1 and close.topics == ()
    batch = hostile.forged_batch()
    assert len(batch) == 69
    from protocol import record_batch

    header = record_batch.parse_header(batch, 0)
    assert header.record_count == 2**31 - 1 and record_batch.crc_ok(batch, 0, header)


def test_consumer_group_scenario_smoke(tmp_path: Path) -> None:
    """Scenario k at scale 0.01: two classic members split the 4 partitions and read every
    record once; the consumer protocol runs or is reported as not supported (before KIP-848)."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--scale", "0.01", "--only", "k",
         "--results-dir", str(out)],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads((out / "results.json").read_text())
    (shoal,) = doc["systems"]
    assert doc["meta"]["shoal_overrides"]["group.initial.rebalance.delay.ms"] == "300"
    k = shoal["scenarios"]["k"]
    assert "error" not in k, k
    classic = k["classic"]
    assert classic["complete"] and classic["records"] == 5000 and classic["reread"] == 0
    assert sorted(p for a in classic["assignments"] for p in a) == [0, 1, 2, 3]
    assert all(classic["assignments"]) and sum(classic["per_consumer"]) == 5000
    assert 0 < classic["first_record_s"] < 10 and classic["rate"] > 100
    consumer = k["consumer"]
    if "skipped" in consumer:
        assert consumer["skipped"] == "not supported by this broker"
    else:
        assert consumer["complete"] and consumer["records"] == 5000
    md = (out / "summary.md").read_text()
    assert "group.protocol=classic: throughput" in md and "subscribe to first record" in md
    assert {(t["scenario"], t["figure"]) for t in doc["targets"]} >= {
        ("k", "group.protocol=classic: throughput"),
        ("k", "group.protocol=classic: subscribe to first record")}
