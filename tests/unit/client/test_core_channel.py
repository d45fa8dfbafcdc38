"""The client core's Channel (``client/core/channel.py``) and discovery helpers, driven with
frames the broker's own codec builds: what every shell relies on (ids, matching, start-up)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.security.sasl import Authenticator, SaslServerConfig
from client.core import (
    Channel,
    ResponseFrameError,
    Stage,
    UnexpectedResponseError,
    find_coordinator_request,
    metadata_request,
    parse_bootstrap,
    parse_coordinator,
)
from client.errors import KafkaError, UnsupportedVersionError
from client.security import SecuritySettings
from protocol.codec import decode_request, encode_response, response_module
from protocol.messages import make

METADATA, API_VERSIONS, FIND_COORDINATOR = 3, 18, 10


def _api_versions(ranges: dict[int, tuple[int, int]],
                  error: ErrorCode = ErrorCode.none) -> Any:
    m = response_module(API_VERSIONS, 3)
    keys = tuple(make(m.ApiVersion, api_key=k, min_version=lo, max_version=hi)
                 for k, (lo, hi) in ranges.items())
    return make(m.ApiVersionsResponse, error_code=error, api_keys=keys, throttle_time=timedelta(0),
                supported_features=(), finalized_features_epoch=-1, finalized_features=(),
                zk_migration_ready=False)


def _answer(out_data: bytes, body: Any) -> bytes:
    """The broker's frame answering an encoded request with ``body``."""
    req = decode_request(out_data[4:])
    return encode_response(req.api_key, req.api_version, req.correlation_id, body)


def _metadata_body(version: int = 12) -> Any:
    m = response_module(METADATA, version)
    return make(m.MetadataResponse, throttle_time=timedelta(0), brokers=(), cluster_id="c",
                controller_id=1, topics=())


def _ready(ranges: dict[int, tuple[int, int]] | None = None) -> Channel:
    ch = Channel("t")
    out = ch.handshake()
    assert out is not None and out.api_key == API_VERSIONS
    (reply,) = ch.feed(_answer(out.data, _api_versions(ranges or {METADATA: (0, 12)})))
    ch.handshake_reply(reply.body)
    assert ch.ready and ch.handshake() is None
    return ch


def test_requests_carry_increasing_correlation_ids_and_decode_as_sent() -> None:
    ch = _ready()
    outs = [ch.request(METADATA, 12, _request_body()) for _ in range(3)]
    assert [o.correlation_id for o in outs] == [2, 3, 4]  # 1 was ApiVersions
    decoded = decode_request(outs[1].data[4:])
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) \
        == (METADATA, 12, 3, "t")
    assert ch.outstanding() == [2, 3, 4]


def _request_body() -> Any:
    return metadata_request(12, ["a"])


def test_replies_split_anywhere_match_their_requests_in_order() -> None:
    ch = _ready()
    a = ch.request(METADATA, 12, _request_body())
    b = ch.request(METADATA, 12, _request_body())
    stream = _answer(a.data, _metadata_body()) + _answer(b.data, _metadata_body())
    got = []
    for i in range(0, len(stream), 7):  # any split of the byte stream
        got += ch.feed(stream[i:i + 7])
    assert [r.correlation_id for r in got] == [a.correlation_id, b.correlation_id]
    assert all(r.error is None and r.body.cluster_id == "c" for r in got)
    assert ch.outstanding() == []


def test_a_forgotten_request_drops_its_reply_and_later_ones_still_match() -> None:
    ch = _ready()
    a = ch.request(METADATA, 12, _request_body())
    b = ch.request(METADATA, 12, _request_body())
    ch.forget(a.correlation_id)
    assert ch.outstanding() == [b.correlation_id]
    got = ch.feed(_answer(a.data, _metadata_body()) + _answer(b.data, _metadata_body()))
    assert [r.correlation_id for r in got] == [b.correlation_id]


def test_a_reply_out_of_order_is_an_unexpected_response() -> None:
    ch = _ready()
    a = ch.request(METADATA, 12, _request_body())
    b = ch.request(METADATA, 12, _request_body())
    with pytest.raises(UnexpectedResponseError, match=f"expected {a.correlation_id}"):
        ch.feed(_answer(b.data, _metadata_body()))


def test_oversized_and_headless_frames_are_response_frame_errors() -> None:
    ch = Channel("t", max_frame=1024)
    with pytest.raises(ResponseFrameError) as ei:
        ch.receive_bytes((5000).to_bytes(4, "big"))
    assert ei.value.size == 5000
    ch = _ready()
    ch.request(METADATA, 12, _request_body())
    with pytest.raises(ResponseFrameError) as ei:
        ch.feed(b"\x00\x00\x00\x00")
    assert ei.value.size == 0


