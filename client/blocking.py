"""The blocking shell of the client core: one socket per ``BlockingConnection``.

It moves the bytes of a ``client.core.Channel`` over a plain (or TLS) socket; everything else
(framing, correlation ids, start-up, versions, SASL) is the channel's. Every socket operation is
bounded by the connection's timeout. Used by the CLI's admin client (``client/admin_wire.py``)
and the integration tests' raw client.

Steps, so a caller can tell which one failed:

    conn = BlockingConnection(host, port, timeout_s, client_id, security)
    conn.connect()            # TCP: OSError / TimeoutError
    conn.start_tls(context)   # TLS: ssl.SSLError / OSError (skip for PLAINTEXT)
    conn.start()              # ApiVersions, then SASL: KafkaError (``conn.channel.stage`` says which)
    body = conn.call(api_key, version, body)

``open_connection`` does all of it. Frames are read exactly (size prefix, then payload), so
nothing after a frame is taken from the socket: a caller may read or write the raw socket
between requests (``sock``, ``send_bytes``, ``read_frame``).

Exceptions: ``OSError`` (``TimeoutError``, ``ConnectionError``) from the socket,
``ResponseFrameError`` / ``UnexpectedResponseError`` / other ``ProtocolError`` from the channel,
``KafkaError`` from the start-up.
"""

from __future__ import annotations

import socket
import ssl
from types import TracebackType
from typing import Any

from client.core.channel import MAX_FRAME, Channel, Reply
from client.core.tls import ssl_context
from client.security import SecuritySettings

__all__ = ["BlockingConnection", "open_connection", "recv_exact"]


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly ``n`` bytes.

    Raises:
        ConnectionError: the peer closed the connection first.
    """
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionResetError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


class BlockingConnection:
    """A socket to one broker driven by a ``Channel``; not thread-safe."""

    def __init__(self, host: str, port: int, timeout_s: float, client_id: str,
                 security: SecuritySettings | None = None, *, handshake: bool = True,
                 max_frame: int = MAX_FRAME,
                 software: tuple[str, str] = ("shoal-client", "0.1")) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self.address = f"{host}:{port}"
        self.channel = Channel(client_id, security, software=software, max_frame=max_frame,
                               handshake=handshake, where=f"broker {self.address}")
        self._sock: socket.socket | None = None

    # -- set-up

    def connect(self) -> None:
        """Open the TCP connection (bounded by the timeout)."""
        self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        self._sock.settimeout(self.timeout_s)

    def start_tls(self, context: ssl.SSLContext) -> None:
        """Wrap the socket in TLS (the handshake is bounded by the timeout); on failure the
        socket is closed."""
        sock = self.sock
        try:
            self._sock = context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self._sock.settimeout(self.timeout_s)

    def start(self) -> None:
        """Run the channel's start-up requests (ApiVersions, then SASL if configured)."""
        ch = self.channel
        while (out := ch.handshake()) is not None:
            self.sock.sendall(out.data)
            ch.handshake_reply(self._body(self._reply()))

    # -- requests

    def version(self, api_key: int, lo: int, hi: int) -> int:
        """See ``Channel.version``."""
        return self.channel.version(api_key, lo, hi)

    def send(self, api_key: int, api_version: int, body: Any) -> int:
        """Send one request without waiting; returns its correlation id."""
        out = self.channel.request(api_key, api_version, body)
        self.sock.sendall(out.data)
        return out.correlation_id

    def receive(self, api_key: int | None = None, api_version: int | None = None) -> Reply:
        """Read the next response: decoded as the request it answers, or (raw mode) as
        ``api_key``/``api_version``."""
        if api_key is None:
            return self._reply()
        reply = self.channel.take(self.read_frame(), api_key, api_version)
        assert reply is not None
        return reply

    def call(self, api_key: int, api_version: int, body: Any) -> Any:
        """Send one request and return its decoded response body.

        Raises:
            OSError: the socket failed or timed out.
            ProtocolError: the response did not decode, or answered another request.
        """
        self.send(api_key, api_version, body)
        return self._body(self._reply())

    # -- raw bytes

    @property
    def sock(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionError(f"not connected to {self.address}")
        return self._sock

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        """Read one whole frame (without its size prefix), exactly.

        Raises:
            ConnectionError: the peer closed the connection.
            ResponseFrameError: a size prefix that cannot be a response.
        """
        ch = self.channel
        while (frame := ch.next_frame()) is None:
            ch.receive_bytes(recv_exact(self.sock, ch.bytes_wanted()))
        return frame

    def close(self) -> None:
        self.channel.close()
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _reply(self) -> Reply:
        while True:
            reply = self.channel.take(self.read_frame())
            if reply is not None:
                return reply

    @staticmethod
    def _body(reply: Reply) -> Any:
        if reply.error is not None:
            raise reply.error
        return reply.body


def open_connection(host: str, port: int, timeout_s: float, client_id: str,
                    security: SecuritySettings | None = None) -> BlockingConnection:
    """A connected, started connection (TLS and SASL as ``security`` says); on failure nothing
    stays open.

    Raises:
        SecurityConfigError: the TLS files cannot be loaded.
        OSError: the broker cannot be reached or the TLS handshake failed.
        KafkaError: ApiVersions or SASL failed.
    """
    conn = BlockingConnection(host, port, timeout_s, client_id, security)
    context = ssl_context(conn.channel.security)
    try:
        conn.connect()
        if context is not None:
            conn.start_tls(context)
        conn.start()
    except BaseException:
        conn.close()
        raise
    return conn
