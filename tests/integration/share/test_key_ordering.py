"""Per-key ordering while sharing (share.ordering=key, issue 16) seen by confluent_kafka
ShareConsumers in explicit mode.

Three consumers share one partition holding 50 keys x 10 records. Each consumer keeps what it
received un-acknowledged while the others poll (it acknowledges and commits at the start of its
next turn), so records really are held across consumers; a few first deliveries are RELEASEd.
A user of key ordering would notice if:

- a record of a key reached a consumer while another consumer still held one of that key;
- a key's records were delivered out of offset order (a redelivery of the same record excepted);
- a record was never accepted.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.share_helpers import set_group_configs, share_consumer
from tests.integration.share.test_backoff import group_configs

KEYS = 50
PER_KEY = 10
ORDERING = "key"  # "none" makes this test fail (checked when written)


def produce_keyed(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(KEYS * PER_KEY):
        p.produce(topic, value=str(i).encode(), key=f"k{i % KEYS}".encode(), partition=0)
    assert p.flush(30) == 0


def test_key_ordering_with_three_consumers_and_releases(broker: BrokerProcess,
                                                         unique: str) -> None:
    create_topic(broker.bootstrap, unique, 1)
    set_group_configs(broker.bootstrap, unique, {"share.auto.offset.reset": "earliest",
                                                 "share.ordering": ORDERING})
    assert group_configs(broker.bootstrap, unique)["share.ordering"].value == ORDERING
    produce_keyed(broker.bootstrap, unique)
    consumers = [share_consumer(broker.bootstrap, unique, unique, explicit=True)
                 for _ in range(3)]
    pending: list[list[Any]] = [[] for _ in consumers]  # received, not yet acknowledged
    held: dict[bytes, tuple[int, int]] = {}  # key -> (consumer, offset) held un-acknowledged
    delivered: dict[bytes, list[int]] = {}  # key -> offsets in delivery order
    released: set[int] = set()
    accepted: set[int] = set()
    total = KEYS * PER_KEY
    deadline = time.monotonic() + 50
    try:
        while len(accepted) < total:
            assert time.monotonic() < deadline, f"only {len(accepted)} of {total} accepted"
            for i, c in enumerate(consumers):
                if pending[i]:
                    done = []
                    for m in pending[i]:
                        # RELEASE the first delivery of every 7th record, ACCEPT the rest.
                        if m.offset() % 7 == 0 and m.offset() not in released:
                            released.add(m.offset())
                            c.acknowledge(m, AcknowledgeType.RELEASE)
                        else:
                            c.acknowledge(m, AcknowledgeType.ACCEPT)
                            done.append(m.offset())
                    results = c.commit_sync(15)
                    assert all(e is None for e in results.values()), results
                    for m in pending[i]:
                        del held[m.key()]
                    accepted.update(done)
                    pending[i] = []
                for m in c.poll(0.3):
                    assert m.error() is None, m.error()
                    k = m.key()
                    assert k not in held, (
                        f"key {k!r}: offset {m.offset()} delivered to consumer {i} while "
                        f"consumer {held[k][0]} holds offset {held[k][1]}")
                    held[k] = (i, m.offset())
                    delivered.setdefault(k, []).append(m.offset())
                    pending[i].append(m)
    finally:
        for c in consumers:
            c.close()
    assert accepted == set(range(total))
    assert len(delivered) == KEYS
    for k, offsets in delivered.items():
        assert offsets == sorted(offsets), f"key {k!r} delivered out of order: {offsets}"
        assert sorted(set(offsets)) == [o for o in range(total) if f"k{o % KEYS}".encode() == k]
    # The RELEASEd records came back (a redelivery right after the first delivery).
    redelivered = {o for offs in delivered.values() for o in offs if offs.count(o) > 1}
    assert redelivered == released


def test_share_ordering_is_validated_and_described(broker: BrokerProcess, unique: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    assert group_configs(broker.bootstrap, unique)["share.ordering"].value == "none"
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry("share.ordering", "fifo", incremental_operation=AlterConfigOpType.SET)
    fut = a.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, unique, incremental_configs=[entry])])
    with pytest.raises(KafkaException) as err:
        next(iter(fut.values())).result(timeout=10)
    assert "share.ordering" in str(err.value)
    assert err.value.args[0].name() == "INVALID_CONFIG"


def test_key_order_survives_kill_and_restart(fresh_broker: BrokerProcess, unique: str) -> None:
    """After kill -9 the order is rebuilt from the persisted share state and the log: a record
    released before the crash (in redelivery backoff after the restart) and one acquired at the
    crash are each delivered before any later record of their key."""
    b = fresh_broker
    b.start()
    create_topic(b.bootstrap, unique, 1)
    set_group_configs(b.bootstrap, unique, {"share.auto.offset.reset": "earliest",
                                            "share.ordering": "key",
                                            "share.delivery.backoff.ms": "2000"})
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(12):  # one log batch per record: a fetch after the restart reads from 2
        p.produce(unique, value=str(i).encode(), key=f"k{i % 3}".encode(), partition=0)
        assert p.flush(30) == 0
    c = share_consumer(b.bootstrap, unique, unique, explicit=True)
    try:
        first: list[Any] = []
        deadline = time.monotonic() + 30
        while len(first) < 3:
            assert time.monotonic() < deadline, first
            first += c.poll(0.5)
        assert sorted(m.offset() for m in first) == [0, 1, 2]  # one record per key
        for m in first:
            if m.offset() == 0:
                c.acknowledge(m, AcknowledgeType.RELEASE)
            elif m.offset() == 1:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            # 2 is not acknowledged: still acquired at the crash
        results = c.commit_sync(15)
        assert all(e is None for e in results.values()), results
    finally:
        b.kill()
        c.close()
    b.start()
    assert group_configs(b.bootstrap, unique)["share.ordering"].value == "key"
    c2 = share_consumer(b.bootstrap, unique, unique, explicit=True)
    delivered: dict[bytes, list[int]] = {}
    try:
        deadline = time.monotonic() + 40
        while sum(map(len, delivered.values())) < 11:
            assert time.monotonic() < deadline, delivered
            msgs = c2.poll(0.5)
            for m in msgs:
                delivered.setdefault(m.key(), []).append(m.offset())
                c2.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                c2.commit_sync(15)
    finally:
        c2.close()
    # Record 0 waited its backoff after the restart, and key k0 waited with it.
    assert delivered == {b"k0": [0, 3, 6, 9], b"k1": [4, 7, 10], b"k2": [2, 5, 8, 11]}
