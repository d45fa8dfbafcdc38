"""A tiny blocking Kafka client for tests: typed kio requests over a plain socket.

For cases real clients cannot express (a specific API version, odd field combinations, fields a
client library hides, pipelining, malformed frames). It is the client core's blocking shell
(``client/blocking.py``) in raw mode: no ApiVersions or SASL on connect, and each response is
decoded as the caller says. Every socket operation is bounded by the client's timeout.

    with RawClient(broker.bootstrap) as c:
        resp = c.call(19, 7, request(19, 7, topics=(...), timeout=timedelta(seconds=5),
                                     validate_only=False))
        cid = c.send(1, 12, fetch)          # pipelining: send now ...
        got_cid, fetch_resp = c.receive(1, 12)   # ... read the answers in order later
"""

from __future__ import annotations

import socket
import ssl
import time
from types import TracebackType
from typing import Any

from client.blocking import BlockingConnection, recv_exact
from client.core import Reply
from protocol.codec import request_module, request_type
from protocol.messages import make

__all__ = ["RawClient", "closed_by_peer", "recv_exact", "request", "request_module",
           "request_type"]

RAW_MAX_FRAME = (1 << 31) - 1  # tests read whatever the broker sends


def request(api_key: int, api_version: int, **fields: Any) -> Any:
    """Build a request body; fields the version does not have are dropped (``make``)."""
    return make(request_type(api_key, api_version), **fields)


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
        self._conn = BlockingConnection(host, int(port), timeout, client_id, handshake=False,
                                        max_frame=RAW_MAX_FRAME)
        self._conn.connect()
        if tls is not None:
            self._conn.start_tls(tls)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    @staticmethod
    def request_module(api_key: int, api_version: int) -> Any:
        """The kio module holding the request types of an API version."""
        return request_module(api_key, api_version)

    def send(self, api_key: int, api_version: int, body: Any) -> int:
        """Send one request without waiting; returns its correlation id."""
        return self._conn.send(api_key, api_version, body)

    def receive(self, api_key: int, api_version: int) -> tuple[int, Any]:
        """Read the next response, decoded as ``api_key``/``api_version``: (correlation id, body).

        Raises:
            ConnectionError: the broker closed the connection (it does on requests it rejects).
            ProtocolError: the response does not decode as that API version.
        """
        reply: Reply = self._conn.receive(api_key, api_version)
        if reply.error is not None:
            raise reply.error
        return reply.correlation_id, reply.body

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
        self._conn.send_bytes(len(payload).to_bytes(4, "big") + payload)

    def receive_frame(self) -> bytes:
        """Read one size-prefixed frame's payload.

        Raises:
            ConnectionError: the broker closed the connection.
        """
        return self._conn.read_frame()

    @property
    def sock(self) -> socket.socket:
        return self._conn.sock

    @property
    def _sock(self) -> socket.socket:
        return self._conn.sock
