"""client/pool.py: connections to other brokers keyed by node id, with a fake connection factory
and an injected clock (the real sockets are in tests/integration/cluster/test_network_persister.py).

One connection per node shared by callers, reconnect after a failure, a moved node reconnects to
its new address, idle connections closed, a connect that hangs on one node does not hold up
another, concurrent callers share one failed connect, close fails later calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from client.pool import ConnectionPool


class FakeConnection:
    def __init__(self, host: str, port: int, node_id: int, world: World) -> None:
        self.host, self.port, self.node_id, self.world = host, port, node_id, world
        self.closed = False
        self.calls: list[tuple[int, int, Any]] = []

    async def connect(self, timeout: float = 10.0) -> None:
        self.world.connects.append((self.host, self.port))
        behaviour = self.world.behaviour.get(self.port, "ok")
        if behaviour == "refuse":
            raise ConnectionRefusedError(f"{self.host}:{self.port} refused")
        if behaviour == "hang":
            async with asyncio.timeout(timeout):
                await asyncio.Event().wait()

    def version(self, api_key: int, lo: int, hi: int) -> int:
        return hi

    async def call(self, api_key: int, api_version: int, body: Any,
                   timeout: float | None = None) -> Any:
        if self.world.behaviour.get(self.port) == "drop":
            self.closed = True
            raise ConnectionError("peer closed the connection")
        self.calls.append((api_key, api_version, body))
        return ("answer", self.port, body)

    async def close(self) -> None:
        self.closed = True


class World:
    def __init__(self) -> None:
        self.behaviour: dict[int, str] = {}
        self.connects: list[tuple[str, int]] = []
        self.made: list[FakeConnection] = []
        self.now = 0.0

    def factory(self, host: str, port: int, node_id: int) -> FakeConnection:
        conn = FakeConnection(host, port, node_id, self)
        self.made.append(conn)
        return conn


def pool(world: World, **kw: Any) -> ConnectionPool:
    return ConnectionPool("test", factory=world.factory, clock=lambda: world.now, **kw)


async def test_one_connection_per_node_is_shared_and_picks_the_highest_version() -> None:
    w = World()
    p = pool(w)
    answers = await asyncio.gather(*(p.request(1, "h", 9001, 85, 0, 1, lambda v: ("body", v))
                                     for _ in range(5)))
    assert answers == [(1, ("answer", 9001, ("body", 1)))] * 5
    assert w.connects == [("h", 9001)] and p.connects == 1
    await p.request(2, "h", 9002, 85, 0, 1, lambda v: v)
    assert p.open_nodes == [1, 2]
    await p.close()
    assert all(c.closed for c in w.made)


async def test_a_failed_connection_is_replaced_on_the_next_call() -> None:
    w = World()
    p = pool(w)
    await p.request(1, "h", 9001, 84, 0, 0, lambda v: v)
    w.behaviour[9001] = "drop"
    with pytest.raises(ConnectionError):
        await p.request(1, "h", 9001, 84, 0, 0, lambda v: v)
    assert p.open_nodes == []
    w.behaviour[9001] = "refuse"
    with pytest.raises(ConnectionRefusedError):
        await p.request(1, "h", 9001, 84, 0, 0, lambda v: v)
    del w.behaviour[9001]
    assert (await p.request(1, "h", 9001, 84, 0, 0, lambda v: v))[1][0] == "answer"
    assert len(w.connects) == 3 and p.connect_failures == 1
    await p.close()


async def test_a_node_that_moved_is_reached_at_its_new_address() -> None:
    w = World()
    p = pool(w)
    await p.request(1, "h", 9001, 84, 0, 0, lambda v: v)
    _, answer = await p.request(1, "h2", 9101, 84, 0, 0, lambda v: v)
    assert answer[1] == 9101 and w.made[0].closed
    await p.close()


async def test_idle_connections_are_closed_when_the_pool_is_next_used() -> None:
    w = World()
    p = pool(w, idle_timeout=60.0)
    await p.request(1, "h", 9001, 84, 0, 0, lambda v: v)
    w.now = 30.0
    await p.request(2, "h", 9002, 84, 0, 0, lambda v: v)
    w.now = 61.0
    await p.request(2, "h", 9002, 84, 0, 0, lambda v: v)
    await asyncio.sleep(0)  # the close runs in a task the pool owns
    assert p.open_nodes == [2] and w.made[0].closed
    await p.close()


async def test_a_hanging_node_does_not_hold_up_another() -> None:
    w = World()
    w.behaviour[9001] = "hang"
    p = pool(w, connect_timeout=0.2)
    stuck = asyncio.create_task(p.request(1, "h", 9001, 84, 0, 0, lambda v: v))
    await asyncio.sleep(0)
    _, answer = await p.request(2, "h", 9002, 84, 0, 0, lambda v: v)
    assert answer[1] == 9002 and not stuck.done()
    with pytest.raises(TimeoutError):
        await stuck
    await p.close()


async def test_callers_waiting_on_a_failed_connect_share_its_failure() -> None:
    w = World()
    w.behaviour[9001] = "hang"
    p = pool(w, connect_timeout=0.2)
    results = await asyncio.gather(*(p.request(1, "h", 9001, 84, 0, 0, lambda v: v)
                                     for _ in range(4)), return_exceptions=True)
    assert isinstance(results[0], TimeoutError)
    assert all(isinstance(r, ConnectionError) and "within 0.2 s" in str(r) for r in results[1:])
    assert len(w.connects) == 1
    await p.close()


async def test_a_closed_pool_refuses_calls() -> None:
    w = World()
    p = pool(w)
    await p.close()
    with pytest.raises(ConnectionError, match="closed"):
        await p.request(1, "h", 9001, 84, 0, 0, lambda v: v)
