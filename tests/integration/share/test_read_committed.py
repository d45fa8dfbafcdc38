"""Share groups on transactional data (issue 15), seen by confluent_kafka.ShareConsumer.

A confluent-kafka transactional producer writes committed and aborted transactions, a plain
producer writes between them, and a second transactional producer leaves one transaction open
(committed later). A share group with ``share.isolation.level=read_committed`` must receive
exactly the committed records: never a transaction marker, never aborted data, and nothing past
the open transaction until it commits. A read_uncommitted group receives every data record. In
both, the share-partition's start offset reaches the log end once everything is consumed, so no
marker offset is left in flight (the broker archives markers, broker/share/txn_filter.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, TopicPartition

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient
from tests.integration.share_helpers import set_group_configs, share_consumer
from tests.integration.share.test_admin_rpcs import describe_offsets, offsets


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("share-txn-broker")) / "data")
    b.start()
    yield b
    b.stop()


def txn_producer(bootstrap: str, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(20)
    return p


def in_txn(p: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)
    # Written before the end (abort_transaction would otherwise purge what is still queued).
    assert p.flush(20) == 0
    if commit:
        p.commit_transaction(20)
    else:
        p.abort_transaction(20)


def vals(prefix: str, lo: int, hi: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(lo, hi)]


class Mix:
    """The topic's records: what is committed before the open transaction, the open one (to be
    committed by ``finish``), what comes after it, and what was aborted."""

    def __init__(self, b: BrokerProcess, topic: str) -> None:
        create_topic(b.bootstrap, topic, 1)
        self.topic, self.bootstrap = topic, b.bootstrap
        t1 = txn_producer(b.bootstrap, f"{topic}-t1")
        plain = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        in_txn(t1, topic, vals("c", 0, 10), commit=True)
        in_txn(t1, topic, vals("a", 0, 10), commit=False)
        for v in vals("p", 0, 5):
            plain.produce(topic, v, partition=0)
        assert plain.flush(20) == 0
        in_txn(t1, topic, vals("c", 10, 15), commit=True)
        in_txn(t1, topic, vals("a", 10, 12), commit=False)
        self.before = vals("c", 0, 15) + vals("p", 0, 5)
        self.aborted = vals("a", 0, 12)
        # A second producer opens a transaction; committed records and plain ones follow it.
        self.t2 = txn_producer(b.bootstrap, f"{topic}-t2")
        self.t2.begin_transaction()
        for v in vals("o", 0, 5):
            self.t2.produce(topic, v, partition=0)
        assert self.t2.flush(20) == 0
        in_txn(t1, topic, vals("c", 15, 20), commit=True)
        for v in vals("p", 5, 10):
            plain.produce(topic, v, partition=0)
        assert plain.flush(20) == 0
        self.open = vals("o", 0, 5)
        self.after = vals("c", 15, 20) + vals("p", 5, 10)

    def finish(self) -> None:
        self.t2.commit_transaction(20)

    def log_end(self) -> int:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "watermarks"})
        try:
            return int(c.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=10)[1])
        finally:
            c.close()


def collect(c: object, want: int, timeout: float, settle: float = 1.5) -> list[bytes]:
    """Poll until ``want`` records arrived (then ``settle`` more seconds, to catch extras) or the
    timeout; every message must be error-free."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_until: float | None = None
    while time.monotonic() < deadline:
        for msg in c.poll(0.2):  # type: ignore[attr-defined]
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        if len(got) >= want and quiet_until is None:
            quiet_until = time.monotonic() + settle
        if quiet_until is not None and time.monotonic() >= quiet_until:
            break
    return got


def wait_start_offset(bootstrap: str, group: str, topic: str, end: int) -> None:
    """The group's share-partition start offset reaches ``end`` with lag 0: nothing (marker
    offsets included) is left in flight or unacknowledged."""
    deadline = time.monotonic() + 15
    with RawClient(bootstrap) as rc:
        while True:
            start, lag, err = offsets(describe_offsets(rc, group, {topic: (0,)}))[(topic, 0)]
            if (start, lag, err) == (end, 0, 0):
                return
            assert time.monotonic() < deadline, f"start offset {start}, lag {lag} (end {end})"
            time.sleep(0.2)


def test_read_committed_share_group_gets_exactly_the_committed_records(tb: BrokerProcess) -> None:
    topic = group = "rc-mix"
    mix = Mix(tb, topic)
    set_group_configs(tb.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                            "share.isolation.level": "read_committed"})
    c = share_consumer(tb.bootstrap, group, topic)
    try:
        first = collect(c, len(mix.before), timeout=25)
        # Everything committed before the open transaction, nothing from it or past it.
        assert sorted(first) == sorted(mix.before)
        mix.finish()
        rest = collect(c, len(mix.open) + len(mix.after), timeout=25)
        assert sorted(rest) == sorted(mix.open + mix.after)
    finally:
        c.close()
    wait_start_offset(tb.bootstrap, group, topic, mix.log_end())


def test_read_uncommitted_share_group_gets_every_data_record(tb: BrokerProcess) -> None:
    topic = group = "ru-mix"
    mix = Mix(tb, topic)
    set_group_configs(tb.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    c = share_consumer(tb.bootstrap, group, topic)
    try:
        everything = mix.before + mix.aborted + mix.open + mix.after
        got = collect(c, len(everything), timeout=25)
        # Aborted and still-open data included, each once; never a marker.
        assert sorted(got) == sorted(everything), b" ".join(sorted(got))
        mix.finish()
        assert collect(c, 0, timeout=3, settle=1.5) == []
    finally:
        c.close()
    wait_start_offset(tb.bootstrap, group, topic, mix.log_end())


def test_switch_to_read_committed_applies_to_released_records(tb: BrokerProcess) -> None:
    """Records of an aborted transaction that a read_uncommitted consumer RELEASEd are not
    delivered again once the group switched to read_committed."""
    topic = group = "switch-mix"
    create_topic(tb.bootstrap, topic, 1)
    t1 = txn_producer(tb.bootstrap, f"{topic}-t1")
    in_txn(t1, topic, vals("a", 0, 5), commit=False)
    in_txn(t1, topic, vals("c", 0, 5), commit=True)
    set_group_configs(tb.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    c = share_consumer(tb.bootstrap, group, topic, explicit=True)
    try:
        seen: list[bytes] = []
        deadline = time.monotonic() + 25
        while len(seen) < 10:
            assert time.monotonic() < deadline, seen
            for msg in c.poll(0.2):
                assert msg.error() is None, msg.error()
                seen.append(msg.value())
                c.acknowledge(msg, AcknowledgeType.RELEASE)
        c.commit_sync()
        assert sorted(seen) == sorted(vals("a", 0, 5) + vals("c", 0, 5))
    finally:
        c.close()  # anything it fetched ahead is released too
    set_group_configs(tb.bootstrap, group, {"share.isolation.level": "read_committed"})
    c = share_consumer(tb.bootstrap, group, topic)
    try:
        assert sorted(collect(c, 5, timeout=25)) == sorted(vals("c", 0, 5))
    finally:
        c.close()
    wait_start_offset(tb.bootstrap, group, topic, 12)  # 5 aborted, ABORT, 5 committed, COMMIT
