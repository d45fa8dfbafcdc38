"""The benchmark report: ``results.json`` (every figure), ``summary.md`` (the table, targets
met/missed) and PNG plots (matplotlib, Agg backend). Everything is drawn from the JSON document,
so ``python -m bench.report RESULTS_DIR`` redraws a report."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Row:
    scenario: str
    title: str
    figure: str
    unit: str
    get: Callable[[dict[str, Any]], Any]
    target: tuple[str, float] | None = None  # (">=" | "<=", value)
    digits: int = 0


def _g(*path: str) -> Callable[[dict[str, Any]], Any]:
    def get(d: dict[str, Any]) -> Any:
        for p in path:
            if not isinstance(d, dict) or p not in d:
                return None
            d = d[p]
        return d
    return get


C_TITLE = "(c) end-to-end latency at 5k rec/s, 1 partition, 2 share consumers (implicit)"

ROWS = [
    Row("a", "(a) produce, acks=all, 4 partitions", "throughput", "rec/s", _g("a", "rate"),
        (">=", 150_000)),
    Row("a", "(a) produce, acks=all, 4 partitions", "throughput", "MiB/s", _g("a", "mb_per_s"),
        digits=1),
    Row("b1", "(b1) share-consume 1 partition x 2 consumers, explicit", "throughput", "rec/s",
        _g("b1", "rate"), (">=", 100_000)),
    Row("b2", "(b2) share-consume 4 partitions x 1 consumer, implicit", "throughput", "rec/s",
        _g("b2", "rate"), (">=", 60_000)),
    Row("b3", "(b3) share-consume 1 partition x 8 consumers, explicit", "throughput", "rec/s",
        _g("b3", "rate")),
    Row("b4", "(b4) share-consume 16 partitions x 4 consumers, implicit", "throughput", "rec/s",
        _g("b4", "rate")),
    Row("c", C_TITLE, "p50", "ms", _g("c", "p50_ms"), digits=2),
    Row("c", C_TITLE, "p99", "ms", _g("c", "p99_ms"), ("<=", 20), digits=2),
    Row("c", C_TITLE, "p99.9", "ms", _g("c", "p999_ms"), digits=2),
    Row("d", "(d) footprint", "cold start to first Metadata", "s", _g("d", "cold_start_s"),
        ("<=", 1.0), digits=3),
    Row("d", "(d) footprint", "idle RSS", "MB", _g("d", "idle_rss_mb"), ("<=", 80), digits=1),
    Row("d", "(d) footprint", "peak RSS under (b)", "MB", _g("d", "rss_under_b_peak_mb"),
        digits=1),
    Row("d", "(d) footprint", "mean RSS under (b)", "MB", _g("d", "rss_under_b_mean_mb"),
        digits=1),
    Row("e", "(e) restart, 10,000 share-partitions of state", "load after clean stop", "ms",
        _g("e", "clean_load_ms")),
    Row("e", "(e) restart, 10,000 share-partitions of state", "load after crash", "ms",
        _g("e", "crash_load_ms")),
    Row("e", "(e) restart, 10,000 share-partitions of state", "broker start after clean stop",
        "ms", _g("e", "clean_broker_start_ms")),
    Row("e", "(e) restart, 10,000 share-partitions of state", "broker start after crash", "ms",
        _g("e", "crash_broker_start_ms")),
]

F_TITLE = "(f) share-consume 1 partition x 1 consumer, implicit (client comparison)"
ROWS += [
    Row("f", F_TITLE, "client.ShareConsumer (asyncio, this project)", "rec/s",
        _g("f", "client.ShareConsumer", "rate")),
    Row("f", F_TITLE, "confluent_kafka.ShareConsumer", "rec/s",
        _g("f", "confluent_kafka.ShareConsumer", "rate")),
]

G_TITLE = "(g) Spark share source (trivial query), 32 partitions, noop sink"
ROWS += [
    Row("g", G_TITLE, "after the first micro-batch", "rec/s", _g("g", "rate"), (">=", 50_000)),
    Row("g", G_TITLE, "overall, incl. Spark warm-up", "rec/s", _g("g", "rate_overall")),
    Row("g", G_TITLE, "first micro-batch", "s", _g("g", "first_batch_s"), digits=1),
    Row("g", G_TITLE, "ceiling: same query, rows made in the executors", "rec/s",
        _g("g", "ceiling", "rate")),
    Row("g", G_TITLE, "after the first micro-batch / ceiling (same run)", "ratio",
        _g("g", "ceiling_ratio"), (">=", 0.8), digits=2),
]

H_TITLE = "(h) hostile load: control producer/consumer round trips during the attacks"
ROWS += [
    Row("h", H_TITLE, "control round trip p50", "ms", _g("h", "control", "p50_ms"), digits=1),
    Row("h", H_TITLE, "control round trip p99", "ms", _g("h", "control", "p99_ms"),
        ("<=", 100), digits=1),
    Row("h", H_TITLE, "control round trips lost", "records", _g("h", "control", "lost")),
    Row("h", H_TITLE, "broker RSS growth", "MB", _g("h", "rss_growth_mb"), ("<=", 200),
        digits=1),
    Row("h", H_TITLE, "broker serving at the end (Metadata)", "1 = yes", _g("h", "serving"),
        (">=", 1)),
    Row("h", H_TITLE, "share load held (10 groups x 200 members, 2,000 sessions at scale 1)",
        "1 = yes", _g("h", "held"), (">=", 1)),
]

T_TITLE = "(t) TLS: SSL vs PLAINTEXT listener, 4 partitions, 1 share consumer (implicit)"
ROWS += [Row("t", T_TITLE, f"{label} over {protocol}", "rec/s", _g("t", protocol, kind, "rate"))
         for kind, label in (("produce", "produce"), ("share_consume", "share-consume"))
         for protocol in ("PLAINTEXT", "SSL")]
ROWS += [Row("t", T_TITLE, f"{label} SSL / PLAINTEXT", "ratio", _g("t", f"{kind}_ssl_ratio"),
             digits=2)
         for kind, label in (("produce", "produce"), ("share_consume", "share-consume"))]

THROUGHPUT_SCENARIOS = [("a", "a produce"), ("b1", "b1 1p x 2c expl"), ("b2", "b2 4p x 1c impl"),
                        ("b3", "b3 1p x 8c expl"), ("b4", "b4 16p x 4c impl"),
                        ("g", "g Spark source")]


def _fmt(v: Any, digits: int) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, (int, float)):
        return f"{v:,.{digits}f}"
    return str(v)


def status(row: Row, value: Any) -> str | None:
    if row.target is None or not isinstance(value, (int, float)):
        return None  # no figure, or a reason instead of one ("not supported by this broker")
    op, goal = row.target
    ok = value >= goal if op == ">=" else value <= goal
    return "met" if ok else "missed"


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per (target, system) with the figure and met/missed."""
    out = []
    for row in ROWS:
        if row.target is None:
            continue
        for s in results["systems"]:
            v = row.get(s["scenarios"])
            if not isinstance(v, (int, float)):
                continue
            out.append({"scenario": row.scenario, "figure": row.figure, "unit": row.unit,
                        "system": s["name"], "value": v, "target": f"{row.target[0]} "
                        f"{_fmt(row.target[1], row.digits)}", "status": status(row, v)})
    return out


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    systems = results["systems"]
    names = [s["name"] for s in systems]
    lines = [f"# Shoal benchmark {meta['run_id']}", ""]
    lines.append(f"Scale {meta['scale']} ({meta['records']:,} records of {meta['record_bytes']} B "
                 f"per throughput scenario), {meta['cpus']} CPUs shared by broker and clients, "
                 f"load average {meta['load_start']} at start, {meta.get('load_end', '?')} at end, "
                 f"{meta.get('wall_s', '?')} s in all. Systems: "
                 + ", ".join(f"{s['name']} ({s['description']})" for s in systems) + ".")
    if meta["scale"] != 1:
        lines += ["", f"**Scaled run ({meta['scale']}):** fewer records per scenario, so ramp-up "
                  "weighs more; throughput figures are not comparable with the targets."]
    if meta.get("settle"):
        lines += ["", "Dirty pages were flushed to disk (`sync`) before each scenario, so one "
                  "scenario's writeback is not billed to the next (`--no-settle` turns this off)."]
    elif "settle" in meta:
        lines += ["", "**No settle (`--no-settle`):** later scenarios share the disk with the "
                  "writeback of earlier ones; fsync-bound figures such as (c) p99 suffer."]
    if meta.get("profile"):
        lines += ["", "**Profile mode:** the broker was profiled during (b); "
                  "(b) figures include the profiler's overhead."]
    lines += ["", "| scenario | figure | " + " | ".join(names) + " | target | "
              + ("status" if len(names) == 1 else "status (" + ", ".join(names) + ")") + " |",
              "|---|---|" + "---:|" * len(names) + "---|---|"]
    notes: list[str] = []
    first_rows = {r.scenario: r for r in reversed(ROWS)}
    for row in ROWS:
        cells, states, any_value = [], [], False
        for s in systems:
            sc = s["scenarios"]
            if row.scenario not in sc:
                cells.append("-")
                states.append("-")
                continue
            err = sc[row.scenario].get("error") if isinstance(sc[row.scenario], dict) else None
            skipped = (sc[row.scenario].get("skipped")
                       if isinstance(sc[row.scenario], dict) else None)
            if skipped:  # the scenario cannot run here (pyspark missing, ...): not an error
                first = first_rows[row.scenario] is row  # said once, on its first row
                cells.append(f"skipped: {skipped}" if first else "-")
                states.append("-")
                any_value = any_value or first
                continue
            v = row.get(sc)
            any_value = any_value or v is not None or bool(err)
            cell = _fmt(v, row.digits)
            if err:
                note = f"{s['name']} {row.scenario}: {err.strip().splitlines()[-1][:300]}"
                if note not in notes:
                    notes.append(note)
                cell += f" (error [{notes.index(note) + 1}])"
            cells.append(cell)
            states.append(status(row, v) or "-")
        if not any_value:
            continue
        target = f"{row.target[0]} {_fmt(row.target[1], row.digits)}" if row.target else "-"
        st = states[0] if len(states) == 1 else ", ".join(states)
        title = row.title
        if row.scenario == "e":  # a scaled run builds fewer share-partitions
            n = next((s["scenarios"]["e"].get("share_partitions") for s in systems
                      if isinstance(s["scenarios"].get("e"), dict)), None)
            if n:
                title = f"(e) restart, {n:,} share-partitions of state"
        if row.scenario == "g":  # (g) reads 600,000 x scale records, not N
            n = next((s["scenarios"]["g"].get("target_records") for s in systems
                      if isinstance(s["scenarios"].get("g"), dict)), None)
            if n:
                title = f"{G_TITLE}, {n:,} records"
        lines.append(f"| {title} | {row.figure} ({row.unit}) | " + " | ".join(cells)
                     + f" | {target} | {st if row.target else '-'} |")
    for s in systems:
        if s.get("error"):
            notes.append(f"{s['name']}: {s['error'].strip().splitlines()[-1][:300]}")
    if notes:
        lines += [""] + [f"[{i + 1}] {n}" for i, n in enumerate(notes)]
    prof = results.get("profile")
    if prof and prof.get("top_project_cumulative"):
        lines += ["", f"## Broker profile during (b) ({prof['profiler']}, top "
                  f"{len(prof['top_project_cumulative'])} Shoal functions by cumulative time)", "",
                  "| cum % | self % | function |", "|---:|---:|---|"]
        for r in prof["top_project_cumulative"]:
            lines.append(f"| {r['cum_pct']:.1f} | {r['self_pct']:.1f} | `{r['function']}` |")
        lines += ["", "Full lists: `profile_top.txt`."]
    lines += hostile_section(systems)
    files = ["`results.json` (every figure)"] + [f"`{p}`" for p in results.get("plots", [])]
    lines += ["", "Files: " + ", ".join(files) + "."]
    if results.get("plots_note"):
        lines.append(results["plots_note"] + ".")
    return "\n".join(lines) + "\n"


