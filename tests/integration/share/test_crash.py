"""kill -9 of the broker under two explicit-mode ShareConsumers, and a restart on the same data dir.

Scenario (the crash issue): produce 20,000 records; two ``confluent_kafka.ShareConsumer``s in
explicit mode ACCEPT (and now and then RELEASE) as they go, committing every poll's
acknowledgements with ``commit_sync``; a watcher thread SIGKILLs the broker at a random point
(possibly while a commit is on the wire); the broker restarts on the same data dir and two new
consumers finish the topic.

What the clients know for certain is only what a successful ``commit_sync`` result says
("respond after commit", STYLE.md 1.4). So the ledger below counts an ACCEPT or RELEASE as done
only when ``commit_sync`` returned ``None`` for its partition; an acknowledgement whose commit
failed or was cut by the kill is *in doubt* (the broker may or may not have written it).

Invariants checked (violations are collected and reported all at once, with the seed):
- a record whose ACCEPT was confirmed is never delivered again (before or after the kill);
- every record is delivered, and the run ends with every record ACCEPTed (confirmed, or in doubt
  from the kill and never redelivered, which means the broker did write it);
- a record whose RELEASE was confirmed before the kill, and that was not ACCEPTed since (confirmed
  or in doubt), comes back after the restart with a delivery count of at least the released
  delivery's count + 1 (the count is share state: batches on ``__share_group_state``);
- the run really crossed the kill: records were delivered after the restart, and released
  records were in flight at the kill;
- ListGroups still shows the group after the restart, before any member rejoins (a separate,
  smaller scenario: share groups are records on ``__consumer_offsets``).

``test_kill_9_mid_stream_loses_no_committed_acknowledgement`` is one run (in ``make test``); the
``slow`` soak repeats the scenario ``CRASH_RUNS`` times with random kill points, each on a fresh
broker (``pytest -m slow -k crash``). The seed of a failing run is in its report.

Locks: the broker lets a group lower ``share.record.lock.duration.ms`` to 1 s
(``group.share.min.record.lock.duration.ms``) and the group uses a few seconds, so records a dead
client instance still held come back quickly. All waits are bounded polls.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, request, request_module
from tests.integration.share_helpers import produce, set_group_configs, share_consumer

log = logging.getLogger(__name__)

RECORDS = 20_000
LOCK_DURATION_MS = 3_000
RELEASE_RATE = 0.03  # share of first deliveries that are RELEASEd instead of ACCEPTed
# Just before the kill (a burst of BURST_S seconds, uniform), half of the deliveries with a count
# below BURST_RELEASE_BELOW are RELEASEd, so that released records are in flight at the kill.
BURST_S = (0.1, 0.4)
BURST_RELEASE_RATE = 0.5
BURST_RELEASE_BELOW = 4
LIST_GROUPS, METADATA, READ_STATE_SUMMARY = 16, 3, 87
CRASH_RUNS = 20

# super.users: durable_start_offset reads committed state with ReadShareGroupStateSummary, an
# inter-broker RPC that plain clients are refused.
CRASH_OVERRIDES = {"group.share.min.record.lock.duration.ms": "1000",
                   "super.users": "User:ANONYMOUS"}
GROUP_CONFIGS = {
    "share.auto.offset.reset": "earliest",
    "share.record.lock.duration.ms": str(LOCK_DURATION_MS),
    # Room for the burst's releases plus redeliveries after the restart.
    "share.delivery.count.limit": "10",
}
# Fail fast against a dead broker instead of the 60 s client default.
CLIENT_CONFIG = {"socket.timeout.ms": 5_000, "socket.connection.setup.timeout.ms": 5_000}
COMMIT_TIMEOUT_S = 10.0


@dataclass
class Ledger:
    """What the test clients observed, and what they know was committed."""

    seed: int
    delivered: dict[bytes, list[int]] = field(default_factory=dict)  # value -> delivery counts
    accepted: set[bytes] = field(default_factory=set)  # confirmed ACCEPT
    in_doubt: set[bytes] = field(default_factory=set)  # ACCEPT sent, outcome unknown
    released: dict[bytes, int] = field(default_factory=dict)  # confirmed RELEASE -> its count
    violations: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def on_delivery(self, value: bytes, count: int, phase: str) -> None:
        if value in self.accepted:
            self.violations.append(f"{phase}: {value!r} delivered again (count {count}) after a "
                                   f"confirmed ACCEPT")
        self.delivered.setdefault(value, []).append(count)

    def on_commit(self, acks: list[tuple[bytes, int, AcknowledgeType]], ok: bool) -> None:
        for value, count, kind in acks:
            if kind == AcknowledgeType.ACCEPT:
                if ok:
                    self.accepted.add(value)
                    self.in_doubt.discard(value)
                else:
                    self.in_doubt.add(value)
            elif ok:
                self.released[value] = count

    def finished(self, values: set[bytes]) -> bool:
        return values <= self.accepted | self.in_doubt

    def report(self) -> str:
        shown = "\n  ".join(self.violations[:20])
        more = f"\n  ... and {len(self.violations) - 20} more" if len(self.violations) > 20 else ""
        return f"seed {self.seed}: {len(self.violations)} violation(s):\n  {shown}{more}"


class Killer(threading.Thread):
    """SIGKILLs the broker once ``ledger.accepted`` reaches ``at`` records, after a random delay
    (cut short at ``latest`` accepted records) so that the kill can land anywhere in a poll/acknowledge/commit cycle. During that delay
    ``burst`` is set: the consumers RELEASE more, so released records are in flight at the kill. It touches no consumer (ShareConsumer is not thread-safe)."""

    def __init__(self, broker: BrokerProcess, ledger: Ledger, at: int, delay_s: float,
                 latest: int) -> None:
        super().__init__(name="broker-killer", daemon=True)
        self.broker, self.ledger, self.at, self.delay_s = broker, ledger, at, delay_s
        self.latest = latest
        self.burst = threading.Event()
        self.killed = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and len(self.ledger.accepted) < self.at:
            self.stop.wait(0.005)
        if self.stop.is_set():
            return
        self.burst.set()
        # The delay ends early near the end of the topic: the kill must come mid-stream.
        until = time.monotonic() + self.delay_s
        while (time.monotonic() < until and len(self.ledger.accepted) < self.latest
               and not self.stop.is_set()):
            self.stop.wait(0.002)
        self.broker.kill()
        self.killed.set()


def consume_round(c: ShareConsumer, ledger: Ledger, phase: str,
                  decide: Callable[[int], AcknowledgeType]) -> None:
    """One poll; acknowledge each record as ``decide(delivery count)`` says; commit them and
    book the outcome per partition."""
    msgs = c.poll(0.2)
    acks: dict[tuple[str, int], list[tuple[bytes, int, AcknowledgeType]]] = {}
    for m in msgs:
        if m.error() is not None:
            raise KafkaException(m.error())
        value, count = m.value(), m.delivery_count()
        ledger.on_delivery(value, count, phase)
        kind = decide(count)
        c.acknowledge(m, kind)
        acks.setdefault((m.topic(), m.partition()), []).append((value, count, kind))
    if not acks:
        return
    try:
        results = c.commit_sync(COMMIT_TIMEOUT_S)
    except KafkaException:
        results = {}
    ok = {(tp.topic, tp.partition) for tp, err in results.items() if err is None}
    for tp, booked in acks.items():
        ledger.on_commit(booked, tp in ok)


def accept_all(_count: int) -> AcknowledgeType:
    return AcknowledgeType.ACCEPT


def close_all(consumers: list[ShareConsumer]) -> None:
    """Close consumers in parallel (each close may wait for a dead broker)."""
    threads = [threading.Thread(target=_close_quietly, args=(c,)) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def _close_quietly(c: ShareConsumer) -> None:
    try:
        c.close()
    except KafkaException as exc:  # closing against a dead broker: the outcome is not used
        log.info("closing a share consumer failed: %s", exc)


def new_consumers(b: BrokerProcess, topic: str, n: int = 2) -> list[ShareConsumer]:
    return [share_consumer(b.bootstrap, topic, topic, explicit=True, **CLIENT_CONFIG)
            for _ in range(n)]


def crash_run(b: BrokerProcess, topic: str, seed: int, timeout: float = 120.0) -> Ledger:
    """The whole scenario on ``b`` (a fresh broker); returns the ledger (violations inside)."""
    rng = random.Random(seed)
    b.start()
    create_topic(b.bootstrap, topic, 1)
    set_group_configs(b.bootstrap, topic, GROUP_CONFIGS)
    values = set(produce(b.bootstrap, topic, RECORDS))
    ledger = Ledger(seed)
    killer = Killer(b, ledger, at=rng.randint(RECORDS // 10, RECORDS * 8 // 10),
                    delay_s=rng.uniform(BURST_S[0], BURST_S[1]), latest=RECORDS * 19 // 20)
    deadline = time.monotonic() + timeout

    def before_kill(count: int) -> AcknowledgeType:
        if killer.burst.is_set():
            if count < BURST_RELEASE_BELOW and rng.random() < BURST_RELEASE_RATE:
                return AcknowledgeType.RELEASE
        elif count == 1 and rng.random() < RELEASE_RATE:
            return AcknowledgeType.RELEASE
        return AcknowledgeType.ACCEPT

    before = new_consumers(b, topic)
    killer.start()
    try:
        while not killer.killed.is_set():
            assert time.monotonic() < deadline, f"seed {seed}: the kill point was never reached"
            for c in before:
                consume_round(c, ledger, "before kill", before_kill)
    finally:
        killer.stop.set()
        killer.join(10)
        close_all(before)

    accepted_before = len(ledger.accepted)
    # Released and not accepted since (an in-doubt ACCEPT may have been written): the broker
    # must hand these out again, with the released delivery's count + 1 or more.
    released_pending = {v: n for v, n in ledger.released.items()
                        if v not in ledger.accepted and v not in ledger.in_doubt}
    delivered_before = {v: len(n) for v, n in ledger.delivered.items()}
    b.start()
    tid = topic_id(b.bootstrap, topic)
    after = new_consumers(b, topic)
    try:
        # Done when the clients have accepted everything (in-doubt ACCEPTs count only if never
        # redelivered) and the durable share state agrees: its start offset reached the end.
        while not (ledger.finished(values) and durable_start_offset(b.bootstrap, topic, tid) >= RECORDS):
            assert time.monotonic() < deadline, (
                f"seed {seed}: {len(values - ledger.accepted - ledger.in_doubt)} record(s) not "
                f"accepted, durable start offset {durable_start_offset(b.bootstrap, topic, tid)}; "
                f"{ledger.report()}")
            for c in after:
                consume_round(c, ledger, "after restart", accept_all)
    finally:
        close_all(after)

    missing = values - set(ledger.delivered)
    if missing:
        ledger.violations.append(f"{len(missing)} record(s) never delivered, e.g. {min(missing)!r}")
    for v, count in released_pending.items():
        later = ledger.delivered[v][delivered_before[v]:]
        if not later:
            ledger.violations.append(f"{v!r} RELEASEd (count {count}) before the kill never came back")
        elif later[0] < count + 1:
            ledger.violations.append(f"{v!r} RELEASEd with count {count} came back with count "
                                     f"{later[0]}")
    ledger.stats = {
        "accepted before kill": accepted_before,
        "in doubt at kill": len(ledger.in_doubt),
        "released pending at kill": len(released_pending),
        "deliveries after restart": sum(len(n) - delivered_before.get(v, 0)
                                        for v, n in ledger.delivered.items()),
    }
    return ledger


def topic_id(bootstrap: str, name: str) -> uuid.UUID:
    m = request_module(METADATA, 12)
    with RawClient(bootstrap) as c:
        resp = c.call(METADATA, 12, request(
            METADATA, 12, topics=(m.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=name),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    (t,) = resp.topics
    assert t.error_code == ErrorCode.none, t
    return t.topic_id


def durable_start_offset(bootstrap: str, group: str, tid: uuid.UUID) -> int:
    """The share-partition's start offset as the share coordinator has committed it
    (ReadShareGroupStateSummary: a read of committed state that fences nobody)."""
    m = request_module(READ_STATE_SUMMARY, 1)
    body = m.ReadShareGroupStateSummaryRequest(group_id=group, topics=(m.ReadStateSummaryData(
        topic_id=tid, partitions=(m.PartitionData(partition=0, leader_epoch=0),)),))
    with RawClient(bootstrap) as c:
        (t,) = c.call(READ_STATE_SUMMARY, 1, body).results
    (r,) = t.partitions
    assert r.error_code == ErrorCode.none, r
    return int(r.start_offset)


@pytest.fixture
def crash_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", CRASH_OVERRIDES)
    yield b
    b.stop()


def crash_check(b: BrokerProcess, topic: str, attempts: int = 3) -> None:
    """Run the scenario until a run crossed the kill with RELEASEd records in flight.

    A violation fails at once and is never retried; only a run whose kill landed where no
    released record was pending (so the released-count path went unexercised) is repeated,
    on the same data directory with a new topic and seed.
    """
    stats: list[dict[str, int]] = []
    for attempt in range(attempts):
        ledger = crash_run(b, f"{topic}-{attempt}", seed=random.randrange(2**32))
        assert not ledger.violations, ledger.report()
        assert ledger.stats["deliveries after restart"] > 0, (ledger.seed, ledger.stats)
        if ledger.stats["released pending at kill"] > 0:
            return
        stats.append(ledger.stats)
        b.stop()
    pytest.fail(f"no run out of {attempts} had RELEASEd records pending at the kill: {stats}")


def test_kill_9_mid_stream_loses_no_committed_acknowledgement(crash_broker: BrokerProcess,
                                                              unique: str) -> None:
    crash_check(crash_broker, unique)


@pytest.mark.slow
@pytest.mark.parametrize("run", range(CRASH_RUNS))
def test_crash_soak_random_kill_points(crash_broker: BrokerProcess, unique: str, run: int) -> None:
    crash_check(crash_broker, unique)


def listed_share_groups(bootstrap: str) -> dict[str, Any]:
    with RawClient(bootstrap) as c:
        resp = c.call(LIST_GROUPS, 5, request(LIST_GROUPS, 5, states_filter=(), types_filter=()))
    assert resp.error_code == ErrorCode.none
    return {g.group_id: g for g in resp.groups}


def test_share_group_still_listed_after_kill_9(crash_broker: BrokerProcess, unique: str) -> None:
    b = crash_broker
    b.start()
    create_topic(b.bootstrap, unique, 1)
    set_group_configs(b.bootstrap, unique, GROUP_CONFIGS)
    produce(b.bootstrap, unique, 100)
    consumers = new_consumers(b, unique)
    ledger = Ledger(seed=0)
    try:
        deadline = time.monotonic() + 30
        while not ledger.accepted:
            assert time.monotonic() < deadline, "nothing was consumed"
            for c in consumers:
                consume_round(c, ledger, "before kill", accept_all)
        assert listed_share_groups(b.bootstrap)[unique].group_type == "share"
        b.kill()
    finally:
        close_all(consumers)
    b.start()
    groups = listed_share_groups(b.bootstrap)
    assert unique in groups, "the share group vanished after kill -9 and restart"
    assert groups[unique].group_type == "share"
