"""Dead-letter topics (KIP-1191, issue 16) with confluent_kafka.ShareConsumer on a real broker.

A REJECTed record and a record RELEASEd until the delivery count limit each appear once on the
group's DLQ topic, with the ``__dlq.errors.*`` headers (and the original key and value when
``errors.deadletterqueue.copy.record.enable`` is on), and are not delivered again. A DLQ topic
that does not exist (auto-creation off) gets nothing: the record is archived anyway, the log says
so and ``shoal_share_dead_letter_skipped_records_total`` counts it. A SIGKILL between the
dead-letter append and the ARCHIVED state write (widened by the test-only
``SHOAL_TEST_DLQ_STATE_WRITE_DELAY_MS``) leaves each record dead-lettered at least once (here:
twice) and archived after the restart, never lost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, TopicPartition

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.share_helpers import drain, set_group_configs, share_consumer
from tests.integration.admin.test_metrics import MetricsBroker, scrape

GROUP_ENABLE = {"errors.deadletterqueue.group.enable": "true"}


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsBroker]:
    b = MetricsBroker(Path(tmp_path_factory.mktemp("dlq-broker")) / "data")
    b.start()
    yield b
    b.stop()


def setup(bootstrap: str, name: str, *, dlq: str | None = None, **configs: str) -> str:
    """Source topic ``name``, DLQ topic ``dlq.<name>`` (2 partitions, DLQ-enabled) unless
    ``dlq`` names another, and the group ``name`` pointing at it."""
    create_topic(bootstrap, name, 1)
    target = dlq or f"dlq.{name}"
    if dlq is None:
        create_topic(bootstrap, target, 2, GROUP_ENABLE)
    set_group_configs(bootstrap, name, {"share.auto.offset.reset": "earliest",
                                        "errors.deadletterqueue.topic.name": target, **configs})
    return target


def produce_keyed(bootstrap: str, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode())
    assert p.flush(30) == 0


def read_dlq(bootstrap: str, topic: str, partition: int, want: int, timeout: float = 20.0,
             settle: float = 1.0) -> list[Any]:
    """Every record of ``topic``-``partition`` from the start: waits for ``want`` of them, then
    ``settle`` seconds more for any duplicate."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    quiet_until: float | None = None
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
            if len(got) >= want:
                quiet_until = quiet_until or time.monotonic() + settle
                if time.monotonic() >= quiet_until:
                    break
    finally:
        c.close()
    return got


def headers(msg: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in (msg.headers() or [])}


def consume(c: Any, decide: Any, want: int, timeout: float = 30.0) -> list[tuple[bytes, int]]:
    """Poll ``c`` (explicit mode), acknowledging each record as ``decide(value, count)`` says,
    committing each poll, until ``want`` deliveries were seen."""
    seen: list[tuple[bytes, int]] = []
    deadline = time.monotonic() + timeout
    while len(seen) < want:
        assert time.monotonic() < deadline, f"only {seen} delivered"
        msgs = c.poll(0.5)
        for msg in msgs:
            assert msg.error() is None, msg.error()
            seen.append((msg.value(), msg.delivery_count()))
            c.acknowledge(msg, decide(msg.value(), msg.delivery_count()))
        if msgs:
            c.commit_sync()
    return seen


