"""client.ShareConsumer next to confluent_kafka.ShareConsumer (issue 7, must-show 2).

Both join one share group on a one-partition topic and consume concurrently (the blocking
confluent consumer polls in a worker thread); together they must see every record exactly once.
Also: the client negotiates ShareFetch/ShareAcknowledge down to v1 when told the broker has no v2.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from client import (
    AcknowledgeType,
    ShareConsumer,
    TopicPartition,
    UnsupportedVersionError,
)
from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.share_helpers import produce, set_group_configs, share_consumer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory):
    b = BrokerProcess(Path(tmp_path_factory.mktemp("client-interop")) / "data",
                      overrides={"group.share.min.heartbeat.interval.ms": "200"})
    b.start()
    yield b
    b.stop()


async def test_client_and_confluent_share_one_partition_without_duplicates(sb, unique) -> None:
    create_topic(sb.bootstrap, unique, 1)
    set_group_configs(sb.bootstrap, unique, {"share.auto.offset.reset": "earliest",
                                             "share.heartbeat.interval.ms": "300"})
    values = produce(sb.bootstrap, unique, 6000)
    seen: Counter[bytes] = Counter()
    per = Counter[str]()
    lock = threading.Lock()
    stop = threading.Event()

    def confluent_side() -> None:
        c = share_consumer(sb.bootstrap, unique, unique, explicit=True)
        try:
            while not stop.is_set():
                for m in c.poll(0.1):
                    assert m.error() is None, m.error()
                    with lock:
                        seen[m.value()] += 1
                        per["confluent"] += 1
                    c.acknowledge(m)
                # Give the other member a chance at the partition.
                time.sleep(0.01)
        finally:
            c.close()

    worker = asyncio.get_running_loop().run_in_executor(None, confluent_side)
    try:
        async with ShareConsumer(sb.bootstrap, unique, acknowledgement_mode="explicit") as ours:
            ours.subscribe([unique])
            deadline = time.monotonic() + 40
            while True:
                with lock:
                    if len(seen) >= len(values):
                        break
                assert time.monotonic() < deadline, f"saw {len(seen)} of {len(values)}"
                assert not worker.done(), worker.exception()
                for records in (await ours.getmany(timeout_ms=100)).values():
                    with lock:
                        seen.update(r.value for r in records)
                        per["client"] += len(records)
                    for r in records:
                        ours.acknowledge(r, AcknowledgeType.ACCEPT)
                await asyncio.sleep(0.01)
            await ours.commit_sync()
    finally:
        stop.set()
        await worker
    assert set(seen) == set(values)
    assert max(seen.values()) == 1, [v for v, n in seen.items() if n > 1][:5]
    assert per["client"] > 0 and per["confluent"] > 0, per


async def test_v1_brokers_get_v1_requests_and_renew_is_refused(sb, unique) -> None:
    create_topic(sb.bootstrap, unique, 1)
    set_group_configs(sb.bootstrap, unique, {"share.auto.offset.reset": "earliest",
                                             "share.heartbeat.interval.ms": "300"})
    produce(sb.bootstrap, unique, 3)
    async with ShareConsumer(sb.bootstrap, unique, acknowledgement_mode="explicit",
                             max_share_version=1) as c:
        c.subscribe([unique])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 3:
            assert time.monotonic() < deadline
            for rs in (await c.getmany(timeout_ms=200)).values():
                got += rs
        assert {s.version for s in c._sessions.values()} == {1}
        with pytest.raises(UnsupportedVersionError):
            c.acknowledge(got[0], AcknowledgeType.RENEW)
        for r in got:
            c.acknowledge(r, AcknowledgeType.ACCEPT)
        assert await c.commit_sync() == {TopicPartition(unique, 0): None}
