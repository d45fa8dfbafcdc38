"""Redelivery backoff (broker/share/backoff.py) on the sans-IO SharePartition, with a fake clock.

Each scenario drives the partition as the shell does (next fetch offset at ``now``, read whole log
batches from there, acquire, acknowledge, complete the write, fire the timer at
``next_deadline()``) and checks what a consumer would see: which offsets a fetch hands out, and
when. The group config validation of the three backoff configs is at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig, ConfigError
from broker.group_configs import GROUP_CONFIGS, GroupConfigs
from broker.share.backoff import redelivery_delay_ms
from broker.share.partition import AcquireMode, SharePartition, SharePartitionConfig
from broker.share.record_state import RecordState
from persister.api import PersisterStateBatch, ReadResult
from tests.unit.broker.share.test_partition import (
    ACCEPT,
    AK,
    AQ,
    AV,
    KEY,
    RELEASE,
    Config,
    ack,
    batch,
    make,
)

BO = AcquireMode.BATCH_OPTIMIZED
RL = AcquireMode.RECORD_LIMIT
LOCK = 30_000
# Ten log batches of ten records: 0-9, 10-19, ..., 90-99.
LOG = [(b, b + 9) for b in range(0, 100, 10)]


def fetch(p: SharePartition, member: str, now: int, max_records: int = 10,
          mode: AcquireMode = BO, log: Sequence[tuple[int, int]] = LOG
          ) -> list[tuple[int, int, int]]:
    """The shell at ``now``: read the log from the next fetch offset, then acquire."""
    offset = p.next_fetch_offset(now)
    read = [b for b in log if b[1] >= offset]
    got = p.acquire(member, read, max_records, max_records, mode, now, fetch_offset=offset)
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in got]


def backoff(start: int = 0, **overrides: object) -> tuple[SharePartition, Config]:
    settings: dict[str, object] = dict(delivery_backoff_ms=1_000, delivery_backoff_max_ms=60_000,
                                       delivery_backoff_multiplier=2.0,
                                       record_lock_duration_ms=LOCK)
    settings.update(overrides)
    return make(start=start, **settings)


def state(p: SharePartition, offset: int) -> tuple[RecordState, int]:
    view = p.offset_view(offset)
    assert view is not None
    return view.state, view.delivery_count


def fire(p: SharePartition, now: int) -> None:
    """The shell's timer: on_timer when the partition's deadline is due."""
    deadline = p.next_deadline()
    if deadline is not None and deadline <= now:
        p.on_timer(now)


# --------------------------------------------------------------------------- the delay


@pytest.mark.parametrize(("base", "mult", "most", "count", "delay"), [
    (0, 2.0, 60_000, 1, 0),
    (0, 2.0, 60_000, 7, 0),
    (1_000, 2.0, 60_000, 1, 1_000),
    (1_000, 2.0, 60_000, 2, 2_000),
    (1_000, 2.0, 60_000, 4, 8_000),
    (1_000, 2.0, 5_000, 4, 5_000),
    (1_000, 1.0, 60_000, 9, 1_000),
    (500, 1.5, 60_000, 3, 1_125),
    (1_000, 10.0, 3_600_000, 10_000, 3_600_000),  # huge counts cannot overflow
    (1_000, 2.0, 60_000, 0, 1_000),  # (loaded count 0 is never held; defensive)
], ids=lambda v: str(v))
def test_delay_formula(base: int, mult: float, most: int, count: int, delay: int) -> None:
    cfg = SharePartitionConfig(delivery_backoff_ms=base, delivery_backoff_multiplier=mult,
                               delivery_backoff_max_ms=most)
    assert redelivery_delay_ms(cfg, count) == delay


# --------------------------------------------------------------------------- RELEASE


def test_released_record_waits_for_its_backoff_while_others_flow() -> None:
    p, _ = backoff()
    assert fetch(p, "a", 0) == [(0, 9, 1)]
    ack(p, "a", [(0, 2, (RELEASE,)), (3, 9, (ACCEPT,))], 100)
    assert p.take_wakeup()
    # 0-2 are AVAILABLE but held until 100 + 1000: fetches get new records meanwhile, and the
    # SPSO stays at 0.
    assert p.next_backoff_end() == p.next_deadline() == 1_100
    assert p.offset_view(0).available_at_ms == 1_100  # type: ignore[union-attr]
    assert fetch(p, "b", 200) == [(10, 19, 1)]
    assert fetch(p, "a", 1_099) == [(20, 29, 1)]
    assert p.start_offset == 0 and state(p, 0) == (AV, 1)
    assert fetch(p, "b", 1_099) == [(30, 39, 1)]
    # Exactly at the end of the backoff: the timer wakes parked fetches, and the next fetch
    # goes back to offset 0.
    fire(p, 1_100)
    assert p.take_wakeup()
    assert p.next_fetch_offset(1_100) == 0
    assert fetch(p, "b", 1_100) == [(0, 2, 2), (40, 49, 1)]
    assert p.next_backoff_end() is None
    ack(p, "b", [(0, 2, (ACCEPT,))], 1_200)
    assert p.start_offset == 10


def test_spso_stops_at_a_backed_off_record() -> None:
    p, _ = backoff()
    fetch(p, "a", 0)
    ack(p, "a", [(0, 0, (RELEASE,)), (1, 9, (ACCEPT,))], 0)
    fetch(p, "a", 0)
    ack(p, "a", [(10, 19, (ACCEPT,))], 0)
    # Everything after offset 0 is done, yet the SPSO waits for it (and the write says so).
    assert p.start_offset == 0 and p.delivery_complete_count == 19
    assert p.metrics().in_flight_records == 20
    assert fetch(p, "b", 999) == [(20, 29, 1)]
    assert p.start_offset == 0
    assert fetch(p, "b", 1_000, max_records=1) == [(0, 0, 2)]
    ack(p, "b", [(0, 0, (ACCEPT,))], 1_000)
    assert p.start_offset == 20


def test_next_fetch_offset_skips_held_records_without_a_timer() -> None:
    """A fetch at a time after the backoff finds the record even if the timer has not run."""
    p, _ = backoff()
    fetch(p, "a", 0)
    ack(p, "a", [(0, 9, (RELEASE,))], 0)
    assert p.next_fetch_offset(999) == 10
    assert p.next_fetch_offset(1_000) == 0
    assert fetch(p, "a", 1_000) == [(0, 9, 2)]


def test_delay_grows_with_the_delivery_count_and_is_capped() -> None:
    p, _ = backoff(delivery_backoff_ms=100, delivery_backoff_max_ms=300,
                   delivery_count_limit=6)
    now = 0
    waits = []
    one = [(0, 0)]  # one record: delivery-count throttling does not cut it
    for delivery in range(1, 6):
        got = fetch(p, "a", now, log=one)
        assert got == [(0, 0, delivery)]
        ack(p, "a", [(0, 0, (RELEASE,))], now)
        released = now
        end = p.next_deadline()
        assert end is not None
        assert fetch(p, "a", end - 1, log=one) == []  # not a millisecond early
        now = end
        fire(p, now)
        waits.append(now - released)
    assert waits == [100, 200, 300, 300, 300]
    # The sixth delivery is the last; its release archives the record instead of holding it.
    assert fetch(p, "a", now, log=one) == [(0, 0, 6)]
    ack(p, "a", [(0, 0, (RELEASE,))], now)
    assert p.start_offset == 1 and p.next_deadline() is None


def test_record_at_the_delivery_limit_is_archived_not_backed_off() -> None:
    p, _ = backoff(delivery_count_limit=2)
    fetch(p, "a", 0, log=LOG[:1])
    ack(p, "a", [(0, 9, (RELEASE,))], 0)
    fire(p, 1_000)
    assert fetch(p, "a", 1_000, log=LOG[:1]) == [(0, 9, 2)]
    ack(p, "a", [(0, 9, (RELEASE,))], 1_000)
    assert p.start_offset == 10 and p.next_deadline() is None
    assert p.metrics().delivery_limit_archives == 10


def test_failed_release_write_starts_no_backoff() -> None:
    p, _ = backoff()
    fetch(p, "a", 0, log=LOG[:1])
    out = ack(p, "a", [(0, 9, (RELEASE,))], 0, ok=False)
    assert out.error == ErrorCode.none  # the shell maps the failed write; records stay ours
    assert state(p, 0) == (AQ, 1) and p.next_backoff_end() is None
    assert p.next_deadline() == LOCK


# --------------------------------------------------------------------------- lock expiry and leave


def test_lock_expiry_backs_off_from_the_expiry() -> None:
    p, _ = backoff()
    fetch(p, "a", 0, log=LOG[:1])
    assert p.next_deadline() == LOCK
    fire(p, LOCK)
    assert state(p, 0) == (AV, 1)
    assert p.next_deadline() == LOCK + 1_000
    assert fetch(p, "b", LOCK + 999, log=LOG[:1]) == []
    fire(p, LOCK + 1_000)
    assert p.take_wakeup()
    assert fetch(p, "b", LOCK + 1_000, log=LOG[:1]) == [(0, 9, 2)]
    # Second expiry: count 2, twice the wait.
    fire(p, 2 * LOCK + 1_000)
    assert p.next_deadline() == 2 * LOCK + 1_000 + 2_000
    assert fetch(p, "a", 2 * LOCK + 2_999, log=LOG[:1]) == []
    assert fetch(p, "a", 2 * LOCK + 3_000, log=LOG[:1]) == [(0, 9, 3)]


def test_member_leaving_backs_off_its_records_only() -> None:
    p, _ = backoff()
    fetch(p, "a", 0)
    fetch(p, "b", 0)
    p.release_member("a", 500)
    assert (state(p, 0), state(p, 10)) == ((AV, 1), (AQ, 1))
    assert p.next_backoff_end() == 1_500
    assert fetch(p, "c", 1_000) == [(20, 29, 1)]
    assert fetch(p, "c", 1_500) == [(0, 9, 2)]


def test_per_offset_releases_in_one_batch_hold_only_those_offsets() -> None:
    p, _ = backoff()
    fetch(p, "a", 0, max_records=10)
    # Release 2 and 5 at different times; accept the rest.
    ack(p, "a", [(0, 1, (ACCEPT,)), (2, 2, (RELEASE,)), (3, 4, (ACCEPT,))], 0)
    ack(p, "a", [(5, 5, (RELEASE,)), (6, 9, (ACCEPT,))], 400)
    assert p.start_offset == 2
    assert fetch(p, "b", 999) == [(10, 19, 1)]
    assert fetch(p, "b", 1_000, max_records=1) == [(2, 2, 2)]  # 5 is held until 1400
    assert fetch(p, "b", 1_399, max_records=1) == [(20, 29, 1)]
    assert fetch(p, "b", 1_400, max_records=1) == [(5, 5, 2)]


def test_record_limit_mode_skips_held_records_and_takes_the_rest() -> None:
    p, _ = backoff()
    fetch(p, "a", 0, max_records=10)
    ack(p, "a", [(0, 4, (RELEASE,)), (5, 9, (ACCEPT,))], 0)
    assert fetch(p, "a", 10, max_records=3, mode=RL) == [(10, 12, 1)]
    assert fetch(p, "a", 10, max_records=3, mode=RL) == [(13, 15, 1)]
    assert fetch(p, "a", 1_000, max_records=3, mode=RL) == [(0, 2, 2)]


def test_many_held_records_do_not_stall_the_partition() -> None:
    """A long run of held records before fetchable ones: the next fetch offset skips all of it,
    so a fetch reading MaxRecords worth of log from there is never left empty."""
    p, _ = backoff(max_record_locks=10_000)
    for _ in range(8):
        fetch(p, "a", 0)
    ack(p, "a", [(0, 79, (RELEASE,))], 0)
    assert p.next_fetch_offset(10) == 80
    assert fetch(p, "b", 10) == [(80, 89, 1)]
    # One record in the middle out of backoff (released earlier): found, and nothing else.
    q, _ = backoff(max_record_locks=10_000)
    for _ in range(3):
        fetch(q, "a", 0)
    ack(q, "a", [(15, 15, (RELEASE,))], 0)
    ack(q, "a", [(0, 14, (RELEASE,)), (16, 29, (RELEASE,))], 500)
    assert q.next_fetch_offset(1_000) == 15
    assert fetch(q, "b", 1_000, max_records=1) == [(15, 15, 2)]
    assert q.next_fetch_offset(1_000) == 30


def test_held_records_count_toward_the_record_lock_limit() -> None:
    p, _ = backoff(max_record_locks=20)
    fetch(p, "a", 0)
    fetch(p, "a", 0)
    ack(p, "a", [(0, 19, (RELEASE,))], 0)
    assert not p.can_acquire(500)  # 20 in flight, all held: nothing to fetch, no new records
    assert fetch(p, "b", 500) == []
    assert p.can_acquire(1_000)
    assert fetch(p, "b", 1_000) == [(0, 9, 2)]


# --------------------------------------------------------------------------- config


def test_backoff_zero_is_kafkas_behaviour() -> None:
    p, _ = backoff(delivery_backoff_ms=0)
    fetch(p, "a", 0)
    ack(p, "a", [(0, 9, (RELEASE,))], 0)
    assert p.next_deadline() is None and p.next_backoff_end() is None
    assert p.offset_view(0).available_at_ms is None  # type: ignore[union-attr]
    assert fetch(p, "b", 0) == [(0, 9, 2)]
    p.on_timer(LOCK)
    assert fetch(p, "a", LOCK) == [(0, 9, 3)]


def test_live_change_applies_to_records_released_afterwards() -> None:
    p, cfg = backoff()
    fetch(p, "a", 0)
    fetch(p, "a", 0)
    ack(p, "a", [(0, 9, (RELEASE,))], 0)  # held until 1000 under the old config
    cfg.set(delivery_backoff_ms=5_000)
    ack(p, "a", [(10, 19, (RELEASE,))], 0)  # held until 5000
    assert fetch(p, "b", 1_000) == [(0, 9, 2)]
    assert fetch(p, "b", 1_000) == [(20, 29, 1)]
    cfg.set(delivery_backoff_ms=0)  # turning it off does not cut a running backoff short
    assert fetch(p, "b", 4_999) == [(30, 39, 1)]
    assert fetch(p, "b", 5_000) == [(10, 19, 2)]
    ack(p, "b", [(10, 19, (RELEASE,))], 5_000)
    assert fetch(p, "a", 5_000) == [(10, 19, 3)]


# --------------------------------------------------------------------------- restart rule


def load(batches: Sequence[PersisterStateBatch], now: int | None,
         **overrides: object) -> SharePartition:
    settings: dict[str, object] = dict(delivery_backoff_ms=1_000, delivery_backoff_max_ms=60_000)
    settings.update(overrides)
    p = SharePartition.load(KEY, 3, ReadResult(ErrorCode.none, 2, 0, tuple(batches)),
                            Config(**settings), now_ms=now)
    assert isinstance(p, SharePartition)
    return p


def test_loaded_available_records_wait_their_full_backoff_from_load() -> None:
    p = load([batch(0, 9, AV, 2), batch(10, 19, AK, 1), batch(20, 29, AV, 0),
              batch(30, 39, AV, 1)], now=50_000)
    # Delivered before (count >= 1): held for delay(count) from the load; count 0: never
    # delivered, fetchable at once (as are new records after the window).
    assert p.next_fetch_offset(50_000) == 20
    assert fetch(p, "a", 50_000) == [(20, 29, 1)]
    assert fetch(p, "a", 50_000) == [(40, 49, 1)]
    assert p.next_deadline() == 51_000
    assert fetch(p, "a", 51_000) == [(30, 39, 2)]
    assert fetch(p, "a", 51_999) == [(50, 59, 1)]
    assert fetch(p, "a", 52_000) == [(0, 9, 3)]
    assert p.start_offset == 0


def test_load_without_backoff_or_without_a_clock_holds_nothing() -> None:
    off = load([batch(0, 9, AV, 2)], now=50_000, delivery_backoff_ms=0)
    assert off.next_fetch_offset(50_000) == 0 and off.next_deadline() is None
    no_clock = load([batch(0, 9, AV, 2)], now=None)
    assert no_clock.next_fetch_offset(0) == 0


def test_held_partition_is_not_settled_until_the_backoff_ends() -> None:
    p, _ = backoff()
    fetch(p, "a", 0)
    ack(p, "a", [(0, 9, (RELEASE,))], 0)
    assert not p.is_settled()
    fire(p, 1_000)
    assert p.is_settled()


def test_records_archived_by_a_moved_log_start_end_their_backoff() -> None:
    p, _ = backoff()
    fetch(p, "a", 0)
    ack(p, "a", [(0, 9, (RELEASE,))], 0)
    p.on_log_start_offset_moved(10)
    assert p.start_offset == 10
    assert p.next_deadline() is None and p.next_backoff_end() is None


# --------------------------------------------------------------------------- group configs


def group_configs(tmp_path: Path) -> GroupConfigs:
    return GroupConfigs(tmp_path, BrokerConfig({}))


@pytest.mark.parametrize(("name", "value", "accepted"), [
    ("share.delivery.backoff.ms", "0", True),
    ("share.delivery.backoff.ms", "1000", True),
    ("share.delivery.backoff.ms", "60000", True),
    ("share.delivery.backoff.ms", "-1", False),
    ("share.delivery.backoff.ms", "60001", False),  # above the default maximum
    ("share.delivery.backoff.ms", "1.5", False),
    ("share.delivery.backoff.max.ms", "1", True),
    ("share.delivery.backoff.max.ms", "3600000", True),
    ("share.delivery.backoff.max.ms", "0", False),
    ("share.delivery.backoff.max.ms", "3600001", False),
    ("share.delivery.backoff.multiplier", "1", True),
    ("share.delivery.backoff.multiplier", "2.5", True),
    ("share.delivery.backoff.multiplier", "10", True),
    ("share.delivery.backoff.multiplier", "0.5", False),
    ("share.delivery.backoff.multiplier", "10.01", False),
    ("share.delivery.backoff.multiplier", "nan", False),
    ("share.delivery.backoff.multiplier", "inf", False),
    ("share.delivery.backoff.multiplier", "fast", False),
], ids=lambda v: str(v))
def test_config_validation(tmp_path: Path, name: str, value: str, accepted: bool) -> None:
    gc = group_configs(tmp_path)
    if accepted:
        gc.alter("g", {name: value})
        assert gc.overrides("g")[name] == float(value)
        assert name in GROUP_CONFIGS
    else:
        with pytest.raises(ConfigError) as err:
            gc.alter("g", {name: value})
        assert name in str(err.value)
        assert gc.overrides("g") == {}


def test_config_defaults_effective_values_and_persistence(tmp_path: Path) -> None:
    gc = group_configs(tmp_path)
    c = gc.get("g")
    assert (c.delivery_backoff_ms, c.delivery_backoff_max_ms, c.delivery_backoff_multiplier) == (
        0, 60_000, 2.0)
    gc.alter("g", {"share.delivery.backoff.max.ms": "120000",
                   "share.delivery.backoff.ms": "90000",
                   "share.delivery.backoff.multiplier": "1.5"})
    again = group_configs(tmp_path).get("g")
    assert (again.delivery_backoff_ms, again.delivery_backoff_max_ms,
            again.delivery_backoff_multiplier) == (90_000, 120_000, 1.5)
    described = {d.name: (d.value, d.source) for d in gc.describe("g")}
    assert described["share.delivery.backoff.ms"] == (90_000, "group")
    assert described["share.delivery.backoff.multiplier"] == (1.5, "group")
    assert described["share.delivery.backoff.max.ms"] == (120_000, "group")


def test_backoff_may_not_exceed_its_maximum(tmp_path: Path) -> None:
    gc = group_configs(tmp_path)
    gc.alter("g", {"share.delivery.backoff.ms": "5000", "share.delivery.backoff.max.ms": "8000"})
    with pytest.raises(ConfigError, match=r"share.delivery.backoff.ms \(5000\) must not be "
                                          r"greater than share.delivery.backoff.max.ms \(4000\)"):
        gc.alter("g", {"share.delivery.backoff.max.ms": "4000"})
    assert gc.get("g").delivery_backoff_max_ms == 8_000  # all or nothing
    gc.alter("g", {"share.delivery.backoff.ms": None})  # back to 0: any maximum is fine
    gc.alter("g", {"share.delivery.backoff.max.ms": "4000"})
