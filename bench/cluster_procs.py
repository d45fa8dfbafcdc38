"""The processes of the cluster bench and the raw probes that time them (``bench/cluster.py``).

``Etcd`` runs one etcd on loopback with its own data directory; ``Member`` is a Shoal cluster
member (``--cluster``, ``--node-id``) with a PLAINTEXT client listener and an INTERNAL SASL
PLAIN listener for the other brokers (``member_configs``), run through the counting wrapper
``bench/cluster_broker.py``, which ``kill9`` kills and ``start`` starts again on the same data
directory and ports. ``metadata`` and ``group_coordinator`` ask one broker directly (no client
library, whose reconnect backoff would blur the timings); ``until`` polls a probe until it
answers, bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.procs import ShoalBroker, free_port, track_popen, untrack_popen

WRAPPER = ["-m", "bench.cluster_broker"]
T = 60.0  # bound of every wait in the recovery phases


class Etcd:
    """One etcd process (Debian's etcd-server) with its own data dir, on loopback."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir, self.log_path = data_dir, log_path
        self.client_port, self.peer_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> None:
        url = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["etcd", "--name", "bench", "--data-dir", str(self.data_dir),
                 "--listen-client-urls", url, "--advertise-client-urls", url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"bench={peer}"], stdout=log, stderr=subprocess.STDOUT)
        track_popen(self.proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {self.log_path}")
            time.sleep(0.1)
        raise RuntimeError(f"etcd did not become healthy within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            untrack_popen(self.proc)


def member_configs(client_port: int, internal_port: int, secret: str) -> dict[str, str]:
    """Listeners of a cluster member: PLAINTEXT for clients, INTERNAL (SASL PLAIN) for brokers."""
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="broker" password="{secret}" user_broker="{secret}";')
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{internal_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": jaas,
        "super.users": "User:broker",
    }


class Member(ShoalBroker):
    """A cluster member (``--cluster``, ``--node-id``) run through the counting wrapper.

    ``start()`` (ShoalBroker's: Metadata on the PLAINTEXT port) works again after ``kill9()``,
    on the same data directory and ports."""

    def __init__(self, root: Path, node_id: int, etcd: Etcd, secret: str,
                 overrides: dict[str, str]) -> None:
        super().__init__(root / f"broker-{node_id}", root / f"broker-{node_id}.log",
                         wrapper=WRAPPER)
        self.node_id = node_id
        self.etcd = etcd
        self.metrics_port = free_port()
        self.overrides = {**member_configs(self.port, free_port(), secret),
                          "metrics.listen": f"127.0.0.1:{self.metrics_port}",
                          "metrics.render.cache.ms": "0", **overrides}

    def command(self) -> list[str]:
        cmd = [sys.executable, *WRAPPER, "broker", "--data-dir", str(self.data_dir),
               "--cluster", self.etcd.endpoint, "--node-id", str(self.node_id)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        untrack_popen(self.proc)



def metadata(bootstrap: str, topics: list[str] | None = None, timeout: float = 2.0,
             ) -> tuple[int, set[int], dict[str, dict[int, int]]]:
    """(controller id, live broker ids, {topic: {partition: leader}}) from one broker."""
    from client.blocking import open_connection
    from protocol import codec

    host, _, port = bootstrap.rpartition(":")
    m = codec.request_module(3, 12)
    req = m.MetadataRequest(
        topics=None if topics is None else tuple(m.MetadataRequestTopic(topic_id=None, name=t)
                                                 for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with open_connection(host, int(port), timeout, "bench-cluster-probe") as conn:
        resp = conn.call(3, 12, req)
    leaders = {t.name: {int(p.partition_index): int(p.leader_id) for p in t.partitions}
               for t in resp.topics if not t.error_code}
    return int(resp.controller_id), {int(b.node_id) for b in resp.brokers}, leaders


def in_sync(bootstrap: str, topic: str, partition: int, timeout: float = 2.0) -> list[int]:
    """The ISR of ``topic``-``partition`` as broker ``bootstrap`` (one broker) sees it."""
    from client.blocking import open_connection
    from protocol import codec

    host, _, port = bootstrap.rpartition(":")
    m = codec.request_module(3, 12)
    req = m.MetadataRequest(topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
    with open_connection(host, int(port), timeout, "bench-cluster-probe") as conn:
        resp = conn.call(3, 12, req)
    for t in resp.topics:
        for p in t.partitions:
            if t.name == topic and int(p.partition_index) == partition:
                return [int(x) for x in p.isr_nodes]
    return []


def group_coordinator(bootstrap: str, group: str, timeout: float = 30.0) -> int:
    from client.blocking import open_connection
    from protocol import codec

    host, _, port = bootstrap.rpartition(":")
    m = codec.request_module(10, 4)
    deadline = time.monotonic() + timeout
    with open_connection(host, int(port), 5, "bench-cluster-probe") as conn:
        while True:
            resp = conn.call(10, 4, m.FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
            (coord,) = resp.coordinators
            if not coord.error_code:
                return int(coord.node_id)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no coordinator for group {group}: {coord.error_code}")
            time.sleep(0.2)


def until(what: str, probe: Callable[[], Any], timeout: float = T, every: float = 0.05) -> Any:
    """Call ``probe`` until it returns something true (exceptions count as not yet)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            got = probe()
            if got:
                return got
        except Exception as exc:  # noqa: BLE001 - a broker still down answers nothing
            last = exc
        time.sleep(every)
    raise TimeoutError(f"{what} did not happen within {timeout:.0f} s (last error: {last!r})")
