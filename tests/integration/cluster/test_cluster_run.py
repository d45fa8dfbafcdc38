"""``shoal cluster run`` (``make cluster``) for real: etcd from PATH and three broker processes.

The scenario a user goes through: the launcher starts etcd (healthy on the port it prints) and
brokers 1..3 with the printed command lines (node id i, port P+i-1, data in D/broker-i), which
register (``shoal cluster describe`` through any of them lists all three) and share a 6-partition
topic's leadership. kill -9 of broker 2 is reported, and etcd and the other brokers keep
running; once its session lapses, describe lists brokers 1 and 3 and broker 2's partitions as
offline. Broker 2's printed command line, run by hand from the same directory, brings it back
with its partitions. SIGTERM stops every process the launcher
started. A second run on the same data directory reuses etcd's data: the same etcd cluster and
the same Shoal cluster id.

Also: a broker that cannot start (a config every broker refuses) is reported and etcd keeps
running until SIGTERM; without etcd on PATH the launcher says how to install it and starts
nothing. The scenario needs cluster mode in the broker (``shoal broker --cluster``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import ROOT
from tests.integration.admin.test_cli import shoal

BROKERS = 3
WAIT_S = 60.0
DATA = "data-cluster"  # relative: command lines are run again "from the same directory"
# The launcher runs in a directory of its own; this checkout's packages come first there too.
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _consecutive_free_ports(n: int) -> int:
    """A port P such that P..P+n-1 are free on 127.0.0.1 (right now)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = int(s.getsockname()[1])
        if first + n > 65535:
            continue
        try:
            socks = []
            for p in range(first, first + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def _etcd_cluster_id(client_url: str) -> str:
    req = urllib.request.Request(client_url + "/v3/cluster/member/list", data=b"{}",
                                 method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return str(json.loads(r.read())["header"]["cluster_id"])


def _etcd_healthy(client_url: str) -> bool:
    try:
        with urllib.request.urlopen(client_url + "/health", timeout=2) as r:
            return b'"true"' in r.read()
    except OSError:
        return False


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _until(what: str, check: object, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.2)


class Launcher:
    """``python -m cli.main cluster run`` from the checkout, its output in a file."""

    def __init__(self, cwd: Path, port: int, out: Path, brokers: int = BROKERS,
                 *extra: str) -> None:
        self.cwd, self.port, self.out = cwd, port, out
        self.etcd_pid = 0
        with open(out, "wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "cluster", "run", "--brokers",
                 str(brokers), "--port", str(port), "--data-dir", DATA, "--stop-timeout", "20",
                 *extra], cwd=cwd, env=ENV, stdout=f, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.out.read_text()

    def wait_for(self, pattern: str, timeout: float = WAIT_S) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            assert self.proc.poll() is None, f"the launcher exited:\n{self.text()}"
            m = re.search(pattern, self.text(), re.M)
            if m:
                found.append(m)
            return m is not None

        _until(f"{pattern!r} in the launcher's output:\n{self.text()}", seen, timeout)
        return found[0]

    def started(self) -> tuple[str, dict[int, int], dict[int, list[str]]]:
        """etcd's client URL, broker pids and printed restart command lines by node id."""
        etcd = self.wait_for(r"^etcd: (http://127\.0\.0\.1:\d+) \(pid (\d+)\)")
        url, self.etcd_pid = etcd.group(1), int(etcd.group(2))
        self.wait_for(rf"^broker {BROKERS}: .*\n  restart by hand: ")
        pids = {int(n): int(pid) for n, pid in
                re.findall(r"^broker (\d+): 127\.0\.0\.1:\d+ \(pid (\d+)\)", self.text(), re.M)}
        commands = {int(n): shlex.split(cmd) for n, cmd in
                    re.findall(r"^broker (\d+): .*\n  restart by hand: (.*)$", self.text(),
                               re.M)}
        return url, pids, commands

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(90)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _describe(port: int) -> dict:
    r = shoal("cluster", "describe", "--bootstrap-server", f"127.0.0.1:{port}", "--json")
    assert r.returncode == 0, r.stderr
    doc: dict = json.loads(r.stdout)
    return doc


def _orders(doc: dict) -> list[dict]:
    return [p for p in doc["partitions"] if p["topic"] == "orders"]


def _registered(port: int, expected: list[tuple[int, int]]) -> bool:
    """Whether describe through ``port`` lists exactly ``expected`` (node id, port)."""
    r = shoal("cluster", "describe", "--bootstrap-server", f"127.0.0.1:{port}", "--json")
    if r.returncode != 0:
        return False
    brokers = json.loads(r.stdout)["brokers"]
    return [(b["node_id"], b["port"]) for b in brokers] == expected


def test_launcher_starts_reports_a_dead_broker_and_stops_everything(tmp_path: Path) -> None:
    assert shutil.which("etcd"), "etcd is not installed: `make etcd` installs Debian's etcd-server"
    port = _consecutive_free_ports(BROKERS)
    launcher = Launcher(tmp_path, port, tmp_path / "launcher-1.out")
    by_hand: subprocess.Popen[bytes] | None = None
    try:
        url, pids, commands = launcher.started()
        assert _etcd_healthy(url)
        endpoint = "etcd://" + url.removeprefix("http://")
        assert sorted(pids) == sorted(commands) == [1, 2, 3]
        for i in range(1, BROKERS + 1):
            expected = [sys.executable, "-m", "cli.main", "broker", "--cluster", endpoint,
                        "--node-id", str(i), "--config", f"{DATA}/broker-{i}.properties",
                        "--data-dir", f"{DATA}/broker-{i}"]
            assert commands[i] == expected
            assert _alive(pids[i]) and _cmdline(pids[i]) == expected
        launcher.wait_for(r"^cluster ready: 3 of 3 brokers, bootstrap servers "
                          rf"127\.0\.0\.1:{port},127\.0\.0\.1:{port + 1},127\.0\.0\.1:{port + 2}")
        everyone = [(i, port + i - 1) for i in range(1, BROKERS + 1)]
        for i in range(BROKERS):  # through any broker
            _until(f"describe through broker {i + 1} lists 3 brokers",
                   lambda i=i: _registered(port + i, everyone))
        shoal_cluster_id = _describe(port)["cluster_id"]
        etcd_cluster_id = _etcd_cluster_id(url)
        created = shoal("topics", "--bootstrap-server", f"127.0.0.1:{port}", "--create",
                        "--topic", "orders", "--partitions", "6")
        assert created.returncode == 0, created.stderr
        placed = _orders(_describe(port + 2))
        assert {p["leader"] for p in placed} == {1, 2, 3}
        on_2 = [p["partition"] for p in placed if p["leader"] == 2]

        os.kill(pids[2], signal.SIGKILL)
        launcher.wait_for(r"^broker 2 \(pid \d+\) exited with signal 9 \(SIGKILL\); etcd and 2 "
                          r"other broker\(s\) keep running\. Its log: .*broker-2\.log\. "
                          r"Restart it with:\n  .*--node-id 2 ")
        assert _alive(pids[1]) and _alive(pids[3]) and launcher.proc.poll() is None
        assert _etcd_healthy(url)
        assert _listening(port) and _listening(port + 2)
        # Once its session lapses, describe shows broker 2 gone and its partitions offline.
        _until("broker 2 leaves the cluster", lambda: _registered(port, [(1, port),
                                                                         (3, port + 2)]))
        doc = _describe(port)
        assert [(p["topic"], p["partition"]) for p in doc["offline_partitions"]] == [
            ("orders", i) for i in on_2]
        assert [p["partition"] for p in _orders(doc) if p["offline"]] == on_2

        # The printed command line, run by hand from the same directory, brings it back.
        with open(tmp_path / "broker-2-by-hand.log", "wb") as log:
            by_hand = subprocess.Popen(commands[2], cwd=tmp_path, env=ENV, stdout=log,
                                       stderr=subprocess.STDOUT)
        _until("broker 2, restarted by hand, listens", lambda: _listening(port + 1))
        _until("broker 2 is registered again", lambda: _registered(port, everyone))
        _until("broker 2's partitions are back online",
               lambda: not _describe(port)["offline_partitions"])
        back = _orders(_describe(port + 1))
        assert [(p["partition"], p["leader"], p["replicas"]) for p in back] == [
            (p["partition"], p["leader"], p["replicas"]) for p in placed]
        # Leadership changed twice for broker 2's partitions (gone, back): new leader epochs.
        assert [p["partition"] for p, q in zip(back, placed, strict=True)
                if p["leader_epoch"] > q["leader_epoch"]] == on_2
        by_hand.send_signal(signal.SIGTERM)
        assert by_hand.wait(60) == 0

        assert launcher.stop() == 0
        out = launcher.text()
        assert "stopping 2 broker(s)\n" in out and out.endswith("stopping etcd\n")
        assert not any(_alive(p) for p in pids.values())
        assert not _alive(launcher.etcd_pid) and not _etcd_healthy(url)
    finally:
        if by_hand is not None and by_hand.poll() is None:
            by_hand.kill()
        launcher.kill()

    # A second run on the same data directory: etcd's data, hence the cluster, is reused.
    again = Launcher(tmp_path, port, tmp_path / "launcher-2.out")
    try:
        url2, pids2, _ = again.started()
        assert _etcd_cluster_id(url2) == etcd_cluster_id
        again.wait_for(r"^cluster ready: ")
        _until("the brokers register again", lambda: _registered(port, everyone))
        assert _describe(port)["cluster_id"] == shoal_cluster_id
        assert again.stop() == 0
        assert not any(_alive(p) for p in [again.etcd_pid, *pids2.values()])
    finally:
        again.kill()


def test_without_etcd_on_path_it_says_how_to_install_it(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    r = subprocess.run([sys.executable, "-m", "cli.main", "cluster", "run", "--data-dir",
                        str(tmp_path / "d"), "--port", str(_consecutive_free_ports(3))],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert not (tmp_path / "d").exists()
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("shoal cluster run: etcd is not installed (not on PATH); `make etcd` "
                        "installs Debian's etcd-server\n")



def test_a_broker_that_cannot_start_is_reported_and_etcd_keeps_running(tmp_path: Path) -> None:
    """A broker config every broker refuses (a misspelt name): each broker exits with status 2,
    which the launcher reports with the log and the command line; etcd stays up until
    SIGTERM, which stops it."""
    port = _consecutive_free_ports(1)
    launcher = Launcher(tmp_path, port, tmp_path / "launcher.out", 1, "-o", "no.such.config=1")
    try:
        etcd = launcher.wait_for(r"^etcd: (http://127\.0\.0\.1:\d+) \(pid (\d+)\)")
        url, etcd_pid = etcd.group(1), int(etcd.group(2))
        launcher.wait_for(r"^broker 1 \(pid \d+\) exited with status 2; etcd and 0 other "
                          r"broker\(s\) keep running\. Its log: data-cluster/broker-1\.log\. "
                          r"Restart it with:\n  .* --override no\.such\.config=1$")
        launcher.wait_for(r"^no broker is running \(see the lines above and their logs\); etcd "
                          r"keeps running\. Ctrl-C stops it\.$")
        assert _etcd_healthy(url)
        assert _cmdline(etcd_pid)[:1] == ["etcd"]
        assert launcher.stop() == 0
        assert launcher.text().endswith("stopping etcd\n")
        assert not _alive(etcd_pid) and not _etcd_healthy(url)
    finally:
        launcher.kill()

