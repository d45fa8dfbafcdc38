"""One client connection: frames in, responses out, in request order.

``Connection`` is an ``asyncio.Protocol``. Bytes go through the sans-IO ``FrameDecoder``; each frame
is decoded with kio and handed to its handler. Handlers may finish out of order (a long-poll Fetch
behind a quick Metadata on the same connection), but responses are written strictly in request
order: every request takes a slot in ``_pending`` and the head slot is written as soon as it is
ready (Kafka's per-connection ordering guarantee, which clients rely on for correlation).

Backpressure: when ``queued.max.requests`` requests are waiting for their turn, or the transport's
write buffer is full, the connection stops reading until the backlog halves. A misbehaving client
(oversized or malformed frame, unknown API) is logged with its address and disconnected; nothing it
sent affects other connections.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from broker.context import NO_RESPONSE, RequestContext
from broker.handlers import api_versions
from protocol.codec import decode_request, encode_response, peek
from protocol.errors import ProtocolError, RemoteProtocolError, UnsupportedApiError
from protocol.framing import FrameDecoder

if TYPE_CHECKING:
    from broker.app import Broker

log = logging.getLogger("shoal.connection")

_ids = itertools.count(1)


class _Slot:
    __slots__ = ("api_key", "api_version", "correlation_id", "result", "task")

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.result: Any = None
        self.task: asyncio.Task[Any] | None = None


class Connection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.id = next(_ids)
        self.peer = "?"
        self.host = ""
        self._decoder = FrameDecoder(broker.config.get("socket.request.max.bytes"))
        self._max_queued = broker.config.get("queued.max.requests")
        self._pending: deque[_Slot] = deque()
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._closing = False

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.host = str(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        self.broker.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        for slot in self._pending:
            if slot.task is not None and not slot.task.done():
                slot.task.cancel()
        self._pending.clear()
        self.broker.connections.discard(self)
        self.broker.on_connection_closed(self.id)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(exc)
            return
        for frame in frames:
            if self._closing:
                return
            self._on_frame(frame)

    # -- requests ---------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _on_frame(self, frame: bytes) -> None:
        try:
            pre = peek(frame)
            route = self.broker.dispatcher.route(pre.api_key, pre.api_version)
            if route is None:
                if pre.api_key == api_versions.API_KEY and pre.api_version > 0:
                    # KIP-511: answer an ApiVersions we cannot parse with a v0 response that
                    # lists our versions, so the client can retry with one we support.
                    slot = _Slot(pre.api_key, 0, pre.correlation_id)
                    slot.result = api_versions.unsupported_version_response(self.broker)
                    self._pending.append(slot)
                    self._drain()
                    return
                known = self.broker.dispatcher.known(pre.api_key)
                raise UnsupportedApiError(
                    f"api key {pre.api_key} version {pre.api_version} is not supported"
                    + (f" (we serve {known.name} v{known.min_version}-{known.max_version})"
                       if known else " (unknown api key)")
                )
            req = decode_request(frame)
        except ProtocolError as exc:
            self._fail(exc)
            return
        ctx = RequestContext(
            broker=self.broker,
            api_key=req.api_key,
            api_version=req.api_version,
            correlation_id=req.correlation_id,
            client_id=req.client_id,
            client_host=self.host,
            connection_id=self.id,
        )
        slot = _Slot(req.api_key, req.api_version, req.correlation_id)
        try:
            result = route.handle(ctx, req.body)
        except Exception:
            log.exception("handler %s failed for client %s (%s); closing the connection",
                          route.name, self.peer, req.client_id)
            self._abort()
            return
        self._pending.append(slot)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            slot.task = task
            task.add_done_callback(self._on_task_done)
            self._update_reading()
        else:
            slot.result = result
            self._drain()

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        if self._closing:
            return
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("request from %s failed: %s; closing the connection", self.peer, exc,
                      exc_info=exc)
            self._abort()
            return
        self._drain()

    def _drain(self) -> None:
        transport = self._transport
        while self._pending:
            slot = self._pending[0]
            if slot.task is not None:
                if not slot.task.done():
                    break
                slot.result = slot.task.result()
                slot.task = None
            self._pending.popleft()
            if slot.result is NO_RESPONSE or transport is None:
                continue
            try:
                data = encode_response(slot.api_key, slot.api_version, slot.correlation_id,
                                       slot.result)
            except ProtocolError:
                log.exception("could not encode a response to %s; closing the connection",
                              self.peer)
                self._abort()
                return
            transport.write(data)
        self._update_reading()

    def _update_reading(self) -> None:
        t = self._transport
        if t is None or self._closing:
            return
        should_pause = self._writing_paused or len(self._pending) >= self._max_queued
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            t.pause_reading()
        elif self._reading_paused and not self._writing_paused \
                and len(self._pending) <= self._max_queued // 2:
            self._reading_paused = False
            t.resume_reading()

    # -- teardown ---------------------------------------------------------------------------

    def _fail(self, exc: ProtocolError) -> None:
        kind = "bad request" if isinstance(exc, RemoteProtocolError) else "internal error"
        log.warning("%s from client %s: %s; closing this connection (others are unaffected)",
                    kind, self.peer, exc)
        self._abort()

    def _abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Close after the responses already queued are written."""
        if self._transport is not None and not self._closing:
            self._closing = True
            self._transport.close()

    async def wait_idle(self) -> None:
        """Wait until every request received so far has been answered."""
        while self._pending and not self._closing:
            tasks = [s.task for s in self._pending if s.task is not None]
            if not tasks:
                self._drain()
                break
            await asyncio.wait(tasks)
            self._drain()
