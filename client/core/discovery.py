"""Bootstrap addresses, Metadata and FindCoordinator, once for both shells (sans-IO).

The shells connect; this module says where to and reads what came back:

- ``parse_address`` / ``parse_bootstrap``: ``host:port[,host:port]`` (IPv6 as ``[::1]:9092``)
  into (host, port) pairs, in the order to try them;
- ``metadata_request`` / ``parse_metadata``: brokers and topics (``TopicMetadata``) of a
  Metadata response;
- ``find_coordinator_request`` / ``parse_coordinator``: the coordinator ``Node`` of a group
  (FindCoordinator v1-v6; v4+ batches keys, this asks for one).

Errors are ``ValueError`` (a bad address) and ``KafkaError`` (an error code from the broker,
with its message).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from client.errors import error_for
from protocol.codec import request_module
from protocol.messages import make

__all__ = ["FIND_COORDINATOR", "METADATA", "Node", "TopicMetadata", "find_coordinator_request",
           "metadata_request", "parse_address", "parse_bootstrap", "parse_coordinator",
           "parse_metadata"]

METADATA = 3
FIND_COORDINATOR = 10
GROUP_KEY = 0  # FindCoordinator key type GROUP


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (IPv6 as ``[::1]:9092``).

    Raises:
        ValueError: not a host:port pair (the message says what to give).
    """
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"invalid broker address {text!r}; use HOST:PORT, for example "
                         "localhost:9092")
    return host.strip("[]"), int(port)


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9092"`` or a list of ``host:port`` into (host, port) pairs.

    Raises:
        ValueError: no address, or one that is not host:port.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = [parse_address(a) for a in items if a.strip()]
    if not out:
        raise ValueError("no bootstrap server given; use HOST:PORT")
    return out


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: Any
    internal: bool
    error: ErrorCode
    partitions: dict[int, Any]  # partition index -> metadata partition (leader, replicas, isr)


def metadata_request(version: int, topics: Sequence[str] | None) -> Any:
    """A Metadata request for ``topics`` (None: all topics, []: brokers only)."""
    m = request_module(METADATA, version)
    req_topics = None if topics is None else tuple(
        make(m.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
    return make(m.MetadataRequest, topics=req_topics, allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False)


def parse_metadata(resp: Any) -> tuple[dict[int, Node], list[TopicMetadata]]:
    """The brokers (by node id) and topics of a Metadata response."""
    brokers = {int(b.node_id): Node(int(b.node_id), b.host, int(b.port)) for b in resp.brokers}
    topics = [TopicMetadata(name=t.name, topic_id=getattr(t, "topic_id", None),
                            internal=bool(getattr(t, "is_internal", False)), error=t.error_code,
                            partitions={int(p.partition_index): p for p in t.partitions})
              for t in resp.topics]
    return brokers, topics


def find_coordinator_request(version: int, key: str, key_type: int = GROUP_KEY) -> Any:
    """A FindCoordinator request for one key."""
    m = request_module(FIND_COORDINATOR, version)
    return make(m.FindCoordinatorRequest, key=key, key_type=key_type, coordinator_keys=(key,))


def parse_coordinator(version: int, resp: Any) -> Node:
    """The coordinator named by a FindCoordinator response (one key asked).

    Raises:
        KafkaError: the broker answered an error code (COORDINATOR_NOT_AVAILABLE, ...), with
            its message.
    """
    if version >= 4:
        (c,) = resp.coordinators
        error, message, node = c.error_code, c.error_message, Node(int(c.node_id), c.host,
                                                                    int(c.port))
    else:
        error, message = resp.error_code, getattr(resp, "error_message", None)
        node = Node(int(resp.node_id), resp.host, int(resp.port))
    err = error_for(error, message)
    if err is not None:
        raise err
    return node