def hostile_section(systems: list[dict[str, Any]]) -> list[str]:
    """Scenario (h) step by step: what each attack did and the control pair during it."""
    lines: list[str] = []
    for s in systems:
        h = s["scenarios"].get("h")
        if not isinstance(h, dict) or "steps" not in h:
            continue
        verdicts = h.get("verdicts", {})
        lines += ["", f"## Hostile load (h), {s['name']}", "",
                  "Targets: " + ", ".join(f"{k} **{v}**" for k, v in verdicts.items())
                  + f". Baseline before the attacks: control p50 "
                  f"{_g('control_baseline', 'p50_ms')(h)} ms, p99 "
                  f"{_g('control_baseline', 'p99_ms')(h)} ms, RSS {h.get('rss_baseline_mb')} MB;"
                  f" peak during them {h.get('rss_peak_mb')} MB.", "",
                  "| step | outcome | control p50 (ms) | control p99 (ms) | lost | step s "
                  "| RSS peak (MB) |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for name, st in h["steps"].items():
            c = st.get("control", {})
            lines.append(f"| {name} | {_step_outcome(name, st)} | {_fmt(c.get('p50_ms'), 1)} | "
                         f"{_fmt(c.get('p99_ms'), 1)} | {_fmt(c.get('lost'), 0)} | "
                         f"{_fmt(st.get('window_s'), 1)} | {_fmt(st.get('rss_peak_mb'), 1)} |")
    return lines


def _step_outcome(name: str, st: dict[str, Any]) -> str:
    if not st.get("ok", True) and st.get("error"):
        return "error: " + str(st["error"]).strip().splitlines()[-1][:160].replace("|", "/")
    if name in ("flood", "half_sent"):
        return (f"{st.get('opened')} connections open"
                + (f", {st['refused']} refused" if st.get("refused") else ""))
    if name == "slow_reader":
        return f"{st.get('requests_sent')} of {st.get('requests_wanted')} fetches sent unread"
    if name in ("wide_fetch", "wide_share_fetch"):
        return (f"{(st.get('frame_bytes') or 0) / 2**20:.1f} MB frame: {st.get('outcome')}"
                + (f" in {st['response_s']} s" if st.get("response_s") is not None else ""))
    if name == "forged_batch":
        return (f"produce answered {st.get('produce_error')}, log end offset "
                f"{st.get('log_end_offset')}")
    if name == "share_load":
        return (f"{st.get('members_joined')} joined, {st.get('sessions_opened')} sessions opened "
                f"{st.get('session_open_errors') or ''}; at the end {st.get('members_at_end')} "
                f"members, {st.get('sessions_at_end')} sessions {st.get('verify_errors') or ''}"
                ).replace("|", "/")
    return "-"


def plots(results: dict[str, Any], out: Path) -> list[str]:
    """Write the PNGs; returns their file names (none if matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    systems = results["systems"]
    targets = {"a": 150_000, "b1": 100_000, "b2": 60_000, "g": 50_000}

    # Throughput per scenario, one bar per system.
    present = [(k, label) for k, label in THROUGHPUT_SCENARIOS
               if any(_g(k, "rate")(s["scenarios"]) is not None for s in systems)]
    if present:
        fig, ax = plt.subplots(figsize=(9, 4.8))
        width = 0.8 / len(systems)
        for i, s in enumerate(systems):
            vals = [_g(k, "rate")(s["scenarios"]) or 0 for k, _ in present]
            xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(present))]
            bars = ax.bar(xs, vals, width, label=s["name"])
            ax.bar_label(bars, labels=[f"{v / 1000:.0f}k" if v else "n/a" for v in vals],
                         fontsize=8)
        labelled = False
        for j, (k, _) in enumerate(present):
            if k in targets:
                ax.hlines(targets[k], j - 0.45, j + 0.45, colors="red", linestyles="--",
                          label="_nolegend_" if labelled else "target")
                labelled = True
        ax.set_xticks(range(len(present)), [label for _, label in present])
        ax.set_ylabel("records/s")
        ax.set_title(f"Throughput per scenario (1 KiB records, scale {results['meta']['scale']})")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "throughput.png", dpi=110)
        plt.close(fig)
        written.append("throughput.png")

    # End-to-end latency CDF.
    curves = [(s["name"], _g("c", "cdf_ms")(s["scenarios"])) for s in systems]
    curves = [(n, c) for n, c in curves if c]
    if curves:
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for name, cdf in curves:
            ys = [(i + 1) / len(cdf) for i in range(len(cdf))]
            ax.plot([max(v, 1e-3) for v in cdf], ys, label=name)
        ax.axvline(20, color="red", linestyle="--", label="p99 target 20 ms")
        ax.axhline(0.99, color="grey", linestyle=":", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("produce() to poll() delivery (ms, log scale)")
        ax.set_ylabel("fraction of records")
        ax.set_title("End-to-end latency CDF at 5,000 records/s, 2 share consumers")
        ax.legend(loc="lower right")
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "latency_cdf.png", dpi=110)
        plt.close(fig)
        written.append("latency_cdf.png")

    # Shoal broker RSS over the run, scenario windows shaded.
    for s in systems:
        tl = s.get("rss_timeline")
        if not tl:
            continue
        fig, ax = plt.subplots(figsize=(9, 4))
        ax.plot([t for t, _ in tl], [m for _, m in tl], color="tab:blue")
        top = max(m for _, m in tl)
        for i, w in enumerate(s.get("windows", [])):
            ax.axvspan(w["t0"], w["t1"], alpha=0.12, color="tab:orange")
            ax.text(w["t0"], top * (1.0 - 0.06 * (i % 3)), w["name"], fontsize=7, va="top")
        ax.set_ylim(bottom=0, top=top * 1.08)
        ax.set_xlabel("seconds since broker start")
        ax.set_ylabel("RSS (MB)")
        ax.set_title(f"{s['name']} broker RSS")
        fig.tight_layout()
        fig.savefig(out / f"rss_{s['name']}.png", dpi=110)
        plt.close(fig)
        written.append(f"rss_{s['name']}.png")
    return written


def write(results: dict[str, Any], out: Path) -> str:
    """Write results.json, the PNGs and summary.md into ``out``; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    results["targets"] = evaluate(results)
    try:
        results["plots"] = plots(results, out)
    except Exception as exc:  # noqa: BLE001 - the table and the JSON matter more
        results["plots"] = []
        results["plots_note"] = f"plotting failed: {exc!r}"
    else:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            results["plots_note"] = "matplotlib is not installed: no PNG plots"
    md = markdown(results)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (out / "summary.md").write_text(md)
    return md


if __name__ == "__main__":
    target = Path(sys.argv[1])
    doc = json.loads((target / "results.json").read_text())
    print(write(doc, target))
