"""Process helpers for the benchmark: the Shoal broker under test, client processes, /proc sampling.

Every process started here is registered and stopped by :func:`stop_everything`, which ``run.py``
calls in a ``finally`` block and on SIGTERM/SIGINT (and which also runs at interpreter exit), so
a failed or interrupted benchmark leaves no broker or client behind.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE_TICKS = os.sysconf("SC_CLK_TCK")

# "spawn": client processes must not inherit the parent's librdkafka threads or sockets.
CTX = mp.get_context("spawn")

_popens: list[subprocess.Popen[bytes]] = []
_processes: list[Any] = []  # multiprocessing processes
_lock = threading.Lock()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def split_hostport(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


# ---------------------------------------------------------------------------------------------
# /proc readings


def rss_bytes(pid: int) -> int | None:
    """Resident set size (VmRSS) of ``pid``; None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def hwm_bytes(pid: int) -> int | None:
    """Peak resident set size (VmHWM) of ``pid``."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of ``pid`` (all its threads)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / PAGE_TICKS  # utime, stime


# ---------------------------------------------------------------------------------------------
# A minimal Metadata probe (no client library: librdkafka's reconnect backoff would blur a
# start-up time measured in milliseconds).


def metadata_ok(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if the broker answers a Metadata v4 request (all topics) listing at least one broker."""
    client = b"shoal-bench"
    # header v1: api_key, api_version, correlation_id, client_id; body v4: topics=null, auto=false
    body = struct.pack(">hhih", 3, 4, 7, len(client)) + client + struct.pack(">ib", -1, 0)
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = recv_exact(s, 4)
            size = struct.unpack(">i", head)[0]
            resp = recv_exact(s, min(size, 12))
    except OSError:
        return False
    if len(resp) < 12:
        return False
    corr, _throttle, brokers = struct.unpack(">iii", resp[:12])
    return corr == 7 and brokers >= 1


