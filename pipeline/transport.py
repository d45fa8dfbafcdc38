"""How a micro-batch's records reach the executors.

``inline`` (the default): each Spark partition's payload (``pipeline.decode.pack``: the
undecoded record batches of its topic-partitions) rides inside its ``InputPartition``, through
the JVM's task serialization. It works wherever Spark does, but the JVM copies the bytes several
times on the way (about 4 µs per 1 KiB record, measured).

``tcp``: the driver-side source keeps the payloads and serves them from a small TCP server; the
input partitions carry only its address and a random token, and each task fetches its payload
directly. The executors must reach ``driverHost`` (127.0.0.1 by default: local mode).
"""

from __future__ import annotations

import logging
import secrets
import socket
import struct
import threading
from collections.abc import Sequence

log = logging.getLogger("pipeline.share_source")

_REQUEST = struct.Struct(">16sI")  # token, Spark partition index
_LENGTH = struct.Struct(">q")  # payload length, -1: unknown token or index
TOKEN_BYTES = 16


class BatchServer:
    """Serves published micro-batches to executor tasks: one payload per Spark partition, each
    a list of pieces sent back to back (so the record batches are never joined in memory)."""

    def __init__(self, host: str) -> None:
        self._payloads: dict[bytes, Sequence[Sequence[bytes]]] = {}
        self._lock = threading.Lock()
        self._sock = socket.create_server((host, 0))
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, name="shoal-batch-server", daemon=True).start()

    def publish(self, parts: Sequence[Sequence[bytes]]) -> bytes:
        token = secrets.token_bytes(TOKEN_BYTES)
        with self._lock:
            self._payloads[token] = parts
        return token

    def retract(self, token: bytes) -> None:
        with self._lock:
            self._payloads.pop(token, None)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._payloads.clear()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() in the server thread
        except OSError:
            pass
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                token, index = _REQUEST.unpack(_recv_exact(conn, _REQUEST.size))
                with self._lock:
                    parts = self._payloads.get(token)
                payload = parts[index] if parts is not None and index < len(parts) else None
                if payload is None:
                    conn.sendall(_LENGTH.pack(-1))
                    return
                conn.sendall(_LENGTH.pack(sum(len(p) for p in payload)))
                for piece in payload:
                    conn.sendall(piece)
            except (OSError, struct.error, ConnectionError) as e:
                log.info("a Spark task's batch fetch failed: %s", e)


def fetch(host: str, port: int, token: bytes, index: int, timeout: float = 120.0) -> bytearray:
    """A task's payload from the driver's :class:`BatchServer`."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(_REQUEST.pack(token, index))
            (length,) = _LENGTH.unpack(_recv_exact(conn, _LENGTH.size))
            if length < 0:
                raise RuntimeError(f"the share source at {host}:{port} no longer has this "
                                   "micro-batch (it was settled or the query restarted)")
            return _recv_exact(conn, length)
    except OSError as e:
        raise RuntimeError(f"cannot fetch the micro-batch from the share source at {host}:{port} "
                           f"({e}); executors must reach the driver there: set the source "
                           "option driverHost, or use transport=inline") from e


def _recv_exact(conn: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = conn.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("connection closed mid-message")
        got += k
    return buf
