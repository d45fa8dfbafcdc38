"""A real etcd server (Debian's etcd-server, installed by `make etcd`) on loopback ports."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BrokerProcess, free_port


class Etcd:
    """One etcd process with its own data dir; ``stop()`` is kill -9, ``start()`` restarts it.
    ``host`` and ``command_prefix`` place it elsewhere (tests/integration/cluster/netns.py)."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1",
                 command_prefix: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.host = host
        self.command_prefix = command_prefix or []
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = open(data_dir.parent / "etcd.log", "ab")

    @property
    def endpoint(self) -> str:
        return f"etcd://{self.host}:{self.client_port}"

    def start(self) -> None:
        url = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        self.proc = subprocess.Popen(
            [*self.command_prefix, "etcd", "--name", "test", "--data-dir", str(self.data_dir),
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


# Small internal topics and a short session, so a 3-broker cluster starts and notices a dead
# broker quickly on a 2-core CI machine.
CLUSTER_OVERRIDES = {
    "offsets.topic.num.partitions": "6",
    "share.coordinator.state.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    # Internal topics keep their default of 3 replicas (capped at the live brokers when they
    # are created), as on a real cluster: coordinators fail over to another in-sync replica.
}


# Brokers call each other on their own listener, authenticated as a super user (share-state
# RPCs need CLUSTER_ACTION); clients use the PLAINTEXT one.
INTERNAL_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                 'username="broker" password="broker-secret" user_broker="broker-secret";')


def member_configs(client_port: int, internal_port: int) -> dict[str, str]:
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{internal_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": INTERNAL_JAAS,
        "super.users": "User:broker",
    }


class Cluster:
    """Real etcd and ``n`` real broker processes (node ids 1..n) on loopback."""

    def __init__(self, root: Path, etcd: Etcd, n: int = 3,
                 overrides: dict[str, str] | None = None) -> None:
        self.etcd = etcd
        self.brokers = []
        self.metrics_ports: list[int] = []
        self._overrides = overrides or {}
        for i in range(1, n + 1):
            self.metrics_ports.append(0)
            b = BrokerProcess(root / f"broker-{i}" / "data", {}, port=1, listen=False,
                              extra_args=["--cluster", etcd.endpoint, "--node-id", str(i)])
            self._choose_ports(b, i)
            b.data_dir.parent.mkdir(parents=True, exist_ok=True)
            self.brokers.append(b)

    def _choose_ports(self, b: BrokerProcess, i: int) -> None:
        """Fresh loopback ports for broker ``i``'s client, INTERNAL and metrics listeners."""
        b.port = free_port()
        self.metrics_ports[i - 1] = free_port()
        b.overrides = {"metrics.render.cache.ms": "0", **CLUSTER_OVERRIDES,
                       **member_configs(b.port, free_port()),
                       "metrics.listen": f"127.0.0.1:{self.metrics_ports[i - 1]}",
                       **self._overrides}
        b.log_path = b.data_dir.parent / f"broker-{b.port}.log"

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.alive())

    def start(self) -> None:
        """Start every broker; one whose ports another process took meanwhile (free_port can
        only say they were free) gets new ones, once. Its registration in etcd went with its
        exit (the lease is revoked), so it registers again at once."""
        for i, b in enumerate(self.brokers, start=1):
            try:
                b.start()
            except RuntimeError as exc:
                if "already in use" not in str(exc):
                    raise
                self._choose_ports(b, i)
                b.start()

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()


@pytest.fixture
def cluster_overrides() -> dict[str, str]:
    """Configs every broker of ``cluster`` gets on top of the above; a test module overrides
    this fixture to start its cluster with, say, an ACL authorizer."""
    return {}


@pytest.fixture
def cluster(tmp_path: Path, etcd: Etcd, cluster_overrides: dict[str, str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, etcd, overrides=cluster_overrides)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def net_cluster(tmp_path: Path, cluster_overrides: dict[str, str]) -> Iterator[Any]:
    """A ``net_cluster.NetCluster``: etcd and 3 brokers, each in its own network namespace
    (needs root); every namespace is removed afterwards, whatever the test did."""
    from tests.integration.cluster.net_cluster import NetCluster
    from tests.integration.cluster.netns import Network

    net = Network()
    try:
        c = NetCluster(tmp_path, net, overrides=cluster_overrides)
        try:
            c.start()
            yield c
        finally:
            c.stop()
    finally:
        net.close()
