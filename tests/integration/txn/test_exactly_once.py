"""Exactly once, end to end: consume-transform-produce with confluent-kafka 2.16.1 across broker
crashes.

An application thread runs the classic EOS loop: a consumer in group ``eos-app`` reads the input
topic (read_committed, no auto-commit), a transactional producer writes one transformed record
per input record to the output topic and commits the consumer's positions with
``send_offsets_to_transaction`` in the same transaction. The broker is killed with SIGKILL in the
middle of transactions (after the output records were produced and again after the offsets were
sent, before the commit) and restarted: the transactions survive the restart and commit. Then the
application itself "crashes" mid-transaction and starts over with a new producer of the same
transactional id, which fences the old one and gets its transaction aborted (its output records
and pending offsets dropped), and a new consumer that resumes at the group's committed offsets.
On errors it recovers as Kafka applications do (abort if the transaction can be aborted, else
start over the same way).

librdkafka runs with ``metadata.recovery.strategy=none``: with its default (``rebootstrap``) a
restart of the only broker makes librdkafka 2.16.1 decommission the broker handle that it has
cached as the group coordinator, and ``send_offsets_to_transaction`` then waits forever (past its
timeout) without sending FindCoordinator or TxnOffsetCommit (seen in its debug log; a client-side
issue, not a broker answer).

The output topic, read with read_committed, holds every input record's transformation exactly
once: nothing lost, nothing duplicated, even though some records were processed (and produced)
more than once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic

pytestmark = pytest.mark.timeout(120)

INPUT, OUTPUT, GROUP, TXN_ID = "eos-in", "eos-out", "eos-app", "eos-app-tx"
PARTITIONS = 3
N = 300
BATCH = 25
FAST = {"group.initial.rebalance.delay.ms": "0"}
# EOS_DEBUG=eos,protocol turns on librdkafka's debug log of the application's producer.
DEBUG = {"debug": os.environ["EOS_DEBUG"]} if os.environ.get("EOS_DEBUG") else {}


class AppCrash(Exception):
    """Raised by the test's hook: the application "crashes" mid-transaction (it drops its
    producer and consumer without ending the transaction and starts over)."""


def transform(value: bytes) -> bytes:
    return b"out:" + value


class App:
    """The consume-transform-produce loop in a thread; ``hook(stage, txn_number)`` is called at
    each stage of each transaction (the test kills the broker from there)."""

    def __init__(self, bootstrap: str, ends: dict[int, int],
                 hook: Callable[[str, int], None]) -> None:
        self.bootstrap = bootstrap
        self.ends = ends
        self.hook = hook
        self.txns = 0
        self.committed_txns = 0
        self.aborted = 0
        self.rebuilt = 0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._main, name="eos-app", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _consumer(self) -> Consumer:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                      "group.protocol": "classic", "isolation.level": "read_committed",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500,
                      "topic.metadata.refresh.interval.ms": 1000})
        c.subscribe([INPUT])
        return c

    def _producer(self) -> Producer:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": TXN_ID,
                      "transaction.timeout.ms": 20_000, "linger.ms": 2,
                      "message.timeout.ms": 20_000, "reconnect.backoff.max.ms": 500,
                      "metadata.recovery.strategy": "none", **DEBUG})
        p.init_transactions(30)
        return p

    def _finished(self, consumer: Consumer) -> bool:
        tps = [TopicPartition(INPUT, p) for p in self.ends]
        try:
            committed = consumer.committed(tps, timeout=10)
        except KafkaException:
            return False
        return all(tp.offset == self.ends[tp.partition] for tp in committed)

    def _main(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.done.set()

    def _run(self) -> None:
        consumer, producer = self._consumer(), self._producer()
        deadline = time.monotonic() + 100
        try:
            while time.monotonic() < deadline:
                msgs = [m for m in consumer.consume(BATCH, 0.5) if not m.error()]
                if not msgs:
                    if consumer.assignment() and self._finished(consumer):
                        return
                    continue
                try:
                    self._transaction(consumer, producer, msgs)
                except (KafkaException, AppCrash) as exc:
                    consumer, producer = self._recover(consumer, producer, exc)
            raise AssertionError("the application did not finish in time")
        finally:
            consumer.close()

    def _transaction(self, consumer: Consumer, producer: Producer, msgs: list[Any]) -> None:
        self.txns += 1
        n = self.txns
        producer.begin_transaction()
        for m in msgs:
            producer.produce(OUTPUT, key=m.key(), value=transform(m.value()),
                             partition=m.partition())
        self.hook("produced", n)
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        self.hook("offsets-sent", n)
        producer.commit_transaction(30)
        self.committed_txns += 1

    def _recover(self, consumer: Consumer, producer: Producer,
                 exc: KafkaException | AppCrash) -> tuple[Consumer, Producer]:
        if isinstance(exc, KafkaException) and exc.args[0].txn_requires_abort():
            try:
                producer.abort_transaction(30)
                self.aborted += 1
                self._rewind(consumer)
                return consumer, producer
            except KafkaException:
                pass
        # Fatal, retriable-but-unknown outcome, or the abort failed: start over with a new
        # producer (same transactional id: it fences the old one and ends its transaction) and
        # a new consumer that resumes at the group's committed offsets.
        self.rebuilt += 1
        consumer.close()
        del producer  # its transaction is left open: the next producer's init fences it
        return self._consumer(), self._producer()

    def _rewind(self, consumer: Consumer) -> None:
        """After an abort: go back to the committed offsets (what the aborted transaction
        consumed will be consumed again)."""
        assignment = consumer.assignment()
        committed = consumer.committed(assignment, timeout=30)
        for tp in committed:
            if tp.offset < 0:
                tp.offset = -2  # OFFSET_BEGINNING: nothing committed yet
            consumer.seek(tp)


def produce_input(bootstrap: str) -> dict[int, int]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(N):
        p.produce(INPUT, key=str(i).encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0
    return {p: len(range(p, N, PARTITIONS)) for p in range(PARTITIONS)}


def read_committed_output(bootstrap: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-verify",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(OUTPUT, p, 0) for p in range(PARTITIONS)])
        out: list[bytes] = []
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            eof.discard(m.partition())
            out.append(m.value())
        assert len(eof) == PARTITIONS, "did not reach the end of the output topic"
        return out
    finally:
        c.close()


def test_consume_transform_produce_exactly_once_across_broker_kills(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides=FAST)
    broker.start()
    try:
        create_topic(broker.bootstrap, INPUT, partitions=PARTITIONS)
        create_topic(broker.bootstrap, OUTPUT, partitions=PARTITIONS)
        ends = produce_input(broker.bootstrap)
        kills: list[tuple[str, int]] = []
        plan = {("produced", 3), ("offsets-sent", 6)}

        def hook(stage: str, n: int) -> None:
            if (stage, n) in plan:
                kills.append((stage, n))
                broker.kill()  # SIGKILL mid-transaction
                broker.start()
            if (stage, n) == ("offsets-sent", 9):
                raise AppCrash  # the application dies before committing

        app = App(broker.bootstrap, ends, hook)
        app.start()
        assert app.done.wait(110), "the application hung"
        if app.error is not None:
            raise app.error
        assert kills == [("produced", 3), ("offsets-sent", 6)], kills
        assert app.rebuilt == 1 and app.committed_txns < app.txns, vars(app)
        out = read_committed_output(broker.bootstrap)
        expected = sorted(transform(f"v{i}".encode()) for i in range(N))
        duplicates = len(out) - len(set(out))
        missing = set(expected) - set(out)
        assert not duplicates and not missing, (
            f"{duplicates} duplicate(s), {len(missing)} missing; transactions "
            f"{app.txns} run, {app.committed_txns} committed, {app.aborted} aborted, "
            f"{app.rebuilt} recoveries")
        assert sorted(out) == expected
    finally:
        broker.stop()
