"""A cluster whose etcd and brokers each run on their own host (network namespace).

``NetCluster`` is ``conftest.Cluster`` placed on a ``netns.Network``: etcd on node ``etcd``,
broker ``i`` on node ``b<i>`` listening on its own address (PLAINTEXT clients on 9092, the SASL
INTERNAL listener on 9093, metrics on 9100; every host has its own ports, so no port is ever
taken by another test). The test process and its clients in the root namespace reach every
node; ``isolate(i)`` / ``heal(i)`` cut broker ``i`` off from everything and back, and
``popen(i, argv)`` runs a client next to broker ``i``, on its side of a cut.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from tests.conftest import BrokerProcess
from tests.integration.cluster.conftest import CLUSTER_OVERRIDES, INTERNAL_JAAS, Etcd
from tests.integration.cluster.netns import Network, Node

CLIENT_PORT, INTERNAL_PORT, METRICS_PORT = 9092, 9093, 9100


class NetBroker(BrokerProcess):
    """A broker process inside a node's namespace; ``bootstrap`` is its address there."""

    def __init__(self, node: Node, data_dir: Path, etcd: Etcd, node_id: int,
                 overrides: dict[str, str]) -> None:
        super().__init__(data_dir, {}, port=CLIENT_PORT, listen=False,
                         extra_args=["--cluster", etcd.endpoint, "--node-id", str(node_id)])
        self.node = node
        self.node_id = node_id
        self.command_prefix = node.command([])
        self.overrides.update({
            **CLUSTER_OVERRIDES,
            "listeners": f"PLAINTEXT://{node.ip}:{CLIENT_PORT},INTERNAL://{node.ip}:{INTERNAL_PORT}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": INTERNAL_JAAS,
            "super.users": "User:broker",
            "metrics.listen": f"{node.ip}:{METRICS_PORT}",
            **overrides})
        data_dir.parent.mkdir(parents=True, exist_ok=True)

    @property
    def bootstrap(self) -> str:
        return f"{self.node.ip}:{CLIENT_PORT}"


class NetCluster:
    """etcd and ``n`` brokers (node ids 1..n), each in its own namespace of ``net``."""

    def __init__(self, root: Path, net: Network, n: int = 3,
                 overrides: dict[str, str] | None = None) -> None:
        self.net = net
        etcd_node = net.add_node("etcd")
        (root / "etcd").mkdir(parents=True, exist_ok=True)
        self.etcd = Etcd(root / "etcd" / "data", host=etcd_node.ip,
                         command_prefix=etcd_node.command([]))
        self.brokers = [NetBroker(net.add_node(f"b{i}"), root / f"broker-{i}" / "data",
                                  self.etcd, i, overrides or {}) for i in range(1, n + 1)]

    def broker(self, node_id: int) -> NetBroker:
        return self.brokers[node_id - 1]

    @property
    def bootstrap(self) -> str:
        """Every live broker that is not cut off (for clients in the root namespace)."""
        return ",".join(b.bootstrap for b in self.brokers
                        if b.alive() and b.node.name not in self.net.isolated)

    def start(self) -> None:
        self.etcd.start()
        for b in self.brokers:
            b.start()

    def isolate(self, node_id: int) -> None:
        """Cut broker ``node_id`` from etcd, the other brokers and the root namespace."""
        self.net.isolate(self.broker(node_id).node.name)

    def heal(self, node_id: int) -> None:
        self.net.heal(self.broker(node_id).node.name)

    def popen(self, node_id: int | None, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """``argv`` next to broker ``node_id`` (same side of any cut), or in the root namespace."""
        where = None if node_id is None else self.broker(node_id).node.name
        return self.net.popen(where, argv, **kwargs)

    def stop(self) -> None:
        """Stop the brokers (SIGTERM, then kill), then etcd; bounded even when some are cut."""
        for name in list(self.net.isolated):
            self.net.heal(name)
        for b in self.brokers:
            b.stop(timeout=10)
        self.etcd.close()


def wait_for(condition: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``condition()`` until it returns something truthy, which is returned; after
    ``timeout`` seconds fail with ``what`` (the thing that did not happen)."""
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} (not within {timeout:.0f} s)"
        time.sleep(interval)
