"""CPU time of a process tree, by role: where a Spark query's CPU goes (scenario g).

:class:`TreeSampler` samples, every ``interval`` s in a thread, the CPU time (user + system)
of every descendant of a root process (the PySpark driver: its JVM, the Python workers the JVM
forks, the streaming-source runner) and of extra named pids (the broker). ``between(t0, t1)``
gives each role's CPU seconds in an interval of ``time.monotonic``, interpolated between
samples; a process that exited keeps its last sample. On 2 cores shared by all of them, CPU
per record is what sets the rate, so this says which process to work on.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from typing import Any

from bench.procs import cpu_seconds


def _stat(pid: int) -> tuple[int, str] | None:
    """(ppid, command line) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return int(text[text.rindex(")") + 2:].split()[1]), cmd


def role(cmd: str, parent_cmd: str) -> str:
    """A process's role in a local-mode PySpark query, from its and its parent's command."""
    if "java" in cmd.split(" ", 1)[0]:
        return "jvm"
    for module, name in (("python_streaming_source_runner", "source_runner"),
                         ("pyspark.daemon", "python_worker"), ("pyspark.worker", "python_worker"),
                         ("plan_data_source_read", "python_planner")):
        if module in cmd:
            return name
    if "java" in parent_cmd.split(" ", 1)[0] and "python" in cmd:
        return "python_other"
    return "driver" if "python" in cmd else "other"


class TreeSampler:
    """Samples the CPU time of ``root``'s descendants (and of ``extra`` {name: pid})."""

    def __init__(self, root: int | None = None, extra: dict[str, int] | None = None,
                 interval: float = 0.1) -> None:
        self.root = root if root is not None else os.getpid()
        self.extra = dict(extra or {})
        self.interval = interval
        self.roles: dict[int, str] = {}
        # pid -> [(monotonic, cpu s)]
        self.samples: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self._stop = threading.Event()
        # One sample before the thread starts: a process that is in it was alive at the start,
        # so a time before its first sample counts from that sample, not from 0.
        self._initial = set(self._tree())
        self._sample(self._tree())
        self._thread = threading.Thread(target=self._run, name="cpu-tree", daemon=True)
        self._thread.start()

    def _tree(self) -> dict[int, str]:
        procs: dict[int, tuple[int, str]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = _stat(int(entry))
                if st is not None:
                    procs[int(entry)] = st
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _) in procs.items():
            children[ppid].append(pid)
        out: dict[int, str] = {}
        todo = [self.root]
        while todo:
            pid = todo.pop()
            for child in children.get(pid, ()):
                if child not in self.roles:
                    parent_cmd = procs.get(pid, (0, ""))[1]
                    self.roles[child] = role(procs[child][1], parent_cmd)
                out[child] = self.roles[child]
                todo.append(child)
        self.roles.setdefault(self.root, "driver")
        out[self.root] = "driver"
        for name, pid in self.extra.items():
            self.roles[pid] = name
            out[pid] = name
        return out

    def _run(self) -> None:
        last_tree = 0.0
        pids: dict[int, str] = {}
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_tree > 0.5:  # new workers appear rarely; /proc walks are not free
                pids, last_tree = self._tree(), now
            self._sample(pids)
            self._stop.wait(self.interval)

    def _sample(self, pids: dict[int, str]) -> None:
        for pid in pids:
            cpu = cpu_seconds(pid)
            if cpu is not None:
                self.samples[pid].append((time.monotonic(), cpu))

    def _at(self, pid: int, t: float) -> float:
        series = self.samples[pid]
        if not series:
            return 0.0
        if t <= series[0][0]:  # before its first sample: born later, or alive at the start
            return series[0][1] if pid in self._initial else 0.0
        for (ta, ca), (tb, cb) in zip(series, series[1:], strict=False):
            if ta <= t <= tb:
                return ca + (cb - ca) * ((t - ta) / (tb - ta) if tb > ta else 0)
        return series[-1][1]

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds per role in ``[t0, t1]`` (a process first seen inside it counts from 0)."""
        out: dict[str, float] = defaultdict(float)
        for pid in list(self.samples):
            used = self._at(pid, t1) - self._at(pid, t0)
            if used > 0:
                out[self.roles.get(pid, "other")] += used
        return {k: round(v, 3) for k, v in sorted(out.items())}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


def per_record_us(cpu: dict[str, float], records: int) -> dict[str, Any]:
    """``between``'s CPU seconds as µs per record, with a total."""
    if records <= 0:
        return {}
    out: dict[str, Any] = {k: round(v * 1e6 / records, 2) for k, v in cpu.items()}
    out["total"] = round(sum(cpu.values()) * 1e6 / records, 2)
    return out
