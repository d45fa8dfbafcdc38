"""A small blocking Kafka admin client: the wire layer of the ``shoal`` admin commands.

It lives in ``client/`` beside the asyncio share consumer (issue 14: one client library, with a
consumer and an admin part; the CLI in ``broker/cli/`` is a thin layer over it) and shares its
security settings and SASL exchange (``client/security.py``). Like ``client.errors`` and
``client.security`` it needs only the broker's own dependencies, so the CLI runs on a
broker-only install. ``broker/cli/wire.py`` re-exports it for older imports.

It speaks the Kafka protocol to any broker (Shoal or Apache Kafka): it negotiates versions with
ApiVersions on every connection, finds brokers with Metadata and group coordinators with
FindCoordinator, and sends typed kio requests encoded by ``protocol/codec.py``. Everything is
bounded by one timeout per socket operation. Nothing here reads a broker's files.

Failures are ``CliError`` with a one-line message that says what failed and what to do; the
command layer prints it and exits non-zero.
"""

from __future__ import annotations

import itertools
import socket
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kio.schema.errors import ErrorCode

from client.errors import KafkaError
from client.security import SaslExchange, SecurityConfigError, SecuritySettings, ssl_context
from protocol.codec import decode_response, encode_request, request_module
from protocol.errors import ProtocolError
from protocol.messages import make

CLIENT_ID = "shoal-cli"
API_VERSIONS = 18
METADATA = 3
FIND_COORDINATOR = 10
MAX_FRAME = 64 << 20

API_NAMES = {
    2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake",
    18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics", 29: "DescribeAcls",
    30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs", 36: "SaslAuthenticate",
    37: "CreatePartitions", 42: "DeleteGroups", 44: "IncrementalAlterConfigs",
    47: "OffsetDelete", 50: "DescribeUserScramCredentials", 51: "AlterUserScramCredentials",
    69: "ConsumerGroupDescribe", 77: "ShareGroupDescribe", 90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
}

# Request versions this client can build, per API (kio has the schemas; the builders below use
# ``make``, which drops fields a version does not have). OffsetCommit/OffsetFetch stop at v9:
# v10 names topics by id.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    2: (1, 10), 3: (1, 12), 8: (2, 9), 9: (1, 9), 10: (1, 6), 15: (0, 6), 16: (0, 5),
    19: (2, 7), 20: (1, 6), 29: (1, 3), 30: (1, 3), 31: (1, 3), 32: (1, 4), 37: (0, 3),
    42: (0, 2), 44: (0, 1), 47: (0, 0), 50: (0, 0), 51: (0, 0), 69: (0, 1), 77: (1, 1),
    90: (0, 1), 91: (0, 0), 92: (0, 0),
}


