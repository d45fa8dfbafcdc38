"""The listeners and graceful shutdown.

``Server.start`` opens the broker's state, then one TCP server per entry of ``listeners``
(``broker/security/listeners.py``; ``shoal broker --listen HOST:PORT`` is one PLAINTEXT
listener). Each listener's TLS context and SASL settings are built first, so a bad key file or
JAAS line stops the broker before it accepts anyone (``broker/endpoint.py``). Every connection
knows its listener: TLS and SASL happen in ``broker/connection.py``, and Metadata,
FindCoordinator and DescribeCluster answer with that listener's advertised address. The
connection limits (``broker/connection_limits.py``) count connections across all listeners.

A TLS listener is served by the server's own accept loop (``loop.sock_accept``) and
``loop.connect_accepted_socket(ssl=...)``, not by ``create_server(ssl=...)``: asyncio and uvloop
create a connection's protocol only after its handshake and drop a failed handshake silently, so
neither the connection limits nor the log would see a stalled or refused one. Here a connection
is counted when it is accepted, its handshake is bounded by
``connections.authentication.timeout.ms``, and a failure (a plaintext client, a bad or missing
client certificate, a timeout) closes that connection with a rate-limited warning and a count in
``shoal_tls_handshake_failures_total``; everyone else is unaffected. (Upgrading a plain
connection with ``loop.start_tls`` instead loses the first bytes on uvloop when the client
speaks first, which TLS clients do.)

``Server.stop`` stops accepting, lets in-flight requests finish (up to ``shutdown.timeout.ms``),
closes connections, then flushes and closes the logs. The server owns the broker and, through
it, every task.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

from cluster.metadata import LocalMetadata
from broker.app import Broker
from broker.connection import Connection
from broker.connection_limits import ConnectionLimits
from broker.endpoint import Endpoint, build_endpoint

log = logging.getLogger("shoal.server")


class Server:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._servers: list[asyncio.AbstractServer] = []
        # TLS listeners: their listening sockets, accept loops and handshakes in progress.
        self._tls_sockets: list[socket.socket] = []
        self._accepting: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self.limits = ConnectionLimits(broker.config.get)
        self.endpoints: list[Endpoint] = []
        self.bound: list[tuple[str, int]] = []  # each endpoint's bound host and port
        # The first listener's bound address (the ready file, `shoal: listening on`).
        self.host = ""
        self.port = 0

    async def start(self) -> None:
        """Raises:
            TlsConfigError, SaslConfigError: a listener's security settings cannot be used.
            OSError: a listener's address cannot be bound.
        """
        config = self.broker.config
        mapping = config.as_mapping()
        planned = [build_endpoint(mapping, listener) for listener in config.listeners]
        await self.broker.start()
        loop = asyncio.get_running_loop()
        try:
            for endpoint in planned:
                await self._open(loop, endpoint)
        except BaseException:
            await self._close_listeners()
            await self.broker.stop()
            raise
        first = self.endpoints[0]
        self.broker.advertised_override = first.advertised
        if isinstance(self.broker.cluster, LocalMetadata):
            self.broker.cluster.set_endpoints({e.name: e.advertised for e in self.endpoints})
        self._sweeper = loop.create_task(self._sweep())
        log.info("Shoal broker %d listening on %s (data in %s, cluster id %s)",
                 self.broker.node_id,
                 ", ".join(f"{h}:{p} ({_named(e.name, e.security_protocol.value)}advertised "
                           f"{e.advertised_host}:{e.advertised_port})"
                           for e, (h, p) in zip(self.endpoints, self.bound, strict=True)),
                 self.broker.data_dir, self.broker.cluster_id)

    async def _open(self, loop: asyncio.AbstractEventLoop, planned: Endpoint) -> None:
        """Raises:
            OSError: the address cannot be bound.
        """
        if planned.ssl is not None:
            self._open_tls(loop, planned)
            return
        listener = planned.listener
        holder: list[Endpoint] = [planned]  # the bound endpoint, once known

        def factory() -> Connection:
            return Connection(self.broker, self.limits, holder[0])

        server = await loop.create_server(factory, listener.bind_host, listener.port,
                                          reuse_address=True, backlog=1024)
        self._servers.append(server)
        host, port = server.sockets[0].getsockname()[:2]
        endpoint = planned.bound(str(host), int(port))
        holder[0] = endpoint
        self.endpoints.append(endpoint)
        self.bound.append((str(host), int(port)))
        if len(self.endpoints) == 1:
            self.host, self.port = str(host), int(port)

    def _open_tls(self, loop: asyncio.AbstractEventLoop, planned: Endpoint) -> None:
        """Bind a TLS listener and start its accept loops (one per bound address).

        Raises:
            OSError: the address cannot be bound.
        """
        sockets = _bind(planned.listener.bind_host, planned.listener.port)
        self._tls_sockets.extend(sockets)
        host, port = sockets[0].getsockname()[:2]
        endpoint = planned.bound(str(host), int(port))
        self.endpoints.append(endpoint)
        self.bound.append((str(host), int(port)))
        if len(self.endpoints) == 1:
            self.host, self.port = str(host), int(port)
        for sock in sockets:
            self._accepting.append(loop.create_task(self._accept(loop, sock, endpoint)))

    async def _accept(self, loop: asyncio.AbstractEventLoop, listening: socket.socket,
                      endpoint: Endpoint) -> None:
        while True:
            try:
                sock, addr = await loop.sock_accept(listening)
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                # EMFILE and friends: asyncio's own servers log and retry the same way.
                log.warning("listener %s could not accept a connection: %s; retrying in 1 s",
                            endpoint.name, exc)
                await asyncio.sleep(1)
                continue
            host, peer = _peer(addr)
            if not self.limits.admit(host, peer, self.broker.clock.monotonic_ms()):
                sock.close()
                continue
            task = loop.create_task(self._handshake(loop, sock, host, peer, endpoint))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, host: str,
                         peer: str, endpoint: Endpoint) -> None:
        """TLS handshake of an accepted (and counted) socket, then its Connection."""
        timeout = self.broker.config.get("connections.authentication.timeout.ms") / 1000
        made: list[Connection] = []

        def factory() -> Connection:
            made.append(Connection(self.broker, self.limits, endpoint, admitted=True))
            return made[0]

        def give_up() -> None:
            sock.close()
            # A connection that got as far as connection_made releases its count when lost.
            if not made or made[0] not in self.broker.connections:
                self.limits.release(host)

        try:
            await loop.connect_accepted_socket(factory, sock, ssl=endpoint.ssl,
                                               ssl_handshake_timeout=timeout)
        except asyncio.CancelledError:
            give_up()
            raise
        except (OSError, ssl.SSLError, EOFError) as exc:
            give_up()
            self.broker.metrics.tls_handshake_failures.inc(endpoint.name)
            suppressed = self.limits.tls_log.admit(self.broker.clock.monotonic_ms())
            if suppressed is not None:
                more = f" ({suppressed} more since the last report)" if suppressed else ""
                log.warning("TLS handshake with %s on listener %s failed: %s; closed this "
                            "connection%s", peer, endpoint.name, _tls_reason(exc, timeout), more)

    async def _close_listeners(self) -> None:
        for server in self._servers:
            server.close()
        for task in self._accepting + list(self._handshakes):
            task.cancel()
        for task in self._accepting + list(self._handshakes):
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._accepting.clear()
        for sock in self._tls_sockets:
            sock.close()
        self._tls_sockets.clear()

    async def _sweep(self) -> None:
        """Close connections idle, stuck in a partial frame or unauthenticated too long
        (connection_limits.py)."""
        while True:
            await asyncio.sleep(self.limits.sweep_interval_ms() / 1000)
            try:
                self.limits.sweep(self.broker.connections, self.broker.clock.monotonic_ms())
            except Exception:
                log.exception("connection sweep failed; it will run again")

    async def stop(self) -> None:
        timeout = self.broker.config.get("shutdown.timeout.ms") / 1000
        self.broker.stop_step = "closing its listeners and waiting for in-flight requests"
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None
        await self._close_listeners()
        conns = list(self.broker.connections)
        if conns:
            done, pending = await asyncio.wait(
                [asyncio.ensure_future(c.wait_idle()) for c in conns], timeout=timeout
            )
            for p in pending:
                p.cancel()
            if pending:
                log.warning("shutdown: %d connection(s) still had requests in flight after %.1fs;"
                            " closing them anyway", len(pending), timeout)
        for c in conns:
            c.close()
        for server in self._servers:
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
            except asyncio.TimeoutError:
                pass
        await self.broker.stop()
        if self.broker.fatal is not None:
            log.critical("Shoal broker stopped after a storage failure (exit status %d): %s",
                         self.broker.exit_code, self.broker.fatal)
        else:
            log.info("Shoal broker stopped cleanly")


def _bind(host: str | None, port: int) -> list[socket.socket]:
    """Listening, non-blocking sockets for ``host`` (None: every interface) and ``port``, as
    ``loop.create_server`` binds them (SO_REUSEADDR, IPv6 sockets IPv6-only, backlog 1024).

    Raises:
        OSError: the address cannot be resolved or bound.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(
                (i[0], i[1], i[2], "", i[4]) for i in infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(1024)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _peer(addr: object) -> tuple[str, str]:
    """(host, "host:port") of an accepted socket's address."""
    if isinstance(addr, tuple):
        return str(addr[0]), f"{addr[0]}:{addr[1]}"
    return str(addr), str(addr)


def _tls_reason(exc: BaseException, timeout_s: float) -> str:
    """A short reason for a failed TLS handshake (a plaintext client shows as
    WRONG_VERSION_NUMBER or HTTP_REQUEST, a stalled one as a timeout)."""
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc)
    text = str(exc)
    if isinstance(exc, (TimeoutError, ConnectionAbortedError)) and "longer" in text:
        return (f"no handshake within {timeout_s:g} s (connections.authentication.timeout.ms)")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _named(name: str, protocol: str) -> str:
    """``PLAINTEXT, `` or ``listener INTERNAL, SASL_SSL, ``: the listener's name only when it
    is not its protocol's."""
    return f"{protocol}, " if name == protocol else f"listener {name}, {protocol}, "