def test_rejected_records_appear_once_on_the_dlq_topic_with_context_headers(mb, unique) -> None:
    dlq = setup(mb.bootstrap, unique)
    produce_keyed(mb.bootstrap, unique, 6)
    c = share_consumer(mb.bootstrap, unique, unique, explicit=True)
    try:
        rejected = {b"v1", b"v4"}
        consume(c, lambda v, _n: AcknowledgeType.REJECT if v in rejected
                else AcknowledgeType.ACCEPT, 6)
        got = read_dlq(mb.bootstrap, dlq, 0, 2)  # source partition 0 % 2 partitions = 0
        assert len(got) == 2, [headers(m) for m in got]
        assert read_dlq(mb.bootstrap, dlq, 1, 0, timeout=1, settle=0.5) == []
        by_offset = {headers(m)["__dlq.errors.offset"]: m for m in got}
        assert sorted(by_offset) == ["1", "4"]
        for m in got:
            h = headers(m)
            assert h["__dlq.errors.topic"] == unique
            assert h["__dlq.errors.partition"] == "0"
            assert h["__dlq.errors.group"] == unique
            assert h["__dlq.errors.delivery.count"] == "1"
            assert h["__dlq.errors.message"] == "Offset rejected by client."  # Kafka 4.4's
            assert m.key() is None and m.value() is None  # copy.record.enable is false
        assert drain(c, 1.5) == []  # rejected records are never delivered again
        s = scrape(mb)
        labels = {"group": unique, "topic": unique, "partition": "0"}
        assert s.value("shoal_share_dead_lettered_records_total", **labels) == 2
        assert s.value("shoal_share_partition_archiving_records", **labels) == 0
        assert s.value("shoal_share_partition_start_offset", **labels) == 6
    finally:
        c.close()


def test_a_record_at_the_delivery_limit_is_dead_lettered_with_its_key_and_value(mb, unique
                                                                                 ) -> None:
    dlq = setup(mb.bootstrap, unique, **{"share.delivery.count.limit": "2",
                                         "errors.deadletterqueue.copy.record.enable": "true"})
    produce_keyed(mb.bootstrap, unique, 3)
    c = share_consumer(mb.bootstrap, unique, unique, explicit=True)
    try:
        seen = consume(c, lambda v, _n: AcknowledgeType.RELEASE if v == b"v1"
                       else AcknowledgeType.ACCEPT, 4)
        assert sorted(seen) == [(b"v0", 1), (b"v1", 1), (b"v1", 2), (b"v2", 1)]
        (m,) = read_dlq(mb.bootstrap, dlq, 0, 1)
        h = headers(m)
        assert (h["__dlq.errors.offset"], h["__dlq.errors.delivery.count"]) == ("1", "2")
        assert h["__dlq.errors.message"] == "Offset delivery count exceeded the threshold."
        assert (m.key(), m.value()) == (b"k1", b"v1")  # copied
        assert drain(c, 1.5) == []
    finally:
        c.close()


@pytest.mark.parametrize("case", ["missing", "not-enabled"])
def test_a_missing_or_disallowed_dlq_topic_archives_the_record_and_says_so(mb, unique, case
                                                                           ) -> None:
    if case == "not-enabled":  # exists, but without errors.deadletterqueue.group.enable=true
        create_topic(mb.bootstrap, f"dlq.{unique}-missing", 1)
    setup(mb.bootstrap, unique, dlq=f"dlq.{unique}-missing")
    produce_keyed(mb.bootstrap, unique, 2)
    c = share_consumer(mb.bootstrap, unique, unique, explicit=True)
    try:
        consume(c, lambda v, _n: AcknowledgeType.REJECT if v == b"v0"
                else AcknowledgeType.ACCEPT, 2)
        labels = {"group": unique, "topic": unique, "partition": "0"}
        deadline = time.monotonic() + 10
        while scrape(mb).value("shoal_share_dead_letter_skipped_records_total", **labels) != 1:
            assert time.monotonic() < deadline, "the skipped dead letter was not counted"
            time.sleep(0.1)
        s = scrape(mb)
        assert s.value("shoal_share_partition_start_offset", **labels) == 2  # archived
        assert s.value("shoal_share_dead_lettered_records_total", **labels) == 0
        log = mb.log_path.read_text(errors="replace")
        line = next(x for x in log.splitlines() if "without a dead-letter record" in x
                    and unique in x)
        assert f"dlq.{unique}-missing" in line
        assert ("does not exist" if case == "missing" else "does not allow") in line
        assert "errors.deadletterqueue.group.enable=true" in line  # what to do
        assert drain(c, 1.0) == []
        assert mb.alive()
    finally:
        c.close()


