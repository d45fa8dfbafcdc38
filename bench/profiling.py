"""Profile mode: a profile of the Shoal broker during scenario (b), and its top functions.

Two profilers:

- ``cprofile`` (the default; stdlib, no extra dependency): the broker runs under
  ``bench.profiled_broker`` and profiling of its event-loop thread is switched on and off by
  signals. Deterministic, with call counts, but it slows call-heavy code, so the (b) figures of a
  profiled run are lower. Cython code (uvloop's transport writes) counts as the calling
  function's own time.
- ``py-spy`` (sampling; attaches to the running broker by pid, needs ptrace permission). Only
  the event-loop thread's samples count (the stacks under ``broker/main.py``), and of those only
  busy ones (samples waiting in the loop itself are counted as idle): cumulative = share of busy
  samples with the function on the stack, self = share with it on top. Unlike ``--gil`` this
  keeps time in calls that release the GIL (``os.pread``, socket writes).
"""

from __future__ import annotations

import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.procs import ROOT, track_popen, untrack_popen

PROJECT_DIRS = ("broker", "protocol", "coordinator", "persister", "storage")
_PROJECT_RE = re.compile(r"(^|/)(" + "|".join(PROJECT_DIRS) + ")/")
TOP = 15


def find_py_spy() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    if local.exists():
        return str(local)
    return shutil.which("py-spy")


def choose(requested: str) -> str:
    if requested == "py-spy" and not find_py_spy():
        raise SystemExit("--profiler py-spy: no py-spy executable (pip install py-spy)")
    return requested


def _short(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        pass
    for marker in ("site-packages/", "/lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1] if marker == "site-packages/" else "stdlib:" + \
                path.split(marker, 1)[1].split("/", 1)[-1]
    return path


def is_project(path: str) -> bool:
    return bool(_PROJECT_RE.search(_short(path))) and "site-packages" not in path


class Profiler:
    """Profile the broker ``pid`` between start() and stop(); finish() writes the files."""

    def __init__(self, kind: str, pid: int, out_dir: Path, profile_env_file: Path | None) -> None:
        self.kind = kind
        self.pid = pid
        self.out_dir = out_dir
        self.cprofile_file = profile_env_file  # where the wrapper dumps (cprofile)
        self.raw_file = out_dir / "profile_b.pyspy.txt"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        if self.kind == "py-spy":
            exe = find_py_spy()
            assert exe is not None
            self.proc = subprocess.Popen(
                [exe, "record", "--pid", str(self.pid), "--rate", "200", "--format", "raw",
                 "--function", "-o", str(self.raw_file)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            track_popen(self.proc)
            time.sleep(0.3)
        else:
            os.kill(self.pid, signal.SIGUSR1)

    def stop(self) -> None:
        self.seconds = time.monotonic() - self.started
        if self.kind == "py-spy":
            assert self.proc is not None
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            untrack_popen(self.proc)
        else:
            assert self.cprofile_file is not None
            os.kill(self.pid, signal.SIGUSR2)
            deadline = time.monotonic() + 30
            while not self.cprofile_file.exists() and time.monotonic() < deadline:
                time.sleep(0.1)

    def finish(self) -> dict[str, Any]:
        if self.kind == "py-spy":
            summary = summarize_pyspy(self.raw_file)
        else:
            assert self.cprofile_file is not None
            summary = summarize_cprofile(self.cprofile_file)
        summary["profiler"] = self.kind
        summary["seconds"] = round(self.seconds, 1)
        text = format_top(summary)
        (self.out_dir / "profile_top.txt").write_text(text)
        summary["files"] = sorted(p.name for p in self.out_dir.glob("profile_*"))
        return summary


def summarize_cprofile(path: Path) -> dict[str, Any]:
    st = pstats.Stats(str(path))
    total = st.total_tt or 1e-9  # type: ignore[attr-defined]
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{func} ({_short(file)}:{line})", "project": is_project(file),
                     "calls": nc, "self_s": round(tt, 3), "cum_s": round(ct, 3),
                     "self_pct": round(100 * tt / total, 1), "cum_pct": round(100 * ct / total, 1)})
    return _tops(rows, {"total_s": round(total, 2), "unit": "s"})


_FRAME_RE = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def summarize_pyspy(path: Path) -> dict[str, Any]:
    incl: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    files: dict[str, str] = {}
    total = idle = other_threads = 0
    for raw in path.read_text(errors="replace").splitlines():
        stack, _, count = raw.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        if "broker/main.py" not in stack:  # IO threads (fsync, ...), not the event loop
            other_threads += n
            continue
        leaf = stack.rsplit(";", 1)[-1]
        if "asyncio/runners.py" in leaf or "asyncio/base_events.py" in leaf:
            idle += n  # the loop waiting for I/O (uvloop's C code under run())
            continue
        total += n
        frames = []
        for fr in stack.split(";"):
            m = _FRAME_RE.match(fr)
            if m is None:  # "thread (0x...)" / "process ..." prefixes
                continue
            name = f"{m['func']} ({_short(m['file'])}:{m['line'] or '?'})"
            files[name] = m["file"]
            frames.append(name)
        if not frames:
            continue
        for name in set(frames):
            incl[name] += n
        self_[frames[-1]] += n
    total = total or 1
    rows = [{"function": name, "project": is_project(files[name]), "samples": incl[name],
             "cum_pct": round(100 * incl[name] / total, 1),
             "self_pct": round(100 * self_[name] / total, 1)} for name in incl]
    loop = total + idle
    return _tops(rows, {"total_samples": total, "unit": "samples",
                        "loop_idle_pct": round(100 * idle / loop, 1) if loop else None,
                        "other_thread_samples": other_threads})


def _tops(rows: list[dict[str, Any]], head: dict[str, Any]) -> dict[str, Any]:
    # broker/main.py is the root of every stack: not worth a line.
    proj = [r for r in rows if r["project"] and "broker/main.py" not in r["function"]]
    head["top_project_cumulative"] = sorted(proj, key=lambda r: -r["cum_pct"])[:TOP]
    head["top_project_self"] = sorted(proj, key=lambda r: -r["self_pct"])[:TOP]
    head["top_all_self"] = sorted(rows, key=lambda r: -r["self_pct"])[:TOP]
    return head


def format_top(summary: dict[str, Any]) -> str:
    lines = [f"Broker profile during scenario (b): {summary['profiler']}, "
             f"{summary['seconds']} s, "
             + (f"{summary['total_s']} s profiled CPU" if "total_s" in summary
                else f"{summary['total_samples']} busy event-loop samples (loop idle "
                f"{summary.get('loop_idle_pct')}% of its samples)"), ""]
    for key, title in (("top_project_cumulative", "Top Shoal functions by cumulative time"),
                       ("top_project_self", "Top Shoal functions by self time"),
                       ("top_all_self", "Top functions overall by self time")):
        lines += [title, f"{'cum %':>6} {'self %':>6} {'calls':>9}  function"]
        for r in summary[key]:
            calls = r.get("calls", "")
            lines.append(f"{r['cum_pct']:6.1f} {r['self_pct']:6.1f} {calls!s:>9}  {r['function']}")
        lines.append("")
    return "\n".join(lines)
