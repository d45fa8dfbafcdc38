"""persister/network_codec.py: the share-state requests the network persister builds encode and
decode as Kafka frames at every version it may send, keys land under their topics, and the
per-key results come back in the callers' order (a key the response leaves out gets
UNKNOWN_SERVER_ERROR)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.share.service import StateOp
from persister.api import (
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
from persister.network_codec import VERSIONS, build_request, parse_response
from protocol.codec import decode_request, encode_request, response_module
from protocol.messages import make

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def params(op: StateOp, key: SharePartitionKey) -> Any:
    if op is StateOp.INITIALIZE:
        return InitializeParams(key, 3, 40)
    if op is StateOp.WRITE:
        return WriteParams(key, 3, 2, 40, 7, (PersisterStateBatch(40, 49, 2, 1),))
    if op is StateOp.DELETE:
        return DeleteParams(key)
    return ReadParams(key, 2)


CASES = [(op, v) for op, (lo, hi) in VERSIONS.items() for v in range(lo, hi + 1)]


@pytest.mark.parametrize("op,version", CASES, ids=[f"{op.name}-v{v}" for op, v in CASES])
def test_requests_survive_the_wire_grouped_by_topic(op: StateOp, version: int) -> None:
    keys = [SharePartitionKey("g", T1, 0), SharePartitionKey("g", T2, 5),
            SharePartitionKey("g", T1, 1)]
    body = build_request(op, "g", [params(op, k) for k in keys], version)
    decoded = decode_request(encode_request(op.value, version, 9, "shoal-broker-1", body)[4:])
    assert decoded.body.group_id == "g"
    assert [(t.topic_id, [p.partition for p in t.partitions]) for t in decoded.body.topics] == [
        (T1, [0, 1]), (T2, [5])]
    first = decoded.body.topics[0].partitions[0]
    if op is StateOp.WRITE:
        assert (first.state_epoch, first.leader_epoch, first.start_offset) == (3, 2, 40)
        assert [(b.first_offset, b.last_offset) for b in first.state_batches] == [(40, 49)]
        assert getattr(first, "delivery_complete_count", 7) == 7


def _write_response(rows: list[tuple[uuid.UUID, int, ErrorCode]]) -> Any:
    m = response_module(StateOp.WRITE.value, 1)
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for topic, partition, code in rows:
        by_topic.setdefault(topic, []).append(make(m.PartitionResult, partition=partition,
                                                   error_code=code, error_message=None))
    return make(m.WriteShareGroupStateResponse, results=tuple(
        make(m.WriteStateResult, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()))


def test_write_results_come_back_per_key_in_the_callers_order() -> None:
    keys = [SharePartitionKey("g", T1, 0), SharePartitionKey("g", T2, 5),
            SharePartitionKey("g", T1, 1)]
    response = _write_response([(T2, 5, ErrorCode.fenced_state_epoch), (T1, 1, ErrorCode.none)])
    out = parse_response(StateOp.WRITE, response, [params(StateOp.WRITE, k) for k in keys])
    assert [code for code, _m, _r in out] == [
        ErrorCode.unknown_server_error, ErrorCode.fenced_state_epoch, ErrorCode.none]
    assert isinstance(out[0][2], WriteResult) and "g:" in (out[0][2].error_message or "")
    assert out[2][2] == WriteResult(ErrorCode.none, None)


def test_read_and_summary_results_carry_the_state() -> None:
    key = SharePartitionKey("g", T1, 0)
    m = response_module(StateOp.READ.value, 0)
    read = make(m.ReadShareGroupStateResponse, results=(make(m.ReadStateResult, topic_id=T1,
        partitions=(make(m.PartitionResult, partition=0, error_code=0, error_message=None,
                         state_epoch=4, start_offset=12, state_batches=(make(
                             m.StateBatch, first_offset=12, last_offset=15, delivery_state=0,
                             delivery_count=2),)),)),))
    ((code, _m, result),) = parse_response(StateOp.READ, read, [ReadParams(key, 0)])
    assert code == ErrorCode.none
    assert result == ReadResult(ErrorCode.none, 4, 12, (PersisterStateBatch(12, 15, 0, 2),))
    s = response_module(StateOp.READ_SUMMARY.value, 1)
    summary = make(s.ReadShareGroupStateSummaryResponse, results=(make(
        s.ReadStateSummaryResult, topic_id=T1, partitions=(make(
            s.PartitionResult, partition=0, error_code=0, error_message=None, state_epoch=4,
            leader_epoch=2, start_offset=12, delivery_complete_count=3),)),))
    ((_c, _m, result),) = parse_response(StateOp.READ_SUMMARY, summary, [ReadParams(key, 0)])
    assert result == SummaryResult(ErrorCode.none, 4, 2, 12, 3)
