"""Log compaction with real clients: confluent-kafka Producer, Consumer, ShareConsumer and
AdminClient against a broker whose cleaner runs every 100 ms.

The topic has tiny segments and ``min.cleanable.dirty.ratio=0.01``, so each roll makes it
cleanable. The active segment is never cleaned: after the test data a filler record (key
``~filler``, after ``segment.ms``) rolls the data out of it.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.conftest import BrokerProcess, free_port
from tests.integration.helpers import create_topic
from tests.integration.share_helpers import set_group_configs, share_consumer

SEGMENT_MS = 300
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "1024", "segment.ms": str(SEGMENT_MS),
             "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1500"}
KEYS = 20
VERSIONS = 5
DELETED = {f"k{i:02d}" for i in range(1, 10, 2)}  # their last version is a tombstone
FILLER = "~filler"


METRICS_PORT = [0]  # chosen when the broker starts (a port chosen at import may be taken since)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = Path(tmp_path_factory.mktemp("compaction")) / "data"
    for attempt in (1, 2):
        METRICS_PORT[0] = free_port()
        b = BrokerProcess(data, overrides={"log.cleaner.backoff.ms": "100",
                                           "log.flush.scheduler.interval.ms": "100",
                                           "metrics.listen": f"127.0.0.1:{METRICS_PORT[0]}"})
        try:
            b.start()
            break
        except RuntimeError as exc:  # the metrics port was taken meanwhile: once more
            if attempt == 2 or "already in use" not in str(exc):
                raise
    yield b
    b.stop()


def metric(name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT[0]}/metrics",
                                  timeout=5).read()
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.decode().splitlines():
        if line.startswith(f"{name}{{{want}}} ") or line.startswith(f"{name} ") and not want:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{want}}} not in /metrics")


def expected() -> dict[str, bytes]:
    return {f"k{i:02d}": b"v%d-%d" % (i, VERSIONS - 1) for i in range(KEYS)
            if f"k{i:02d}" not in DELETED}


def write_history(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    for v in range(VERSIONS):
        for i in range(KEYS):
            key = f"k{i:02d}"
            value = None if v == VERSIONS - 1 and key in DELETED else b"v%d-%d" % (i, v)
            p.produce(topic, value, key=key)
        p.flush(10)
    time.sleep(SEGMENT_MS / 1000 + 0.1)
    p.produce(topic, b"x", key=FILLER)  # rolls the history out of the active segment
    assert p.flush(10) == 0


def read_from_start(bootstrap: str, topic: str, timeout: float = 10.0
                    ) -> list[tuple[int, str, bytes | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[int, str, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append((msg.offset(), msg.key().decode(), msg.value()))
        raise AssertionError(f"no end of partition within {timeout}s")
    finally:
        c.close()


def compacted_view(bootstrap: str, topic: str, timeout: float = 30.0
                   ) -> list[tuple[int, str, bytes | None]]:
    """Consume from the start until the topic reads as fully compacted, tombstones gone."""
    deadline = time.monotonic() + timeout
    while True:
        got = read_from_start(bootstrap, topic)
        data = [r for r in got if r[1] != FILLER]
        if {k: v for _, k, v in data} == expected() and len(data) == len(expected()):
            return got
        assert time.monotonic() < deadline, f"not compacted in {timeout}s: {got}"
        time.sleep(0.3)


def test_consumers_read_the_latest_value_per_key_across_gaps(broker: BrokerProcess) -> None:
    topic = "compacted-history"
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    write_history(broker.bootstrap, topic)
    got = compacted_view(broker.bootstrap, topic)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets)
    # Offsets kept: gaps where records went, inside the log and before the first survivor.
    assert offsets[0] > 0 and offsets[-1] - offsets[0] + 1 > len(offsets)
    data = [r for r in got if r[1] != FILLER]
    assert all(v is not None for _, _, v in data)  # no tombstone left
    # Offsets are the original ones: the last version of key i was written at offset
    # (VERSIONS - 1) * KEYS + i.
    assert [o for o, _, _ in data] == [(VERSIONS - 1) * KEYS + int(k[1:]) for _, k, _ in data]
    # Earliest/latest offsets are unaffected by compaction.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()
    assert (low, high) == (0, VERSIONS * KEYS + 1)

    # A share group reads the compacted topic from the earliest offset across the gaps.
    group = "compacted-share"
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    sc = share_consumer(broker.bootstrap, group, topic)
    seen: dict[str, bytes | None] = {}
    labels = {"group": group, "topic": topic, "partition": "0"}
    deadline = time.monotonic() + 30
    try:
        while len(seen) < len(expected()) + 1:
            assert time.monotonic() < deadline, f"share group got only {seen}"
            for msg in sc.poll(0.3):
                assert msg.error() is None, msg.error()
                assert msg.key().decode() not in seen, "delivered twice"
                seen[msg.key().decode()] = msg.value()
        # The next polls send the implicit acknowledgements, the offsets missing inside batches
        # as GAP: the share-partition start offset reaches the log end, nothing to redeliver.
        while metric("shoal_share_partition_start_offset", **labels) != VERSIONS * KEYS + 1:
            assert time.monotonic() < deadline, "the share-partition start offset did not advance"
            assert list(sc.poll(0.2)) == []  # no redelivery
    finally:
        sc.close()
    seen.pop(FILLER)
    assert seen == expected()
    assert metric("shoal_share_acknowledgements_total", **labels, type="gap") > 0
    assert metric("shoal_log_cleaner_passes_total") >= 1


def test_an_unkeyed_record_is_refused_on_a_compacted_topic(broker: BrokerProcess) -> None:
    topic = "compacted-keys"
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    reports: list[tuple[KafkaError | None, bytes | None]] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "retries": 0})
    p.produce(topic, b"no key", on_delivery=lambda err, msg: reports.append((err, msg.value())))
    p.flush(10)
    p.produce(topic, b"keyed", key=b"k",
              on_delivery=lambda err, msg: reports.append((err, msg.value())))
    p.flush(10)
    (err, value), (ok_err, _) = reports
    assert value == b"no key" and err is not None and err.code() == KafkaError.INVALID_RECORD
    assert ok_err is None  # the connection and the partition keep working
    got = read_from_start(broker.bootstrap, topic)
    assert [(k, v) for _, k, v in got] == [("k", b"keyed")]
    # DeleteRecords needs the delete policy (Kafka: POLICY_VIOLATION).
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    (fut,) = a.delete_records([TopicPartition(topic, 0, 1)]).values()
    with pytest.raises(Exception) as info:
        fut.result(timeout=10)
    assert info.value.args[0].code() == KafkaError.POLICY_VIOLATION


def test_cleanup_policy_is_configured_and_described(broker: BrokerProcess) -> None:
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(broker.bootstrap, "policy-topic", config={"cleanup.policy": "compact,delete",
                                                           "min.compaction.lag.ms": "100"})
    res = ConfigResource(ConfigResource.Type.TOPIC, "policy-topic")
    cfg = a.describe_configs([res])[res].result(timeout=10)
    assert cfg["cleanup.policy"].value == "compact,delete"
    assert cfg["min.compaction.lag.ms"].value == "100"
    assert cfg["delete.retention.ms"].value == "86400000"
    assert cfg["min.cleanable.dirty.ratio"].value == "0.5"
    assert cfg["max.compaction.lag.ms"].value == str(2**63 - 1)
    alter = ConfigResource(ConfigResource.Type.TOPIC, "policy-topic", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([alter])[alter].result(timeout=10)
    assert a.describe_configs([res])[res].result(timeout=10)["cleanup.policy"].value == "delete"
    bad = ConfigResource(ConfigResource.Type.TOPIC, "policy-topic", incremental_configs=[
        ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="compact"):
        a.incremental_alter_configs([bad])[bad].result(timeout=10)


def test_records_cleaned_while_in_flight_are_not_delivered_again(broker: BrokerProcess) -> None:
    """A share consumer holds v0 of every key (acquired, unacknowledged) while v1 is written and
    the cleaner removes v0; once released, the group gets only what the log still has."""
    topic = "compacted-inflight"
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    group = "compacted-inflight"
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce(topic, b"v0", key=b"k%d" % i)
    assert p.flush(10) == 0
    holder = share_consumer(broker.bootstrap, group, topic, explicit=True)
    held: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(held) < 10:
        assert time.monotonic() < deadline, f"holder got only {held}"
        held += [m.value() for m in holder.poll(0.3) if m.error() is None]
    assert set(held) == {b"v0"}
    for i in range(10):
        p.produce(topic, b"v1", key=b"k%d" % i)
    p.flush(10)
    time.sleep(SEGMENT_MS / 1000 + 0.1)
    p.produce(topic, b"x", key=FILLER)
    assert p.flush(10) == 0
    deadline = time.monotonic() + 30
    while any(o < 10 for o, _, _ in read_from_start(broker.bootstrap, topic)):
        assert time.monotonic() < deadline, "v0 not cleaned"
        time.sleep(0.3)
    holder.close()  # releases what it still holds
    reader = share_consumer(broker.bootstrap, group, topic)
    got: list[tuple[str, bytes | None]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 11:
            assert time.monotonic() < deadline, f"reader got only {got}"
            got += [(m.key().decode(), m.value()) for m in reader.poll(0.3) if m.error() is None]
        got += [(m.key().decode(), m.value()) for m in reader.poll(1.0) if m.error() is None]
    finally:
        reader.close()
    assert sorted(got) == sorted([(f"k{i}", b"v1") for i in range(10)] + [(FILLER, b"x")])


def test_min_compaction_lag_above_max_is_refused(broker: BrokerProcess) -> None:
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = a.create_topics([NewTopic("lag-conflict", 1, 1, config={
        "cleanup.policy": "compact", "min.compaction.lag.ms": "5000",
        "max.compaction.lag.ms": "1000"})])["lag-conflict"]
    with pytest.raises(Exception) as info:
        fut.result(timeout=10)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "must not be larger than" in info.value.args[0].str()


def test_a_compacted_log_survives_kill_and_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides={"log.cleaner.backoff.ms": "100",
                                                    "log.flush.scheduler.interval.ms": "100"})
    b.start()
    try:
        topic = "compacted-restart"
        create_topic(b.bootstrap, topic, config=COMPACTED)
        write_history(b.bootstrap, topic)
        before = compacted_view(b.bootstrap, topic)
        b.kill()
        b.start()
        assert read_from_start(b.bootstrap, topic) == before
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        p.produce(topic, b"after", key=b"k00")
        assert p.flush(10) == 0
        after = read_from_start(b.bootstrap, topic)
        assert after[-1] == (VERSIONS * KEYS + 1, "k00", b"after")
    finally:
        b.stop()
