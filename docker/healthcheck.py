"""Container health probe: one Kafka ApiVersions (v0) round trip against the broker.

Exit status 0 when the broker answers with error code NONE, 1 otherwise. Standard library
only, so it runs in the broker image as is. Usage: ``python healthcheck.py [HOST:PORT]``
(default ``127.0.0.1:9092``, or ``$SHOAL_HEALTHCHECK_ADDRESS``).
"""

from __future__ import annotations

import os
import socket
import struct
import sys

API_VERSIONS = 18
CORRELATION_ID = 0x5A1
CLIENT_ID = b"shoal-healthcheck"


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        buf += chunk
    return bytes(buf)


def probe(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when the broker answers an ApiVersions v0 request without error."""
    # Request header v1: api key, api version, correlation id, client id (int16-prefixed).
    body = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION_ID, len(CLIENT_ID)) + CLIENT_ID
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", _read_exactly(sock, 4))
            if not 6 <= size <= 1 << 20:
                return False
            response = _read_exactly(sock, size)
    except (OSError, ConnectionError):
        return False
    correlation_id, error_code = struct.unpack(">ih", response[:6])
    return correlation_id == CORRELATION_ID and error_code == 0


def main(argv: list[str]) -> int:
    address = argv[1] if len(argv) > 1 else os.environ.get("SHOAL_HEALTHCHECK_ADDRESS",
                                                           "127.0.0.1:9092")
    host, _, port = address.rpartition(":")
    return 0 if probe(host or "127.0.0.1", int(port)) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
