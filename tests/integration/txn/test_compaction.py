"""Compaction of a transactional topic with real clients (issue 15): confluent-kafka transactional
producers against a broker whose log cleaner runs every 100 ms.

The cleaner must drop the records of an aborted transaction (and never let them hide older
records of their keys), keep committed ones, leave everything at or past the last stable offset
(an open transaction's records) alone, and drop the ABORT marker once its data is gone and
``delete.retention.ms`` passed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol import codec
from protocol.record_batch import CONTROL_ABORT, CONTROL_COMMIT, control_type, iter_batches
from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient

pytestmark = pytest.mark.timeout(90)

T = 15
SEGMENT_MS = 300
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "1024", "segment.ms": str(SEGMENT_MS),
             "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1500"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("txn-compaction")) / "data",
                      overrides={"log.cleaner.backoff.ms": "100",
                                 "log.flush.scheduler.interval.ms": "100"})
    b.start()
    yield b
    b.stop()


def _txn_producer(bootstrap: str, txn_id: str) -> Any:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    p.init_transactions(T)
    return p


def _read(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record a fresh consumer reads from the start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{topic}-{isolation}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + T
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    break
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()
    return out


def _markers(bootstrap: str, topic: str) -> list[tuple[int, int | None]]:
    """(offset, type) of every control batch in the partition, read raw (read_uncommitted)."""
    m = codec.request_module(1, 12)
    body = m.FetchRequest(
        replica_id=-1, max_wait=timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=(m.FetchTopic(topic=topic, partitions=(
            m.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                             last_fetched_epoch=-1, log_start_offset=-1,
                             partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")
    with RawClient(bootstrap) as c:
        data = c.call(1, 12, body).responses[0].partitions[0].records or b""
    return [(h.base_offset, control_type(data, pos)) for pos, h in iter_batches(data)
            if h.is_control]


def _until(what: str, check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_cleaner_removes_aborted_data_keeps_the_open_transaction_and_drops_the_marker(
        broker: BrokerProcess) -> None:
    topic = "txn-compacted"
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    for k in "abcde":
        plain.produce(topic, b"old", key=k.encode(), partition=0)
    plain.flush(T)
    aborting = _txn_producer(broker.bootstrap, "compact-abort")
    aborting.begin_transaction()
    for k in "abcde":
        aborting.produce(topic, b"aborted", key=k.encode(), partition=0)
    aborting.produce(topic, b"aborted", key=b"ghost", partition=0)
    aborting.flush(T)  # in the log before the abort
    aborting.abort_transaction(T)
    before = _read(broker.bootstrap, topic, "read_uncommitted")
    assert sum(v == b"aborted" for _, _, v in before) == 6  # in the log until cleaned
    assert [k for _, k in _markers(broker.bootstrap, topic)] == [CONTROL_ABORT]
    committing = _txn_producer(broker.bootstrap, "compact-commit")
    committing.begin_transaction()
    committing.produce(topic, b"committed", key=b"c", partition=0)
    committing.commit_transaction(T)
    # Fillers roll segments so the above is cleanable; an open transaction sits among them.
    for i in range(6):
        plain.produce(topic, b"x" * 300, key=b"f%d" % i, partition=0)
    plain.flush(T)
    open_txn = _txn_producer(broker.bootstrap, "compact-open")
    open_txn.begin_transaction()
    open_txn.produce(topic, b"pending", key=b"a", partition=0)
    open_txn.flush(T)
    time.sleep(SEGMENT_MS / 1000 + 0.1)
    for i in range(6, 12):
        plain.produce(topic, b"x" * 300, key=b"f%d" % i, partition=0)
        plain.flush(T)
        time.sleep(SEGMENT_MS / 1000 / 3)

    def cleaned() -> list[tuple[int, bytes, bytes | None]] | None:
        got = _read(broker.bootstrap, topic, "read_uncommitted")
        return got if not any(v == b"aborted" for _, _, v in got) else None

    records = _until("the aborted records to be cleaned away", cleaned)
    latest = {k: v for _, k, v in records}
    # Older records of the aborted keys survive; the committed one wins; the open transaction's
    # record (past the LSO) is still there.
    assert {k: latest[k] for k in (b"b", b"c", b"d", b"e")} == {
        b"b": b"old", b"c": b"committed", b"d": b"old", b"e": b"old"}
    assert latest[b"a"] == b"pending" and b"ghost" not in latest
    assert (b"a", b"old") in {(k, v) for _, k, v in records}  # below the LSO, kept
    # The ABORT marker goes once delete.retention.ms passed; the COMMIT marker (data left) stays.
    kinds = _until("the ABORT marker to be dropped",
                   lambda: (m := _markers(broker.bootstrap, topic))
                   and CONTROL_ABORT not in {k for _, k in m} and m)
    assert CONTROL_COMMIT in {k for _, k in kinds}
    open_txn.commit_transaction(T)
    committed = _read(broker.bootstrap, topic, "read_committed")
    assert (b"a", b"pending") in {(k, v) for _, k, v in committed}
