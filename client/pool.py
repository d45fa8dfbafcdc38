"""A pool of ``BrokerConnection``s keyed by node id: the broker's client for broker-to-broker calls.

One connection per destination broker, opened on first use and shared by every caller (a Kafka
connection carries many outstanding requests, answered in order). Used by the broker for all
inter-broker RPCs: the share-state persister now, transaction markers and dead-letter appends
later. It knows nothing of Shoal's cluster metadata: callers say where a node is (node id, host,
port) each time, so a node that moved to a new address gets a new connection.

Contract:

- ``request(node_id, host, port, api_key, lo, hi, build)`` opens (or reuses) the connection,
  picks the highest version in ``lo..hi`` the peer speaks, sends ``build(version)`` and returns
  ``(version, response)``. Connect is bounded by ``connect_timeout`` (TCP, TLS, ApiVersions and
  SASL together), every call by its ``timeout`` (else ``request_timeout``).
- Reconnect on demand: a connection that failed (peer closed, read error) is dropped and the
  next call opens a new one; a failed connect is not cached, the next call tries again.
- Connects to different nodes never wait on each other (one lock per node); concurrent callers
  of one node share one connect attempt, and its failure (a ``ConnectionError`` for those that
  waited), so a black-holed node costs each burst of callers one ``connect_timeout``, not one
  per caller.
- A connection unused for ``idle_timeout`` seconds is closed when the pool is next used (Kafka's
  ``connections.max.idle.ms``), in a task the pool owns, so the caller never waits for it.
- ``close()`` closes every connection; later calls raise ``ConnectionError``.

Errors (``request``): ``ConnectionError``/``OSError`` (unreachable, or the connection failed),
``TimeoutError`` (connect or request deadline), ``KafkaError`` (SASL refused the credentials,
ApiVersions answered an error, or no common version: ``UnsupportedVersionError``). A connection
that timed out on a request stays open (its answer is read and dropped); one that failed any
other way is closed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from client.connection import BrokerConnection
from client.security import SecuritySettings

__all__ = ["ConnectionPool", "PooledConnection"]

DEFAULT_CONNECT_TIMEOUT = 10.0  # Kafka socket.connection.setup.timeout.ms
DEFAULT_REQUEST_TIMEOUT = 30.0  # Kafka request.timeout.ms
DEFAULT_IDLE_TIMEOUT = 600.0  # Kafka connections.max.idle.ms


class PooledConnection(Protocol):
    """What the pool needs of a connection (``BrokerConnection``; a fake in unit tests)."""

    @property
    def closed(self) -> bool: ...

    async def connect(self, timeout: float = ...) -> None: ...

    def version(self, api_key: int, lo: int, hi: int) -> int: ...

    async def call(self, api_key: int, api_version: int, body: Any,
                   timeout: float | None = None) -> Any: ...

    async def close(self) -> None: ...


Factory = Callable[[str, int, int], PooledConnection]


@dataclass(slots=True)
class _Slot:
    host: str
    port: int
    lock: asyncio.Lock
    conn: PooledConnection | None = None
    last_used: float = 0.0
    failures: int = 0  # connect attempts that failed
    error: BaseException | None = None  # why the last one failed


class ConnectionPool:
    """Connections to other brokers, keyed by node id (see the module doc)."""

    def __init__(self, client_id: str, security: SecuritySettings | None = None, *,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic,
                 factory: Factory | None = None) -> None:
        """``factory(host, port, node_id)`` makes an unconnected connection (default: a
        ``BrokerConnection`` with ``security``); ``clock`` gives seconds for idle tracking."""
        self.client_id = client_id
        self.security = security or SecuritySettings()
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self._clock = clock
        self._factory = factory or self._broker_connection
        self._slots: dict[int, _Slot] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        self.connects = 0  # connections opened (a metric, and for tests)
        self.connect_failures = 0

    def _broker_connection(self, host: str, port: int, node_id: int) -> PooledConnection:
        return BrokerConnection(host, port, self.client_id, node_id, self.security,
                                request_timeout=self.request_timeout)

    @property
    def open_nodes(self) -> list[int]:
        """Node ids with an open connection."""
        return sorted(n for n, s in self._slots.items() if s.conn is not None and not s.conn.closed)

    async def connection(self, node_id: int, host: str, port: int) -> PooledConnection:
        """The open connection to ``node_id`` at ``host:port``, opened if needed.

        Raises:
            ConnectionError: the pool is closed, or see ``BrokerConnection.connect``.
        """
        if self._closed:
            raise ConnectionError("the inter-broker connection pool is closed")
        now = self._clock()
        self._close_idle(now, keep=node_id)
        slot = self._slots.get(node_id)
        if slot is None or (slot.host, slot.port) != (host, port):
            if slot is not None:  # the node moved: its old connection is useless
                await self._drop(slot)
            slot = _Slot(host, port, asyncio.Lock())
            self._slots[node_id] = slot
        conn = slot.conn
        if conn is None or conn.closed:
            failures = slot.failures
            async with slot.lock:
                conn = slot.conn
                if conn is None or conn.closed:
                    if slot.failures != failures and slot.error is not None:
                        # Another caller's attempt failed while this one waited: share its
                        # answer rather than queue connect timeouts one after another.
                        raise ConnectionError(f"cannot connect to broker {node_id} at "
                                              f"{host}:{port}: {slot.error}")
                    conn = await self._open(slot, node_id)
        slot.last_used = self._clock()
        return conn

    async def _open(self, slot: _Slot, node_id: int) -> PooledConnection:
        if slot.conn is not None:
            await slot.conn.close()
            slot.conn = None
        conn = self._factory(slot.host, slot.port, node_id)
        try:
            await conn.connect(self.connect_timeout)
        except BaseException as e:
            self.connect_failures += 1
            slot.failures += 1
            slot.error = e if not isinstance(e, TimeoutError) else TimeoutError(
                f"no connection within {self.connect_timeout} s")
            await conn.close()
            raise
        slot.error = None
        if self._closed:  # closed while connecting
            await conn.close()
            raise ConnectionError("the inter-broker connection pool is closed")
        self.connects += 1
        slot.conn = conn
        return conn

    async def request(self, node_id: int, host: str, port: int, api_key: int, lo: int, hi: int,
                      build: Callable[[int], Any], timeout: float | None = None) -> tuple[int, Any]:
        """Send ``build(version)`` to ``node_id`` and return ``(version, response)``.

        Raises:
            ConnectionError / OSError / TimeoutError / KafkaError: see the module doc.
        """
        conn = await self.connection(node_id, host, port)
        version = conn.version(api_key, lo, hi)
        try:
            response = await conn.call(api_key, version, build(version),
                                       timeout if timeout is not None else self.request_timeout)
        except TimeoutError:
            raise
        except Exception:
            await self._forget(node_id, conn)
            raise
        slot = self._slots.get(node_id)
        if slot is not None:
            slot.last_used = self._clock()
        return version, response

    async def _forget(self, node_id: int, conn: PooledConnection) -> None:
        slot = self._slots.get(node_id)
        if slot is not None and slot.conn is conn:
            slot.conn = None
        await conn.close()

    def _close_idle(self, now: float, keep: int) -> None:
        for node_id, slot in list(self._slots.items()):
            if node_id == keep or slot.lock.locked():
                continue
            conn = slot.conn
            if conn is not None and conn.closed:
                slot.conn = None
            elif conn is not None and now - slot.last_used >= self.idle_timeout:
                slot.conn = None
                self._close_later(conn)

    def _close_later(self, conn: PooledConnection) -> None:
        # A close may wait for the peer (TLS close_notify); a call to another node must not.
        task = asyncio.create_task(conn.close(), name="shoal-pool-close-idle")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _drop(self, slot: _Slot) -> None:
        conn, slot.conn = slot.conn, None
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        """Close every connection (idempotent)."""
        self._closed = True
        slots = list(self._slots.values())
        self._slots.clear()
        for slot in slots:
            await self._drop(slot)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
