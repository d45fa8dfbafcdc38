"""The asyncio shell of the client core: one TCP connection to one broker.

It moves the bytes of a ``client.core.Channel`` over an asyncio stream: typed kio requests in,
typed responses out, matched by correlation id (the channel's job). A reader task owned by the
connection feeds received bytes to the channel and resolves the waiting futures. Several requests
may be outstanding at once (Kafka answers a connection's requests in order).

On connect the channel's start-up runs: ApiVersions (v3), then, with SASL settings
(``client/security.py``), the SASL exchange; with TLS settings the socket is TLS from the first
byte. Callers then pick ``version(api_key, lo, hi)``: the highest version both sides speak.

Made to live inside a long-running process (the share consumer, and the broker-to-broker client):

- ``connect(timeout)`` is bounded as a whole (TCP, TLS, ApiVersions and SASL);
- every ``call`` has a deadline: its ``timeout`` argument, else ``request_timeout``
  (``TimeoutError`` when it passes); a caller that stops waiting (timeout or cancellation) only
  forgets its request, whose answer is then read and dropped;
- ``close`` is idempotent, bounded, fails every outstanding request with ``ConnectionError`` and
  cancels and awaits the reader task.

Invariants: every pending future is resolved (answer or error) or failed by ``close``; after a
read failure (peer closed, a frame that is not a response, an answer out of order) the
connection is closed and every waiter gets the ``ConnectionError``.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from client.core.channel import Channel, Outgoing
from client.core.tls import ssl_context
from client.security import SecuritySettings

__all__ = ["BrokerConnection"]

CLOSE_TIMEOUT = 5.0  # the longest close waits for the peer to take the FIN


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, node_id: int = -1,
                 security: SecuritySettings | None = None,
                 request_timeout: float | None = None) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self._security = security or SecuritySettings()
        self.request_timeout = request_timeout
        self.channel = Channel(client_id, self._security, where=f"broker {host}:{port}")
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed_exc: BaseException | None = None

    @property
    def closed(self) -> bool:
        return self._closed_exc is not None

    @property
    def api_ranges(self) -> dict[int, tuple[int, int]]:
        """The broker's (min, max) version per API key (from ApiVersions)."""
        return dict(self.channel.versions.ranges)

    async def connect(self, timeout: float = 10.0) -> None:
        """Open the socket and run the start-up (ApiVersions, SASL), all within ``timeout``.

        Raises:
            OSError / TimeoutError: the broker is unreachable (``ssl.SSLError``, an OSError:
                the TLS handshake failed).
            SecurityConfigError: the TLS files cannot be loaded.
            KafkaError: ApiVersions answered an error, or SASL authentication failed.
        """
        context = ssl_context(self._security)
        try:
            async with asyncio.timeout(timeout):
                await self._open(context)
        except BaseException:
            await self.close()  # no reader task or socket outlives a failed connect
            raise

    async def _open(self, context: ssl.SSLContext | None) -> None:
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=context,
            server_hostname=self.host if context is not None else None)
        self._task = asyncio.create_task(self._read_loop(),
                                         name=f"shoal-client-read-{self.node_id}")
        ch = self.channel
        while (out := ch.handshake()) is not None:
            ch.handshake_reply(await self._exchange(out, None))

    def version(self, api_key: int, lo: int, hi: int) -> int:
        """The highest version in ``lo..hi`` the broker also supports.

        Raises:
            UnsupportedVersionError: no overlap.
        """
        return self.channel.version(api_key, lo, hi)

    async def call(self, api_key: int, api_version: int, body: Any,
                   timeout: float | None = None) -> Any:
        """Send one request and wait for its decoded response, at most ``timeout`` seconds
        (default ``request_timeout``; None for both: no deadline of its own).

        Raises:
            ConnectionError: the connection failed or was closed.
            TimeoutError: the deadline passed (the request is forgotten, the connection stays).
            ProtocolError: the response did not decode.
        """
        if self._closed_exc is not None or self._writer is None:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
        out = self.channel.request(api_key, api_version, body)
        return await self._exchange(out, timeout if timeout is not None else self.request_timeout)

    async def _exchange(self, out: Outgoing, timeout: float | None) -> Any:
        assert self._writer is not None
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[out.correlation_id] = fut
        try:
            async with asyncio.timeout(timeout):
                self._writer.write(out.data)
                await self._writer.drain()
                return await fut
        finally:
            if self._waiters.pop(out.correlation_id, None) is not None:
                self.channel.forget(out.correlation_id)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        exc: BaseException
        try:
            while True:
                data = await self._reader.read(1 << 20)
                if not data:
                    exc = ConnectionError(f"broker {self.host}:{self.port} closed the connection")
                    break
                for reply in self.channel.feed(data):
                    fut = self._waiters.pop(reply.correlation_id, None)
                    if fut is None or fut.done():
                        continue  # the caller gave up waiting
                    if reply.error is not None:
                        fut.set_exception(reply.error)
                    else:
                        fut.set_result(reply.body)
        except asyncio.CancelledError:
            self._fail(ConnectionError("connection closed"))
            raise
        except Exception as e:  # noqa: BLE001 - any read failure ends the connection
            exc = ConnectionError(f"connection to {self.host}:{self.port} failed: {e}")
        self._fail(exc)
        if self._writer is not None:
            self._writer.close()

    def _fail(self, exc: BaseException) -> None:
        if self._closed_exc is None:
            self._closed_exc = exc
        for fut in list(self._waiters.values()):
            if not fut.done():
                fut.set_exception(exc)
        self._waiters.clear()
        self.channel.close()

    async def close(self) -> None:
        """Close the socket and fail any outstanding requests (idempotent, bounded)."""
        self._fail(ConnectionError("connection closed"))
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, ConnectionError):
                pass
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await writer.wait_closed()
            except (OSError, TimeoutError):
                pass
