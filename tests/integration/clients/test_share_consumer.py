"""client.ShareConsumer against Shoal (issue 7, must-show 1): reference 8 items 1-11, 13, 15-17, 27.

One module-scoped broker lowers the bounds of share.record.lock.duration.ms and
share.heartbeat.interval.ms so lock-expiry and rebalance tests take a second or two, not minutes.
Every test uses its own topic and group (``unique``) and bounds every wait.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from client import (
    AcknowledgeType,
    IllegalStateError,
    InvalidRecordStateError,
    ShareConsumer,
    ShareRecord,
    TopicPartition,
)
from client.records import decode_partition
from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.share_helpers import produce, set_group_configs

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory):
    b = BrokerProcess(Path(tmp_path_factory.mktemp("client-broker")) / "data",
                      overrides={"group.share.min.record.lock.duration.ms": "1000",
                                 "group.share.min.heartbeat.interval.ms": "200"})
    b.start()
    yield b
    b.stop()


def setup(sb: BrokerProcess, name: str, partitions: int = 1, count: int = 0,
          **configs: str) -> list[bytes]:
    create_topic(sb.bootstrap, name, partitions)
    set_group_configs(sb.bootstrap, name, {"share.auto.offset.reset": "earliest",
                                           "share.heartbeat.interval.ms": "300", **configs})
    return produce(sb.bootstrap, name, count, partitions) if count else []


@pytest.fixture
async def consumers(sb) -> AsyncIterator[Callable[..., Awaitable[ShareConsumer]]]:
    """Make started consumers; the ones still open are closed after the test."""
    made: list[ShareConsumer] = []

    async def make(group: str, topic: str | None = None, **kw: Any) -> ShareConsumer:
        c = ShareConsumer(sb.bootstrap, group, **kw)
        await c.start()
        if topic is not None:
            c.subscribe([topic])
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()


async def collect(c: ShareConsumer, want: int, timeout: float = 15.0,
                  ack: AcknowledgeType | None = None) -> list[ShareRecord]:
    """getmany until ``want`` records arrived (acknowledging each with ``ack`` if given)."""
    got: list[ShareRecord] = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        assert time.monotonic() < deadline, f"got {len(got)} of {want} records"
        for records in (await c.getmany(timeout_ms=200)).values():
            for r in records:
                got.append(r)
                if ack is not None:
                    c.acknowledge(r, ack)
    return got


async def quiet(c: ShareConsumer, seconds: float,
                ack: AcknowledgeType | None = None) -> list[ShareRecord]:
    """Everything ``c`` receives within ``seconds``."""
    got: list[ShareRecord] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for records in (await c.getmany(timeout_ms=200)).values():
            for r in records:
                got.append(r)
                if ack is not None:
                    c.acknowledge(r, ack)
    return got


# -- item 1: subscription --------------------------------------------------------------------


async def test_getmany_without_subscription_fails_and_empty_topic_gives_nothing(
        sb, unique, consumers) -> None:
    setup(sb, unique)
    c = await consumers(unique)
    with pytest.raises(IllegalStateError):
        await c.getmany(timeout_ms=10)
    c.subscribe([unique])
    assert await quiet(c, 1.0) == []
    c.unsubscribe()
    with pytest.raises(IllegalStateError):
        await c.getmany(timeout_ms=10)


# -- item 2: a record arrives intact -------------------------------------------------------------


async def test_record_with_key_value_and_headers_is_delivered_intact(sb, unique, consumers) -> None:
    setup(sb, unique)
    p = Producer({"bootstrap.servers": sb.bootstrap, "compression.type": "zstd"})
    p.produce(unique, key=b"k1", value=b"v1", headers=[("h", b"x"), ("n", None)])
    assert p.flush(10) == 0
    c = await consumers(unique, unique)
    (r,) = await collect(c, 1)
    assert (r.topic, r.partition, r.offset) == (unique, 0, 0)
    assert (r.key, r.value, r.delivery_count) == (b"k1", b"v1", 1)
    assert r.headers == [("h", b"x"), ("n", None)]
    assert r.timestamp > 0


# -- item 3: max_poll_records ------------------------------------------------------------------


async def test_record_limit_mode_caps_each_batch(sb, unique, consumers) -> None:
    setup(sb, unique, count=100)
    c = await consumers(unique, unique, max_poll_records=7, acquire_mode="record_limit")
    got: list[ShareRecord] = []
    deadline = time.monotonic() + 15
    while len(got) < 100:
        assert time.monotonic() < deadline
        batch = [r for rs in (await c.getmany(timeout_ms=200)).values() for r in rs]
        assert len(batch) <= 7
        got += batch
    assert sorted(r.offset for r in got) == list(range(100))


# -- item 4: lock timeout reported -----------------------------------------------------------


async def test_acquisition_lock_timeout_is_reported_after_the_first_fetch(
        sb, unique, consumers) -> None:
    setup(sb, unique, count=1, **{"share.record.lock.duration.ms": "4000"})
    c = await consumers(unique, unique)
    assert c.acquisition_lock_timeout_ms is None
    await collect(c, 1)
    assert c.acquisition_lock_timeout_ms == 4000


# -- item 5: implicit mode ---------------------------------------------------------------------


async def test_implicit_mode_accepts_on_next_getmany_and_nothing_is_redelivered(
        sb, unique, consumers) -> None:
    values = setup(sb, unique, count=2000)
    c = await consumers(unique, unique)
    seen = Counter(r.value for r in await collect(c, len(values)))
    assert set(seen) == set(values) and max(seen.values()) == 1
    await c.close()
    c2 = await consumers(unique, unique)
    assert await quiet(c2, 1.5) == []


# -- item 6: explicit ACCEPT + commit_sync -------------------------------------------------------


async def test_explicit_accept_and_commit_sync_returns_per_partition_success(
        sb, unique, consumers) -> None:
    setup(sb, unique, partitions=2, count=50)
    c = await consumers(unique, unique, acknowledgement_mode="explicit")
    got = await collect(c, 50, ack=AcknowledgeType.ACCEPT)
    results = await c.commit_sync()
    assert set(results) <= {TopicPartition(unique, 0), TopicPartition(unique, 1)}
    assert all(v is None for v in results.values()), results
    assert len({(r.partition, r.offset) for r in got}) == 50
    assert await quiet(c, 1.0, AcknowledgeType.ACCEPT) == []


async def test_acknowledge_all_settles_what_is_left_of_the_batch(sb, unique, consumers) -> None:
    setup(sb, unique, count=6)
    c = await consumers(unique, unique, acknowledgement_mode="explicit")
    batch = await c.getmany(timeout_ms=5000)
    got = sorted((r for rs in batch.values() for r in rs), key=lambda r: r.offset)
    assert len(got) == 6  # one produced batch, acquired whole
    c.acknowledge(got[0], AcknowledgeType.REJECT)
    c.acknowledge_all(AcknowledgeType.RELEASE)  # the rest; got[0] keeps its REJECT
    assert all(v is None for v in (await c.commit_sync()).values())
    again = await collect(c, 5, ack=AcknowledgeType.ACCEPT)
    assert sorted(r.offset for r in again) == [r.offset for r in got[1:]]
    assert {r.delivery_count for r in again} == {2}
    implicit = await consumers(f"{unique}-i", unique)
    with pytest.raises(IllegalStateError, match="explicit"):
        implicit.acknowledge_all()


# -- item 7: RELEASE -----------------------------------------------------------------------------


async def test_release_then_getmany_redelivers_with_delivery_count_two(
        sb, unique, consumers) -> None:
    setup(sb, unique, count=5)
    c = await consumers(unique, unique, acknowledgement_mode="explicit")
    first = await collect(c, 5, ack=AcknowledgeType.RELEASE)
    again = await collect(c, 5, ack=AcknowledgeType.ACCEPT)
    await c.commit_sync()
    assert {r.delivery_count for r in first} == {1}
    assert sorted(r.offset for r in again) == sorted(r.offset for r in first)
    assert {r.delivery_count for r in again} == {2}


# -- item 8: RELEASE / unacknowledged then close ---------------------------------------------------


async def test_released_and_unacknowledged_records_go_to_the_next_consumer_at_close(
        sb, unique, consumers) -> None:
    setup(sb, unique, count=4)
    c = await consumers(unique, unique, acknowledgement_mode="explicit")
    got = await collect(c, 4)
    c.acknowledge(got[0], AcknowledgeType.RELEASE)  # the other three stay unacknowledged
    await c.close()
    c2 = await consumers(unique, unique, acknowledgement_mode="explicit")
    again = await collect(c2, 4, ack=AcknowledgeType.ACCEPT)
    assert sorted(r.offset for r in again) == [0, 1, 2, 3]
    assert {r.delivery_count for r in again} == {2}


# -- item 9: client-side checks --------------------------------------------------------------------


async def test_acknowledging_a_record_not_from_the_current_batch_is_illegal(
        sb, unique, consumers) -> None:
    setup(sb, unique, count=3)
    c = await consumers(unique, unique, acknowledgement_mode="explicit")
    got = await collect(c, 3)
    stranger = ShareRecord(unique, 0, got[0].offset, 0, 0, None, b"m0")
    with pytest.raises(IllegalStateError):
        c.acknowledge(stranger, AcknowledgeType.ACCEPT)
    with pytest.raises(IllegalStateError):  # explicit mode: the batch must be acknowledged first
        await c.getmany(timeout_ms=10)
    for r in got:
        c.acknowledge(r, AcknowledgeType.ACCEPT)
    await c.getmany(timeout_ms=10)
    with pytest.raises(IllegalStateError):  # now from an earlier batch
        c.acknowledge(got[0], AcknowledgeType.ACCEPT)
    implicit = await consumers(unique, unique)
    with pytest.raises(IllegalStateError):
        implicit.acknowledge(got[0], AcknowledgeType.ACCEPT)


# -- items 10, 11: REJECT, results and the callback ------------------------------------------------


async def test_rejected_record_is_never_redelivered_and_acking_again_fails(
        sb, unique, consumers) -> None:
    setup(sb, unique, count=2)
    calls: list[tuple[dict, Any]] = []
    c = await consumers(unique, unique, acknowledgement_mode="explicit",
                        acknowledgement_commit_callback=lambda o, e: calls.append((o, e)))
    first, second = sorted(await collect(c, 2), key=lambda r: r.offset)
    tp = TopicPartition(unique, 0)
    # Offset 0 stays held so that the share-partition start offset does not move past offset 1
    # (Shoal, unlike Kafka, accepts acknowledgements below the start offset without complaint).
    c.acknowledge(second, AcknowledgeType.REJECT)
    assert await c.commit_sync() == {tp: None}
    c.acknowledge(second, AcknowledgeType.ACCEPT)
    c.acknowledge(first, AcknowledgeType.ACCEPT)
    (err,) = (await c.commit_sync()).values()
    assert isinstance(err, InvalidRecordStateError)
    assert err.name == "INVALID_RECORD_STATE" and err.topic_partition == tp
    assert calls[0] == ({tp: {1}}, None)
    assert calls[1][0] == {tp: {0, 1}} and isinstance(calls[1][1], InvalidRecordStateError)
    c.acknowledge(first, AcknowledgeType.ACCEPT)  # the failed batch was all-or-nothing
    assert await c.commit_sync() == {tp: None}
    assert await quiet(c, 1.0, AcknowledgeType.ACCEPT) == []


async def test_callback_fires_on_commit_async_piggyback_and_close(sb, unique, consumers) -> None:
    setup(sb, unique, count=3)
    calls: list[tuple[dict, Any]] = []
    c = await consumers(unique, unique, acknowledgement_mode="explicit",
                        acknowledgement_commit_callback=lambda o, e: calls.append((o, e)))
    tp = TopicPartition(unique, 0)
    got = await collect(c, 3)
    c.acknowledge(got[0], AcknowledgeType.ACCEPT)
    done: list[dict] = []
    await c.commit_async(done.append)
    assert done == [{tp: None}]
    assert calls.pop() == ({tp: {got[0].offset}}, None)
    for r in got[1:]:
        c.acknowledge(r, AcknowledgeType.RELEASE)
    redelivered = await collect(c, 2)  # the RELEASEs travel with this fetch
    assert calls.pop() == ({tp: {got[1].offset, got[2].offset}}, None)
    for r in redelivered:
        c.acknowledge(r, AcknowledgeType.ACCEPT)
    await c.close()
    assert calls == [({tp: {got[1].offset, got[2].offset}}, None)]


# -- item 13: two consumers share a partition ----------------------------------------------------


async def test_two_consumers_on_one_partition_get_disjoint_records(sb, unique, consumers) -> None:
    values = setup(sb, unique, count=3000)
    a = await consumers(unique, unique)
    b = await consumers(unique, unique)
    seen: Counter[bytes] = Counter()
    per: Counter[str] = Counter()
    deadline = time.monotonic() + 20
    while len(seen) < len(values):
        assert time.monotonic() < deadline, len(seen)
        for name, batch in zip("ab", await asyncio.gather(a.getmany(timeout_ms=100),
                                                          b.getmany(timeout_ms=100))):
            for rs in batch.values():
                seen.update(r.value for r in rs)
                per[name] += len(rs)
    assert set(seen) == set(values) and max(seen.values()) == 1
    assert per["a"] > 0 and per["b"] > 0


# -- item 15: a member goes away mid-stream -----------------------------------------------------------


async def test_records_held_by_a_closed_member_go_to_the_others(sb, unique, consumers) -> None:
    setup(sb, unique, count=20)
    a = await consumers(unique, unique, acknowledgement_mode="explicit")
    held = await collect(a, 1)
    b = await consumers(unique, unique)
    await a.close()  # explicit mode, nothing acknowledged: all released
    got = await collect(b, 20)
    assert {r.offset for r in got} == set(range(20))
    assert all(r.delivery_count == 2 for r in got if r.offset in {h.offset for h in held})


# -- item 16: lock timeout -------------------------------------------------------------------------


async def test_unacknowledged_record_is_redelivered_after_the_lock_times_out(
        sb, unique, consumers) -> None:
    setup(sb, unique, count=1, **{"share.record.lock.duration.ms": "1000"})
    a = await consumers(unique, unique, acknowledgement_mode="explicit")
    b = await consumers(unique, unique, acknowledgement_mode="explicit")
    (r,) = await collect(a, 1)
    (again,) = await collect(b, 1, timeout=10, ack=AcknowledgeType.ACCEPT)
    assert (again.offset, again.delivery_count) == (r.offset, 2)


# -- item 17: delivery count limit -------------------------------------------------------------------


async def test_delivery_count_limit_archives_after_three_deliveries(sb, unique, consumers) -> None:
    setup(sb, unique, count=1, **{"share.delivery.count.limit": "3"})
    counts = []
    c = await consumers(unique, unique, acknowledgement_mode="explicit")
    for _ in range(3):
        (r,) = await collect(c, 1, ack=AcknowledgeType.RELEASE)
        counts.append(r.delivery_count)
    await c.commit_sync()
    assert counts == [1, 2, 3]
    assert await quiet(c, 1.0, AcknowledgeType.RELEASE) == []


# -- item 27: RENEW ----------------------------------------------------------------------------------


async def test_renew_keeps_a_slow_record_from_redelivery_past_the_original_lock(
        sb, unique, consumers) -> None:
    setup(sb, unique, count=1, **{"share.record.lock.duration.ms": "1000"})
    a = await consumers(unique, unique, acknowledgement_mode="explicit")
    b = await consumers(unique, unique, acknowledgement_mode="explicit")
    (r,) = await collect(a, 1)
    t0 = time.monotonic()
    for _ in range(3):  # "processing" for ~1.8 s, renewing every 0.6 s
        await asyncio.sleep(0.6)
        a.acknowledge(r, AcknowledgeType.RENEW)
        assert await a.getmany(timeout_ms=100) == {}  # a renew-only poll fetches nothing
    assert time.monotonic() - t0 > 1.5
    assert await quiet(b, 0.3) == []  # past the original lock and still not redelivered
    a.acknowledge(r, AcknowledgeType.ACCEPT)
    assert await a.commit_sync() == {TopicPartition(unique, 0): None}
    assert await quiet(b, 1.2) == []


async def test_renew_of_a_rejected_record_is_refused_and_disabled_renew_is_invalid_record_state(
        sb, unique, consumers) -> None:
    """A RENEW of a record already REJECTed is refused by the client (it would undo the reject);
    the broker's answer to a RENEW that reaches it is tested in test_share_protocol.py. With
    share.renew.acknowledge.enable=false the broker refuses a RENEW of an acquired record."""
    setup(sb, unique, count=2, **{"share.renew.acknowledge.enable": "false"})
    c = await consumers(unique, unique, acknowledgement_mode="explicit")
    got = await collect(c, 2)
    c.acknowledge(got[0], AcknowledgeType.REJECT)
    with pytest.raises(IllegalStateError, match="REJECT"):
        c.acknowledge(got[0], AcknowledgeType.RENEW)
    c.acknowledge(got[1], AcknowledgeType.RENEW)
    (err,) = (await c.commit_sync()).values()
    assert isinstance(err, InvalidRecordStateError)


async def test_lock_keeper_renews_records_the_application_is_still_processing(
        sb, unique, consumers) -> None:
    setup(sb, unique, count=1, **{"share.record.lock.duration.ms": "1000"})
    a = await consumers(unique, unique, acknowledgement_mode="explicit", renew_locks=True)
    b = await consumers(unique, unique, acknowledgement_mode="explicit")
    (r,) = await collect(a, 1)
    assert await quiet(b, 2.0) == []  # a is "processing" for 2 s; its keeper renews
    a.acknowledge(r, AcknowledgeType.ACCEPT)
    assert await a.commit_sync() == {TopicPartition(unique, 0): None}


async def test_raw_records_mode_hands_out_undecoded_partitions_and_acks_whole_ranges(
        sb, unique, consumers) -> None:
    """raw_records (the Spark source's mode): getmany_raw returns the broker's record batches
    and acquired ranges per partition, acknowledge_all settles every acquired offset, and an
    unsettled batch blocks the next poll as in explicit mode."""
    values = setup(sb, unique, partitions=2, count=40)
    with pytest.raises(ValueError, match="explicit"):
        ShareConsumer(sb.bootstrap, unique, raw_records=True)
    c = await consumers(unique, unique, acknowledgement_mode="explicit", raw_records=True,
                        max_poll_records=15, acquire_mode="record_limit")
    with pytest.raises(IllegalStateError, match="getmany_raw"):
        await c.getmany(timeout_ms=10)
    got: list[ShareRecord] = []
    deadline = time.monotonic() + 15
    while len(got) < 40:
        assert time.monotonic() < deadline, f"got {len(got)} of 40 records"
        parts = await c.getmany_raw(timeout_ms=200)
        assert sum(p.count for p in parts) <= 15
        if parts:
            with pytest.raises(IllegalStateError, match="not acknowledged"):
                await c.getmany_raw(timeout_ms=10)
        for p in parts:
            got += decode_partition(p.topic, p.partition, p.data, p.acquired).records
        c.acknowledge_all(AcknowledgeType.ACCEPT)
        results = await c.commit_sync()
        assert all(err is None for err in results.values())
    assert sorted(r.value for r in got) == sorted(values)
    assert {r.delivery_count for r in got} == {1}
    other = await consumers(unique, unique)
    assert await quiet(other, 1.0) == []  # everything was accepted


# -- the async shape --------------------------------------------------------------------------------


async def test_async_with_and_async_for(sb, unique) -> None:
    values = setup(sb, unique, count=30)
    got: list[bytes] = []
    async with ShareConsumer(sb.bootstrap, unique) as c:
        c.subscribe([unique])
        async with asyncio.timeout(15):
            async for r in c:
                got.append(r.value)
                if len(got) == len(values):
                    break
    assert sorted(got) == sorted(values)
