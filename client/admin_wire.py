"""A small blocking Kafka admin client: the wire layer of the ``shoal`` admin commands.

It is the blocking shell of the client core (``client/blocking.py`` over ``client/core/``:
framing, correlation ids, version negotiation, TLS, SASL, Metadata and FindCoordinator) with the
CLI's routing and messages on top; the CLI in ``cli/`` is a thin layer over it. Like
``client.errors`` and ``client.security`` it needs only the broker's own dependencies, so the
CLI runs on a broker-only install. ``cli/wire.py`` re-exports it for older imports.

It speaks the Kafka protocol to any broker (Shoal or Apache Kafka): ApiVersions on every
connection, brokers from Metadata, group coordinators from FindCoordinator, typed kio requests.
Everything is bounded by one timeout per socket operation. Nothing here reads a broker's files.

Failures are ``CliError`` with a one-line message that says what failed and what to do; the
command layer prints it and exits non-zero.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

from kio.schema.errors import ErrorCode

from client.blocking import BlockingConnection
from client.core import (
    FIND_COORDINATOR,
    METADATA,
    Node,
    ResponseFrameError,
    Stage,
    TopicMetadata,
    UnexpectedResponseError,
    api_name,
    find_coordinator_request,
    metadata_request,
    parse_coordinator,
    parse_metadata,
    ssl_context,
)
from client.core import parse_address as _parse_address
from client.core.versions import API_NAMES
from client.errors import KafkaError, error_text
from client.security import SecurityConfigError, SecuritySettings
from protocol.codec import request_module
from protocol.messages import make

__all__ = ["API_NAMES", "CLIENT_ID", "CLIENT_VERSIONS", "CliError", "Cluster", "Connection",
           "Node", "TopicMetadata", "error_text", "parse_address"]

CLIENT_ID = "shoal-cli"
MAX_FRAME = 64 << 20

# Request versions this client can build, per API (kio has the schemas; the builders below use
# ``make``, which drops fields a version does not have). OffsetCommit/OffsetFetch stop at v9:
# v10 names topics by id.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    2: (1, 10), 3: (1, 12), 8: (2, 9), 9: (1, 9), 10: (1, 6), 15: (0, 6), 16: (0, 5),
    19: (2, 7), 20: (1, 6), 29: (1, 3), 30: (1, 3), 31: (1, 3), 32: (1, 4), 37: (0, 3),
    42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 1), 46: (0, 0), 47: (0, 0), 50: (0, 0),
    51: (0, 0), 60: (0, 2), 69: (0, 1), 77: (1, 1),
    90: (0, 1), 91: (0, 0), 92: (0, 0),
}


class CliError(Exception):
    """A failure to report on one line (``message``), with the process exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (IPv6 as ``[::1]:9092``).

    Raises:
        CliError: not a host:port pair.
    """
    try:
        return _parse_address(text)
    except ValueError as exc:
        raise CliError(str(exc), exit_code=2) from None


class Connection:
    """One socket to one broker, with the API versions it supports: the blocking shell
    (``client/blocking.py``) with every failure turned into a ``CliError`` that says what to do.

    With ``security`` (``--command-config``) the socket is wrapped in TLS before the first
    byte and, after ApiVersions, authenticates with SASL.
    """

    def __init__(self, host: str, port: int, timeout_s: float,
                 security: SecuritySettings | None = None) -> None:
        self.address = f"{host}:{port}"
        security = security or SecuritySettings()
        try:
            context = ssl_context(security)
        except SecurityConfigError as exc:
            raise CliError(f"{exc}; fix --command-config", exit_code=2) from None
        self._conn = BlockingConnection(host, port, timeout_s, CLIENT_ID, security,
                                        max_frame=MAX_FRAME, software=(CLIENT_ID, "1"))
        try:
            self._conn.connect()
        except OSError as exc:
            raise CliError(f"cannot connect to {self.address}: {_reason(exc)}; check "
                           "--bootstrap-server and that the broker is running") from None
        if context is not None:
            self._tls(context)
        try:
            self._start(security)
        except CliError:
            self._conn.close()
            raise

    def _tls(self, context: ssl.SSLContext) -> None:
        try:
            self._conn.start_tls(context)
        except ssl.SSLCertVerificationError as exc:
            raise CliError(f"TLS to {self.address} failed: the broker's certificate did not "
                           f"verify ({exc.verify_message}); check ssl.ca.location and "
                           "ssl.endpoint.identification.algorithm in --command-config"
                           ) from None
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"TLS to {self.address} failed: {_reason(exc)}; is this a TLS "
                           "listener (security.protocol in --command-config)?") from None

    def _start(self, security: SecuritySettings) -> None:
        ch = self._conn.channel
        while True:
            try:
                out = ch.handshake()
                if out is None:
                    return
                name = api_name(out.api_key)
                ch.handshake_reply(self._exchange(name, out.api_version,
                                                  lambda o=out: self._conn.sock.sendall(o.data)))
            except KafkaError as exc:
                if ch.stage is Stage.VERSIONS:
                    raise CliError(f"{self.address} refused ApiVersions: "
                                   f"{error_text(exc.code)}; is this a Kafka broker?") from None
                raise CliError(f"SASL {security.sasl_mechanism} authentication to "
                               f"{self.address} failed: {exc}; check the credentials in "
                               "--command-config") from None

    @property
    def versions(self) -> dict[int, tuple[int, int]]:
        return dict(self._conn.channel.versions.ranges)

    def close(self) -> None:
        self._conn.close()

    def supports(self, api_key: int) -> bool:
        """Whether the broker serves a version of the API this client speaks."""
        return self._conn.channel.supports(api_key, *CLIENT_VERSIONS[api_key])

    def version(self, api_key: int) -> int:
        """The highest version both sides support.

        Raises:
            CliError: the broker does not serve a version this client can send.
        """
        if not self.supports(api_key):
            raise CliError(f"the broker at {self.address} does not support "
                           f"{api_name(api_key)} (api key {api_key}) in a version this tool "
                           "speaks; upgrade the broker")
        return self._conn.version(api_key, *CLIENT_VERSIONS[api_key])

    def call(self, api_key: int, body_name: str, **fields: Any) -> tuple[int, Any]:
        """Send one request at the negotiated version; (version, response body).

        Raises:
            CliError: the broker cannot be reached or answers garbage.
        """
        version = self.version(api_key)
        cls = getattr(request_module(api_key, version), body_name)
        return version, self.request(api_key, version, make(cls, **fields))

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send a built request body at ``version``; the response body.

        Raises:
            CliError: the broker cannot be reached or answers garbage.
        """
        return self._exchange(api_name(api_key), version,
                              lambda: self._conn.send(api_key, version, body))

    def _exchange(self, name: str, version: int, send: Any) -> Any:
        """Send (``send()``) and read the reply, every failure as a ``CliError``."""
        try:
            send()
            reply = self._conn.receive()
        except TimeoutError:
            if name == "ApiVersions":  # any Kafka broker answers it at once
                raise CliError(f"no answer to {name} from {self.address}; is it a Kafka "
                               "listener? check --bootstrap-server") from None
            raise CliError(f"{name} to {self.address} timed out; retry, or raise --timeout"
                           ) from None
        except OSError as exc:
            if name == "ApiVersions" and isinstance(exc, ConnectionResetError):
                raise CliError(f"{self.address} closed the connection without answering "
                               f"{name}; is it a Kafka listener (and not TLS: see "
                               "--command-config)? check --bootstrap-server") from None
            raise CliError(f"{name} to {self.address} failed: {_reason(exc)}; check that the "
                           "broker is running") from None
        except ResponseFrameError as exc:
            if exc.size == _HTTP:  # "HTTP/1.1 400 ..." read as a frame size
                raise CliError(f"{self.address} is an HTTP server (a metrics port?), not a "
                               "Kafka listener; check --bootstrap-server") from None
            raise CliError(f"{self.address} sent a {exc.size}-byte {name} response; is this a "
                           "Kafka broker?") from None
        except UnexpectedResponseError:
            raise CliError(f"{self.address} answered out of order; retry") from None
        if reply.error is not None:
            raise CliError(f"could not decode the {name} v{version} response from "
                           f"{self.address}; is this a Kafka broker?")
        return reply.body


