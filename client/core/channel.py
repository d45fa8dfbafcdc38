"""The sans-IO state of one client connection: the heart of the client core.

A ``Channel`` turns typed kio requests into size-prefixed frames (``protocol/codec.py``) and
received bytes back into typed responses, matched to their requests by correlation id. It owns
the connection's start-up sequence (ApiVersions, then the SASL exchange when the settings ask for
one) and the negotiated versions. It never touches a socket, an event loop or a clock: the
blocking shell (``client/blocking.py``) and the asyncio shell (``client/connection.py``) move
the bytes and decide how long to wait.

Use:

    ch = Channel("my-client", security)
    while (out := ch.handshake()) is not None:   # ApiVersions, then SaslHandshake/Authenticate
        send(out.data); ch.handshake_reply(<the body of the reply to out>)
    out = ch.request(api_key, ch.version(api_key, lo, hi), body)
    send(out.data)
    for reply in ch.feed(received_bytes): ...    # Reply(correlation_id, ..., body | error)

Invariants:

- correlation ids start at 1 and increase by one per request;
- Kafka answers a connection's requests in order: a reply whose correlation id is not the
  oldest outstanding one is ``UnexpectedResponseError`` (the connection is unusable after it);
- a request given up with ``forget`` stays outstanding until its reply arrives, which is then
  dropped (so later replies still match);
- a size prefix above ``max_frame`` is ``ResponseFrameError`` before the payload is buffered,
  and so is a frame too short to hold a correlation id when it is decoded;
- a reply that does not decode is returned with ``error`` set (a ``ProtocolError``); the
  channel stays usable.

Raw mode (``handshake=False``, for tests that speak the protocol by hand): no start-up requests,
and ``take(frame, api_key, api_version)`` decodes a frame as the caller says, whatever request
it answers.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from enum import Enum
from itertools import count
from typing import Any

from client.core.sasl import SaslExchange
from client.core.versions import ApiVersions, api_versions_request
from client.security import SecuritySettings
from protocol.codec import decode_response, encode_request
from protocol.errors import FrameTooLargeError, ProtocolError, RemoteProtocolError
from protocol.framing import FrameDecoder

__all__ = ["Channel", "Outgoing", "Reply", "ResponseFrameError", "Stage",
           "UnexpectedResponseError", "MAX_FRAME"]

MAX_FRAME = 100 * 1024 * 1024  # the largest response frame accepted (Kafka's fetch.max.bytes-ish)


class ResponseFrameError(RemoteProtocolError):
    """A response size prefix that cannot be a Kafka response (``size`` says what it was)."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


class UnexpectedResponseError(RemoteProtocolError):
    """A response whose correlation id answers no outstanding request, or not the oldest one."""


class Stage(Enum):
    VERSIONS = "versions"  # ApiVersions not answered yet
    SASL = "sasl"  # authenticating
    READY = "ready"


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One encoded request: send ``data`` (size prefix included) as it is."""

    correlation_id: int
    api_key: int
    api_version: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to one request: ``body`` decoded, or ``error`` when it did not decode."""

    correlation_id: int
    api_key: int
    api_version: int
    body: Any = None
    error: ProtocolError | None = None


@dataclass(slots=True)
class _Pending:
    api_key: int
    api_version: int
    forgotten: bool = False


