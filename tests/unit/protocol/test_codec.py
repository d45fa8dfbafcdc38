"""The kio adapter: request/response round trips, headers per version, and fault mapping."""

from __future__ import annotations


import struct
import uuid
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.dispatch import default_dispatcher
from protocol import codec
from protocol.errors import MalformedRequestError, ProtocolError, UnsupportedApiError
from protocol.messages import make


def test_request_round_trip_every_served_version_of_metadata() -> None:
    for v in range(0, 13):
        m = codec.request_module(3, v)
        topics = (make(m.MetadataRequestTopic, name="t", topic_id=None),)
        body = make(m.MetadataRequest, topics=topics, allow_auto_topic_creation=True,
                    include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False)
        frame = codec.encode_request(3, v, 42, "client-1", body)
        decoded = codec.decode_request(frame[4:])
        assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (3, v, 42)
        assert decoded.client_id == "client-1"
        assert decoded.body == body


@pytest.mark.parametrize(("key", "version"), [
    (k, v) for k, lo, hi in default_dispatcher().ranges() for v in range(lo, hi + 1)
])
def test_every_served_version_has_request_and_response_schemas(key: int, version: int) -> None:
    assert codec.request_module(key, version) is not None
    assert codec.response_type(key, version) is not None


def test_response_header_v0_for_api_versions_and_v1_for_flexible() -> None:
    from broker.handlers._common import NO_THROTTLE
    from kio.schema.errors import ErrorCode

    m = codec.response_module(18, 3)
    body = m.ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(), throttle_time=NO_THROTTLE)
    frame = codec.encode_response(18, 3, 7, body)
    # size, correlation id, then directly the body (no tagged-field byte: header v0)
    assert frame[4:8] == (7).to_bytes(4, "big")
    assert frame[8:10] == b"\x00\x00"  # error code
    m3 = codec.response_module(3, 12)
    body3 = make(m3.MetadataResponse, throttle_time=NO_THROTTLE, brokers=(), cluster_id="c",
                 controller_id=1, topics=())
    frame3 = codec.encode_response(3, 12, 9, body3)
    assert frame3[8] == 0  # empty tagged fields of header v1
    assert codec.decode_response(3, 12, frame3[4:]) == (9, body3)


def test_unknown_key_and_version_are_unsupported() -> None:
    with pytest.raises(UnsupportedApiError):
        codec.decode_request(b"\x7f\x00\x00\x00\x00\x00\x00\x01")
    with pytest.raises(UnsupportedApiError):
        codec.decode_request((3).to_bytes(2, "big") + (999).to_bytes(2, "big") + b"\x00" * 8)


def test_garbage_body_is_malformed() -> None:
    # Metadata v12: flexible header then a body that claims a huge compact array.
    frame = (3).to_bytes(2, "big") + (12).to_bytes(2, "big") + (1).to_bytes(4, "big")
    frame += b"\xff\xff" + b"\x00" + b"\xff\xff\xff\xff\x0f"
    with pytest.raises(MalformedRequestError):
        codec.decode_request(frame)


@given(st.sampled_from([(k, v) for k, lo, hi in default_dispatcher().ranges()
                        for v in (lo, hi)]),
       st.binary(max_size=64), st.lists(st.sampled_from(
           [b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\xff\xff", b"\x00"]), max_size=4))
@settings(max_examples=400, deadline=None)
def test_fuzzed_bodies_decode_or_raise_protocol_error(api, noise: bytes, lengths: list[bytes]) -> None:
    """Random bodies behind valid headers never crash the process (kio preallocates arrays)."""
    key, version = api
    m = codec.request_module(key, version)
    flexible = next(getattr(m, n) for n in dir(m) if n.endswith("Request")
                    and getattr(getattr(m, n), "__module__", "") == m.__name__).__flexible__
    header = struct.pack(">hhih", key, version, 1, 1) + b"c" + (b"\x00" if flexible else b"")
    frame = header + b"".join(lengths) + noise
    try:
        codec.decode_request(frame)
    except ProtocolError:
        pass


def _share_fetch_response(version: int, records: list[bytes]) -> object:
    m = codec.response_module(78, version)
    parts = tuple(make(m.PartitionData, partition_index=i, error_code=ErrorCode.none,
                       error_message=None, acknowledge_error_code=ErrorCode.none,
                       acknowledge_error_message=None,
                       current_leader=m.LeaderIdAndEpoch(leader_id=1, leader_epoch=0),
                       records=r, acquired_records=(m.AcquiredRecords(
                           first_offset=0, last_offset=9, delivery_count=1),))
                  for i, r in enumerate(records))
    return make(m.ShareFetchResponse, throttle_time=timedelta(0), error_code=ErrorCode.none,
                error_message=None, acquisition_lock_timeout=timedelta(milliseconds=30_000),
                responses=(m.ShareFetchableTopicResponse(topic_id=uuid.uuid4(),
                                                         partitions=parts),),
                node_endpoints=())


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_response_in_parts_is_the_same_frame_with_records_not_copied(
        version: int) -> None:
    """encode_response_parts: the frame a client reads is byte for byte encode_response's; the
    large record data are parts of their own (the very objects, so never copied)."""
    big = [bytes([i]) * (codec.SPLICE_MIN_BYTES + i) for i in range(2)]
    body = _share_fetch_response(version, [big[0], b"small", big[1]])
    parts = codec.encode_response_parts(78, version, 42, body)
    assert isinstance(parts, tuple)
    assert b"".join(parts) == codec.encode_response(78, version, 42, body)
    assert sum(p is big[0] for p in parts) == 1 and sum(p is big[1] for p in parts) == 1
    assert struct.unpack(">i", parts[0][:4])[0] == sum(map(len, parts)) - 4
    small = _share_fetch_response(version, [b"tiny"])
    assert codec.encode_response_parts(78, version, 7, small) == \
        codec.encode_response(78, version, 7, small)
