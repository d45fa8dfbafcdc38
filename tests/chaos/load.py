"""The chaos soak's load: real confluent-kafka clients in threads, each keeping a journal.

Every worker runs until ``stop()``; a client error (a broker just died, a coordinator moved) is
counted and the worker carries on, as an application would; an unexpected exception ends the
worker and is kept in ``Journal.crashes`` (the test fails on it). What each worker records is
only what its client *confirmed*, so the invariants in invariants.py compare confirmations with
what the logs hold at the end:

- ``Producer``: idempotent, ``acks=all``; every acknowledged value with its (partition, offset)
  and, per partition, the times acknowledgements arrived (gaps = unavailability).
- ``ShareWorker``: a ShareConsumer in explicit mode; every delivery (value, delivery count), the
  values it sent an ACCEPT for, those whose ACCEPT ``commit_sync`` confirmed (an ACCEPT whose
  answer was lost with a killed broker may have been applied: its outcome is unknown), and any
  delivery of a value already confirmed.
  A few records (seeded) are RELEASEd instead, so redelivery is exercised too.
- ``GroupWorker``: a classic consumer group member committing after every batch
  (asynchronously: a synchronous commit has no deadline in confluent-kafka); every value seen
  and, per partition, the highest offset whose commit ``on_commit`` confirmed.
- ``EosWorker``: consume-transform-produce (read_committed in, transactional out, offsets sent
  to the transaction). Any failure of a transaction throws both clients away: a new producer
  with the same transactional.id fences and aborts the old one, and a new consumer starts from
  the committed offsets, so the output holds each input exactly once by construction if the
  broker keeps its promises.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)

IN, OUT = "chaos-in", "chaos-out"
SHARE_GROUP, CONSUMER_GROUP, EOS_GROUP = "chaos-share", "chaos-cg", "chaos-eos"
TXN_ID = "chaos-eos-tx"


@dataclass
class Journal:
    """What the clients were told; every field is guarded by ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)
    ack_times: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    share_deliveries: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    share_accept_sent: set[str] = field(default_factory=set)
    share_confirmed: set[str] = field(default_factory=set)
    share_after_confirm: list[tuple[str, int]] = field(default_factory=list)
    group_seen: set[str] = field(default_factory=set)
    group_commits: dict[int, int] = field(default_factory=dict)
    eos_transactions: int = 0
    eos_seen: set[str] = field(default_factory=set)  # input values of committed transactions
    eos_slowest: tuple[float, str] = (0.0, "")  # the slowest step of a transaction, seconds
    client_errors: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    client_restarts: list[str] = field(default_factory=list)  # hung clients replaced (HANG_S)


# A client call this long, or a reader given nothing this long while records wait for it, is a
# hung client: every call of the workers has a timeout of at most 30 s. librdkafka 2.16 has
# been seen to go silent in all its threads after a re-bootstrap (every broker it knew being
# down at once) and never recover, close() included, while the brokers served everyone else;
# the supervisor (test_chaos_soak.py) replaces such a client and the report lists it.
HANG_S = 90.0


def client_debug(name: str) -> dict[str, Any]:
    """librdkafka debug logging for a client, when CHAOS_DEBUG names librdkafka debug contexts
    (e.g. "cgrp,fetch,topic"): lines go to the file in CHAOS_DEBUG_DIR (else the cwd) named
    after the worker. Empty (no debug) otherwise."""
    contexts = os.environ.get("CHAOS_DEBUG")
    if not contexts:
        return {}
    logger = logging.getLogger(f"chaos.{name}")
    if not logger.handlers:
        path = os.path.join(os.environ.get("CHAOS_DEBUG_DIR", "."), f"{name}.rdkafka.log")
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    return {"debug": contexts, "logger": logger}


