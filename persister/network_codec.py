"""The five share-state RPCs as the network persister sends them: requests out, per-key results in.

Pure (no I/O): ``build_request(op, group_id, params, version)`` makes one Initialize/Read/Write/
Delete/ReadSummary ShareGroupState request (API keys 83-87) for many keys of one group (the RPC
schemas of KIP-932 carry one group id per request), grouping the keys under their topic ids in
the order first seen; ``parse_response`` reads the answer back into one ``(error, message,
result)`` per key, in the order of ``params``, where ``result`` is the ``persister.api`` result
the caller gets (``WriteResult`` for initialize/write/delete, ``ReadResult``, ``SummaryResult``).

Invariants:
- the keys of one request are unique (the batcher sends at most one call per key at a time), so
  a result is matched to its key by (topic id, partition);
- a key the response does not answer gets UNKNOWN_SERVER_ERROR, never an exception.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.share.service import StateOp, error_reply
from persister.api import (
    UNINITIALIZED_START_OFFSET,
    DeleteParams,
    InitializeParams,
    PersisterStateBatch,
    ReadParams,
    ReadResult,
    SharePartitionKey,
    SummaryResult,
    WriteParams,
    WriteResult,
)
from protocol.codec import request_module
from protocol.messages import make

__all__ = ["VERSIONS", "Outcome", "build_request", "parse_response"]

# The versions this client can send, per RPC (Kafka 4.1+: Write and ReadSummary v1 carry
# DeliveryCompleteCount, KIP-1226).
VERSIONS: dict[StateOp, tuple[int, int]] = {
    StateOp.INITIALIZE: (0, 0),
    StateOp.READ: (0, 0),
    StateOp.WRITE: (0, 1),
    StateOp.DELETE: (0, 0),
    StateOp.READ_SUMMARY: (0, 1),
}

# (error code, error message, the caller's result)
Outcome = tuple[ErrorCode, str | None, Any]

_NAMES = {  # request class, per-topic class
    StateOp.INITIALIZE: ("InitializeShareGroupStateRequest", "InitializeStateData"),
    StateOp.READ: ("ReadShareGroupStateRequest", "ReadStateData"),
    StateOp.WRITE: ("WriteShareGroupStateRequest", "WriteStateData"),
    StateOp.DELETE: ("DeleteShareGroupStateRequest", "DeleteStateData"),
    StateOp.READ_SUMMARY: ("ReadShareGroupStateSummaryRequest", "ReadStateSummaryData"),
}


def _partition(op: StateOp, m: Any, p: Any) -> Any:
    key: SharePartitionKey = p.key
    if op is StateOp.INITIALIZE:
        assert isinstance(p, InitializeParams)
        return make(m.PartitionData, partition=key.partition, state_epoch=p.state_epoch,
                    start_offset=p.start_offset)
    if op is StateOp.WRITE:
        assert isinstance(p, WriteParams)
        return make(m.PartitionData, partition=key.partition, state_epoch=p.state_epoch,
                    leader_epoch=p.leader_epoch, start_offset=p.start_offset,
                    delivery_complete_count=p.delivery_complete_count,
                    state_batches=tuple(
                        make(m.StateBatch, first_offset=b.first_offset, last_offset=b.last_offset,
                             delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                        for b in p.state_batches))
    if op is StateOp.DELETE:
        assert isinstance(p, DeleteParams)
        return make(m.PartitionData, partition=key.partition)
    assert isinstance(p, ReadParams)
    return make(m.PartitionData, partition=key.partition, leader_epoch=p.leader_epoch)


def build_request(op: StateOp, group_id: str, params: Sequence[Any], version: int) -> Any:
    """One request of ``op`` at ``version`` for ``params`` (all of group ``group_id``)."""
    m = request_module(op.value, version)
    request_name, topic_name = _NAMES[op]
    topics: dict[uuid.UUID, list[Any]] = {}
    for p in params:
        topics.setdefault(p.key.topic_id, []).append(_partition(op, m, p))
    return make(getattr(m, request_name), group_id=group_id, topics=tuple(
        make(getattr(m, topic_name), topic_id=topic_id, partitions=tuple(parts))
        for topic_id, parts in topics.items()))


def _result(op: StateOp, r: Any) -> Outcome:
    code = ErrorCode(r.error_code)
    message = r.error_message or None
    if op is StateOp.READ:
        return code, message, ReadResult(
            code, state_epoch=r.state_epoch, start_offset=r.start_offset,
            state_batches=tuple(PersisterStateBatch(b.first_offset, b.last_offset,
                                                    b.delivery_state, b.delivery_count)
                                for b in r.state_batches),
            error_message=message)
    if op is StateOp.READ_SUMMARY:
        return code, message, SummaryResult(
            code, state_epoch=r.state_epoch, leader_epoch=getattr(r, "leader_epoch", 0),
            start_offset=getattr(r, "start_offset", UNINITIALIZED_START_OFFSET),
            delivery_complete_count=getattr(r, "delivery_complete_count", -1),
            error_message=message)
    return code, message, WriteResult(code, message)


def parse_response(op: StateOp, response: Any, params: Sequence[Any]) -> list[Outcome]:
    """One outcome per entry of ``params``, in order (see the module doc)."""
    found: dict[tuple[uuid.UUID, int], Any] = {}
    for topic in response.results:
        for r in topic.partitions:
            found[(topic.topic_id, int(r.partition))] = r
    out: list[Outcome] = []
    for p in params:
        r = found.get((p.key.topic_id, p.key.partition))
        if r is None:
            text = (f"the share coordinator's {op.name} response has no result for "
                    f"{p.key.coordinator_key()}")
            out.append((ErrorCode.unknown_server_error, text,
                        error_reply(op, ErrorCode.unknown_server_error, text)))
        else:
            out.append(_result(op, r))
    return out
