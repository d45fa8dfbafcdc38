"""confluent_kafka.ShareConsumer against the running broker (issue 3, must-show 3).

A module-scoped broker lowers the lower bound of share.record.lock.duration.ms so the lock-expiry
test can use a 2-second lock.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.share_helpers import (
    drain,
    poll_until,
    produce,
    set_group_configs,
    share_consumer,
)


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory):
    b = BrokerProcess(Path(tmp_path_factory.mktemp("share-broker")) / "data",
                      overrides={"group.share.min.record.lock.duration.ms": "1000"})
    b.start()
    yield b
    b.stop()


def setup(sb: BrokerProcess, name: str, partitions: int = 1, count: int = 0, **configs: str) -> list[bytes]:
    create_topic(sb.bootstrap, name, partitions)
    set_group_configs(sb.bootstrap, name, {"share.auto.offset.reset": "earliest", **configs})
    return produce(sb.bootstrap, name, count, partitions) if count else []


def test_implicit_mode_delivers_everything_exactly_once(sb, unique) -> None:
    values = setup(sb, unique, count=10_000)
    seen: Counter[bytes] = Counter()
    c = share_consumer(sb.bootstrap, unique, unique)
    try:
        poll_until([c], lambda: len(seen) >= len(values),
                   on_message=lambda _i, m: seen.update([m.value()]))
        assert drain(c, 1.5) == []
    finally:
        c.close()
    assert set(seen) == set(values)
    assert max(seen.values()) == 1


def test_explicit_accept_and_commit_then_nothing_is_redelivered(sb, unique) -> None:
    values = setup(sb, unique, count=200)
    got: list[bytes] = []
    c = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    results: dict = {}
    try:
        def on(_i, m):
            got.append(m.value())
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        poll_until([c], lambda: len(got) >= len(values), on_message=on)
        results = c.commit_sync(15)
    finally:
        c.close()
    assert sorted(got) == sorted(values)
    assert results and all(v is None for v in results.values()), results
    c2 = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    try:
        assert drain(c2, 3.0, AcknowledgeType.ACCEPT) == []
    finally:
        c2.close()


def test_release_redelivers_with_a_higher_delivery_count(sb, unique) -> None:
    setup(sb, unique, count=10)
    c = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    first: dict[bytes, int] = {}
    again: dict[bytes, int] = {}
    try:
        def on_first(_i, m):
            first[m.value()] = m.delivery_count()
            c.acknowledge(m, AcknowledgeType.RELEASE)
        poll_until([c], lambda: len(first) >= 10, on_message=on_first)
        c.commit_sync(15)

        def on_again(_i, m):
            again[m.value()] = m.delivery_count()
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        poll_until([c], lambda: len(again) >= 10, on_message=on_again)
        c.commit_sync(15)
    finally:
        c.close()
    assert set(first.values()) == {1}
    assert set(again) == set(first) and set(again.values()) == {2}


def test_reject_is_never_redelivered(sb, unique) -> None:
    setup(sb, unique, count=20)
    c = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    got: list[bytes] = []
    try:
        def on(_i, m):
            got.append(m.value())
            c.acknowledge(m, AcknowledgeType.REJECT)
        poll_until([c], lambda: len(got) >= 20, on_message=on)
        c.commit_sync(15)
        assert drain(c, 2.0, AcknowledgeType.REJECT) == []
    finally:
        c.close()
    c2 = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    try:
        assert drain(c2, 2.0, AcknowledgeType.ACCEPT) == []
    finally:
        c2.close()


def test_lock_expiry_hands_records_to_another_consumer(sb, unique) -> None:
    values = setup(sb, unique, count=30, **{"share.record.lock.duration.ms": "2000"})
    holder = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    held: list[bytes] = []
    poll_until([holder], lambda: len(held) >= 30, on_message=lambda _i, m: held.append(m.value()))
    # The holder never acknowledges and keeps its session: the locks must expire.
    other = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    got: dict[bytes, int] = {}
    try:
        def on(_i, m):
            got[m.value()] = m.delivery_count()
            other.acknowledge(m, AcknowledgeType.ACCEPT)
        poll_until([other], lambda: len(got) >= 30, timeout=20, on_message=on)
        other.commit_sync(15)
    finally:
        other.close()
        holder.close()
    assert sorted(got) == sorted(values)
    assert set(got.values()) == {2}


def test_delivery_limit_archives_after_two_deliveries(sb, unique) -> None:
    setup(sb, unique, count=5, **{"share.delivery.count.limit": "2"})
    c = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    counts: Counter[int] = Counter()
    try:
        for _ in range(2):
            batch: list = []
            poll_until([c], lambda: len(batch) >= 5, on_message=lambda _i, m: batch.append(m))
            for m in batch:
                counts[m.delivery_count()] += 1
                c.acknowledge(m, AcknowledgeType.RELEASE)
            c.commit_sync(15)
        assert drain(c, 2.0, AcknowledgeType.RELEASE) == []
    finally:
        c.close()
    assert counts == {1: 5, 2: 5}


def test_three_consumers_on_one_partition_get_disjoint_sets(sb, unique) -> None:
    values = setup(sb, unique, count=3000)
    consumers = [share_consumer(sb.bootstrap, unique, unique) for _ in range(3)]
    per: list[list[bytes]] = [[], [], []]
    try:
        poll_until(consumers, lambda: sum(map(len, per)) >= len(values),
                   on_message=lambda i, m: per[i].append(m.value()))
    finally:
        for c in consumers:
            c.close()
    allv = [v for p in per for v in p]
    assert sorted(allv) == sorted(values), "every record exactly once across the group"
    assert sum(1 for p in per if p) >= 2, "records were shared between members"


def test_five_consumers_on_two_partitions_all_receive(sb, unique) -> None:
    setup(sb, unique, partitions=2)
    consumers = [share_consumer(sb.bootstrap, unique, unique) for _ in range(5)]
    per: list[list[bytes]] = [[] for _ in range(5)]
    produced: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        # Produce in small rounds while every member polls, as Kafka's own test does, until
        # each of the five has received something; then drain the rest.
        rnd = 0
        while not all(per):
            assert time.monotonic() < deadline, f"members' counts: {[len(p) for p in per]}"
            produced += produce(sb.bootstrap, unique, 100, partitions=2, prefix=f"r{rnd}-")
            rnd += 1
            for i, c in enumerate(consumers):
                for msg in c.poll(0.3):
                    assert msg.error() is None, msg.error()
                    per[i].append(msg.value())
        poll_until(consumers, lambda: sum(map(len, per)) >= len(produced),
                   on_message=lambda i, m: per[i].append(m.value()))
    finally:
        for c in consumers:
            c.close()
    assert sorted(v for p in per for v in p) == sorted(produced)


def test_two_groups_each_receive_everything(sb, unique) -> None:
    values = setup(sb, unique, count=500)
    g2 = unique + "-other"
    set_group_configs(sb.bootstrap, g2, {"share.auto.offset.reset": "earliest"})
    a = share_consumer(sb.bootstrap, unique, unique)
    b = share_consumer(sb.bootstrap, g2, unique)
    got: list[set[bytes]] = [set(), set()]
    try:
        poll_until([a, b], lambda: all(len(s) >= 500 for s in got),
                   on_message=lambda i, m: got[i].add(m.value()))
    finally:
        a.close()
        b.close()
    assert got[0] == got[1] == set(values)


def test_auto_offset_reset_latest_skips_earlier_records(sb, unique) -> None:
    create_topic(sb.bootstrap, unique, 1)
    produce(sb.bootstrap, unique, 50, prefix="old")
    c = share_consumer(sb.bootstrap, unique, unique)  # default: latest
    got: list[bytes] = []
    try:
        drain(c, 3.0)  # join and initialise the share-partition at the log end
        new = produce(sb.bootstrap, unique, 20, prefix="new")
        poll_until([c], lambda: len(got) >= 20, on_message=lambda _i, m: got.append(m.value()))
    finally:
        c.close()
    assert sorted(got) == sorted(new)


def test_auto_offset_reset_by_duration_starts_at_the_first_record_that_young(sb, unique) -> None:
    """by_duration:PT1H starts a new share-partition at the first record at most an hour old:
    records stamped two hours ago are skipped, those of the last minutes delivered."""
    create_topic(sb.bootstrap, unique, 1)
    now_ms = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": sb.bootstrap, "acks": "all"})
    old = [f"old{i}".encode() for i in range(30)]
    recent = [f"recent{i}".encode() for i in range(20)]
    for i, v in enumerate(old):
        p.produce(unique, v, partition=0, timestamp=now_ms - 7_200_000 + i)
    assert p.flush(30) == 0  # its own batch: the start is found at batch granularity
    for i, v in enumerate(recent):
        p.produce(unique, v, partition=0, timestamp=now_ms - 60_000 + i)
    assert p.flush(30) == 0
    set_group_configs(sb.bootstrap, unique, {"share.auto.offset.reset": "by_duration:PT1H"})
    c = share_consumer(sb.bootstrap, unique, unique)
    got: list[bytes] = []
    try:
        poll_until([c], lambda: len(got) >= len(recent),
                   on_message=lambda _i, m: got.append(m.value()))
        assert drain(c, 1.5) == []
    finally:
        c.close()
    assert sorted(got) == sorted(recent)
