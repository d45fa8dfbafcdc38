"""A real etcd server (Debian's etcd-server, installed by `make etcd`) on loopback ports."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port


class Etcd:
    """One etcd process with its own data dir; ``stop()`` is kill -9, ``start()`` restarts it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = open(data_dir.parent / "etcd.log", "ab")

    @property
    def endpoint(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        url = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.proc = subprocess.Popen(
            ["etcd", "--name", "test", "--data-dir", str(self.data_dir),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"test={peer}"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see etcd.log")
            time.sleep(0.1)
        raise RuntimeError("etcd did not become healthy within 20 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        self._log.close()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    assert shutil.which("etcd"), "etcd is not installed: `make etcd` installs Debian's etcd-server"
    server = Etcd(tmp_path / "etcd")
    server.start()
    try:
        yield server
    finally:
        server.close()