def recv_exact(s: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``s`` (ConnectionError if the peer closes first)."""
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


# ---------------------------------------------------------------------------------------------
# The Shoal broker under test


class ShoalBroker:
    """A fresh ``shoal broker`` process with its own data directory and port.

    ``wrapper`` runs the broker through another module (the cProfile wrapper in profile mode).
    """

    def __init__(self, data_dir: Path, log_path: Path, overrides: dict[str, str] | None = None,
                 wrapper: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = free_port()
        self.overrides = dict(overrides or {})
        self.wrapper = wrapper
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_s: float | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        entry = self.wrapper or ["-m", "broker.main"]
        cmd = [sys.executable, *entry, "broker", "--listen", self.bootstrap,
               "--data-dir", str(self.data_dir)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> float:
        """Start and wait for the first successful Metadata; returns that time in seconds."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        env = dict(os.environ, **(self.env or {}))
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(self.command(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                     env=env)
        log.close()
        with _lock:
            _popens.append(self.proc)
        deadline = self.started_at + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.logs()}")
            if metadata_ok("127.0.0.1", self.port, timeout=0.2):
                self.ready_s = time.monotonic() - self.started_at
                return self.ready_s
            time.sleep(0.002)
        self.stop()
        raise RuntimeError(f"broker did not answer Metadata within {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        _terminate_popen(self.proc, timeout)
        return self.proc.returncode


def _terminate_popen(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    with _lock:
        if proc in _popens:
            _popens.remove(proc)


def track_popen(proc: subprocess.Popen[bytes]) -> None:
    """Register a subprocess started elsewhere so that :func:`stop_everything` ends it too."""
    with _lock:
        _popens.append(proc)


def untrack_popen(proc: subprocess.Popen[bytes]) -> None:
    with _lock:
        if proc in _popens:
            _popens.remove(proc)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Sampling a process's RSS and CPU in the background


@dataclass
class Window:
    """A named interval of the run (monotonic times) and the broker samples inside it."""

    name: str
    start: float
    end: float
    samples: list[tuple[float, int, float]] = field(default_factory=list)
    cpu_s: float | None = None

    def summary(self) -> dict[str, Any]:
        wall = self.end - self.start
        out: dict[str, Any] = {"seconds": round(wall, 3)}
        if self.samples:
            rss = [r for _, r, _ in self.samples]
            out["rss_peak_mb"] = round(max(rss) / 2**20, 1)
            out["rss_mean_mb"] = round(sum(rss) / len(rss) / 2**20, 1)
        if self.cpu_s is not None and wall > 0:
            out["broker_cpu_s"] = round(self.cpu_s, 2)
            out["broker_cpu_pct"] = round(100 * self.cpu_s / wall, 1)
        return out


class Monitor:
    """Samples VmRSS and CPU time of ``pid`` every ``interval`` s in a thread.

    ``between(name, t0, t1)`` gives the broker's share of an interval that the clients measured
    (CPU interpolated between samples), and keeps it as a window for the RSS plot.
    """

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.t0 = time.monotonic()
        self.timeline: list[tuple[float, int, float]] = []  # (monotonic, rss bytes, cpu s)
        self.windows: list[Window] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-monitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, cpu = rss_bytes(self.pid), cpu_seconds(self.pid)
            if rss is None or cpu is None:
                return
            self.timeline.append((time.monotonic(), rss, cpu))
            self._stop.wait(self.interval)

    def _cpu_at(self, t: float) -> float | None:
        tl = self.timeline
        if not tl:
            return None
        if t <= tl[0][0]:
            return tl[0][2]
        for (ta, _, ca), (tb, _, cb) in zip(tl, tl[1:], strict=False):
            if ta <= t <= tb:
                return ca + (cb - ca) * ((t - ta) / (tb - ta) if tb > ta else 0)
        return tl[-1][2]

    def between(self, name: str, t0: float, t1: float) -> dict[str, Any]:
        deadline = time.monotonic() + 1.0  # let the sampler pass t1
        while (self._thread.is_alive() and time.monotonic() < deadline
               and (not self.timeline or self.timeline[-1][0] < t1)):
            time.sleep(self.interval / 2)
        inside = [s for s in self.timeline if t0 <= s[0] <= t1]
        if not inside and self.timeline:  # shorter than the sampling interval: nearest sample
            inside = [min(self.timeline, key=lambda s: abs(s[0] - (t0 + t1) / 2))]
        w = Window(name, t0, t1, inside)
        c0, c1 = self._cpu_at(t0), self._cpu_at(t1)
        if c0 is not None and c1 is not None:
            w.cpu_s = c1 - c0
        self.windows.append(w)
        return w.summary()

    def rss_mb(self) -> float | None:
        rss = rss_bytes(self.pid)
        return round(rss / 2**20, 1) if rss is not None else None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


# ---------------------------------------------------------------------------------------------
# Client processes


def start_process(target: Callable[..., None], *args: Any, name: str = "") -> Any:
    """Start ``target(*args)`` in a new (spawned) process; it is stopped by stop_everything."""
    p = CTX.Process(target=target, args=args, name=name or target.__name__, daemon=True)
    p.start()
    with _lock:
        _processes.append(p)
    return p


def join_processes(procs: list[Any], timeout: float) -> None:
    """Wait up to ``timeout`` s for ``procs``; terminate (then kill) those still running."""
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        _end_process(p)


def _end_process(p: Any) -> None:
    if p.is_alive():
        p.terminate()
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)
    with _lock:
        if p in _processes:
            _processes.remove(p)


def stop_everything() -> None:
    """End every client process and broker this module started (idempotent)."""
    with _lock:
        procs, popens = list(_processes), list(_popens)
    for p in procs:
        try:
            _end_process(p)
        except Exception:  # noqa: BLE001 - best effort at teardown
            pass
    for proc in popens:
        try:
            _terminate_popen(proc, timeout=10)
        except Exception:  # noqa: BLE001
            pass


atexit.register(stop_everything)


def install_signal_cleanup() -> None:
    """SIGTERM/SIGINT: stop every process we started, then exit (130/143)."""
    def handler(signum: int, _frame: Any) -> None:
        stop_everything()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
