"""protocol/produce_shape.py: a Produce frame's topics plus partitions, counted up to a bound
(the connection decodes a frame of many partitions off the event loop, issue 25)."""

from __future__ import annotations

import datetime
import uuid

import pytest

from broker.wire_limits import PRODUCE_INLINE_PARTITIONS, decode_off_loop
from protocol.codec import decode_request, encode_request, request_module
from protocol.messages import make
from protocol.produce_shape import lists_more_than
from tests.unit.batches import make_batch

BATCH = make_batch([(b"key", b"v" * 100_000)])  # one large batch: cheap to decode at any size


def _frame(version: int, shape: list[int], records: bytes | None = BATCH,
           transactional_id: str | None = None) -> bytes:
    """A Produce frame (no size prefix): one topic per entry of ``shape``, with that many
    partitions, each carrying ``records``."""
    m = request_module(0, version)
    topics = []
    for t, count in enumerate(shape):
        parts = tuple(make(m.PartitionProduceData, index=p, records=records)
                      for p in range(count))
        topics.append(make(m.TopicProduceData, name=f"topic-{t}", topic_id=uuid.UUID(int=t + 1),
                           partition_data=parts))
    body = make(m.ProduceRequest, transactional_id=transactional_id, acks=-1,
                timeout=datetime.timedelta(seconds=30), topic_data=tuple(topics))
    return encode_request(0, version, 7, "client-with-an-id", body)[4:]


@pytest.mark.parametrize("version", [3, 8, 9, 11, 12, 13])
def test_counts_topics_and_partitions_up_to_the_bound(version: int) -> None:
    # (shape, topics + partitions)
    for shape, count in [([1], 2), ([3, 4], 9), ([0, 0, 0], 3), ([50] * 4, 204)]:
        frame = _frame(version, shape)
        assert decode_request(frame).body is not None  # a frame the decoder accepts
        assert not lists_more_than(frame, count)
        assert lists_more_than(frame, count - 1)
    # Records of any size are skipped by their length; a null record set is one partition too.
    assert not lists_more_than(_frame(version, [2], records=None), 3)
    assert lists_more_than(_frame(version, [2], records=None, transactional_id="tx"), 2)


def test_many_partitions_without_records_go_off_the_loop_and_few_large_batches_stay() -> None:
    """The case it exists for: 0.1-0.6 MB listing thousands of partitions is decoded in a worker
    thread; a 1 MB frame of a few large batches is decoded inline."""
    many = _frame(11, [1] * 30_000, records=None)
    assert 64 * 1024 < len(many) < 1 << 20
    assert decode_off_loop(0, many)
    # One topic and its partitions: at the bound inline, one more off the loop.
    at_bound = _frame(11, [PRODUCE_INLINE_PARTITIONS - 1], records=b"x" * 300)
    over = _frame(11, [PRODUCE_INLINE_PARTITIONS], records=b"x" * 300)
    assert len(at_bound) > 64 * 1024
    assert not decode_off_loop(0, at_bound)
    assert decode_off_loop(0, over)
    big = _frame(11, [4, 5])
    assert 64 * 1024 < len(big) < 1 << 20
    assert not decode_off_loop(0, big)
    assert decode_off_loop(0, _frame(11, [12] * 1))  # over 1 MiB: always off the loop


def test_stops_at_the_bound_and_anything_it_cannot_follow_counts_as_more() -> None:
    frame = _frame(11, [1] * 1000, records=None)
    # Cut after about 300 partitions: the count stops before it reaches the cut.
    assert lists_more_than(frame[:len(frame) * 3 // 10], 256)
    # Truncated before the bound, an unknown old version, garbage: "more" (decoded off the loop,
    # where the decoder refuses it as before).
    assert lists_more_than(frame[:len(frame) // 10], 256)
    assert lists_more_than(_frame(9, [2])[:30], 256)
    old = bytearray(_frame(9, [2]))
    old[2:4] = (2).to_bytes(2, "big")
    assert lists_more_than(bytes(old), 256)
    assert lists_more_than(b"\x00\x00\x00\x0b\x00\x00\x00\x01\xff", 256)
