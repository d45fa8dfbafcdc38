"""Shoal's asyncio share consumer (KIP-932 share groups) for Shoal and Apache Kafka 4.2+.

    async with ShareConsumer("localhost:9092", "my-group",
                             acknowledgement_mode="explicit") as consumer:
        consumer.subscribe(["orders"])
        batch = await consumer.getmany(timeout_ms=1000)
        for tp, records in batch.items():
            for record in records:
                consumer.acknowledge(record, AcknowledgeType.ACCEPT)
        results = await consumer.commit_sync()   # {TopicPartition: None | KafkaError}

Modules: ``consumer`` (the asyncio shell), ``fetcher`` (ShareFetch tasks per leader and the
record buffer), ``ack_sender`` (share sessions per broker, unsent acknowledgements,
ShareAcknowledge), ``membership`` and ``session`` (sans-IO heartbeat and share-session state),
``acks`` (acknowledgement bookkeeping of the current batch), ``records`` (decoding),
``security`` (TLS and SASL settings from Kafka client properties), ``errors``.

The transport is one client core, ``core/`` (sans-IO: framing over the broker's own
``protocol`` codec, correlation ids, ApiVersions negotiation, the TLS context, the SASL
exchange, bootstrap/Metadata/FindCoordinator), with two shells: ``connection``/``cluster``
(asyncio: the consumer, the Spark source, the broker-to-broker client) and ``blocking``
(sockets: the admin part the ``shoal`` CLI is built on, ``admin_wire`` (connections,
coordinators, metadata, one-line ``CliError`` messages) and ``admin_groups`` (consumer-group
calls: list, describe, committed offsets), and the integration tests' raw client).

``errors``, ``security``, ``core``, ``blocking``, ``admin_wire`` and ``admin_groups`` need only
the broker's own dependencies (the ``shoal`` CLI uses them on a broker-only install); the
consumer and its record decoding need the ``client`` extra (aiokafka, cramjam), so they are imported on first use.
The names below are all imported on first use, so importing ``client.security`` alone stays
cheap (the Spark source's executors and planners parse options without the kio schemas).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client.errors import (
        ConsumerClosedError,
        IllegalStateError,
        InvalidRecordStateError,
        KafkaError,
        ShareConsumerError,
        UnsupportedVersionError,
        error_class,
    )
    from client.security import SecurityConfigError, SecuritySettings
    from client.consumer import ShareConsumer
    from client.records import AcknowledgeType, RawPartition, ShareRecord, TopicPartition

_LAZY = {"ShareConsumer": "client.consumer", "AcknowledgeType": "client.records",
         "RawPartition": "client.records", "ShareRecord": "client.records",
         "TopicPartition": "client.records",
         **dict.fromkeys(["ConsumerClosedError", "IllegalStateError", "InvalidRecordStateError",
                          "KafkaError", "ShareConsumerError", "UnsupportedVersionError",
                          "error_class"], "client.errors"),
         "SecurityConfigError": "client.security", "SecuritySettings": "client.security"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

__all__ = [
    "AcknowledgeType",
    "ConsumerClosedError",
    "IllegalStateError",
    "InvalidRecordStateError",
    "KafkaError",
    "RawPartition",
    "SecurityConfigError",
    "SecuritySettings",
    "ShareConsumer",
    "ShareConsumerError",
    "ShareRecord",
    "TopicPartition",
    "UnsupportedVersionError",
    "error_class",
]
