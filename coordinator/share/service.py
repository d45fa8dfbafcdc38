"""Routing share-state RPCs to ``__share_group_state`` partitions, and back.

Concept (reference section 6; Kafka ``ShareCoordinatorService``): the five share-state RPCs
(Initialize/Read/Write/Delete/ReadSummary ShareGroupState) each carry many
(group, topic id, partition) entries. The service splits such a request into one operation per
share-partition key, routes each to the shard that owns the key's coordinator partition, and puts
the per-key replies back in request order. This module holds the pure part of that: placement,
split and gather. The async runtime that runs the ops and appends their records comes later.

Placement (Kafka ``ShareCoordinatorService.partitionFor`` with ``SharePartitionKey.asCoordinatorKey``):
``partition = Utils.abs(javaStringHashCode("groupId:topicId:partition")) % numPartitions`` where
topicId is Kafka's Uuid string (URL-safe base64 of the 16 bytes, no padding, 22 chars) and
``Utils.abs`` maps Integer.MIN_VALUE to 0. Same function, same answer as any Kafka-aware tool that
sends FindCoordinator(key type SHARE).

Invariants:
- ``gather_replies(split_request(items))`` lines replies up with ``items`` one to one, whatever the
  order in which partitions answer;
- no I/O, no clock, no exceptions for expected outcomes (``error_reply`` builds per-key errors).
"""

from __future__ import annotations

import base64
import functools
import enum
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

from persister.api import ReadResult, SharePartitionKey, SummaryResult, WriteResult

# share.coordinator.state.topic.num.partitions default.
DEFAULT_NUM_PARTITIONS = 50

P = TypeVar("P")
R = TypeVar("R")


class StateOp(enum.Enum):
    """The five share-state RPCs (API keys 83-87)."""

    INITIALIZE = 83
    READ = 84
    WRITE = 85
    DELETE = 86
    READ_SUMMARY = 87


# --------------------------------------------------------------------------------------------
# Placement


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: ``h = 31 * h + c`` over UTF-16 code units, wrapped to int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_uuid_str(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """The FindCoordinator(SHARE) key ``groupId:topicId:partition`` with Kafka's Uuid string."""
    return f"{group_id}:{kafka_uuid_str(topic_id)}:{partition}"


def partition_for(key: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """The ``__share_group_state`` partition owning a coordinator key string.

    Raises:
        ValueError: ``num_partitions`` is not positive.
    """
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    h = java_string_hash(key)
    # Kafka Utils.abs: abs, except Integer.MIN_VALUE (whose abs overflows) maps to 0.
    return (0 if h == -(2**31) else abs(h)) % num_partitions


def partition_for_key(key: SharePartitionKey, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """``partition_for`` of a ``SharePartitionKey``, hashing ``groupId:topicId:`` once per
    (group, topic) (a state RPC of tens of thousands of partitions of one topic, issue 25).

    Raises:
        ValueError: ``num_partitions`` is not positive.
    """
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    h = _prefix_hash(key.group_id, key.topic_id)
    for ch in str(key.partition):  # ASCII digits: one UTF-16 code unit each
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(2**31) else abs(signed)) % num_partitions


@functools.lru_cache(maxsize=4096)
def _prefix_hash(group_id: str, topic_id: uuid.UUID) -> int:
    """``java_string_hash("groupId:topicId:")`` as an unsigned 32-bit value."""
    return java_string_hash(f"{group_id}:{kafka_uuid_str(topic_id)}:") & 0xFFFFFFFF


# --------------------------------------------------------------------------------------------
# Split and gather


@dataclass(frozen=True, slots=True)
class KeyedOp(Generic[P]):
    """One per-key operation of a split request: its position, key, owner partition and params."""

    index: int
    key: SharePartitionKey
    coordinator_partition: int
    params: P


def split_request(
    items: Sequence[tuple[str, uuid.UUID, int, P]],
    num_partitions: int = DEFAULT_NUM_PARTITIONS,
    start: int = 0,
    into: dict[int, list[KeyedOp[P]]] | None = None,
) -> dict[int, list[KeyedOp[P]]]:
    """Group a state RPC's (group, topic id, partition, params) entries by coordinator partition.

    Within a partition the ops keep request order (the shard runs them serially in that order).
    ``start`` is the request index of ``items[0]`` and ``into`` a split to extend, so a long
    request can be split a slice at a time.
    """
    by_partition: dict[int, list[KeyedOp[P]]] = {} if into is None else into
    for index, (group_id, topic_id, partition, params) in enumerate(items, start):
        key = SharePartitionKey(group_id, topic_id, partition)
        owner = partition_for_key(key, num_partitions)
        by_partition.setdefault(owner, []).append(KeyedOp(index, key, owner, params))
    return by_partition


def gather_replies(count: int, replies: Iterable[tuple[int, R]]) -> list[R]:
    """Put ``(index, reply)`` pairs back into request order.

    Raises:
        ValueError: an index is out of range, repeated, or missing (a bug in the caller).
    """
    by_index: dict[int, R] = {}
    for index, reply in replies:
        if not 0 <= index < count or index in by_index:
            raise ValueError(f"reply index {index} out of range or repeated")
        by_index[index] = reply
    if len(by_index) != count:
        raise ValueError(f"missing replies for indexes {sorted(set(range(count)) - set(by_index))}")
    return [by_index[i] for i in range(count)]


def error_reply(
    op: StateOp, code: ErrorCode, message: str | None = None
) -> WriteResult | ReadResult | SummaryResult:
    """The per-key error reply of ``op`` (e.g. NOT_COORDINATOR when the partition is not loaded)."""
    text = message if message is not None else code.name
    if op is StateOp.READ:
        return ReadResult(code, error_message=text)
    if op is StateOp.READ_SUMMARY:
        return SummaryResult(code, error_message=text)
    return WriteResult(code, text)


def error_for_exception(exc: BaseException) -> ErrorCode:
    """The one mapping of an unexpected exception from a shard op to a per-key error code.

    Expected outcomes never raise (they are error codes in the reply), so anything that reaches
    here is a bug or an infrastructure failure; Kafka answers those with UNKNOWN_SERVER_ERROR
    unless the runtime says the coordinator moved (``CoordinatorOperationExceptionHelper``).
    """
    del exc  # the runtime's NOT_COORDINATOR/LOAD_IN_PROGRESS errors will be mapped here
    return ErrorCode.unknown_server_error
