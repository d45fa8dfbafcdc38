"""Topic configs: the table of per-topic configs and the broker config each falls back to
(``synonym``), as in Kafka."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker.config_types import (
    ConfigDef,
    at_least,
    cleanup_policy_problem,
    one_of,
    _minus_one_or_at_least,
    _ratio,
)

if TYPE_CHECKING:
    from broker.config import BrokerConfig


_TOPIC_DEFS: list[ConfigDef] = [
    ConfigDef("cleanup.policy", "list", None,
              "delete: remove old segments by retention.ms/retention.bytes; compact: keep the "
              "latest record per key (records need a key); compact,delete: both.",
              cleanup_policy_problem, synonym="log.cleanup.policy"),
    ConfigDef("min.cleanable.dirty.ratio", "double", None,
              "Per-topic log.cleaner.min.cleanable.ratio.", _ratio,
              synonym="log.cleaner.min.cleanable.ratio"),
    ConfigDef("min.compaction.lag.ms", "long", None, "Per-topic log.cleaner.min.compaction.lag.ms.",
              at_least(0), synonym="log.cleaner.min.compaction.lag.ms"),
    ConfigDef("max.compaction.lag.ms", "long", None, "Per-topic log.cleaner.max.compaction.lag.ms.",
              at_least(1), synonym="log.cleaner.max.compaction.lag.ms"),
    ConfigDef("delete.retention.ms", "long", None, "Per-topic log.cleaner.delete.retention.ms.",
              at_least(0), synonym="log.cleaner.delete.retention.ms"),
    ConfigDef("retention.ms", "long", None, "Per-topic log.retention.ms.",
              _minus_one_or_at_least(1), synonym="log.retention.ms"),
    ConfigDef("retention.bytes", "long", None, "Per-topic log.retention.bytes.",
              _minus_one_or_at_least(0), synonym="log.retention.bytes"),
    ConfigDef("segment.bytes", "int", None, "Per-topic log.segment.bytes.", at_least(1024),
              synonym="log.segment.bytes"),
    ConfigDef("segment.ms", "long", None, "Per-topic log.roll.ms.", at_least(1),
              synonym="log.roll.ms"),
    ConfigDef("max.message.bytes", "int", None, "Per-topic message.max.bytes.", at_least(0),
              synonym="message.max.bytes"),
    ConfigDef("flush.messages", "long", None, "Per-topic log.flush.interval.messages.",
              at_least(1), synonym="log.flush.interval.messages"),
    ConfigDef("flush.ms", "long", None, "Per-topic log.flush.interval.ms.",
              _minus_one_or_at_least(0), synonym="log.flush.interval.ms"),
    ConfigDef("index.interval.bytes", "int", None, "Per-topic log.index.interval.bytes.",
              at_least(0), synonym="log.index.interval.bytes"),
    ConfigDef("message.timestamp.type", "string", None,
              "Per-topic log.message.timestamp.type.", one_of("CreateTime", "LogAppendTime"),
              synonym="log.message.timestamp.type"),
    ConfigDef("message.timestamp.before.max.ms", "long", None,
              "Per-topic log.message.timestamp.before.max.ms.", at_least(0),
              synonym="log.message.timestamp.before.max.ms"),
    ConfigDef("message.timestamp.after.max.ms", "long", None,
              "Per-topic log.message.timestamp.after.max.ms.", at_least(0),
              synonym="log.message.timestamp.after.max.ms"),
    ConfigDef("min.insync.replicas", "int", None, "Per-topic min.insync.replicas.",
              at_least(1), synonym="min.insync.replicas"),
    ConfigDef("unclean.leader.election.enable", "bool", None,
              "Per-topic unclean.leader.election.enable.",
              synonym="unclean.leader.election.enable"),
    ConfigDef("compression.type", "string", "producer", "Only 'producer' is supported.",
              one_of("producer")),
    ConfigDef("errors.deadletterqueue.group.enable", "bool", False,
              "KIP-1191: whether share groups may use this topic as their dead-letter topic "
              "(errors.deadletterqueue.topic.name); the broker then writes to it on their "
              "behalf."),
]

TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _TOPIC_DEFS}


def topic_config_value(name: str, topic_configs: Mapping[str, Any], broker: BrokerConfig) -> Any:
    """Effective value of a topic config: the topic's override, else the broker synonym/default."""
    if name in topic_configs:
        return topic_configs[name]
    d = TOPIC_CONFIGS[name]
    if d.synonym is not None:
        return broker.get(d.synonym)
    return d.default
