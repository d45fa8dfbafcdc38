"""Produced batches are validated record by record (issue 12, section 2), over the wire.

A refused partition gets its error and a message, nothing is appended (the log end offset does not
move) and the connection keeps serving.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.integration.helpers import create_topic
from tests.integration.produce_helpers import log_end_offset, produce
from tests.integration.rawclient import RawClient
from tests.unit.batches import encode_records, make_batch, raw_batch


def _now() -> int:
    return int(time.time() * 1000)


def _forged_huge_count() -> bytes:
    # 69 bytes claiming 2^31-1 records: before validation the log end offset jumped to 2^31-1.
    data = raw_batch(encode_records([(0, 0, None, b"v")]), 2**31 - 1, base_ts=_now())
    assert len(data) == 69
    return data


CASES = [
    ("huge-count", _forged_huge_count, ErrorCode.invalid_record, "2147483647 records"),
    ("bad-crc", lambda: raw_batch(encode_records([(0, 0, None, b"v")]), 1, base_ts=_now(),
                                  crc=1), ErrorCode.corrupt_message, "CRC"),
    ("offset-deltas", lambda: raw_batch(encode_records([(0, 0, None, b"a"), (0, 5, None, b"b")]),
                                        2, base_ts=_now()),
     ErrorCode.invalid_record, "offset delta 5"),
    ("too-large", lambda: make_batch([(None, b"x" * 3000)], timestamp_ms=_now()),
     ErrorCode.message_too_large, "max.message.bytes=2000"),
    ("future-timestamp", lambda: make_batch([(None, b"v")], timestamp_ms=_now() + 7_200_000),
     ErrorCode.invalid_timestamp, "message.timestamp.after.max.ms"),
    ("old-timestamp", lambda: make_batch([(None, b"v")], timestamp_ms=_now() - 120_000),
     ErrorCode.invalid_timestamp, "message.timestamp.before.max.ms"),
    ("magic-1", lambda: raw_batch(encode_records([(0, 0, None, b"v")]), 1, magic=1),
     ErrorCode.invalid_record, "magic 1"),
]


@pytest.mark.parametrize(("forge", "error", "fragment"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_invalid_batch_is_refused_and_nothing_is_appended(broker, unique, forge, error,
                                                          fragment) -> None:
    create_topic(broker.bootstrap, unique, 1, {"max.message.bytes": "2000",
                                               "message.timestamp.before.max.ms": "60000"})
    with RawClient(broker.bootstrap) as c:
        first = produce(c, unique, make_batch([(None, b"before")], timestamp_ms=_now()))
        assert first.error_code == ErrorCode.none and first.base_offset == 0
        got = produce(c, unique, forge())
        assert got.error_code == error, got
        assert fragment in got.error_message and f"{unique}-0" in got.error_message
        assert got.base_offset == -1
        if error == ErrorCode.invalid_timestamp:
            assert [e.batch_index for e in got.record_errors] == [0]  # the one record
        # Nothing appended, and the same connection still produces.
        assert log_end_offset(c, unique) == 1
        after = produce(c, unique, make_batch([(None, b"after")] * 3, timestamp_ms=_now()))
        assert after.error_code == ErrorCode.none and after.base_offset == 1
        assert log_end_offset(c, unique) == 4


def test_log_append_time_topic_stamps_batches_with_the_broker_clock(broker, unique) -> None:
    create_topic(broker.bootstrap, unique, 1, {"message.timestamp.type": "LogAppendTime"})
    old = _now() - 10 * 86_400_000  # CreateTime bounds do not apply to LogAppendTime
    before = _now()
    with RawClient(broker.bootstrap) as c:
        got = produce(c, unique, make_batch([(None, b"a"), (None, b"b")], timestamp_ms=old))
    after = _now()
    assert got.error_code == ErrorCode.none
    stamped = int(got.log_append_time.timestamp() * 1000)
    assert before - 5 <= stamped <= after + 5
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{unique}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(unique, 0, 0)])
        msgs = []
        deadline = time.monotonic() + 15
        while len(msgs) < 2 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                msgs.append(m)
    finally:
        consumer.close()
    assert [m.value() for m in msgs] == [b"a", b"b"]
    assert {m.timestamp() for m in msgs} == {(TIMESTAMP_LOG_APPEND_TIME, stamped)}


def test_heavy_validation_leaves_other_connections_served_and_keeps_request_order(
        broker, unique) -> None:
    """A request whose records take long to read is validated off the event loop: another
    connection is answered meanwhile, and the pipelined requests of the same connection are
    still appended in order (an idempotent producer would otherwise see OUT_OF_ORDER)."""
    import select
    from datetime import timedelta

    from tests.integration.produce_helpers import init_producer_id
    from tests.integration.rawclient import request

    n = 110_000  # 7-9 byte records: about 1 MB per partition, about 0.1 s each to read
    create_topic(broker.bootstrap, unique, 4)
    body = encode_records([(0, i, None, None) for i in range(n)])
    with RawClient(broker.bootstrap) as a, RawClient(broker.bootstrap) as b:
        pid, epoch = init_producer_id(a)
        m = a.request_module(0, 9)

        def req(parts: dict[int, bytes]):  # type: ignore[no-untyped-def]
            return request(0, 9, transactional_id=None, acks=-1, timeout=timedelta(seconds=30),
                           topic_data=(m.TopicProduceData(name=unique, partition_data=tuple(
                               m.PartitionProduceData(index=p, records=r)
                               for p, r in parts.items())),))

        heavy = {p: raw_batch(body, n, base_ts=_now(), producer_id=pid, producer_epoch=epoch,
                              base_sequence=0) for p in range(4)}
        follow = make_batch([(None, b"next")], timestamp_ms=_now(), producer_id=pid,
                            producer_epoch=epoch, base_sequence=n)
        first = a.send(0, 9, req(heavy))
        second = a.send(0, 9, req({0: follow}))
        b.call(18, 3, request(18, 3, client_software_name="t", client_software_version="1"))
        # B was answered while A's first request was still being validated.
        ready, _, _ = select.select([a._sock], [], [], 0)  # noqa: SLF001
        assert not ready, "the other connection waited for the heavy validation"
        got1, r1 = a.receive(0, 9)
        got2, r2 = a.receive(0, 9)
    assert (got1, got2) == (first, second)
    assert [(p.error_code, p.base_offset) for p in r1.responses[0].partition_responses] == \
        [(ErrorCode.none, 0)] * 4
    p2 = r2.responses[0].partition_responses[0]
    assert (p2.error_code, p2.base_offset) == (ErrorCode.none, n)
