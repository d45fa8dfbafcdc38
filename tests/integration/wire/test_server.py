"""Connection behaviour: in-order pipelined responses, long polls that block nobody else,
produce waking a waiting fetch, and a graceful SIGTERM shutdown."""

from __future__ import annotations

import time
from datetime import timedelta

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from protocol import codec
from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, request

FETCH_V = 12


def fetch_body(topic: str, offset: int, max_wait_ms: int, min_bytes: int = 1):
    m = codec.request_module(1, FETCH_V)
    return m.FetchRequest(
        replica_id=-1, max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")


def make_topic(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 1)


def test_pipelined_requests_are_answered_in_order_and_long_poll_blocks_no_one(broker, unique) -> None:
    topic = f"pipe-{unique}"
    make_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as slow, RawClient(broker.bootstrap) as other:
        t0 = time.monotonic()
        fetch_cid = slow.send(1, FETCH_V, fetch_body(topic, 0, max_wait_ms=1500))
        av_cid = slow.send(18, 3, request(18, 3, client_software_name="t", client_software_version="1"))
        # Another connection is served while the first one's fetch is parked.
        assert other.call(18, 3, request(18, 3, client_software_name="t",
                                         client_software_version="1")).error_code == ErrorCode.none
        assert time.monotonic() - t0 < 1.0
        got_cid, fetch = slow.receive(1, FETCH_V)
        assert got_cid == fetch_cid  # the fetch answer comes first, although it finished last
        assert time.monotonic() - t0 >= 1.4
        got_cid, _ = slow.receive(18, 3)
        assert got_cid == av_cid
        assert fetch.responses[0].partitions[0].records in (b"", None)


def test_produce_wakes_a_waiting_fetch(broker, unique) -> None:
    topic = f"wake-{unique}"
    make_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        t0 = time.monotonic()
        c.send(1, FETCH_V, fetch_body(topic, 0, max_wait_ms=20_000))
        time.sleep(0.3)
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce(topic, b"hello", partition=0)
        assert p.flush(10) == 0
        _, resp = c.receive(1, FETCH_V)
        assert time.monotonic() - t0 < 10
        part = resp.responses[0].partitions[0]
        assert part.error_code == ErrorCode.none
        assert b"hello" in bytes(part.records)
        assert part.high_watermark == 1


def test_sigterm_shuts_down_gracefully_and_data_survives(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker
    b.start()
    make_topic(b.bootstrap, "graceful")
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(1000):
        p.produce("graceful", str(i).encode(), partition=0)
    assert p.flush(15) == 0
    t0 = time.monotonic()
    assert b.stop() == 0
    assert time.monotonic() - t0 < 8
    assert "stopped cleanly" in b.logs()
    b.start()
    with RawClient(b.bootstrap) as c:
        resp = c.call(1, FETCH_V, fetch_body("graceful", 0, max_wait_ms=0, min_bytes=0))
    assert resp.responses[0].partitions[0].high_watermark == 1000
