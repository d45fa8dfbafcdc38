"""One TCP connection to one broker: typed kio requests in, typed responses out.

Requests are encoded with the broker's own codec (``protocol.codec.encode_request``), written to
an asyncio stream, and matched to their responses by correlation id; a reader task owned by the
connection decodes frames with ``protocol.framing.FrameDecoder`` (frame size capped) and resolves
the waiting futures. Several requests may be outstanding at once (Kafka answers a connection's
requests in order). A caller that stops waiting (cancellation) only drops its future; the answer
is read and discarded.

On connect the connection asks ApiVersions (v3) and keeps the broker's ranges, so callers can
pick ``version(api_key, lo, hi)``: the highest version both sides speak. With security settings
(``client/security.py``) the socket is TLS from the first byte (SSL, SASL_SSL) and, after
ApiVersions, the connection authenticates with SASL (SASL_PLAINTEXT, SASL_SSL) before any other
request is sent.

Invariants: every pending future is resolved (answer or error) or cancelled by ``close``; the
reader task is cancelled and awaited by ``close``.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from typing import Any

from client.errors import UnsupportedVersionError, error_for
from client.security import SaslExchange, SecuritySettings, ssl_context
from protocol.codec import decode_response, encode_request, request_module
from protocol.framing import FrameDecoder

API_VERSIONS = 18

__all__ = ["BrokerConnection"]


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, node_id: int = -1,
                 security: SecuritySettings | None = None) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self._client_id = client_id
        self._security = security or SecuritySettings()
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed_exc: BaseException | None = None
        self.api_ranges: dict[int, tuple[int, int]] = {}

    @property
    def closed(self) -> bool:
        return self._closed_exc is not None

    async def connect(self, timeout: float = 10.0) -> None:
        """Open the socket and learn the broker's API versions.

        Raises:
            OSError / TimeoutError: the broker is unreachable (``ssl.SSLError``, an OSError:
                the TLS handshake failed).
            SecurityConfigError: the TLS files cannot be loaded.
            KafkaError: SASL authentication failed.
        """
        context = ssl_context(self._security)
        try:
            await self._open(context, timeout)
        except BaseException:
            await self.close()  # no reader task or socket outlives a failed connect
            raise

    async def _open(self, context: ssl.SSLContext | None, timeout: float) -> None:
        self._reader, self._writer = await asyncio.wait_for(asyncio.open_connection(
            self.host, self.port, ssl=context,
            server_hostname=self.host if context is not None else None), timeout)
        self._task = asyncio.create_task(self._read_loop(), name=f"shoal-client-read-{self.node_id}")
        m = request_module(API_VERSIONS, 3)
        resp = await asyncio.wait_for(self.call(API_VERSIONS, 3, m.ApiVersionsRequest(
            client_software_name="shoal-client", client_software_version="0.1")), timeout)
        err = error_for(resp.error_code)
        if err is not None:
            raise err
        self.api_ranges = {int(k.api_key): (int(k.min_version), int(k.max_version))
                           for k in resp.api_keys}
        if self._security.uses_sasl:
            exchange = SaslExchange(self._security, self.api_ranges)
            while (req := exchange.next_request()) is not None:
                exchange.receive(await asyncio.wait_for(self.call(*req), timeout))

    def version(self, api_key: int, lo: int, hi: int) -> int:
        """The highest version in ``lo..hi`` the broker also supports.

        Raises:
            UnsupportedVersionError: no overlap.
        """
        got = self.api_ranges.get(api_key)
        if got is None or got[1] < lo or got[0] > hi:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} supports api {api_key} versions {got}, "
                f"this client needs {lo}-{hi}")
        return min(hi, got[1])

    async def call(self, api_key: int, api_version: int, body: Any) -> Any:
        """Send one request and wait for its decoded response.

        Raises:
            ConnectionError: the connection failed or was closed.
        """
        if self._closed_exc is not None or self._writer is None:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
        cid = next(self._correlation)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[cid] = (api_key, api_version, fut)
        self._writer.write(encode_request(api_key, api_version, cid, self._client_id, body))
        try:
            await self._writer.drain()
            return await fut
        finally:
            self._pending.pop(cid, None)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        decoder = FrameDecoder()
        exc: BaseException
        try:
            while True:
                data = await self._reader.read(1 << 20)
                if not data:
                    exc = ConnectionError(f"broker {self.host}:{self.port} closed the connection")
                    break
                for frame in decoder.feed(data):
                    cid = int.from_bytes(frame[:4], "big", signed=True)
                    entry = self._pending.get(cid)
                    if entry is None or entry[2].done():
                        continue  # the caller gave up waiting
                    api_key, api_version, fut = entry
                    try:
                        _, body = decode_response(api_key, api_version, frame)
                    except Exception as e:  # noqa: BLE001 - handed to the waiting caller
                        fut.set_exception(e)
                    else:
                        fut.set_result(body)
        except asyncio.CancelledError:
            exc = ConnectionError("connection closed")
            self._fail(exc)
            raise
        except Exception as e:  # noqa: BLE001 - any read failure ends the connection
            exc = ConnectionError(f"connection to {self.host}:{self.port} failed: {e}")
        self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._closed_exc is None:
            self._closed_exc = exc
        for _, _, fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(exc)
        self._pending.clear()

    async def close(self) -> None:
        """Close the socket and fail any outstanding requests."""
        self._fail(ConnectionError("connection closed"))
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, ConnectionError):
                pass
            self._task = None
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
            self._writer = None
