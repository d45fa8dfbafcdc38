"""The direct WriteShareGroupState writers and the request header writer write what kio's writer
writes, and a request framed with them decodes back to what was sent."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from protocol import codec, share_state_codec
from protocol.codec import request_module, response_module

_I8 = st.integers(-(2**7), 2**7 - 1)
_I16 = st.integers(-(2**15), 2**15 - 1)
_I32 = st.integers(-(2**31), 2**31 - 1)
_I64 = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.text(max_size=30)
_CODES = st.sampled_from([ErrorCode.none, ErrorCode.fenced_state_epoch,
                          ErrorCode.not_coordinator, ErrorCode.unknown_topic_or_partition])


def _kio_bytes(cls: type, value: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, value)
    return buf.getvalue()


def _direct_bytes(writer: Any, value: Any) -> bytes:
    buf = io.BytesIO()
    writer(buf, value)
    return buf.getvalue()


def _requests(version: int) -> st.SearchStrategy[Any]:
    m = request_module(85, version)
    batch = st.builds(lambda f, l, s, c: m.StateBatch(first_offset=f, last_offset=l,
                                                       delivery_state=s, delivery_count=c),
                      _I64, _I64, _I8, _I16)
    extra = {"delivery_complete_count": _I32} if version >= 1 else {}
    part = st.builds(lambda **kw: m.PartitionData(**kw), partition=_I32, state_epoch=_I32,
                     leader_epoch=_I32, start_offset=_I64,
                     state_batches=st.lists(batch, max_size=4).map(tuple), **extra)
    topic = st.builds(lambda t, ps: m.WriteStateData(topic_id=t, partitions=ps),
                      st.none() | st.uuids(), st.lists(part, max_size=3).map(tuple))
    return st.builds(lambda g, ts: m.WriteShareGroupStateRequest(group_id=g, topics=ts),
                     _TEXT, st.lists(topic, max_size=3).map(tuple))


def _responses(version: int) -> st.SearchStrategy[Any]:
    m = response_module(85, version)
    part = st.builds(lambda p, c, t: m.PartitionResult(partition=p, error_code=c,
                                                       error_message=t),
                     _I32, _CODES, st.none() | _TEXT)
    topic = st.builds(lambda t, ps: m.WriteStateResult(topic_id=t, partitions=ps),
                      st.none() | st.uuids(), st.lists(part, max_size=4).map(tuple))
    return st.builds(lambda rs: m.WriteShareGroupStateResponse(results=rs),
                     st.lists(topic, max_size=3).map(tuple))


@pytest.mark.parametrize("version", [0, 1])
@given(data=st.data())
def test_write_state_request_bytes_are_kios(version: int, data: st.DataObject) -> None:
    body = data.draw(_requests(version))
    writer = share_state_codec.REQUEST_WRITERS[(85, version)]
    assert _direct_bytes(writer, body) == _kio_bytes(type(body), body)


@pytest.mark.parametrize("version", [0, 1])
@given(data=st.data())
def test_write_state_response_bytes_are_kios(version: int, data: st.DataObject) -> None:
    body = data.draw(_responses(version))
    writer = share_state_codec.RESPONSE_WRITERS[(85, version)]
    assert _direct_bytes(writer, body) == _kio_bytes(type(body), body)


@given(api_key=st.integers(0, 90), api_version=st.integers(0, 20), correlation_id=_I32,
       client_id=st.none() | st.text(max_size=40), flexible=st.booleans())
def test_request_header_bytes_are_kios(api_key: int, api_version: int, correlation_id: int,
                                       client_id: str | None, flexible: bool) -> None:
    header_type = RequestHeaderV2 if flexible else RequestHeaderV1
    kio = _kio_bytes(header_type, header_type(
        request_api_key=i16(api_key), request_api_version=i16(api_version),
        correlation_id=i32(correlation_id), client_id=client_id))
    assert codec.request_header(api_key, api_version, correlation_id, client_id,
                                flexible) == kio


@pytest.mark.parametrize("version", [0, 1])
@given(data=st.data())
def test_an_encoded_write_state_request_decodes_to_what_was_sent(
        version: int, data: st.DataObject) -> None:
    body = data.draw(_requests(version))
    frame = codec.encode_request(85, version, 7, "broker-2", body)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    decoded = codec.decode_request(frame[4:])
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id,
            decoded.client_id) == (85, version, 7, "broker-2")
    assert decoded.body == body


def test_a_value_out_of_range_is_refused() -> None:
    m = request_module(85, 1)
    body = m.WriteShareGroupStateRequest(group_id="g", topics=(m.WriteStateData(
        topic_id=None, partitions=(m.PartitionData(
            partition=2**31, state_epoch=0, leader_epoch=0, start_offset=0,
            state_batches=()),)),))
    with pytest.raises(struct.error):
        _direct_bytes(share_state_codec.REQUEST_WRITERS[(85, 1)], body)