class CliError(Exception):
    """A failure to report on one line (``message``), with the process exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def error_text(code: ErrorCode | int, message: str | None = None) -> str:
    """``NAME`` or ``NAME: message`` for an error code from a response."""
    try:
        name = ErrorCode(int(code)).name.upper()
    except ValueError:
        name = f"error {int(code)}"
    return f"{name}: {message}" if message else name


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (IPv6 as ``[::1]:9092``).

    Raises:
        CliError: not a host:port pair.
    """
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise CliError(f"invalid broker address {text!r}; use HOST:PORT, for example "
                       "localhost:9092", exit_code=2)
    return host.strip("[]"), int(port)


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class Connection:
    """One socket to one broker, with the API versions it supports.

    With ``security`` (``--command-config``) the socket is wrapped in TLS before the first
    byte and, after ApiVersions, authenticates with SASL (``client/security.py``).
    """

    def __init__(self, host: str, port: int, timeout_s: float,
                 security: SecuritySettings | None = None) -> None:
        self.address = f"{host}:{port}"
        security = security or SecuritySettings()
        try:
            context = ssl_context(security)
        except SecurityConfigError as exc:
            raise CliError(f"{exc}; fix --command-config", exit_code=2) from None
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise CliError(f"cannot connect to {self.address}: {_reason(exc)}; check "
                           "--bootstrap-server and that the broker is running") from None
        if context is not None:
            sock = self._tls(sock, context, host)
        self._sock = sock
        self._sock.settimeout(timeout_s)
        self._correlation = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            self._negotiate()
            if security.uses_sasl:
                self._authenticate(security)
        except CliError:
            self._sock.close()
            raise

    def _tls(self, sock: socket.socket, context: ssl.SSLContext, host: str) -> socket.socket:
        try:
            return context.wrap_socket(sock, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise CliError(f"TLS to {self.address} failed: the broker's certificate did not "
                           f"verify ({exc.verify_message}); check ssl.ca.location and "
                           "ssl.endpoint.identification.algorithm in --command-config"
                           ) from None
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise CliError(f"TLS to {self.address} failed: {_reason(exc)}; is this a TLS "
                           "listener (security.protocol in --command-config)?") from None

    def _authenticate(self, security: SecuritySettings) -> None:
        try:
            exchange = SaslExchange(security, self.versions)
            while (req := exchange.next_request()) is not None:
                exchange.receive(self._call(*req))
        except KafkaError as exc:
            raise CliError(f"SASL {security.sasl_mechanism} authentication to {self.address} "
                           f"failed: {exc}; check the credentials in --command-config"
                           ) from None

    def close(self) -> None:
        self._sock.close()

    def _negotiate(self) -> None:
        m = request_module(API_VERSIONS, 3)
        body = m.ApiVersionsRequest(client_software_name=CLIENT_ID,
                                    client_software_version="1")
        resp = self._call(API_VERSIONS, 3, body)
        if resp.error_code != ErrorCode.none:
            raise CliError(f"{self.address} refused ApiVersions: {error_text(resp.error_code)}; "
                           "is this a Kafka broker?")
        self.versions = {int(k.api_key): (int(k.min_version), int(k.max_version))
                         for k in resp.api_keys}

    def supports(self, api_key: int) -> bool:
        """Whether the broker serves a version of the API this client speaks."""
        ours = CLIENT_VERSIONS[api_key]
        theirs = self.versions.get(api_key)
        return theirs is not None and theirs[1] >= ours[0] and theirs[0] <= ours[1]

    def version(self, api_key: int) -> int:
        """The highest version both sides support.

        Raises:
            CliError: the broker does not serve a version this client can send.
        """
        name = API_NAMES.get(api_key, f"API {api_key}")
        ours = CLIENT_VERSIONS[api_key]
        theirs = self.versions.get(api_key)
        if theirs is None or theirs[1] < ours[0] or theirs[0] > ours[1]:
            raise CliError(f"the broker at {self.address} does not support {name} (api key "
                           f"{api_key}) in a version this tool speaks; upgrade the broker")
        return min(ours[1], theirs[1])

    def call(self, api_key: int, body_name: str, **fields: Any) -> tuple[int, Any]:
        """Send one request at the negotiated version; (version, response body).

        Raises:
            CliError: the broker cannot be reached or answers garbage.
        """
        version = self.version(api_key)
        cls = getattr(request_module(api_key, version), body_name)
        return version, self._call(api_key, version, make(cls, **fields))

    def _call(self, api_key: int, version: int, body: Any) -> Any:
        correlation_id = next(self._correlation)
        name = API_NAMES.get(api_key, f"API {api_key}")
        try:
            self._sock.sendall(encode_request(api_key, version, correlation_id, CLIENT_ID, body))
            head = self._recv(4)
            if head == b"HTTP":
                raise CliError(f"{self.address} is an HTTP server (a metrics port?), not a "
                               "Kafka listener; check --bootstrap-server")
            size = int.from_bytes(head, "big")
            if not 0 < size <= MAX_FRAME:
                raise CliError(f"{self.address} sent a {size}-byte {name} response; is this a "
                               "Kafka broker?")
            got, resp = decode_response(api_key, version, self._recv(size))
        except TimeoutError:
            if api_key == API_VERSIONS:  # any Kafka broker answers it at once
                raise CliError(f"no answer to {name} from {self.address}; is it a Kafka "
                               "listener? check --bootstrap-server") from None
            raise CliError(f"{name} to {self.address} timed out; retry, or raise --timeout"
                           ) from None
        except OSError as exc:
            if api_key == API_VERSIONS and isinstance(exc, ConnectionResetError):
                raise CliError(f"{self.address} closed the connection without answering "
                               f"{name}; is it a Kafka listener (and not TLS: see "
                               "--command-config)? check --bootstrap-server") from None
            raise CliError(f"{name} to {self.address} failed: {_reason(exc)}; check that the "
                           "broker is running") from None
        except ProtocolError:
            raise CliError(f"could not decode the {name} v{version} response from "
                           f"{self.address}; is this a Kafka broker?") from None
        if got != correlation_id:
            raise CliError(f"{self.address} answered out of order; retry")
        return resp

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionResetError("the broker closed the connection")
            buf += chunk
        return bytes(buf)


def _reason(exc: OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or type(exc).__name__
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror})"
    return exc.strerror or type(exc).__name__


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: Any
    internal: bool
    error: ErrorCode
    partitions: dict[int, Any]  # partition index -> metadata partition (leader, replicas, isr)


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
        version, resp = self.any.call(FIND_COORDINATOR, "FindCoordinatorRequest", key=group_id,
                                      key_type=0, coordinator_keys=(group_id,))
        if version >= 4:
            (c,) = resp.coordinators
            error, message, node = c.error_code, c.error_message, Node(c.node_id, c.host, c.port)
        else:
            error, message = resp.error_code, getattr(resp, "error_message", None)
            node = Node(resp.node_id, resp.host, resp.port)
        if error != ErrorCode.none:
            retriable = error in (ErrorCode.coordinator_not_available,
                                  ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator)
            raise CliError(f"cannot find the coordinator of group {group_id!r}: "
                           f"{error_text(error, message)}" + ("; retry shortly" if retriable
                                                               else ""))
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
        m = request_module(METADATA, self.any.version(METADATA))
        req_topics = None if topics is None else tuple(
            make(m.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        _, resp = self.any.call(METADATA, "MetadataRequest", topics=req_topics,
                                allow_auto_topic_creation=False,
                                include_cluster_authorized_operations=False,
                                include_topic_authorized_operations=False)
        for b in resp.brokers:
            self._nodes[int(b.node_id)] = Node(int(b.node_id), b.host, int(b.port))
        out = {}
        for t in resp.topics:
            out[t.name] = TopicMetadata(
                name=t.name, topic_id=getattr(t, "topic_id", None),
                internal=bool(getattr(t, "is_internal", False)), error=t.error_code,
                partitions={int(p.partition_index): p for p in t.partitions})
        return out

    def existing_topics(self, names: Iterable[str]) -> dict[str, TopicMetadata]:
        """Metadata of named topics that exist (unknown names are left out)."""
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return {}
        return {n: t for n, t in self.metadata(wanted).items()
                if t.error == ErrorCode.none}
