"""The network-namespace harness itself (netns.py): a cut is a cut, and nothing is left behind.

What a test author relies on: after ``isolate(node)`` nothing crosses between the node and the
rest (the other nodes and the root namespace) while the node still reaches itself; ``heal``
restores it; a run killed with SIGKILL leaves namespaces that the next run removes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT
from tests.integration.cluster.netns import Network, ip

SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5000))
s.listen()
while True:
    c, _ = s.accept()
    c.sendall(b"hi")
    c.close()
"""


@pytest.fixture
def net() -> Iterator[Network]:
    n = Network()
    try:
        yield n
    finally:
        n.close()


def _reaches(net: Network, frm: str | None, host: str) -> bool:
    """Whether a client in ``frm``'s namespace (root when None) gets the server's greeting."""
    code = (f"import socket; s = socket.create_connection(({host!r}, 5000), timeout=1); "
            "assert s.recv(2) == b'hi'")
    p = net.popen(frm, [sys.executable, "-c", code], stderr=subprocess.DEVNULL)
    return p.wait(10) == 0


def test_isolate_cuts_a_node_off_both_ways_and_heal_restores_it(net: Network) -> None:
    a, b = net.add_node("a"), net.add_node("b")
    server = net.popen("b", [sys.executable, "-c", SERVER, b.ip])
    try:
        deadline = time.monotonic() + 10
        while not _reaches(net, "a", b.ip):
            assert time.monotonic() < deadline, "node a never reached node b's server"
        assert _reaches(net, None, b.ip), "the root namespace does not reach node b"

        net.isolate("b")
        assert not _reaches(net, "a", b.ip), "node a still reaches isolated node b"
        assert not _reaches(net, None, b.ip), "the root namespace still reaches isolated b"
        assert _reaches(net, "b", b.ip), "isolated node b no longer reaches itself"

        net.heal("b")
        deadline = time.monotonic() + 10
        while not (_reaches(net, "a", b.ip) and _reaches(net, None, b.ip)):
            assert time.monotonic() < deadline, "node b unreachable after heal"
        assert a.ns != b.ns
    finally:
        server.kill()
        server.wait(5)


def test_a_killed_run_leaves_namespaces_the_next_run_removes() -> None:
    code = ("from tests.integration.cluster.netns import Network; import sys, time; "
            "n = Network(); n.add_node('x'); print(n.run, flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None
    run = p.stdout.readline().strip()
    assert run, "the helper process made no network"
    p.send_signal(signal.SIGKILL)
    p.wait(5)
    p.stdout.close()
    left = [ns for ns in ip("netns", "list").split() if ns.startswith(f"shn{run}-")]
    assert left, "the killed run's namespaces are already gone (nothing to test)"

    n = Network()
    try:
        assert run in n.removed_stale
        assert [ns for ns in ip("netns", "list").split() if ns.startswith(f"shn{run}-")] == []
        assert f"shn{run}h" not in ip("-o", "link", "show")
    finally:
        n.close()
