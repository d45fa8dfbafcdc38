"""The share consumer's sans-IO parts: ack batching, the current batch, share-session epochs,
membership transitions, record decoding and typed errors (issue 7)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from client.acks import InFlight, to_wire_batches
from client.errors import (
    IllegalStateError,
    InvalidRecordStateError,
    KafkaError,
    error_class,
    error_for,
)
from client.membership import Membership, new_member_id
from client.records import (
    AcknowledgeType,
    RawPartition,
    ShareRecord,
    TopicPartition,
    decode_partition,
)
from client.session import FetchParams, ShareSession, next_epoch

A, R, J, N = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT,
              AcknowledgeType.RENEW)

WIRE_CASES = [
    pytest.param({}, [], id="empty"),
    pytest.param({5: A}, [(5, 5, (1,))], id="one"),
    pytest.param({1: A, 2: A, 3: A}, [(1, 3, (1,))], id="run-one-type"),
    pytest.param({1: A, 2: R, 3: A}, [(1, 3, (1, 2, 1))], id="run-mixed-types"),
    pytest.param({1: A, 3: A, 4: J}, [(1, 1, (1,)), (3, 4, (1, 3))], id="hole-splits"),
    pytest.param({9: N, 8: N}, [(8, 9, (4,))], id="unsorted-renew"),
]


@pytest.mark.parametrize(("acks", "expected"), WIRE_CASES)
def test_to_wire_batches(acks, expected) -> None:
    assert to_wire_batches(acks) == expected


def rec(offset: int, topic: str = "t", partition: int = 0) -> ShareRecord:
    return ShareRecord(topic, partition, offset, 0, 0, None, b"v")


def test_in_flight_only_accepts_records_of_the_current_batch() -> None:
    f = InFlight()
    a, b = rec(0), rec(1)
    f.replace([a, b])
    f.acknowledge(a, A)
    f.acknowledge(a, A)  # the same type again changes nothing
    with pytest.raises(IllegalStateError):
        f.acknowledge(rec(1), A)  # same offset, but not the delivered object
    assert f.unacknowledged() == [b]
    f.acknowledge(b, N)
    assert f.unacknowledged() == [b]  # RENEW is not final
    assert f.has_pending(renew=True) and f.has_pending(renew=False)
    assert f.take_pending() == {TopicPartition("t", 0): {0: A, 1: N}}
    assert not f.has_pending()
    f.acknowledge(a, R)  # again after sending: sent again, the broker judges it
    f.acknowledge(b, N)  # a renewed record is renewed again,
    f.acknowledge(b, R)  # then settled
    assert f.take_pending() == {TopicPartition("t", 0): {0: R, 1: R}}
    f.replace([])
    with pytest.raises(IllegalStateError):
        f.acknowledge(a, A)


@pytest.mark.parametrize("first", [A, R, J])
@pytest.mark.parametrize("then", [A, R, J, N])
def test_a_final_acknowledgement_cannot_be_changed_before_it_is_sent(first, then) -> None:
    """A RENEW (or another final type) must not overwrite an unsent REJECT/ACCEPT/RELEASE:
    a rejected record would silently be redelivered."""
    f = InFlight()
    a = rec(0)
    f.replace([a])
    f.acknowledge(a, first)
    if then == first:
        f.acknowledge(a, then)
    else:
        with pytest.raises(IllegalStateError, match=first.name):
            f.acknowledge(a, then)
    assert f.take_pending() == {TopicPartition("t", 0): {0: first}}


def test_in_flight_acknowledge_all_skips_records_already_acknowledged() -> None:
    f = InFlight()
    a, b = rec(0), rec(1, partition=1)
    f.replace([a, b])
    f.acknowledge(a, J)
    f.acknowledge_all(A)
    assert f.take_pending() == {TopicPartition("t", 0): {0: J}, TopicPartition("t", 1): {1: A}}
    assert f.unacknowledged() == []


def test_raw_batch_is_held_and_acknowledged_by_acquired_range() -> None:
    """A raw_records batch: every acquired offset (gaps too) is held; acknowledge_all settles
    them in one wire batch per contiguous range; single records cannot be acknowledged."""
    f = InFlight()
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    f.replace_raw([RawPartition("t", 0, b"", ((10, 12, 1), (20, 20, 2))),
                   RawPartition("t", 1, b"", ((0, 1, 1),))])
    assert f.unacknowledged_offsets() == {t0: [10, 11, 12, 20], t1: [0, 1]}
    assert f.unacknowledged() == []  # no record objects to hand back
    with pytest.raises(IllegalStateError):
        f.acknowledge(rec(10), A)
    f.acknowledge_all(N)
    assert f.unacknowledged_offsets() == {t0: [10, 11, 12, 20], t1: [0, 1]}  # RENEW is not final
    f.take_pending()
    f.acknowledge_all(A)
    assert f.unacknowledged_offsets() == {}
    pending = f.take_pending()
    assert {tp: to_wire_batches(a) for tp, a in pending.items()} == {
        t0: [(10, 12, (1,)), (20, 20, (1,))], t1: [(0, 1, (1,))]}
    assert RawPartition("t", 0, b"", ((10, 12, 1), (20, 20, 2))).count == 4


def test_session_epochs_and_partition_diffs() -> None:
    tid = uuid.uuid4()
    s = ShareSession(1, "g", "m", 2)
    assert s.diff({(tid, 0), (tid, 1)}) == ({(tid, 0), (tid, 1)}, set())
    s.advance({(tid, 0), (tid, 1)})
    assert (s.epoch, s.partitions) == (1, {(tid, 0), (tid, 1)})
    assert s.diff({(tid, 1), (tid, 2)}) == ({(tid, 2)}, {(tid, 0)})
    s.advance({(tid, 2)}, {(tid, 0)})
    assert (s.epoch, s.partitions) == (2, {(tid, 1), (tid, 2)})
    s.reset()
    assert (s.epoch, s.partitions, s.is_open) == (0, set(), False)
    assert next_epoch(2**31 - 1) == 1


def test_session_builds_renew_fetches_with_zero_limits_and_v1_without_v2_fields() -> None:
    tid = uuid.uuid4()
    params = FetchParams(500, 1, 1 << 20, 10, 10, 1)
    body = ShareSession(1, "g", "m", 2).fetch_request(
        set(), set(), {(tid, 0): [(3, 3, (4,))]}, params, renew=True)
    assert body.is_renew_ack and body.share_acquire_mode == 1
    assert (body.max_wait, body.min_bytes, body.max_bytes, body.max_records) == (
        timedelta(0), 0, 0, 0)
    (t,) = body.topics
    assert t.partitions[0].acknowledgement_batches[0].acknowledge_types == (4,)
    v1 = ShareSession(1, "g", "m", 1).fetch_request({(tid, 0)}, set(), {}, params)
    assert not hasattr(v1, "is_renew_ack") and v1.max_records == 10
    ack = ShareSession(1, "g", "m", 1).acknowledge_request({(tid, 0): [(0, 1, (1,))]}, epoch=-1)
    assert ack.share_session_epoch == -1 and not hasattr(ack, "is_renew_ack")


def hb(error: ErrorCode = ErrorCode.none, epoch: int = 1, assignment=None):
    return SimpleNamespace(error_code=error, error_message=None, member_epoch=epoch,
                           heartbeat_interval=timedelta(milliseconds=300), assignment=assignment)


def test_membership_join_heartbeat_fence_and_leave() -> None:
    m = Membership("g")
    assert len(m.member_id) == 22 and new_member_id() != m.member_id
    m.subscribe(("t",))
    join = m.request()
    assert (join.member_epoch, join.subscribed_topic_names) == (0, ("t",))
    tid = uuid.uuid4()
    assignment = SimpleNamespace(topic_partitions=(SimpleNamespace(topic_id=tid, partitions=(1, 0)),))
    out = m.on_response(join, hb(epoch=3, assignment=assignment))
    assert out.assignment_changed and m.assignment == {tid: (0, 1)} and m.interval_ms == 300
    beat = m.request()
    assert (beat.member_epoch, beat.subscribed_topic_names) == (3, None)
    out = m.on_response(beat, hb(ErrorCode.fenced_member_epoch))
    assert out.assignment_changed and m.epoch == 0 and m.assignment == {}
    assert m.request().subscribed_topic_names == ("t",)
    out = m.on_response(beat, hb(ErrorCode.not_coordinator))
    assert out.find_coordinator
    out = m.on_response(beat, hb(ErrorCode.group_max_size_reached))
    assert out.error is not None and out.error.name == "GROUP_MAX_SIZE_REACHED"
    m.epoch, m.leaving = 3, True
    assert m.request().member_epoch == -1


def batch(base: int, count: int, compression: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i in range(count):
        b.append(i, timestamp=1000 + i, key=None, value=f"v{base + i}".encode(),
                 headers=[("h", b"x")])
    data = bytearray(b.build())
    data[0:8] = base.to_bytes(8, "big")
    return bytes(data)


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_decode_keeps_only_acquired_offsets_with_their_delivery_counts(compression) -> None:
    data = batch(10, 5, compression) + batch(15, 5, compression)
    got = decode_partition("t", 0, data, [(11, 12, 1), (14, 16, 3), (30, 31, 1)])
    assert [(r.offset, r.delivery_count, r.value) for r in got.records] == [
        (11, 1, b"v11"), (12, 1, b"v12"), (14, 3, b"v14"), (15, 3, b"v15"), (16, 3, b"v16")]
    assert got.records[0].headers == [("h", b"x")] and got.records[0].timestamp == 1001
    assert got.gaps == [30, 31]


def test_errors_are_typed_by_kafka_name_and_partition() -> None:
    tp = TopicPartition("t", 2)
    err = error_for(ErrorCode.invalid_record_state, "archived", tp)
    assert isinstance(err, InvalidRecordStateError) and isinstance(err, KafkaError)
    assert err.name == "INVALID_RECORD_STATE" and err.topic_partition == tp
    assert "t-2" in str(err) and "archived" in str(err)
    assert error_for(ErrorCode.none) is None
    assert error_class(ErrorCode.unknown_topic_id).__name__ == "UnknownTopicIdError"
    assert error_class(121) is InvalidRecordStateError
