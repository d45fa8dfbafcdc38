"""The request pre-check (protocol/guard.py): exact on valid requests, linear, and strict on claims."""

from __future__ import annotations

import gc
import struct
import time
import uuid
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from broker.dispatch import default_dispatcher
from protocol import codec, guard
from protocol.errors import MalformedRequestError
from protocol.messages import make

SERVED = [(k, v) for k, lo, hi in default_dispatcher().ranges() for v in range(lo, hi + 1)]

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


def _request_type(key: int, version: int) -> type:
    return codec._request_codec(key, version).request_type


def _body_pos(frame: bytes) -> int:
    pre = codec.peek(frame)
    _header, pos = codec._request_codec(pre.api_key, pre.api_version).header_reader(frame, 0)
    return int(pos)


def _fetch_v17(partitions: int, tagged: bool = True) -> bytes:
    m = codec.request_module(1, 17)
    parts = tuple(make(m.FetchPartition, partition=i, current_leader_epoch=-1, fetch_offset=0,
                       last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20,
                       replica_directory_id=uuid.uuid4() if tagged else None)
                  for i in range(partitions))
    body = make(m.FetchRequest, replica_id=-1, max_wait=timedelta(0), min_bytes=1,
                max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                topics=(make(m.FetchTopic, topic_id=uuid.uuid4(), partitions=parts),),
                forgotten_topics_data=(), rack_id="")
    return codec.encode_request(1, 17, 1, "c", body)[4:]


def _share_fetch(topics: list[int]) -> bytes:
    m = codec.request_module(78, 1)
    body = make(m.ShareFetchRequest, group_id="g", member_id="m", share_session_epoch=0,
                max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20, max_records=10,
                batch_size=10, forgotten_topics_data=(),
                topics=tuple(make(m.FetchTopic, topic_id=uuid.uuid4(), partitions=tuple(
                    make(m.FetchPartition, partition_index=i, acknowledgement_batches=())
                    for i in range(n))) for n in topics))
    return codec.encode_request(78, 1, 1, "c", body)[4:]


@pytest.mark.parametrize(("key", "version"), SERVED)
def test_every_served_request_schema_compiles(key: int, version: int) -> None:
    guard._compiled(_request_type(key, version), None)


@given(st.sampled_from(SERVED), st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_valid_requests_of_every_served_version_pass(api: tuple[int, int], data: st.DataObject
                                                     ) -> None:
    """No false alarm: whatever the schema allows (random ids, offsets, strings) passes."""
    key, version = api
    body = data.draw(st.from_type(_request_type(key, version)))
    frame = codec.encode_request(key, version, 7, "c", body)[4:]
    assert codec.decode_request(frame).body == body


def test_claims_that_cannot_fit_are_refused_for_flexible_and_plain_versions() -> None:
    # Metadata v1 (plain): topics claims 2^31-1 entries.
    plain = struct.pack(">hhih", 3, 1, 1, 1) + b"c" + struct.pack(">i", 2**31 - 1) + b"\x00" * 8
    with pytest.raises(MalformedRequestError, match="claims 2147483647 elements"):
        codec.decode_request(plain)
    # Fetch v17: 10 partitions of at least 33 bytes each cannot fit in 100 bytes, although a
    # bare "count <= remaining bytes" bound would let the count through.
    frame = _fetch_v17(10, tagged=False)
    pos = _body_pos(frame)
    m = codec.request_module(1, 17)
    one = codec.encode_request(1, 17, 1, "c", make(
        m.FetchRequest, replica_id=-1, max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(make(m.FetchTopic, topic_id=uuid.UUID(int=0), partitions=()),)))[4:]
    count_at = pos + 4 * 3 + 1 + 4 * 2 + 1 + 16  # after max wait .. session epoch, topics, id
    assert one[count_at] == 1 and frame[count_at] == 11  # compact arrays: count + 1
    truncated = frame[:count_at + 1] + b"\x00" * 100
    with pytest.raises(MalformedRequestError, match="at least 33 byte"):
        guard.check_body(_request_type(1, 17), truncated, pos)


def test_a_frame_ending_mid_field_is_malformed() -> None:
    frame = _share_fetch([3])
    with pytest.raises(MalformedRequestError):
        guard.check_body(_request_type(78, 1), frame[:-5], _body_pos(frame))


def test_counts_the_elements_of_a_path_across_topics() -> None:
    frame = _share_fetch([3, 0, 5])
    t = _request_type(78, 1)
    pos = _body_pos(frame)
    assert guard.check_body(t, frame, pos, (("topics", "partitions"),)) == 8
    assert guard.check_body(t, frame, pos, (("topics",),)) == 3
    assert guard.check_body(t, frame, pos, (("topics",), ("topics", "partitions"))) == 11
    assert guard.check_body(t, frame, pos) == 0
    over = codec.decode_request(frame, ((("topics", "partitions"),), 7))
    assert over.body is None and over.over_limit == 8
    assert codec.decode_request(frame, ((("topics", "partitions"),), 8)).body is not None


def test_counts_primitive_arrays_too() -> None:
    m = codec.request_module(78, 1)
    body = make(m.ShareFetchRequest, group_id="g", member_id="m", share_session_epoch=3,
                max_wait=timedelta(0), min_bytes=1, max_bytes=1, max_records=1, batch_size=1,
                topics=(), forgotten_topics_data=(make(m.ForgottenTopic, topic_id=uuid.uuid4(),
                                                       partitions=tuple(range(40))),))
    frame = codec.encode_request(78, 1, 1, "c", body)[4:]
    paths = (("topics", "partitions"), ("forgotten_topics_data", "partitions"))
    assert guard.check_body(_request_type(78, 1), frame, _body_pos(frame), paths) == 40


def _best_walk_seconds(frame: bytes, runs: int = 5) -> float:
    """The best of ``runs`` walks, in this thread's CPU time (other processes on a loaded CI
    machine do not count) with the garbage collector off (a full collection would land in one
    walk only)."""
    t = _request_type(1, 17)
    pos = _body_pos(frame)
    best = float("inf")
    gc.disable()
    try:
        for _ in range(runs):
            start = time.thread_time()
            guard.check_body(t, frame, pos)
            best = min(best, time.thread_time() - start)
    finally:
        gc.enable()
    return best


def test_walking_fetch_v17_with_tagged_fields_is_linear_in_the_frame_size() -> None:
    """The old walker copied the frame for every tagged field: 20k partitions took ~0.9 s and
    ten times the partitions took a hundred times longer."""
    small, large = _fetch_v17(5_000), _fetch_v17(50_000)
    t_small, t_large = _best_walk_seconds(small), _best_walk_seconds(large)
    assert t_large < 0.5, f"50k partitions took {t_large:.3f}s"
    # Linear is 10x; allow for noise on a loaded machine, far below quadratic's 100x.
    assert t_large / max(t_small, 1e-4) < 30, (t_small, t_large)