def alter_broker(bootstrap: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    from confluent_kafka.admin import ResourceType

    a = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    for fut in a.incremental_alter_configs(
            [ConfigResource(ResourceType.BROKER, "1", incremental_configs=entries)]).values():
        fut.result(timeout=10)


def test_auto_creation_makes_a_dlq_enabled_topic_when_the_broker_allows_it(mb, unique) -> None:
    dlq = setup(mb.bootstrap, unique, dlq=f"dlq.{unique}-auto")
    alter_broker(mb.bootstrap, {"errors.deadletterqueue.auto.create.topics.enable": "true"})
    try:
        produce_keyed(mb.bootstrap, unique, 1)
        c = share_consumer(mb.bootstrap, unique, unique, explicit=True)
        try:
            consume(c, lambda _v, _n: AcknowledgeType.REJECT, 1)
        finally:
            c.close()
        (m,) = read_dlq(mb.bootstrap, dlq, 0, 1)
        assert headers(m)["__dlq.errors.offset"] == "0"
        from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

        a = AdminClient({"bootstrap.servers": mb.bootstrap})
        (fut,) = a.describe_configs([ConfigResource(ResourceType.TOPIC, dlq)]).values()
        described = fut.result(timeout=10)
        assert described["errors.deadletterqueue.group.enable"].value == "true"
        # Pinned on the topic (as Kafka 4.4 creates it), not inherited from the broker default.
        ts = described["message.timestamp.type"]
        source = int(getattr(ts.source, "value", ts.source))
        assert (ts.value, source) == ("CreateTime", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    finally:
        alter_broker(mb.bootstrap, {"errors.deadletterqueue.auto.create.topics.enable": "false"})


def test_the_dlq_topic_name_must_carry_the_broker_prefix(mb, unique) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    from confluent_kafka.admin import ResourceType

    a = AdminClient({"bootstrap.servers": mb.bootstrap})
    entries = [ConfigEntry("errors.deadletterqueue.topic.name", unique,
                           incremental_operation=AlterConfigOpType.SET)]
    (fut,) = a.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, unique, incremental_configs=entries)]).values()
    with pytest.raises(Exception) as info:
        fut.result(timeout=10)
    err = info.value.args[0]
    assert err.name() == "INVALID_CONFIG"
    assert "must start with 'dlq.'" in err.str()


@pytest.fixture
def crash_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data")
    # Only the first start has the window between the DLQ append and the ARCHIVED write.
    monkeypatch.setenv("SHOAL_TEST_DLQ_STATE_WRITE_DELAY_MS", "4000")
    b.start()
    monkeypatch.delenv("SHOAL_TEST_DLQ_STATE_WRITE_DELAY_MS")
    yield b
    b.stop()


def test_sigkill_while_archiving_dead_letters_again_after_the_restart(crash_broker, unique
                                                                      ) -> None:
    b = crash_broker
    dlq = setup(b.bootstrap, unique)
    produce_keyed(b.bootstrap, unique, 5)
    c = share_consumer(b.bootstrap, unique, unique, explicit=True)
    try:
        consume(c, lambda v, _n: AcknowledgeType.REJECT if v in (b"v0", b"v2", b"v3")
                else AcknowledgeType.ACCEPT, 5)
        # The dead letters are durable on the DLQ topic; the ARCHIVED write waits 4 s: kill now.
        before = read_dlq(b.bootstrap, dlq, 0, 3, timeout=10, settle=0)
        assert sorted(headers(m)["__dlq.errors.offset"] for m in before) == ["0", "2", "3"]
        b.kill()
    finally:
        c.close()
    assert "SHOAL_TEST_DLQ_STATE_WRITE_DELAY_MS" not in os.environ
    b.start()
    # The share-partition loads on the first ShareFetch (as in Kafka): its ARCHIVING records
    # are dead-lettered again then (at least once), and archived; a new record flows past them.
    produce_keyed(b.bootstrap, unique, 1)
    c = share_consumer(b.bootstrap, unique, unique, explicit=True)
    try:
        got = consume(c, lambda _v, _n: AcknowledgeType.ACCEPT, 1)
        assert got == [(b"v0", 1)]  # the new record (produce_keyed restarts at v0), count 1
        after = read_dlq(b.bootstrap, dlq, 0, 4, timeout=30, settle=2.0)
        offsets = [headers(m)["__dlq.errors.offset"] for m in after]
        # Each record at least once; those whose ARCHIVED write the kill cut (all three when
        # they were dead-lettered in one append) twice, never more.
        assert set(offsets) == {"0", "2", "3"}, offsets
        assert all(offsets.count(o) <= 2 for o in offsets), offsets
        assert len(offsets) > 3, offsets  # the kill did land inside the window
        assert drain(c, 1.0) == []  # archived: never delivered again
    finally:
        c.close()


