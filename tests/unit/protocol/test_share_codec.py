"""The direct ShareFetch / ShareAcknowledge response writers write what kio's writer writes, and
the framed responses (with large record data kept as a part of its own) decode as they were."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from protocol import codec, share_codec
from protocol.errors import LocalProtocolError
from protocol.messages import make

_CODES = st.sampled_from([ErrorCode.none, ErrorCode.invalid_record_state,
                          ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_id])
_TEXT = st.none() | st.text(max_size=40)
_I32 = st.integers(-(2**31), 2**31 - 1)


def _leader(m: Any) -> Any:
    return st.builds(lambda i, e: m.LeaderIdAndEpoch(leader_id=i, leader_epoch=e), _I32, _I32)


def _endpoints(m: Any) -> Any:
    return st.lists(st.builds(
        lambda n, h, p, r: m.NodeEndpoint(node_id=n, host=h, port=p, rack=r),
        _I32, st.text(max_size=20), st.integers(0, 65535), _TEXT), max_size=3).map(tuple)


def _top(m: Any, cls: Any, responses: Any) -> Any:
    return st.builds(
        lambda t, code, msg, lock, rs, eps: make(
            cls, throttle_time=timedelta(milliseconds=t), error_code=code, error_message=msg,
            acquisition_lock_timeout=timedelta(milliseconds=lock), responses=rs,
            node_endpoints=eps),
        st.integers(0, 10_000), _CODES, _TEXT, st.integers(0, 2**31 - 1),
        st.lists(responses, max_size=3).map(tuple), _endpoints(m))


def _fetch_responses(version: int) -> Any:
    m = codec.response_module(78, version)
    acquired = st.builds(lambda f, n, d: m.AcquiredRecords(first_offset=f, last_offset=f + n,
                                                           delivery_count=d),
                         st.integers(0, 2**62), st.integers(0, 1000), st.integers(-1, 2**15 - 1))
    part = st.builds(
        lambda i, code, msg, ack, ack_msg, leader, recs, acq: make(
            m.PartitionData, partition_index=i, error_code=code, error_message=msg,
            acknowledge_error_code=ack.value, acknowledge_error_message=ack_msg,
            current_leader=leader, records=recs, acquired_records=acq),
        _I32, _CODES, _TEXT, _CODES, _TEXT, _leader(m),
        st.binary(max_size=300) | st.just(b"r" * (codec.SPLICE_MIN_BYTES + 5)),
        st.lists(acquired, max_size=4).map(tuple))
    topic = st.builds(lambda t, ps: m.ShareFetchableTopicResponse(topic_id=t, partitions=ps),
                      st.none() | st.uuids(), st.lists(part, max_size=3).map(tuple))
    return _top(m, m.ShareFetchResponse, topic)


def _ack_responses(version: int) -> Any:
    m = codec.response_module(79, version)
    part = st.builds(
        lambda i, code, msg, leader: m.PartitionData(
            partition_index=i, error_code=code, error_message=msg, current_leader=leader),
        _I32, _CODES, _TEXT, _leader(m))
    topic = st.builds(lambda t, ps: m.ShareAcknowledgeTopicResponse(topic_id=t, partitions=ps),
                      st.none() | st.uuids(), st.lists(part, max_size=3).map(tuple))
    return _top(m, m.ShareAcknowledgeResponse, topic)


def _kio_bytes(body: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(body))(buf, body)
    return buf.getvalue()


def _direct_bytes(api_key: int, version: int, body: Any) -> bytes:
    buf = io.BytesIO()
    share_codec.WRITERS[(api_key, version)](buf, body)
    return buf.getvalue()


@pytest.mark.parametrize("version", [1, 2])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_share_fetch_response_bytes_are_kios(version: int, data: st.DataObject) -> None:
    body = data.draw(_fetch_responses(version))
    assert _direct_bytes(78, version, body) == _kio_bytes(body)
    parts = codec.encode_response_parts(78, version, 9, body)
    frame = parts if isinstance(parts, bytes) else b"".join(parts)
    assert codec.decode_response(78, version, frame[4:]) == (9, body)


@pytest.mark.parametrize("version", [1, 2])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_share_acknowledge_response_bytes_are_kios(version: int, data: st.DataObject) -> None:
    body = data.draw(_ack_responses(version))
    assert _direct_bytes(79, version, body) == _kio_bytes(body)
    frame = codec.encode_response(79, version, 3, body)
    assert codec.decode_response(79, version, frame[4:]) == (3, body)


def test_large_records_stay_a_part_of_their_own() -> None:
    m = codec.response_module(78, 2)
    records = b"b" * (codec.SPLICE_MIN_BYTES * 2)
    body = make(m.ShareFetchResponse, throttle_time=timedelta(0), error_code=ErrorCode.none,
                error_message=None, acquisition_lock_timeout=timedelta(seconds=30),
                responses=(m.ShareFetchableTopicResponse(topic_id=uuid.uuid4(), partitions=(
                    make(m.PartitionData, partition_index=0, error_code=ErrorCode.none,
                         error_message=None, acknowledge_error_code=0,
                         acknowledge_error_message=None,
                         current_leader=m.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                         records=records, acquired_records=()),)),),
                node_endpoints=())
    parts = codec.encode_response_parts(78, 2, 1, body)
    assert isinstance(parts, tuple) and any(p is records for p in parts)


def test_a_value_out_of_range_is_a_local_protocol_error() -> None:
    m = codec.response_module(79, 2)
    body = make(m.ShareAcknowledgeResponse, throttle_time=timedelta(0),
                error_code=ErrorCode.none, error_message=None,
                acquisition_lock_timeout=timedelta(seconds=30),
                responses=(m.ShareAcknowledgeTopicResponse(topic_id=uuid.uuid4(), partitions=(
                    m.PartitionData(partition_index=2**31, error_code=ErrorCode.none,
                                    error_message=None, current_leader=m.LeaderIdAndEpoch(
                                        leader_id=-1, leader_epoch=-1)),)),),
                node_endpoints=())
    with pytest.raises(LocalProtocolError):
        codec.encode_response(79, 2, 1, body)