class Worker(threading.Thread):
    """A daemon thread running ``step()`` until ``stop()``; see the module docstring."""

    name_ = "worker"

    def __init__(self, journal: Journal, bootstrap: str) -> None:
        super().__init__(daemon=True, name=self.name_)
        self.journal = journal
        self.bootstrap = bootstrap
        self._stop_event = threading.Event()
        self._call: tuple[str, float] | None = None  # the client call under way, since when
        self.progress_at = time.monotonic()  # when a reader last got records
        self.abandoned = False

    def clone(self) -> Worker:
        """A fresh worker doing the same job with a new client (see ``hung``)."""
        return type(self)(self.journal, self.bootstrap)

    def behind(self) -> bool:
        """Whether records wait for this reader (never for the producer)."""
        return False

    def hung(self) -> str | None:
        """Why this worker's client looks hung (``HANG_S``), or None."""
        stuck = self.stuck(HANG_S)
        if stuck is not None:
            return stuck
        idle = time.monotonic() - self.progress_at
        if idle > HANG_S and self.behind():
            return f"{self.name_} got no records for {idle:.0f} s while records waited"
        return None

    def abandon(self) -> None:
        """Leave this worker to its hung client: told to stop, never waited for."""
        self.abandoned = True
        self._stop_event.set()

    def call(self, what: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, remembered as the call under way (see ``stuck``)."""
        self._call = (what, time.monotonic())
        try:
            return fn(*args)
        finally:
            self._call = None

    def stuck(self, longer_than: float = 30.0) -> str | None:
        """The client call this worker has been in for more than ``longer_than`` s, if any."""
        call = self._call
        if call is None or time.monotonic() - call[1] < longer_than:
            return None
        return f"{self.name_} in {call[0]} for {time.monotonic() - call[1]:.0f} s"

    def stop(self, timeout: float = 60.0) -> None:
        self._stop_event.set()
        if self.abandoned:
            return
        self.join(timeout)
        if self.is_alive():
            self.journal.crashes.append(f"{self.name_} did not stop within {timeout:.0f} s"
                                        f" ({self.stuck(0) or 'not in a client call'})")

    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    def error(self, what: str) -> None:
        with self.journal.lock:
            self.journal.client_errors[f"{self.name_}: {what}"] += 1

    def run(self) -> None:
        try:
            self.setup()
            while not self.stopping:
                self.step()
        except Exception as e:  # kept for the test to fail on, with what happened
            self.journal.crashes.append(f"{self.name_} crashed: {type(e).__name__}: {e}")
        finally:
            try:
                self.teardown()
            except Exception as e:
                self.journal.crashes.append(f"{self.name_} close failed: {e}")

    def setup(self) -> None: ...
    def step(self) -> None: ...
    def teardown(self) -> None: ...


class ProducerWorker(Worker):
    """``rate`` records/s, round-robin over ``partitions`` partitions of IN, until stopped."""

    name_ = "producer"

    def __init__(self, journal: Journal, bootstrap: str, partitions: int, rate: float) -> None:
        super().__init__(journal, bootstrap)
        self.partitions, self.interval, self.seq = partitions, 1.0 / rate, 0

    def clone(self) -> Worker:
        return ProducerWorker(self.journal, self.bootstrap, self.partitions, 1.0 / self.interval)

    def setup(self) -> None:
        self.p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                           "enable.idempotence": True, "linger.ms": 5,
                           "message.timeout.ms": 600_000, "reconnect.backoff.max.ms": 1000})

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.error(str(err.name()))
            return
        with self.journal.lock:
            self.journal.acked[msg.value().decode()] = (msg.partition(), msg.offset())
            self.journal.ack_times[msg.partition()].append(time.monotonic())

    def step(self) -> None:
        value = f"r{self.seq}"
        try:
            self.p.produce(IN, value.encode(), partition=self.seq % self.partitions,
                           on_delivery=self._delivered)
            self.seq += 1
        except BufferError:
            self.error("queue full")
        self.p.poll(self.interval)

    def teardown(self) -> None:
        left = self.p.flush(120)
        if left:
            self.journal.crashes.append(f"producer: {left} records neither acknowledged nor "
                                        "failed 120 s after the load stopped")


class ShareWorker(Worker):
    """One explicit-mode share consumer of IN in SHARE_GROUP."""

    name_ = "share"

    def __init__(self, journal: Journal, bootstrap: str, index: int, seed: int) -> None:
        super().__init__(journal, bootstrap)
        self.name_ = f"share-{index}"
        self.index, self.seed = index, seed
        self.rng = random.Random(seed * 100 + index)

    def clone(self) -> Worker:
        return ShareWorker(self.journal, self.bootstrap, self.index, self.seed)

    def behind(self) -> bool:
        with self.journal.lock:
            return not self.journal.acked.keys() <= self.journal.share_accept_sent

    def setup(self) -> None:
        self.c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": SHARE_GROUP,
                                "share.acknowledgement.mode": "explicit",
                                **client_debug(self.name_)})
        self.c.subscribe([IN])

    def step(self) -> None:
        batch = []
        for m in self.call("poll", self.c.poll, 0.5):
            if m.error() is not None:
                self.error(m.error().name())
            else:
                batch.append(m)
        if not batch:
            return
        self.progress_at = time.monotonic()
        accepted = []
        j = self.journal
        for m in batch:
            value = m.value().decode()
            with j.lock:
                j.share_deliveries[value].append(m.delivery_count())
                if value in j.share_confirmed:
                    j.share_after_confirm.append((value, m.delivery_count()))
            if self.rng.random() < 0.02:
                self.c.acknowledge(m, AcknowledgeType.RELEASE)
            else:
                self.c.acknowledge(m, AcknowledgeType.ACCEPT)
                accepted.append(m)
        with j.lock:
            j.share_accept_sent.update(m.value().decode() for m in accepted)
        try:
            results = self.call("commit_sync", self.c.commit_sync, 15) or {}
        except KafkaException as e:
            self.error(f"commit_sync: {e.args[0].name()}")
            return
        failed = {(tp.topic, tp.partition) for tp, err in results.items() if err is not None}
        if failed:
            self.error("acknowledgement failed")
        with j.lock:
            j.share_confirmed.update(m.value().decode() for m in accepted
                                     if (m.topic(), m.partition()) not in failed)

    def teardown(self) -> None:
        self.call("close", self.c.close)


class GroupWorker(Worker):
    """One member of CONSUMER_GROUP (classic protocol), committing after every batch."""

    name_ = "group"

    def setup(self) -> None:
        self.c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": CONSUMER_GROUP,
                           "enable.auto.commit": False, "auto.offset.reset": "earliest",
                           "on_commit": self._committed, **client_debug(self.name_)})
        self.c.subscribe([IN])

    def _committed(self, err: Any, partitions: Any) -> None:
        if err is not None:
            self.error(f"commit: {err.name()}")
            return
        with self.journal.lock:
            for tp in partitions:
                if tp.error is None and tp.offset >= 0:
                    prev = self.journal.group_commits.get(tp.partition, -1)
                    self.journal.group_commits[tp.partition] = max(prev, tp.offset)

    def behind(self) -> bool:
        with self.journal.lock:
            return not self.journal.acked.keys() <= self.journal.group_seen

    def step(self) -> None:
        msgs = [m for m in self.call("consume", self.c.consume, 200, 0.5) if m.error() is None]
        if not msgs:
            return
        self.progress_at = time.monotonic()
        with self.journal.lock:
            self.journal.group_seen.update(m.value().decode() for m in msgs)
        try:
            self.c.commit(asynchronous=True)
        except KafkaException as e:
            self.error(f"commit: {e.args[0].name()}")

    def teardown(self) -> None:
        self.call("close", self.c.close)


class EosWorker(Worker):
    """Consume-transform-produce from IN to OUT; see the module docstring."""

    name_ = "eos"

    def __init__(self, journal: Journal, bootstrap: str, out_partitions: int) -> None:
        super().__init__(journal, bootstrap)
        self.out_partitions = out_partitions
        self.c: Consumer | None = None
        self.p: Producer | None = None
        # The consumer's group metadata, read once per consumer (see step).
        self.group_metadata: object | None = None

    def clone(self) -> Worker:
        return EosWorker(self.journal, self.bootstrap, self.out_partitions)

    def behind(self) -> bool:
        with self.journal.lock:
            return not self.journal.acked.keys() <= self.journal.eos_seen

    def _clients(self) -> tuple[Consumer, Producer]:
        if self.p is None:
            p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": TXN_ID,
                          "transaction.timeout.ms": 60_000, "linger.ms": 5})
            try:
                self.call("init_transactions", p.init_transactions, 30)
            except KafkaException as e:
                self.error(f"init_transactions: {e.args[0].name()}")
                time.sleep(0.5)
                raise _Retry from e
            self.p = p
        if self.c is None:
            self.c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": EOS_GROUP,
                               "isolation.level": "read_committed",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False,
                               **client_debug(self.name_)})
            self.c.subscribe([IN])
        return self.c, self.p

    def _discard(self) -> None:
        """Throw both clients away (a new consumer restarts from the committed offsets). The
        old consumer leaves its group in a thread of its own: close() has no deadline."""
        if self.c is not None:
            threading.Thread(target=self.c.close, daemon=True, name="eos-close").start()
        self.c, self.p, self.group_metadata = None, None, None

    def step(self) -> None:
        try:
            c, p = self._clients()
        except _Retry:
            return
        msgs = [m for m in self.call("consume", c.consume, 200, 0.5) if m.error() is None]
        if not msgs:
            return
        step, started = "begin", time.monotonic()
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(OUT, m.value(), partition=m.partition() % self.out_partitions)
            step = "send_offsets_to_transaction"
            # The consumed positions from the records themselves: Consumer.assignment() and
            # position() wait on librdkafka's main thread while holding the GIL, which a
            # callback there may be waiting for (a chaos run deadlocked every client thread).
            ends: dict[int, int] = {}
            for m in msgs:
                ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
            # consumer_group_metadata() holds the GIL too while it waits on that thread, and
            # librdkafka 2.16's main thread can deadlock on its own locks after a leader change
            # (OffsetForLeaderEpoch handling against a broker thread failing a connection): one
            # such call then froze the whole test process (no thread, not even the supervisor,
            # could run). So it is read once per consumer, after it first got records (it has
            # joined); a rebalance since fails the transaction, and a new consumer reads it anew.
            if self.group_metadata is None:
                self.group_metadata = c.consumer_group_metadata()
            self.call(step, p.send_offsets_to_transaction,
                      [TopicPartition(IN, part, end) for part, end in sorted(ends.items())],
                      self.group_metadata, 30)
            step = "commit_transaction"
            self.call(step, p.commit_transaction, 30)
        except KafkaException as e:
            self.error(f"{step}: {e.args[0].name()}")
            self._discard()
            return
        finally:
            took = time.monotonic() - started
            with self.journal.lock:
                if took > self.journal.eos_slowest[0]:
                    self.journal.eos_slowest = (round(took, 2), f"{step}, {len(msgs)} records")
        self.progress_at = time.monotonic()
        with self.journal.lock:
            self.journal.eos_transactions += 1
            self.journal.eos_seen.update(m.value().decode() for m in msgs)

    def teardown(self) -> None:
        if self.c is not None:
            self.call("close", self.c.close)


class _Retry(Exception):
    pass
