"""Shared fixtures: a real broker process on a random loopback port with its own data dir."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHILD_SITE = ROOT / "tests" / "child_site"


def child_env() -> dict[str, str]:
    """The environment of a broker or CLI process a test starts: this one, with
    tests/child_site first on PYTHONPATH (its sitecustomize keeps kio from importing hypothesis,
    as on a broker install)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHILD_SITE), env.get("PYTHONPATH")) if p)
    return env


class BrokerProcess:
    """A ``shoal broker`` subprocess. ``kill()`` is ``kill -9``; ``start()`` reuses the data dir."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None,
                 port: int | None = None, extra_args: list[str] | None = None,
                 listen: bool = True) -> None:
        self.data_dir = data_dir
        # False: the listeners come from extra_args (--config FILE); readiness is then the
        # broker's ready file rather than a TCP connect (which a TLS listener logs as a failed
        # handshake).
        self.listen = listen
        # Tests read a metric right after the action that changes it: every scrape renders
        # (the default, 1 s of page cache, is covered by tests/integration/admin/test_metrics.py).
        self.overrides = {"metrics.render.cache.ms": "0", **(overrides or {})}
        self.extra_args = list(extra_args or [])  # more `shoal broker` options
        # Run through this first (e.g. `ip netns exec NS`, which execs: the pid stays the broker's).
        self.command_prefix: list[str] = []
        self._auto_port = port is None  # chosen here: may be taken again if it was lost
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        """Start the broker and wait until it listens. A port this object chose that another
        process took in the meantime (free_port can only tell it was free) is chosen again,
        once."""
        try:
            self._start(timeout)
        except RuntimeError as exc:
            if not (self._auto_port and self.listen and "address already in use" in str(exc)):
                raise
            self.port = free_port()
            self.log_path = self.data_dir.parent / f"broker-{self.port}.log"
            self._start(timeout)

    def _start(self, timeout: float) -> None:
        cmd = [*self.command_prefix, sys.executable, "-m", "broker.main", "broker",
               "--data-dir", str(self.data_dir)]
        ready = self.data_dir.parent / f"broker-{self.port}.ready"
        if self.listen:
            cmd += ["--listen", self.bootstrap]
        else:
            ready.unlink(missing_ok=True)
            cmd += ["--ready-file", str(ready)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        cmd += self.extra_args
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=child_env())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._close_log()
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.logs()}")
            if not self.listen:
                if ready.exists():
                    return
                time.sleep(0.05)
                continue
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start within {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._close_log()

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._close_log()
        return self.proc.returncode

    def _close_log(self) -> None:
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by a test session (tests use unique topic names)."""
    data = tmp_path_factory.mktemp("shared-broker") / "data"
    b = BrokerProcess(data)
    b.start()
    yield b
    b.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, for tests that restart, kill or reconfigure it."""
    b = BrokerProcess(tmp_path / "data")
    yield b
    b.stop()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> str:
    """A topic/group name unique to the test."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    return f"{name[:60]}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
