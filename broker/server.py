"""The listener and graceful shutdown.

``Server.start`` opens the broker's state and the TCP listener; ``Server.stop`` stops accepting,
lets in-flight requests finish (up to ``shutdown.timeout.ms``), closes connections, then flushes and
closes the logs. The server owns the broker and, through it, every task.
"""

from __future__ import annotations

import asyncio
import logging

from broker.app import Broker
from broker.connection import Connection
from broker.connection_limits import ConnectionLimits

log = logging.getLogger("shoal.server")


class Server:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.limits = ConnectionLimits(broker.config.get)
        self.host = ""
        self.port = 0

    async def start(self) -> None:
        await self.broker.start()
        host, port = self.broker.config.listen
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self.broker, self.limits),
                                                host, port, reuse_address=True, backlog=1024)
        self._sweeper = loop.create_task(self._sweep())
        sock = self._server.sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        if port == 0 or not self.broker.config.get("advertised.listeners"):
            adv_host = self.broker.config.advertised[0]
            if adv_host in ("0.0.0.0", "::", ""):
                adv_host = "127.0.0.1"
            self.broker.advertised_override = (adv_host, self.port)
        log.info("Shoal broker %d listening on %s:%d (data in %s, cluster id %s)",
                 self.broker.node_id, self.host, self.port, self.broker.data_dir,
                 self.broker.cluster_id)

    async def _sweep(self) -> None:
        """Close connections idle or stuck in a partial frame too long (connection_limits.py)."""
        while True:
            await asyncio.sleep(self.limits.sweep_interval_ms() / 1000)
            try:
                self.limits.sweep(self.broker.connections, self.broker.clock.monotonic_ms())
            except Exception:
                log.exception("connection sweep failed; it will run again")

    async def stop(self) -> None:
        timeout = self.broker.config.get("shutdown.timeout.ms") / 1000
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None
        if self._server is not None:
            self._server.close()
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
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), timeout=1.0)
            except asyncio.TimeoutError:
                pass
        await self.broker.stop()
        if self.broker.fatal is not None:
            log.critical("Shoal broker stopped after a storage failure (exit status %d): %s",
                         self.broker.exit_code, self.broker.fatal)
        else:
            log.info("Shoal broker stopped cleanly")
