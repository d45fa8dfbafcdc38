"""Network namespaces for cluster tests: every node on its own host, and cuttable links.

A ``Network`` is one test run's private network on this machine (traffic never leaves it):

- a *switch* namespace holding a Linux bridge. The bridge lives outside the root namespace on
  purpose: the root namespace of these machines has ``br_netfilter`` on and Docker's
  ``FORWARD DROP`` policy, which would drop bridged traffic; a fresh namespace has empty
  iptables tables, so nothing of the host's firewall is read or changed;
- one namespace per node (``add_node``), linked to the bridge by a veth pair (``eth0`` inside,
  with an address of the run's /24);
- a veth pair from the root namespace to the bridge, so a test (and its clients) in the root
  namespace reach every node at its address.

``isolate(node)`` takes the node's link down on the switch side: the node can reach neither
the other nodes, nor etcd, nor the root namespace, and nothing reaches it (packets are dropped,
no reset is sent, as with a real cut). Processes inside the node's namespace still talk to each
other over its addresses: a client started with ``popen(node, ...)`` is on the node's side of
the cut. ``heal(node)`` brings the link up again.

Names are unique per run (``shn<5 hex>``); the run writes an owner file with its pid before it
creates anything, and ``close()`` removes everything it made (kills what still runs inside its
namespaces, deletes them and the root-side link). A run that was itself killed leaves its
namespaces behind: the next ``Network()`` removes every ``shn`` namespace whose owner is gone.
Everything needs root, ``ip`` (iproute2) and the ``veth`` and ``bridge`` kernel modules.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "shn"
OWNERS = Path("/run/shoal-netns")  # one file per live run: "<pid> <process start time>"
# Names and subnets from the OS's randomness: test runs may reseed ``random`` identically in
# every pytest-xdist worker, and parallel runs must not pick the same names.
_pick = random.SystemRandom()


def ip(*args: str, check: bool = True) -> str:
    """Run ``ip ARGS``; a failure raises with ip's own message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _namespaces() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def _delete_namespace(ns: str) -> None:
    """Kill what runs in ``ns`` (processes a test run started there), then delete it."""
    for pid in ip("netns", "pids", ns, check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    ip("netns", "del", ns, check=False)


def _owner_alive(run: str) -> bool:
    """Whether run ``run``'s owner file names a live process (the same one: pid and start
    time). A run writes its owner file before it creates anything, so a namespace seen after
    this says no is a stale one."""
    try:
        pid, started = (OWNERS / run).read_text().split()
    except (OSError, ValueError):
        return False
    return _start_time(int(pid)) == started


def remove_stale() -> list[str]:
    """Remove the namespaces and root-side links of runs whose owner process is gone (or that
    have no owner file); returns the run ids removed. Live runs are left alone."""
    OWNERS.mkdir(parents=True, exist_ok=True)
    stale: set[str] = set()
    for ns in _namespaces():
        if ns.startswith(PREFIX) and "-" in ns:
            run = ns[len(PREFIX):ns.index("-")]
            if run in stale or not _owner_alive(run):
                stale.add(run)
                _delete_namespace(ns)
    for line in ip("-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if (len(name) == len(PREFIX) + 6 and name.startswith(PREFIX) and name.endswith("h")
                and not _owner_alive(name[len(PREFIX):-1])):
            stale.add(name[len(PREFIX):-1])
            ip("link", "del", name, check=False)
    for owner in OWNERS.iterdir():
        if not _owner_alive(owner.name):
            owner.unlink(missing_ok=True)
    return sorted(stale)


@dataclass(frozen=True)
class Node:
    """One host of the network: its namespace, its address, and its link on the switch."""

    name: str
    ns: str
    ip: str
    port: str  # the switch-side end of its veth pair (taken down by ``isolate``)

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this node's namespace (``ip netns exec`` execs it: the process
        id ``Popen`` returns is the command's own, so a kill -9 reaches it)."""
        return ["ip", "netns", "exec", self.ns, *argv]


class Network:
    """A private bridged network for one test run; see the module docstring."""

    def __init__(self) -> None:
        self.removed_stale = remove_stale()
        self.run = f"{_pick.randrange(16**5):05x}"
        while (OWNERS / self.run).exists():
            self.run = f"{_pick.randrange(16**5):05x}"
        self.owner = OWNERS / self.run
        self.owner.write_text(f"{os.getpid()} {_start_time(os.getpid())}")
        self.switch = f"{PREFIX}{self.run}-sw"
        self.nodes: dict[str, Node] = {}
        self.isolated: set[str] = set()
        self._host_link = f"{PREFIX}{self.run}h"
        self.subnet = self._free_subnet()
        try:
            self._build_switch()
        except Exception:
            self.close()
            raise

    @staticmethod
    def _free_subnet() -> str:
        """A 10.x.y.0/24 no route of this machine uses (other runs included)."""
        used = ip("-4", "route", "show", "table", "all")
        for _ in range(100):
            prefix = f"10.{_pick.randrange(200, 250)}.{_pick.randrange(256)}"
            if f"{prefix}." not in used:
                return prefix
        raise RuntimeError("no free 10.x.y.0/24 for a test network")

    def _build_switch(self) -> None:
        ip("netns", "add", self.switch)
        sw = ("-n", self.switch)
        ip(*sw, "link", "set", "lo", "up")
        ip(*sw, "link", "add", "br0", "type", "bridge")
        ip(*sw, "link", "set", "br0", "up")
        # The root namespace's end of its link to the bridge, with address .1.
        ip("link", "add", self._host_link, "type", "veth", "peer", "name", "host",
           "netns", self.switch)
        ip(*sw, "link", "set", "host", "master", "br0", "up")
        ip("addr", "add", f"{self.subnet}.1/24", "dev", self._host_link)
        ip("link", "set", self._host_link, "up")

    def add_node(self, name: str) -> Node:
        """A new namespace ``name`` on the bridge, with the next free address (from .10)."""
        if name in self.nodes or not name.isalnum() or len(name) > 8:
            raise ValueError(f"node name {name!r} must be new, alphanumeric and <= 8 chars")
        node = Node(name, f"{PREFIX}{self.run}-{name}", f"{self.subnet}.{10 + len(self.nodes)}",
                    f"p{len(self.nodes)}")
        ip("netns", "add", node.ns)
        ip("-n", node.ns, "link", "set", "lo", "up")
        temp = f"{PREFIX}{self.run}t"  # created in the root namespace, moved at once
        ip("link", "add", temp, "type", "veth", "peer", "name", "eth0", "netns", node.ns)
        ip("link", "set", temp, "netns", self.switch)
        ip("-n", self.switch, "link", "set", temp, "name", node.port)
        ip("-n", self.switch, "link", "set", node.port, "master", "br0", "up")
        ip("-n", node.ns, "addr", "add", f"{node.ip}/24", "dev", "eth0")
        ip("-n", node.ns, "link", "set", "eth0", "up")
        self.nodes[name] = node
        return node

    def isolate(self, name: str) -> None:
        """Cut ``name`` from every other node and from the root namespace, both ways."""
        ip("-n", self.switch, "link", "set", self.nodes[name].port, "down")
        self.isolated.add(name)

    def heal(self, name: str) -> None:
        """Undo ``isolate(name)``: its link to the bridge is up again."""
        ip("-n", self.switch, "link", "set", self.nodes[name].port, "up")
        self.isolated.discard(name)

    def popen(self, name: str | None, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside node ``name``'s namespace (its side of any cut), or in the
        root namespace when ``name`` is None."""
        cmd = argv if name is None else self.nodes[name].command(argv)
        return subprocess.Popen(cmd, **kwargs)

    def close(self) -> None:
        """Remove every namespace and link of this run (killing what still runs there)."""
        for node in self.nodes.values():
            _delete_namespace(node.ns)
        _delete_namespace(self.switch)
        ip("link", "del", self._host_link, check=False)
        self.owner.unlink(missing_ok=True)