class Channel:
    """One connection's framing, correlation ids, start-up and negotiated versions."""

    def __init__(self, client_id: str, security: SecuritySettings | None = None, *,
                 software: tuple[str, str] = ("shoal-client", "0.1"),
                 max_frame: int = MAX_FRAME, handshake: bool = True,
                 where: str = "the broker") -> None:
        self.client_id = client_id
        self.security = security or SecuritySettings()
        self.where = where  # names the peer in messages ("broker host:port")
        self.versions = ApiVersions()
        self.stage = Stage.VERSIONS if handshake else Stage.READY
        self._software = software
        self._correlation = count(1)
        self._pending: dict[int, _Pending] = {}
        self._decoder = FrameDecoder(max_frame, "the client's largest response")
        self._frames: deque[bytes] = deque()
        self._sasl: SaslExchange | None = None
        self._handshake_waiting = False

    # -- start-up

    @property
    def ready(self) -> bool:
        return self.stage is Stage.READY

    def handshake(self) -> Outgoing | None:
        """The next start-up request to send, or None (ready, or a start-up reply is awaited).

        Raises:
            KafkaError: the broker serves no SASL RPCs this client speaks (stage SASL).
            SecurityConfigError: the SASL settings are incomplete.
        """
        if self._handshake_waiting or self.stage is Stage.READY:
            return None
        if self.stage is Stage.VERSIONS:
            out = self.request(*api_versions_request(*self._software))
        else:
            if self._sasl is None:
                self._sasl = SaslExchange(self.security, self.versions.ranges)
            req = self._sasl.next_request()
            if req is None:
                return None
            out = self.request(*req)
        self._handshake_waiting = True
        return out

    def handshake_reply(self, body: Any) -> None:
        """Take the decoded reply to the last start-up request.

        Raises:
            KafkaError: ApiVersions answered an error (stage VERSIONS), or the broker refused
                the SASL mechanism or credentials (stage SASL).
        """
        if not self._handshake_waiting:
            raise RuntimeError("no start-up request is outstanding")
        self._handshake_waiting = False
        if self.stage is Stage.VERSIONS:
            self.versions = ApiVersions.from_response(body)
            self.stage = Stage.SASL if self.security.uses_sasl else Stage.READY
            return
        assert self._sasl is not None
        self._sasl.receive(body)
        if self._sasl.done:
            self.stage = Stage.READY

    # -- versions

    def version(self, api_key: int, lo: int, hi: int) -> int:
        """The highest version in ``lo..hi`` the broker serves.

        Raises:
            UnsupportedVersionError: no overlap.
        """
        return self.versions.pick(api_key, lo, hi, self.where)

    def supports(self, api_key: int, lo: int, hi: int) -> bool:
        return self.versions.supports(api_key, lo, hi)

    # -- requests out

    def request(self, api_key: int, api_version: int, body: Any) -> Outgoing:
        """Encode a request with the next correlation id and wait for its reply."""
        cid = next(self._correlation)
        data = encode_request(api_key, api_version, cid, self.client_id, body)
        self._pending[cid] = _Pending(api_key, api_version)
        return Outgoing(cid, api_key, api_version, data)

    def forget(self, correlation_id: int) -> None:
        """The caller stopped waiting: drop the reply when it comes."""
        entry = self._pending.get(correlation_id)
        if entry is not None:
            entry.forgotten = True

    def outstanding(self) -> list[int]:
        """Correlation ids still waited for (not forgotten), oldest first."""
        return [cid for cid, e in self._pending.items() if not e.forgotten]

    def oldest(self) -> tuple[int, int] | None:
        """(api key, version) of the oldest outstanding request, for messages."""
        for e in self._pending.values():
            return e.api_key, e.api_version
        return None

    def close(self) -> list[int]:
        """Forget every outstanding request; returns the ids that were still waited for."""
        waiting = self.outstanding()
        self._pending.clear()
        self._frames.clear()
        return waiting

    # -- bytes in

    def bytes_wanted(self) -> int:
        """How many bytes complete the frame being assembled (its size prefix first): a
        blocking shell reads exactly this many, so nothing after the frame leaves the socket."""
        need = self._decoder.partial_size
        if need < 0:
            return 4 - self._decoder.buffered
        return need - self._decoder.buffered

    def receive_bytes(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer received bytes; complete frames are queued for ``next_frame``/``next_reply``.

        Raises:
            ResponseFrameError: a size prefix that cannot be a response.
        """
        try:
            frames = self._decoder.feed(data)
        except FrameTooLargeError as exc:
            found = re.search(r"frame size (-?\d+)", str(exc))
            raise ResponseFrameError(str(exc), int(found.group(1)) if found else -1) from None
        self._frames.extend(frames)

    def next_frame(self) -> bytes | None:
        """The next complete frame (without its size prefix), undecoded."""
        return self._frames.popleft() if self._frames else None

    def next_reply(self) -> Reply | None:
        """The next complete frame decoded as the request it answers (None: no frame yet, or
        the frame answered a forgotten request).

        Raises:
            UnexpectedResponseError: the frame answers no outstanding request, or not the
                oldest one.
        """
        frame = self.next_frame()
        return None if frame is None else self.take(frame)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Reply]:
        """``receive_bytes`` and every reply it completes (forgotten ones left out)."""
        self.receive_bytes(data)
        out = []
        while self._frames:
            reply = self.take(self._frames.popleft())
            if reply is not None:
                out.append(reply)
        return out

    def take(self, frame: bytes, api_key: int | None = None,
             api_version: int | None = None) -> Reply | None:
        """Decode one frame. Without ``api_key`` it is decoded as the request it answers
        (which must be the oldest outstanding one); with it, as the caller says (raw mode).

        Raises:
            ResponseFrameError: the frame is too short to hold a correlation id.
            UnexpectedResponseError: see ``next_reply`` (only without ``api_key``).
        """
        if len(frame) < 4:
            raise ResponseFrameError(f"a {len(frame)}-byte response frame has no correlation "
                                     "id", len(frame))
        cid = int.from_bytes(frame[:4], "big", signed=True)
        if api_key is not None and api_version is not None:
            self._pending.pop(cid, None)
            return self._decode(cid, api_key, api_version, frame)
        oldest = next(iter(self._pending), None)
        if oldest is None or cid != oldest:
            raise UnexpectedResponseError(
                f"{self.where} answered correlation id {cid}, expected "
                f"{oldest if oldest is not None else 'none'}")
        entry = self._pending.pop(cid)
        if entry.forgotten:
            return None
        return self._decode(cid, entry.api_key, entry.api_version, frame)

    @staticmethod
    def _decode(cid: int, api_key: int, api_version: int, frame: bytes) -> Reply:
        try:
            _, body = decode_response(api_key, api_version, frame)
        except ProtocolError as exc:
            return Reply(cid, api_key, api_version, error=exc)
        return Reply(cid, api_key, api_version, body)