def test_a_reply_that_does_not_decode_is_returned_with_its_error() -> None:
    ch = _ready()
    a = ch.request(METADATA, 12, _request_body())
    (reply,) = ch.feed(len(b"garbage").to_bytes(4, "big") + a.correlation_id.to_bytes(4, "big")
                       + b"gar")
    assert reply.correlation_id == a.correlation_id and reply.error is not None
    assert ch.outstanding() == []


def test_blocking_reads_are_told_exactly_how_many_bytes_finish_a_frame() -> None:
    ch = _ready()
    a = ch.request(METADATA, 12, _request_body())
    frame = _answer(a.data, _metadata_body())
    assert ch.bytes_wanted() == 4
    ch.receive_bytes(frame[:4])
    assert ch.bytes_wanted() == len(frame) - 4
    ch.receive_bytes(frame[4:])
    reply = ch.next_reply()
    assert reply is not None and reply.body.cluster_id == "c"


def test_versions_are_negotiated_from_api_versions() -> None:
    ch = _ready({METADATA: (0, 11), FIND_COORDINATOR: (0, 3)})
    assert ch.version(METADATA, 10, 12) == 11
    assert ch.supports(FIND_COORDINATOR, 1, 6) and not ch.supports(FIND_COORDINATOR, 4, 6)
    with pytest.raises(UnsupportedVersionError, match="this client needs 4-6"):
        ch.version(FIND_COORDINATOR, 4, 6)


def test_api_versions_error_fails_the_start_up() -> None:
    ch = Channel("t")
    assert ch.handshake() is not None
    with pytest.raises(KafkaError) as ei:
        ch.handshake_reply(_api_versions({}, ErrorCode.unsupported_version))
    assert ei.value.code == ErrorCode.unsupported_version and ch.stage is Stage.VERSIONS


def test_sasl_plain_start_up_runs_after_api_versions() -> None:
    server = Authenticator(SaslServerConfig(("PLAIN",), {"alice": "pw"}), lambda u, m: None)
    ch = Channel("t", SecuritySettings(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                       sasl_username="alice", sasl_password="pw"))
    sent = []
    while (out := ch.handshake()) is not None:
        sent.append(out.api_key)
        assert ch.handshake() is None  # one start-up request at a time
        req = decode_request(out.data[4:]).body
        m = response_module(out.api_key, out.api_version)
        if out.api_key == API_VERSIONS:
            body = _api_versions({17: (0, 1), 36: (0, 2)})
        elif out.api_key == 17:
            body = m.SaslHandshakeResponse(error_code=server.handshake(req.mechanism),
                                           mechanisms=server.mechanisms)
        else:
            step = server.step(req.auth_bytes)
            body = make(m.SaslAuthenticateResponse, error_code=ErrorCode.none,
                        error_message=None, auth_bytes=step.response or b"",
                        session_lifetime=timedelta(0))
        (reply,) = ch.feed(_answer(out.data, body))  # the reply matched as the shells do
        ch.handshake_reply(reply.body)
    assert sent == [18, 17, 36] and ch.ready and server.principal == "User:alice"


def test_raw_mode_sends_nothing_first_and_decodes_as_told() -> None:
    ch = Channel("t", handshake=False)
    assert ch.ready and ch.handshake() is None
    a = ch.request(METADATA, 12, _request_body())
    reply = ch.take(_answer(a.data, _metadata_body())[4:], METADATA, 12)
    assert reply is not None and reply.correlation_id == 1 and reply.body.cluster_id == "c"


def test_bootstrap_addresses_and_coordinator_answers() -> None:
    assert parse_bootstrap("h1:9092, [::1]:9093") == [("h1", 9092), ("::1", 9093)]
    with pytest.raises(ValueError, match="use HOST:PORT"):
        parse_bootstrap("h1")
    with pytest.raises(ValueError):
        parse_bootstrap(" , ")
    assert find_coordinator_request(4, "g").coordinator_keys == ("g",)
    m = response_module(FIND_COORDINATOR, 4)
    ok = make(m.FindCoordinatorResponse, throttle_time=timedelta(0), coordinators=(make(
        m.Coordinator, key="g", node_id=3, host="h", port=9, error_code=ErrorCode.none,
        error_message=None),))
    assert parse_coordinator(4, ok).address == "h:9"
    bad = make(m.FindCoordinatorResponse, throttle_time=timedelta(0), coordinators=(make(
        m.Coordinator, key="g", node_id=-1, host="", port=-1,
        error_code=ErrorCode.coordinator_not_available, error_message="loading"),))
    with pytest.raises(KafkaError, match="COORDINATOR_NOT_AVAILABLE: loading"):
        parse_coordinator(4, bad)
