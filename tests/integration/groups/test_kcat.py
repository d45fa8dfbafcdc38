"""kcat's balanced consumer (``kcat -G group topic``, librdkafka's KafkaConsumer with the classic
protocol) against a Shoal broker (issue 14).

One kcat reads every record of a 4-partition topic to the end (``-e``) and its auto-commit leaves
the group's committed offsets at each partition's end (read back with AdminClient's
list_consumer_group_offsets, i.e. OffsetFetch). Two kcat processes in one group split the four
partitions between them, each reads only its own partitions' records, and when both are stopped
(SIGTERM: kcat closes its consumer, which commits) the committed offsets cover every record.
Every wait is bounded and every process is stopped (then killed) at the end.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(KCAT is None,
                                reason="kcat is installed by `make test` (make kcat)")
PARTITIONS = 4
ASSIGNED = re.compile(r"rebalanced \(memberid [^)]*\): assigned: (.*)$")


class Kcat:
    """A ``kcat -G`` process whose output lines (``partition:offset:value``) and stderr lines
    are collected by reader threads."""

    def __init__(self, bootstrap: str, group: str, topic: str, *extra: str) -> None:
        assert KCAT is not None
        self.proc = subprocess.Popen(
            [KCAT, "-b", bootstrap, "-G", group, topic, "-u", "-f", "%p:%o:%s\n",
             "-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=100",
             "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records: list[tuple[int, int, str]] = []
        self.errors: list[str] = []
        self.assigned: set[int] | None = None
        self._readers = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._readers:
            t.start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            p, o, v = line.rstrip("\n").split(":", 2)
            self.records.append((int(p), int(o), v))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.errors.append(line.rstrip())
            m = ASSIGNED.search(line)
            if m:
                self.assigned = {int(x) for x in re.findall(r"\[(\d+)\]", m.group(1))}

    def stop(self) -> int:
        """SIGTERM (kcat closes its consumer, committing), then SIGKILL after 15 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for t in self._readers:
            t.join(5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        return self.proc.returncode


@pytest.fixture
def group_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b
    b.stop()


def produce(bootstrap: str, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        p.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def committed(bootstrap: str, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {tp.partition: tp.offset for tp in fut.result(15).topic_partitions}


def wait_for(what: str, check: object, timeout: float, *procs: Kcat) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            detail = "\n".join("\n".join(p.errors[-10:]) for p in procs)
            raise AssertionError(f"{what} not within {timeout} s; kcat said:\n{detail}")
        time.sleep(0.05)


def test_kcat_balanced_consumer_reads_everything_and_commits(group_broker: BrokerProcess) -> None:
    topic, group, n = "kcat-g-all", "kcat-g-all", 200
    create_topic(group_broker.bootstrap, topic, PARTITIONS)
    produce(group_broker.bootstrap, topic, n)
    k = Kcat(group_broker.bootstrap, group, topic, "-e")  # exits at the end of every partition
    try:
        k.proc.wait(30)
    finally:
        code = k.stop()
    assert code == 0, k.errors
    assert sorted(v for _, _, v in k.records) == sorted(f"v{i}" for i in range(n))
    assert {p for p, _, _ in k.records} == set(range(PARTITIONS))
    assert committed(group_broker.bootstrap, group) == {p: n // PARTITIONS
                                                        for p in range(PARTITIONS)}


def test_two_kcat_processes_split_the_partitions_and_commit(group_broker: BrokerProcess) -> None:
    topic, group, n = "kcat-g-split", "kcat-g-split", 400
    create_topic(group_broker.bootstrap, topic, PARTITIONS)
    a = Kcat(group_broker.bootstrap, group, topic)
    b = Kcat(group_broker.bootstrap, group, topic)
    procs = (a, b)
    try:
        def split() -> bool:
            sets = [p.assigned for p in procs]
            return all(sets) and sets[0].isdisjoint(sets[1]) and \
                sets[0] | sets[1] == set(range(PARTITIONS))  # type: ignore[operator]

        wait_for("two disjoint assignments covering every partition", split, 40, *procs)
        assert a.assigned is not None and b.assigned is not None
        assert len(a.assigned) == len(b.assigned) == PARTITIONS // 2
        produce(group_broker.bootstrap, topic, n)
        wait_for(f"{n} records", lambda: len(a.records) + len(b.records) >= n, 30, *procs)
        for p in procs:  # each process read only its own partitions
            assert {part for part, _, _ in p.records} <= p.assigned  # type: ignore[operator]
            assert p.records
        values = [v for p in procs for _, _, v in p.records]
        assert sorted(values) == sorted(f"v{i}" for i in range(n))  # nothing twice
    finally:
        codes = [p.stop() for p in procs]
    assert codes == [0, 0], [p.errors[-5:] for p in procs]
    assert committed(group_broker.bootstrap, group) == {p: n // PARTITIONS
                                                        for p in range(PARTITIONS)}
