"""The messages of ConsumerGroupHeartbeat as the consumer-group rules see them (KIP-848;
``heartbeat.py`` has the rules): the request and response, the per-group settings read on every
op, the special member epochs and the topic filter a regex subscription is narrowed by.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.group.consumer.assignor import DEFAULT_ASSIGNORS

LEAVE_GROUP_MEMBER_EPOCH = -1
JOIN_GROUP_MEMBER_EPOCH = 0
MAX_ID_LENGTH = 255  # member and instance ids; Kafka has no explicit bound, we keep them small


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings:
    """Per-group settings, read on every op (Kafka's broker defaults; group configs override
    the session timeout and heartbeat interval)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    # Shoal's own: answered instead while the group settles (``heartbeat_interval``); 0 = never.
    settling_heartbeat_interval_ms: int = 0
    max_size: int = 0x7FFFFFFF
    assignors: tuple[str, ...] = DEFAULT_ASSIGNORS
    # group.consumer.migration.policy (``migration.py``) and the classic group size a
    # downgrade may produce (group.classic.max.size).
    migration_policy: str = "bidirectional"
    classic_max_size: int = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatRequest:
    """ConsumerGroupHeartbeat v0-1 fields (None / -1 = unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[uuid.UUID, frozenset[int]] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResponse:
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[uuid.UUID, list[int]] | None = None  # None: not sent


def error_response(code: ErrorCode, message: str) -> ConsumerHeartbeatResponse:
    return ConsumerHeartbeatResponse(error_code=code, error_message=message)


TopicFilter = Callable[[frozenset[str]], frozenset[str]]
"""Narrows regex matches to the topics the heartbeating principal may DESCRIBE."""
