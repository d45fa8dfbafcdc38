"""Crash recovery and retention with real files and a real broker process (issue 2, 3 and 5)."""

from __future__ import annotations

import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, request


def topic_id(bootstrap: str, topic: str):
    with RawClient(bootstrap) as c:
        m = request(3, 12, topics=(request_topic(topic),), allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False)
        resp = c.call(3, 12, m)
    (t,) = resp.topics
    assert t.error_code == ErrorCode.none
    return t.topic_id


def request_topic(name: str):
    from protocol import codec
    import uuid

    return codec.request_module(3, 12).MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=name)


def read_all(bootstrap: str, topic: str, partitions: int, until: dict[int, int]) -> dict[tuple[int, int], bytes]:
    """Read every partition from the beginning up to the given end offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: dict[tuple[int, int], bytes] = {}
    done: set[int] = {p for p, end in until.items() if end == 0}
    deadline = time.monotonic() + 60
    try:
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in c.consume(5000, timeout=1.0):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= until[msg.partition()]:
                            done.add(msg.partition())
                        continue
                    raise AssertionError(msg.error())
                got[(msg.partition(), msg.offset())] = msg.value()
    finally:
        c.close()
    return got


def test_kill_9_during_produce_loses_no_acknowledged_record(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker
    b.start()
    topic = "crash"
    create_topic(b.bootstrap, topic, 2)
    tid = topic_id(b.bootstrap, topic)

    acked: dict[tuple[int, int], bytes] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err, msg) -> None:
        if err is None:
            with lock:
                acked[(msg.partition(), msg.offset())] = msg.value()

    def produce_forever() -> None:
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 2, "message.timeout.ms": 3000, "retries": 2,
                      "reconnect.backoff.max.ms": 200})
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, f"v{i}".encode(), partition=i % 2, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            p.poll(0 if i % 500 else 0.001)
        p.flush(10)

    t = threading.Thread(target=produce_forever)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    b.kill()  # kill -9 mid-stream
    time.sleep(0.5)
    stop.set()
    t.join(30)
    with lock:
        snapshot = dict(acked)
    assert len(snapshot) >= 20_000

    b.start()
    ends = {p: max((o for (pp, o) in snapshot if pp == p), default=-1) + 1 for p in range(2)}
    got = read_all(b.bootstrap, topic, 2, ends)
    missing = [k for k in snapshot if got.get(k) != snapshot[k]]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:5]}"
    assert topic_id(b.bootstrap, topic) == tid

    # The log end offset continues after the recovered data.
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    offsets: list[int] = []
    p.produce(topic, b"after-restart", partition=0,
              on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert p.flush(15) == 0
    with RawClient(b.bootstrap) as c:
        resp = c.call(2, 7, request(2, 7, replica_id=-1, isolation_level=0, topics=(
            list_offsets_topic(topic, -1),)))
    leo = resp.topics[0].partitions[0].offset
    assert offsets == [leo - 1]
    assert offsets[0] >= ends[0]


def list_offsets_topic(topic: str, ts: int, version: int = 7):
    from protocol import codec

    m = codec.request_module(2, version)
    return m.ListOffsetsTopic(name=topic, partitions=(
        m.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts),))


def test_retention_moves_log_start_and_old_offsets_are_out_of_range(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker
    b.overrides.update({"log.segment.bytes": "1024", "log.retention.bytes": "4096",
                        "log.retention.check.interval.ms": "100"})
    b.start()
    topic = "retained"
    create_topic(b.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0,
                  "batch.num.messages": 1})
    for _ in range(300):
        p.produce(topic, b"x" * 100, partition=0)
        p.flush(10)

    def earliest() -> int:
        with RawClient(b.bootstrap) as c:
            resp = c.call(2, 7, request(2, 7, replica_id=-1, isolation_level=0,
                                        topics=(list_offsets_topic(topic, -2),)))
        return resp.topics[0].partitions[0].offset

    # Wait until retention has run and settled (two equal readings a few checks apart).
    deadline = time.monotonic() + 15
    start, previous = earliest(), -1
    while (start == 0 or start != previous) and time.monotonic() < deadline:
        time.sleep(0.5)
        previous, start = start, earliest()
    assert 0 < start < 300

    # A fetch below the log start offset is OFFSET_OUT_OF_RANGE; at the start it returns data.
    from datetime import timedelta

    from protocol import codec

    m = codec.request_module(1, 12)

    def fetch(offset: int):
        body = m.FetchRequest(replica_id=-1, max_wait=timedelta(0), min_bytes=0, max_bytes=1 << 20,
                              isolation_level=0, session_id=0, session_epoch=-1,
                              topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
                                  partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                  last_fetched_epoch=-1, log_start_offset=-1,
                                  partition_max_bytes=1 << 20),)),),
                              forgotten_topics_data=(), rack_id="")
        with RawClient(b.bootstrap) as c:
            return c.call(1, 12, body).responses[0].partitions[0]

    below = fetch(0)
    assert below.error_code == ErrorCode.offset_out_of_range
    assert below.log_start_offset >= start
    at = fetch(below.log_start_offset)
    assert at.error_code == ErrorCode.none and at.records
