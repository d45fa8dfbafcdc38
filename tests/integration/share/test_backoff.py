"""Redelivery backoff (issue 16) seen by confluent_kafka.ShareConsumer in explicit mode.

The group configs are set with AdminClient.incremental_alter_configs on the GROUP resource. A
RELEASEd record must not come back before its backoff while other records keep flowing, the
second redelivery must wait longer than the first (multiplier), and after kill -9 and a restart
the config is still there and a record released right before the kill does not come back early.

Timing: delays are measured on the client from just *before* the acknowledgement is sent, so the
broker's release time is later and every lower bound is safe; upper bounds are generous (a
loaded 2-core machine).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient
from tests.integration.share_helpers import initialize_share_state, produce, share_consumer
from tests.integration.share.test_protocol import Member, part, topic_id

RELEASE = 2


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("backoff-broker")) / "data")
    b.start()
    yield b
    b.stop()


def alter_group(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    for fut in a.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]).values():
        fut.result(timeout=10)


def group_configs(bootstrap: str, group: str) -> dict[str, Any]:
    a = AdminClient({"bootstrap.servers": bootstrap})
    fut = a.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    return dict(next(iter(fut.values())).result(timeout=10))


def setup(b: BrokerProcess, name: str, **configs: str) -> None:
    create_topic(b.bootstrap, name, 1)
    alter_group(b.bootstrap, name, {"share.auto.offset.reset": "earliest", **configs})


class Receiver:
    """Polls one explicit-mode ShareConsumer: ACCEPTs every record except ``held``, which it
    RELEASEs (committing at once) ``releases`` times and ACCEPTs after that. Records the client
    time of every delivery."""

    def __init__(self, c: ShareConsumer, held: bytes, releases: int) -> None:
        self.c, self.held, self.releases = c, held, releases
        self.deliveries: list[tuple[bytes, int, float]] = []  # (value, delivery count, time)
        self.released_at: list[float] = []  # client time just before each RELEASE was sent

    def held_deliveries(self) -> list[tuple[int, float]]:
        return [(n, t) for v, n, t in self.deliveries if v == self.held]

    def others(self) -> list[tuple[bytes, float]]:
        return [(v, t) for v, _n, t in self.deliveries if v != self.held]

    def poll_until(self, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out; got {self.deliveries}"
            msgs = self.c.poll(0.2)
            now = time.monotonic()
            release = False
            for m in msgs:
                assert m.error() is None, m.error()
                self.deliveries.append((m.value(), m.delivery_count(), now))
                if m.value() == self.held and len(self.released_at) < self.releases:
                    self.c.acknowledge(m, AcknowledgeType.RELEASE)
                    release = True
                else:
                    self.c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                before = time.monotonic()
                results = self.c.commit_sync(15)
                assert all(e is None for e in results.values()), results
                if release:
                    self.released_at.append(before)


def test_released_record_waits_its_backoff_and_the_wait_grows(sb: BrokerProcess,
                                                              unique: str) -> None:
    setup(sb, unique, **{"share.delivery.backoff.ms": "1000",
                         "share.delivery.backoff.multiplier": "2",
                         "share.delivery.backoff.max.ms": "10000"})
    (held,) = produce(sb.bootstrap, unique, 1, prefix="held")
    c = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    r = Receiver(c, held, releases=2)
    try:
        r.poll_until(lambda: len(r.released_at) == 1, timeout=30)
        # Other records produced while the released one waits reach the consumer meanwhile.
        others = produce(sb.bootstrap, unique, 20, prefix="other")
        r.poll_until(lambda: len(r.held_deliveries()) == 3 and len(r.others()) == 20,
                     timeout=40)
    finally:
        c.close()
    (n1, _), (n2, t2), (n3, t3) = r.held_deliveries()
    assert (n1, n2, n3) == (1, 2, 3)
    first_wait = t2 - r.released_at[0]
    second_wait = t3 - r.released_at[1]
    assert 0.95 <= first_wait < 8, first_wait
    assert 1.95 <= second_wait < 12, second_wait  # 1000 ms x 2^(2-1)
    assert second_wait > first_wait + 0.5
    got = r.others()
    assert sorted(v for v, _ in got) == sorted(others)  # each other record exactly once
    assert min(t for _, t in got) < t2, "no other record flowed while the released one waited"


def test_long_poll_wakes_when_the_backoff_ends(sb: BrokerProcess, unique: str) -> None:
    """Raw ShareFetch: while only backed-off records remain, a fetch parks for its MaxWaitMs
    (no busy answer), and a fetch with a long MaxWaitMs returns as soon as the backoff ends."""
    setup(sb, unique, **{"share.delivery.backoff.ms": "1500"})
    produce(sb.bootstrap, unique, 10)
    initialize_share_state(sb.bootstrap, unique, unique)
    with RawClient(sb.bootstrap) as c:
        tid = topic_id(c, unique)
    m = Member(sb.bootstrap, unique, "m1", tid)
    try:
        assert m.acquire(10) == [(0, 9, 1)]
        released = time.monotonic()
        assert m.ack({0: [(0, 9, (RELEASE,))]}).error_code == 0
        started = time.monotonic()
        early = part(m.fetch(max_wait_ms=500))
        parked = time.monotonic() - started
        assert early is None or not early.acquired_records
        assert parked >= 0.45, parked  # waited, did not answer at once
        resp = m.fetch(max_wait_ms=10_000)
        back = time.monotonic() - released
        got = part(resp)
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in got.acquired_records] == [(0, 9, 2)]
        assert 1.45 <= back < 6, back  # woken by the backoff's end, not the 10 s MaxWaitMs
    finally:
        m.close()


def test_backoff_zero_redelivers_at_once(sb: BrokerProcess, unique: str) -> None:
    setup(sb, unique)  # default: share.delivery.backoff.ms=0 (Kafka's behaviour)
    (held,) = produce(sb.bootstrap, unique, 1, prefix="held")
    c = share_consumer(sb.bootstrap, unique, unique, explicit=True)
    r = Receiver(c, held, releases=1)
    try:
        r.poll_until(lambda: len(r.held_deliveries()) == 2, timeout=30)
    finally:
        c.close()
    (_n1, _t1), (n2, t2) = r.held_deliveries()
    assert n2 == 2 and t2 - r.released_at[0] < 0.9


@pytest.mark.parametrize(("configs", "message"), [
    ({"share.delivery.backoff.ms": "-5"}, "must be between 0 and 3600000"),
    ({"share.delivery.backoff.multiplier": "0.5"}, "must be between 1.0 and 10.0"),
    ({"share.delivery.backoff.ms": "90000"}, "must not be greater than "
                                             "share.delivery.backoff.max.ms (60000)"),
], ids=["negative", "multiplier", "above-max"])
def test_bad_backoff_configs_are_invalid_config(sb: BrokerProcess, unique: str,
                                                configs: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaException) as info:
        alter_group(sb.bootstrap, unique, configs)
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG
    assert next(iter(configs)) in err.str() and message in err.str(), err.str()
    got = group_configs(sb.bootstrap, unique)
    assert got["share.delivery.backoff.ms"].value == "0"
    assert got["share.delivery.backoff.max.ms"].value == "60000"
    assert got["share.delivery.backoff.multiplier"].value == "2.0"


def test_backoff_survives_kill_and_restart(fresh_broker: BrokerProcess, unique: str) -> None:
    """A record released right before kill -9 waits its full backoff after the restart (restart
    rule: held for its whole backoff from load, broker/share/backoff.py), while new records are
    delivered; the group config is still set."""
    b = fresh_broker
    b.start()
    backoff_s = 6.0
    setup(b, unique, **{"share.delivery.backoff.ms": str(int(backoff_s * 1000))})
    (held,) = produce(b.bootstrap, unique, 1, prefix="held")
    c = share_consumer(b.bootstrap, unique, unique, explicit=True)
    r = Receiver(c, held, releases=1)
    try:
        r.poll_until(lambda: len(r.released_at) == 1, timeout=30)
    finally:
        c.close()
    b.kill()
    b.start()
    got = group_configs(b.bootstrap, unique)
    assert got["share.delivery.backoff.ms"].value == str(int(backoff_s * 1000))
    assert got["share.delivery.backoff.ms"].source == ConfigSource.GROUP_CONFIG.value
    others = produce(b.bootstrap, unique, 5, prefix="after")
    c2 = share_consumer(b.bootstrap, unique, unique, explicit=True)
    r2 = Receiver(c2, held, releases=0)
    try:
        r2.poll_until(lambda: bool(r2.held_deliveries()) and len(r2.others()) == 5,
                      timeout=40)
    finally:
        c2.close()
    ((count, t_back),) = r2.held_deliveries()
    assert count == 2
    assert t_back - r.released_at[0] >= backoff_s - 0.05, t_back - r.released_at[0]
    assert sorted(v for v, _ in r2.others()) == sorted(others)
    assert min(t for _, t in r2.others()) < t_back
