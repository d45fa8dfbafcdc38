"""One client connection: frames in, responses out, in request order.

``Connection`` is an ``asyncio.Protocol``. Bytes go through the sans-IO ``FrameDecoder``; each frame
is decoded with kio and handed to its handler. Handlers may finish out of order (a long-poll Fetch
behind a quick Metadata on the same connection), but responses are written strictly in request
order: every request takes a slot in ``_pending``; a response is encoded as soon as its handler
finishes and written once every slot before it has been written (Kafka's per-connection ordering
guarantee, which clients rely on for correlation).

Backpressure (Kafka mutes a channel; we stop reading). Frames read but not yet dispatched wait in
``_backlog``. A request is dispatched only while:

- fewer than ``queued.max.requests`` requests are in progress;
- the connection's unsent response bytes (the transport's write buffer plus responses encoded but
  waiting for an earlier one) are at most ``queued.max.response.bytes``; and
- for a request whose response may be large (one with a MaxBytes, i.e. Fetch and ShareFetch), the
  response bytes it and the large requests already in progress may produce still fit in that bound,
  unless no other such request is in progress (so one fetch always proceeds).

While anything waits, the transport stops reading. So a client that pipelines fetches and never
reads its answers costs the broker about ``queued.max.response.bytes`` plus one response, not
``queued.max.requests`` full responses. On the request side, a frame not received in one read
holds its declared size of the broker-wide ``queued.max.request.bytes`` budget once more than its
first 64 KiB have arrived, and a connection whose frame does not fit is not read until it does.

Large frames (``broker/wire_limits.py``) are decoded in a worker thread, and large responses can be
encoded in one, so that no single request holds the event loop. Connection-count, idle and
partial-frame limits live in ``broker/connection_limits.py``. A misbehaving client (oversized or
malformed frame, unknown API) is logged with its address and disconnected; nothing it sent affects
other connections.

Authentication (TLS principal, SASL exchange) is ``broker/connection_auth.py``'s.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from broker.authentication import Admit, Reply, SaslGate
from broker.authz import ANONYMOUS, Principal
from broker.connection_auth import certificate_principal, record_reply
from broker.connection_limits import RateLimitedLog
from broker.context import NO_RESPONSE, RequestContext
from broker.dispatch import Route
from broker.handlers import api_versions, sasl_handshake
from broker.security.sasl import Authenticator
from broker.security.tls import NoMatchingRule, PrincipalMapper
from broker.wire_limits import EncodeOffLoop, decode_off_loop
from protocol.codec import (
    DecodedRequest,
    decode_request,
    encode_response,
    encode_response_parts,
    peek,
)
from protocol.errors import ProtocolError, RemoteProtocolError, UnsupportedApiError
from protocol.framing import FrameDecoder
from protocol.guard import CountPaths

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.connection_limits import ConnectionLimits
    from broker.endpoint import Endpoint

log = logging.getLogger("shoal.connection")

# A partly received frame reserves request memory once this much of it has arrived.
_RESERVE_AFTER = 64 * 1024

_ids = itertools.count(1)

# A request whose response is bounded by at most this many bytes is "small": it is never held
# back for response-size reasons (only by queued.max.requests and unsent bytes).
_SMALL_RESPONSE = 64 * 1024

# Rate limit of the SASL failure warnings when no ConnectionLimits is given (unit tests).
_SASL_LOG = RateLimitedLog()


# Responses encoded as parts, record data not copied into the frame: Fetch and ShareFetch.
_SPLICED = frozenset({1, 78})


class _Slot:
    __slots__ = ("api_key", "api_version", "correlation_id", "data", "size", "task", "reserved",
                 "close_after")

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        # The encoded response once ready (b"": no response); a ShareFetch answer with record
        # data comes as its parts (protocol.codec.encode_response_parts), ``size`` bytes in all.
        self.data: bytes | tuple[bytes, ...] | None = None
        self.size = 0
        self.task: asyncio.Future[Any] | None = None
        self.reserved = 0  # response bytes this request may produce, while in progress
        self.close_after = False  # close the connection once this response is written


class Connection(asyncio.Protocol):
    def __init__(self, broker: Broker, limits: ConnectionLimits | None = None,
                 listener: Endpoint | None = None, admitted: bool = False) -> None:
        self.broker = broker
        self.id = next(_ids)
        self.peer = "?"
        self.host = ""
        self.listener = listener
        self.principal: Principal = ANONYMOUS
        self._gate: SaslGate | None = None
        if listener is not None and listener.sasl is not None:
            self._gate = SaslGate(Authenticator(listener.sasl,
                                                broker.scram_credentials.lookup))
        self._limits = limits
        # True when the server counted this connection already (TLS: at accept, before the
        # handshake); released when the connection is lost either way.
        self._admitted = admitted
        self._memory = limits.memory if limits is not None else None
        self._frame_reserved = 0  # bytes reserved in ``_memory`` for the frame being received
        self._memory_wait = 0  # bytes this connection waits for before reading on
        self._decoder = FrameDecoder(broker.config.get("socket.request.max.bytes"))
        if self._gate is not None:
            self._decoder.set_limit(_config(broker, "sasl.server.max.receive.size", 524_288),
                                    "sasl.server.max.receive.size, before authentication")
        self._max_queued = broker.config.get("queued.max.requests")
        self._max_unsent = _config(broker, "queued.max.response.bytes", 16 * 1024 * 1024)
        self._pending: deque[_Slot] = deque()
        self._backlog: deque[bytes] = deque()  # frames read, not yet dispatched
        self._parked: tuple[Route, DecodedRequest, int] | None = None  # decoded, held back
        self._held = 0  # bytes of encoded responses waiting for an earlier one
        self._reserved = 0  # response bytes large requests in progress may produce
        self._decoding = False  # a large frame is being decoded in a worker thread
        self._pumping = False
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._closing = False
        self._last_active_ms = broker.clock.monotonic_ms()
        self._accepted_ms = self._last_active_ms
        self._partial_since_ms: int | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.host = str(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        if self._limits is not None and not self._admitted:
            if not self._limits.admit(self.host, self.peer, self.broker.clock.monotonic_ms()):
                self._closing = True
                transport.abort()  # type: ignore[attr-defined]
                return
            self._admitted = True
        self.broker.connections.add(self)
        self._set_buffer_limits()
        if self.listener is not None and self.listener.mapper is not None:
            self._take_certificate_principal(transport, self.listener.mapper)

    def _set_buffer_limits(self) -> None:
        assert self._transport is not None
        # pause_writing fires once half the unsent bound sits in the socket's write buffer.
        self._transport.set_write_buffer_limits(high=max(self._max_unsent // 2, 1),
                                                low=self._max_unsent // 8)

    def _take_certificate_principal(self, transport: asyncio.BaseTransport,
                                    mapper: PrincipalMapper) -> None:
        """The principal of a TLS connection: its client certificate's mapped DN."""
        try:
            self.principal = certificate_principal(transport, mapper)
        except NoMatchingRule as exc:
            self.close_for(f"{exc}; Kafka refuses such clients too")

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        for slot in self._pending:
            if slot.task is not None and not slot.task.done():
                slot.task.cancel()
        self._pending.clear()
        self._backlog.clear()
        self._parked = None
        if self._memory is not None:
            self._memory.forget(self)
            self._memory_wait = 0
            if self._frame_reserved:
                reserved, self._frame_reserved = self._frame_reserved, 0
                self._memory.release(reserved)
        if self._admitted and self._limits is not None:
            self._admitted = False
            self._limits.release(self.host)
        if self in self.broker.connections:
            self.broker.connections.discard(self)
            self.broker.on_connection_closed(self.id)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._pump()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        now = self.broker.clock.monotonic_ms()
        self._last_active_ms = now
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(exc)
            return
        if self._decoder.buffered == 0:
            self._partial_since_ms = None
        elif frames or self._partial_since_ms is None:
            self._partial_since_ms = now  # a new frame started in this read
        if self._memory is not None:
            self._account_partial_frame(bool(frames))
        self._backlog.extend(frames)
        self._pump()

    def _account_partial_frame(self, completed: bool) -> None:
        """Hold ``queued.max.request.bytes`` for a frame not received in one read, or stop
        reading until it fits (connection_limits.RequestMemory)."""
        memory = self._memory
        assert memory is not None
        if completed and self._frame_reserved:
            reserved, self._frame_reserved = self._frame_reserved, 0
            memory.release(reserved)
        size = self._decoder.partial_size
        if size > 0 and not self._frame_reserved and not self._memory_wait \
                and self._decoder.buffered >= _RESERVE_AFTER:
            # Only a frame whose client has sent more than its start reserves its declared size:
            # a client that announces 50 MB and sends a few bytes holds what it sent, so hundreds
            # of announced-but-unsent frames cannot keep an honest large request from being read.
            # Reserving the whole frame (not the part buffered) keeps frames that are being
            # received from waiting for one another's memory forever.
            if memory.reserve(size):
                self._frame_reserved = size
            else:
                self._memory_wait = size
                memory.wait(self, size)
                log.info("connection from %s waits for %d bytes of request memory "
                         "(queued.max.request.bytes=%s, %d in use)", self.peer, size,
                         memory.capacity, memory.used)

    def memory_granted(self) -> None:
        """RequestMemory made room for the frame this connection waits to receive."""
        self._frame_reserved, self._memory_wait = self._memory_wait, 0
        self._update_reading()

    # -- limits (broker/connection_limits.py) -------------------------------------------------

    def idle_since_ms(self) -> int | None:
        """When traffic last moved, or None while a request is in progress or waiting."""
        if self._pending or self._backlog or self._parked is not None or self._decoding:
            return None
        return self._last_active_ms

    def partial_frame_since_ms(self) -> int | None:
        """When the frame being received started, or None (none, or we stopped reading)."""
        if self._reading_paused:
            return None
        return self._partial_since_ms

    def unauthenticated_since_ms(self) -> int | None:
        """When the connection was accepted while its SASL authentication has not finished,
        else None (TLS handshakes are bounded by the server, ``broker/server.py``)."""
        if self._gate is not None:
            return self._accepted_ms
        return None

    def close_for(self, reason: str, level: int = logging.WARNING) -> None:
        log.log(level, "closing the connection from %s: %s", self.peer, reason)
        self._abort()

    # -- requests ---------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _unsent(self) -> int:
        t = self._transport
        return self._held + (t.get_write_buffer_size() if t is not None else 0)

    def _may_dispatch(self, estimate: int) -> bool:
        if len(self._pending) >= self._max_queued or self._decoding:
            return False
        unsent = self._unsent()
        if unsent > self._max_unsent:
            return False
        if estimate <= _SMALL_RESPONSE or self._reserved == 0:
            return True
        return unsent + self._reserved + estimate <= self._max_unsent

    def _pump(self) -> None:
        """Dispatch waiting requests while the bounds allow, then pause or resume reading."""
        if self._pumping:
            return  # a handler answered synchronously inside the loop below
        self._pumping = True
        try:
            while not self._closing:
                if self._parked is not None:
                    route, req, estimate = self._parked
                    if not self._may_dispatch(estimate):
                        break
                    self._parked = None
                    self._dispatch(route, req, estimate)
                elif self._backlog and self._may_dispatch(0):
                    self._on_frame(self._backlog.popleft())
                else:
                    break
        finally:
            self._pumping = False
        self._update_reading()

    def _on_frame(self, frame: bytes) -> None:
        gate = self._gate
        if gate is not None and gate.raw_tokens:
            self._on_auth_reply(gate, gate.raw_token(frame), None)
            return
        try:
            pre = peek(frame)
            admit = gate.admit(pre.api_key) if gate is not None else Admit.SERVE
            if admit is Admit.REFUSE:
                assert gate is not None
                # Kafka: IllegalSaslStateException, the connection closes unanswered.
                self._on_auth_reply(gate, Reply(close=True, failure=gate.refused(pre.api_key)),
                                    None)
                return
            route = self.broker.dispatcher.route(pre.api_key, pre.api_version)
            if route is None:
                if pre.api_key == api_versions.API_KEY and pre.api_version > 0:
                    # KIP-511: answer an ApiVersions we cannot parse with a v0 response that
                    # lists our versions, so the client can retry with one we support.
                    slot = _Slot(pre.api_key, 0, pre.correlation_id)
                    self._pending.append(slot)
                    self._complete(slot, api_versions.unsupported_version_response(self.broker))
                    return
                known = self.broker.dispatcher.known(pre.api_key)
                raise UnsupportedApiError(
                    f"api key {pre.api_key} version {pre.api_version} is not supported"
                    + (f" (we serve {known.name} v{known.min_version}-{known.max_version})"
                       if known else " (unknown api key)")
                )
            limit = route.limit(self.broker.config) if route.limit is not None else None
            # SASL frames are answered by the gate on the loop (at most
            # sasl.server.max.receive.size bytes before authentication).
            if admit is not Admit.INTERCEPT and decode_off_loop(pre.api_key, frame):
                self._decode_off_loop(frame, pre.api_key, pre.api_version, pre.correlation_id,
                                      route, limit)
                return
            req = decode_request(frame, limit)
        except ProtocolError as exc:
            self._fail(exc)
            return
        if admit is Admit.INTERCEPT:
            assert gate is not None
            slot = _Slot(req.api_key, req.api_version, req.correlation_id)
            if req.api_key == sasl_handshake.API_KEY:
                reply = gate.handshake(req.api_version, req.body.mechanism)
            else:
                reply = gate.authenticate(req.api_version, req.body.auth_bytes)
            self._on_auth_reply(gate, reply, slot)
            return
        estimate = self._estimate(req)
        if self._may_dispatch(estimate):
            self._dispatch(route, req, estimate)
        else:
            self._parked = (route, req, estimate)

    def _estimate(self, req: DecodedRequest) -> int:
        """Most response bytes a request may produce, if it says (Fetch, ShareFetch MaxBytes)."""
        max_bytes = getattr(req.body, "max_bytes", None)
        if not isinstance(max_bytes, int) or max_bytes <= 0:
            return 0
        return min(max_bytes, _config(self.broker, "fetch.max.bytes", max_bytes))

    def _on_auth_reply(self, gate: SaslGate, reply: Reply, slot: _Slot | None) -> None:
        """Send what the SASL gate answered; then authenticated, failed, or still going."""
        sasl_log = self._limits.sasl_log if self._limits is not None else _SASL_LOG
        principal = record_reply(self.broker, self.listener, gate, reply, self.peer, sasl_log)
        if principal is not None:
            self.principal = principal
            self._gate = None
            self._decoder.set_limit(self.broker.config.get("socket.request.max.bytes"),
                                    "socket.request.max.bytes")
        if reply.raw is not None or slot is None:
            slot = _Slot(-1, 0, 0)  # a bare token: written as is, in its turn
            slot.close_after = reply.close
            self._pending.append(slot)
            self._ready(slot, reply.raw or b"")
            return
        slot.close_after = reply.close
        self._pending.append(slot)
        self._complete(slot, reply.body)

    def _context(self, req: DecodedRequest) -> RequestContext:
        return RequestContext(
            broker=self.broker,
            api_key=req.api_key,
            api_version=req.api_version,
            correlation_id=req.correlation_id,
            client_id=req.client_id,
            client_host=self.host,
            connection_id=self.id,
            principal=self.principal,
            listener=self.listener,
        )

    def _call(self, route: Route, req: DecodedRequest) -> Any:
        ctx = self._context(req)
        if req.body is None and route.refuse is not None and route.limit is not None:
            _path, most = route.limit(self.broker.config)
            return route.refuse(ctx, req.over_limit, most)
        return route.handle(ctx, req.body)

    def _dispatch(self, route: Route, req: DecodedRequest, estimate: int) -> None:
        slot = _Slot(req.api_key, req.api_version, req.correlation_id)
        try:
            result = self._call(route, req)
        except Exception:
            log.exception("handler %s failed for client %s (%s); closing the connection",
                          route.name, self.peer, req.client_id)
            self._abort()
            return
        self._pending.append(slot)
        if inspect.isawaitable(result):
            slot.reserved = estimate if estimate > _SMALL_RESPONSE else 0
            self._reserved += slot.reserved
            task = asyncio.ensure_future(result)
            slot.task = task
            task.add_done_callback(functools.partial(self._on_task_done, slot))
        else:
            self._complete(slot, result)

    def _decode_off_loop(self, frame: bytes, api_key: int, api_version: int,
                         correlation_id: int, route: Route,
                         limit: tuple[CountPaths, int] | None) -> None:
        """Decode (and then handle) a large frame in a worker thread; reading waits for it."""
        slot = _Slot(api_key, api_version, correlation_id)
        self._pending.append(slot)
        self._decoding = True
        task = asyncio.ensure_future(self._decode_and_handle(frame, route, limit))
        slot.task = task
        task.add_done_callback(functools.partial(self._on_task_done, slot))

    async def _decode_and_handle(self, frame: bytes, route: Route,
                                 limit: tuple[CountPaths, int] | None) -> Any:
        loop = asyncio.get_running_loop()
        try:
            req = await loop.run_in_executor(None, decode_request, frame, limit)
        except ProtocolError as exc:
            self._fail(exc)
            return NO_RESPONSE
        finally:
            self._decoding = False
            loop.call_soon(self._pump)  # frames that arrived meanwhile may go now
        result = self._call(route, req)
        if inspect.isawaitable(result):
            result = await result
        if result is NO_RESPONSE or isinstance(result, EncodeOffLoop):
            return result
        return EncodeOffLoop(result)  # a large request tends to have a large answer

    def _on_task_done(self, slot: _Slot, task: asyncio.Future[Any]) -> None:
        if self._closing or task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("request from %s failed: %s; closing the connection", self.peer, exc,
                      exc_info=exc)
            self._abort()
            return
        slot.task = None
        self._complete(slot, task.result())

    def _complete(self, slot: _Slot, result: Any) -> None:
        """A handler finished: encode its response (off the loop if asked) and write what is due."""
        if isinstance(result, EncodeOffLoop):
            loop = asyncio.get_running_loop()
            task = loop.run_in_executor(None, encode_response, slot.api_key, slot.api_version,
                                        slot.correlation_id, result.body)
            slot.task = task
            task.add_done_callback(functools.partial(self._on_encoded, slot))
            return
        if result is NO_RESPONSE:
            data = b""
        else:
            try:
                encode = encode_response_parts if slot.api_key in _SPLICED else encode_response
                data = encode(slot.api_key, slot.api_version, slot.correlation_id, result)
            except ProtocolError:
                log.exception("could not encode a response to %s; closing the connection",
                              self.peer)
                self._abort()
                return
        self._ready(slot, data)

    def _on_encoded(self, slot: _Slot, task: asyncio.Future[bytes]) -> None:
        if self._closing or task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("could not encode a response to %s: %s; closing the connection",
                      self.peer, exc, exc_info=exc)
            self._abort()
            return
        slot.task = None
        self._ready(slot, task.result())

    def _ready(self, slot: _Slot, data: bytes | tuple[bytes, ...]) -> None:
        slot.data = data
        slot.size = len(data) if type(data) is bytes else sum(len(p) for p in data)
        self._held += slot.size
        self._reserved -= slot.reserved
        slot.reserved = 0
        self._drain()

    def _drain(self) -> None:
        """Write every response whose turn has come, then let waiting requests in."""
        transport = self._transport
        while self._pending and self._pending[0].data is not None:
            slot = self._pending.popleft()
            data = slot.data or b""
            self._held -= slot.size
            if data and transport is not None and not self._closing:
                if type(data) is tuple:
                    transport.writelines(data)  # record batches as read, not copied
                else:
                    transport.write(data)
                self._last_active_ms = self.broker.clock.monotonic_ms()
            if slot.close_after:
                self.close()
                return
        self._pump()

    def _update_reading(self) -> None:
        t = self._transport
        if t is None or self._closing:
            return
        waiting = bool(self._backlog) or self._parked is not None or self._decoding \
            or self._memory_wait > 0
        should_pause = (waiting or self._writing_paused
                        or len(self._pending) >= self._max_queued
                        or self._unsent() > self._max_unsent)
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            t.pause_reading()
        elif self._reading_paused and not should_pause \
                and len(self._pending) <= self._max_queued // 2 \
                and self._unsent() <= self._max_unsent // 2:
            self._reading_paused = False
            if self._partial_since_ms is not None:
                self._partial_since_ms = self.broker.clock.monotonic_ms()
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
        """Wait until every request dispatched so far has been answered."""
        while self._pending and not self._closing:
            tasks = [s.task for s in self._pending if s.task is not None]
            if not tasks:
                self._drain()
                break
            await asyncio.wait(tasks)
            await asyncio.sleep(0)  # let the done callbacks write what completed


def _config(broker: Broker, name: str, default: int) -> int:
    try:
        return int(broker.config.get(name))
    except KeyError:
        return default