_HTTP = int.from_bytes(b"HTTP", "big")  # the first 4 bytes of an HTTP answer, as a size


def _reason(exc: OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or type(exc).__name__
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror})"
    return exc.strerror or type(exc).__name__


class Cluster:
    """Connections to a cluster, opened through ``--bootstrap-server``."""

    def __init__(self, bootstrap: str, timeout_ms: int,
                 security: SecuritySettings | None = None) -> None:
        self.timeout_s = max(timeout_ms, 1) / 1000
        self.security = security
        addresses = [a for a in bootstrap.split(",") if a.strip()]
        if not addresses:
            raise CliError("--bootstrap-server is empty; give HOST:PORT", exit_code=2)
        last: CliError | None = None
        self.bootstrap: Connection | None = None
        for a in addresses:
            host, port = parse_address(a)
            try:
                self.bootstrap = Connection(host, port, self.timeout_s, security)
                break
            except CliError as exc:
                last = exc
        if self.bootstrap is None:
            assert last is not None
            raise last
        self._nodes: dict[int, Node] = {}
        self._conns: dict[int, Connection] = {}

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.bootstrap is not None:
            self.bootstrap.close()
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # -- routing

    @property
    def any(self) -> Connection:
        assert self.bootstrap is not None
        return self.bootstrap

    def node(self, node_id: int) -> Connection:
        """A connection to a broker by id (from the last Metadata)."""
        conn = self._conns.get(node_id)
        if conn is not None:
            return conn
        if node_id not in self._nodes:
            self.metadata([])
        n = self._nodes.get(node_id)
        if n is None:
            raise CliError(f"broker {node_id} is not in the cluster metadata; retry")
        if n.address == self.any.address:
            return self.any
        conn = self._conns[node_id] = Connection(n.host, n.port, self.timeout_s,
                                                      self.security)
        return conn

    def broker_ids(self) -> list[int]:
        """Ids of every broker in the cluster (fresh Metadata)."""
        self.metadata([])
        return sorted(self._nodes)

    def coordinator(self, group_id: str) -> tuple[Node, Connection]:
        """The group's coordinator (FindCoordinator, key type GROUP).

        Raises:
            CliError: no coordinator could be found.
        """
        conn = self.any
        version = conn.version(FIND_COORDINATOR)
        resp = conn.request(FIND_COORDINATOR, version, find_coordinator_request(version, group_id))
        try:
            node = parse_coordinator(version, resp)
        except KafkaError as exc:
            retriable = exc.code in (ErrorCode.coordinator_not_available,
                                     ErrorCode.coordinator_load_in_progress,
                                     ErrorCode.not_coordinator)
            raise CliError(f"cannot find the coordinator of group {group_id!r}: "
                           f"{error_text(exc.code, exc.message)}"
                           + ("; retry shortly" if retriable else "")) from None
        self._nodes[node.node_id] = node
        if node.address == self.any.address:
            return node, self.any
        conn = self._conns.get(node.node_id)
        if conn is None:
            conn = self._conns[node.node_id] = Connection(node.host, node.port,
                                                               self.timeout_s, self.security)
        return node, conn

    def metadata(self, topics: Sequence[str] | None) -> dict[str, TopicMetadata]:
        """Topic metadata (``None`` = all topics, ``[]`` = brokers only), keyed by name."""
        version = self.any.version(METADATA)
        resp = self.any.request(METADATA, version, metadata_request(version, topics))
        brokers, found = parse_metadata(resp)
        self._nodes.update(brokers)
        return {t.name: t for t in found}

    def existing_topics(self, names: Iterable[str]) -> dict[str, TopicMetadata]:
        """Metadata of named topics that exist (unknown names are left out)."""
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return {}
        return {n: t for n, t in self.metadata(wanted).items()
                if t.error == ErrorCode.none}
