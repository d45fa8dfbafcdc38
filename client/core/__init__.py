"""The Kafka client core: everything a connection does that is not moving bytes (sans-IO).

No sockets, no asyncio, no clock here. Two shells move the bytes: ``client/blocking.py``
(sockets with timeouts: the CLI, the integration tests' raw client) and ``client/connection.py``
+ ``client/cluster.py`` (asyncio: the ``ShareConsumer``, the Spark source, and the
broker-to-broker client).

- ``channel.Channel``: framing and encoding through ``protocol/codec.py``, correlation ids and
  matching replies to requests, the start-up sequence (ApiVersions, then SASL) and the
  negotiated versions (``Outgoing``, ``Reply``, ``ResponseFrameError``,
  ``UnexpectedResponseError``).
- ``versions.ApiVersions``: version negotiation (``pick``, ``supports``); ``api_name``.
- ``sasl.SaslExchange``: the SASL PLAIN / SCRAM-SHA-256/512 exchange as a state machine.
- ``tls.ssl_context``: the TLS context of ``SecuritySettings`` (``client/security.py``).
- ``discovery``: bootstrap address parsing, Metadata and FindCoordinator requests and replies.
- Error mapping (kio ``ErrorCode`` -> ``KafkaError`` subclasses) is ``client/errors.py``
  (``error_for``, ``raise_for``, ``error_text``), re-exported here.
"""

from __future__ import annotations

from client.core.channel import (
    MAX_FRAME,
    Channel,
    Outgoing,
    Reply,
    ResponseFrameError,
    Stage,
    UnexpectedResponseError,
)
from client.core.discovery import (
    FIND_COORDINATOR,
    METADATA,
    Node,
    TopicMetadata,
    find_coordinator_request,
    metadata_request,
    parse_address,
    parse_bootstrap,
    parse_coordinator,
    parse_metadata,
)
from client.core.sasl import SaslExchange
from client.core.tls import ssl_context
from client.core.versions import API_NAMES, ApiVersions, api_name
from client.errors import KafkaError, error_class, error_for, error_text, raise_for

__all__ = [
    "API_NAMES", "FIND_COORDINATOR", "MAX_FRAME", "METADATA", "ApiVersions", "Channel",
    "KafkaError", "Node", "Outgoing", "Reply", "ResponseFrameError", "SaslExchange", "Stage",
    "TopicMetadata", "UnexpectedResponseError", "api_name", "error_class", "error_for",
    "error_text", "find_coordinator_request", "metadata_request", "parse_address",
    "parse_bootstrap", "parse_coordinator", "parse_metadata", "raise_for", "ssl_context",
]
