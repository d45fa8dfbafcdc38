"""A tiny blocking Kafka client for tests: typed kio requests over a plain socket.

For cases real clients cannot express (a specific API version, odd field combinations, fields a
client library hides, pipelining). Every socket operation is bounded by the client's timeout.

    with RawClient(broker.bootstrap) as c:
        resp = c.call(19, 7, request(19, 7, topics=(...), timeout=timedelta(seconds=5),
                                     validate_only=False))
        cid = c.send(1, 12, fetch)          # pipelining: send now ...
        got_cid, fetch_resp = c.receive(1, 12)   # ... read the answers in order later
"""

from __future__ import annotations

import itertools
import socket
import ssl
import time
from functools import lru_cache
from types import TracebackType
from typing import Any

from kio.static.constants import EntityType

from protocol.codec import decode_response, encode_request, request_module
from protocol.messages import make

__all__ = ["RawClient", "closed_by_peer", "request", "request_module", "request_type"]


@lru_cache(maxsize=None)
def request_type(api_key: int, api_version: int) -> type:
    """The kio request dataclass of an API version."""
    module = request_module(api_key, api_version)
    for name in dir(module):
        obj = getattr(module, name)
        if (isinstance(obj, type) and name.endswith("Request")
                and getattr(obj, "__type__", None) == EntityType.request
                and obj.__module__ == module.__name__):
            return obj
    raise LookupError(f"no request type for api {api_key} v{api_version}")


def request(api_key: int, api_version: int, **fields: Any) -> Any:
    """Build a request body; fields the version does not have are dropped (``make``)."""
    return make(request_type(api_key, api_version), **fields)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly ``n`` bytes.

    Raises:
        ConnectionError: the broker closed the connection first.
    """
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Whether the peer closes ``sock`` within ``timeout`` seconds (what it sends is skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return False
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
            return True
        if not data:
            return True


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0, client_id: str = "shoal-raw",
                 tls: ssl.SSLContext | None = None) -> None:
        host, _, port = bootstrap.rpartition(":")
        self._sock = socket.create_connection((host, int(port)), timeout=timeout)
        if tls is not None:
            self._sock = tls.wrap_socket(self._sock, server_hostname=host)
        self._sock.settimeout(timeout)
        self._client_id = client_id
        self._correlation = itertools.count(1)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    @staticmethod
    def request_module(api_key: int, api_version: int) -> Any:
        """The kio module holding the request types of an API version."""
        return request_module(api_key, api_version)

    def send(self, api_key: int, api_version: int, body: Any) -> int:
        """Send one request without waiting; returns its correlation id."""
        correlation_id = next(self._correlation)
        self._sock.sendall(encode_request(api_key, api_version, correlation_id, self._client_id,
                                          body))
        return correlation_id

    def receive(self, api_key: int, api_version: int) -> tuple[int, Any]:
        """Read the next response, decoded as ``api_key``/``api_version``: (correlation id, body).

        Raises:
            ConnectionError: the broker closed the connection (it does on requests it rejects).
        """
        size = int.from_bytes(self._recv(4), "big")
        correlation_id, body = decode_response(api_key, api_version, self._recv(size))
        return correlation_id, body

    def call(self, api_key: int, api_version: int, body: Any) -> Any:
        """Send one request and return its decoded response body.

        Raises:
            ConnectionError: the broker closed the connection.
            AssertionError: the response answers another request.
        """
        sent = self.send(api_key, api_version, body)
        got, resp = self.receive(api_key, api_version)
        assert got == sent, f"correlation id {got}, expected {sent}"
        return resp

    def send_frame(self, payload: bytes) -> None:
        """Send bytes as one size-prefixed frame without a request header (SASL v0 tokens)."""
        self._sock.sendall(len(payload).to_bytes(4, "big") + payload)

    def receive_frame(self) -> bytes:
        """Read one size-prefixed frame's payload.

        Raises:
            ConnectionError: the broker closed the connection.
        """
        return self._recv(int.from_bytes(self._recv(4), "big"))

    @property
    def sock(self) -> socket.socket:
        return self._sock

    def _recv(self, n: int) -> bytes:
        return recv_exact(self._sock, n)