def test_dead_letters_respect_the_dlq_topics_max_message_bytes(mb, unique) -> None:
    create_topic(mb.bootstrap, unique, 1)
    dlq = f"dlq.{unique}"
    create_topic(mb.bootstrap, dlq, 1, {**GROUP_ENABLE, "max.message.bytes": "1500"})
    set_group_configs(mb.bootstrap, unique, {
        "share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.copy.record.enable": "true"})
    p = Producer({"bootstrap.servers": mb.bootstrap, "acks": "all"})
    values = [b"small-0", b"x" * 2000, b"small-2", b"small-3", b"small-4"]
    for v in values:
        p.produce(unique, v)
    assert p.flush(30) == 0
    c = share_consumer(mb.bootstrap, unique, unique, explicit=True)
    try:
        consume(c, lambda _v, _n: AcknowledgeType.REJECT, 5)
    finally:
        c.close()
    got = read_dlq(mb.bootstrap, dlq, 0, 5)
    by_offset = {int(headers(m)["__dlq.errors.offset"]): m.value() for m in got}
    assert len(got) == 5 and sorted(by_offset) == [0, 1, 2, 3, 4]
    # Small records are copied; the one too large for the DLQ topic goes with headers only.
    assert by_offset == {0: b"small-0", 1: None, 2: b"small-2", 3: b"small-3", 4: b"small-4"}


def _share_version(bootstrap: str) -> tuple[tuple[int, int], int]:
    """(supported min, max) and finalized level of share.version from ApiVersions."""
    from tests.integration.rawclient import RawClient, request

    with RawClient(bootstrap) as c:
        resp = c.call(18, 3, request(18, 3, client_software_name="t",
                                     client_software_version="1"))
    (sup,) = [f for f in resp.supported_features if f.name == "share.version"]
    (fin,) = [f for f in resp.finalized_features if f.name == "share.version"]
    return (int(sup.min_version), int(sup.max_version)), int(fin.max_version_level)


def test_share_version_2_is_advertised_as_kafka_4_4_does(mb) -> None:
    assert _share_version(mb.bootstrap) == ((0, 2), 2)


def test_below_share_version_2_rejected_records_are_archived_without_a_dead_letter(
        tmp_path: Path, unique: str) -> None:
    """Dead-letter topics belong to share.version 2 (Kafka's SV_2): finalized at 1, a group's
    DLQ config has no effect and a REJECTed record is archived at once."""
    b = MetricsBroker(tmp_path / "data")
    b.overrides["share.version"] = "1"
    b.start()
    try:
        assert _share_version(b.bootstrap) == ((0, 2), 1)
        dlq = setup(b.bootstrap, unique)
        produce_keyed(b.bootstrap, unique, 2)
        c = share_consumer(b.bootstrap, unique, unique, explicit=True)
        try:
            consume(c, lambda v, _n: AcknowledgeType.REJECT if v == b"v0"
                    else AcknowledgeType.ACCEPT, 2)
            labels = {"group": unique, "topic": unique, "partition": "0"}
            deadline = time.monotonic() + 10
            while scrape(b).value("shoal_share_partition_start_offset", **labels) != 2:
                assert time.monotonic() < deadline, "the rejected record was not archived"
                time.sleep(0.1)
            s = scrape(b)
            assert s.value("shoal_share_dead_lettered_records_total", **labels) == 0
            assert s.value("shoal_share_dead_letter_skipped_records_total", **labels) == 0
            assert read_dlq(b.bootstrap, dlq, 0, 0, timeout=1, settle=0.5) == []
        finally:
            c.close()
    finally:
        b.stop()
