"""Age and drain figures (broker/share/drain.py) and the sans-IO SharePartition that feeds them,
with a fake clock (every call takes ``now``)."""

from __future__ import annotations

import math

import pytest

from cli import share_figures as sf
from cli.share_groups import read_reset_plan
from cli.wire import CliError
from broker.share.drain import (
    DecayingRate,
    age_s,
    batch_append_ms,
    drain_eta_s,
    first_unacked_offset,
)
from tests.unit.broker.share.test_backoff import LOCK, backoff, fetch, fire
from tests.unit.broker.share.test_partition import (
    ACCEPT, AK, AV, GAP, RELEASE, REJECT, ack, batch, make,
)

# --------------------------------------------------------------------------- the rate


def test_steady_rate_reads_right_from_the_first_seconds() -> None:
    r = DecayingRate()
    assert r.rate(0) == 0.0
    for t in range(0, 10_001, 100):  # 10 records every 100 ms = 100/s
        r.record(10, t)
    assert r.rate(10_000) == pytest.approx(100, rel=0.02)


def test_rate_decays_with_a_one_minute_time_constant_after_acks_stop() -> None:
    r = DecayingRate()
    for t in range(0, 600_001, 1_000):  # ten minutes of 50/s: the average is warm
        r.record(50, t)
    assert r.rate(600_000) == pytest.approx(50, rel=0.02)
    assert r.rate(660_000) == pytest.approx(50 / math.e, rel=0.02)  # one minute later
    assert r.rate(1_200_000) < 0.01


def test_one_burst_is_not_an_infinite_rate_and_time_going_back_is_ignored() -> None:
    r = DecayingRate()
    r.record(100, 5_000)
    assert r.rate(5_000) == pytest.approx(100, rel=0.01)  # spread over at least one second
    r.record(0, 6_000)
    r.record(-3, 6_000)
    assert r.rate(4_000) == r.rate(5_000)


def test_tau_must_be_positive() -> None:
    with pytest.raises(ValueError):
        DecayingRate(0)


@pytest.mark.parametrize(("lag", "rate", "eta"), [
    (0, 0.0, 0.0),
    (0, 5.0, 0.0),
    (100, 0.0, math.inf),
    (100, 1e-9, math.inf),
    (100, 20.0, 5.0),
    (-1, 3.0, -1.0),
], ids=["no-lag", "no-lag-acking", "stuck", "nearly-stuck", "draining", "unknown-lag"])
def test_drain_eta(lag: int, rate: float, eta: float) -> None:
    assert drain_eta_s(lag, rate) == eta


def test_age_and_batch_timestamps() -> None:
    assert age_s(10_000, None) == 0.0
    assert age_s(10_000, 7_500) == 2.5
    assert age_s(10_000, 12_000) == 0.0  # a producer clock ahead of ours
    assert batch_append_ms(0, 1_000, 1_900) == 1_000  # CreateTime: the first record's
    assert batch_append_ms(0x08, 1_000, 1_900) == 1_900  # LogAppendTime: the broker's


@pytest.mark.parametrize(("start", "batches", "first"), [
    (0, [], 0),
    (10, [batch(10, 19, AK, 1), batch(20, 29, AV, 2)], 20),
    (10, [batch(20, 29, AK, 1), batch(10, 19, AK, 1)], 30),  # unsorted, all done
    (10, [batch(10, 14, AK, 1), batch(16, 19, AK, 1)], 15),  # a hole was never delivered
    (12, [batch(10, 14, AK, 1), batch(15, 19, AV, 1)], 15),
], ids=["nothing", "available", "all-done", "hole", "straddling"])
def test_first_unacked_offset_of_persisted_state(start, batches, first) -> None:
    assert first_unacked_offset(start, batches) == first


# --------------------------------------------------------------------------- the partition


def test_oldest_unacked_offset_stays_on_a_record_until_it_is_acknowledged() -> None:
    p, _cfg = make(start=0)
    assert fetch(p, "m", 1_000) == [(0, 9, 1)]
    assert p.oldest_unacked_offset() == 0  # acquired, not acknowledged
    ack(p, "m", [(1, 9, (ACCEPT,))], 2_000)
    assert p.oldest_unacked_offset() == 0  # offset 0 is still held
    ack(p, "m", [(0, 0, (RELEASE,))], 3_000)
    assert p.oldest_unacked_offset() == 0  # released: waiting for redelivery, still counts
    assert fetch(p, "m", 4_000) == [(0, 0, 2), (10, 19, 1)]
    assert p.oldest_unacked_offset() == 0  # redelivered: same record, same age
    ack(p, "m", [(0, 0, (ACCEPT,))], 5_000)
    assert p.oldest_unacked_offset() == 10  # everything up to 9 done: 10 is held now
    ack(p, "m", [(10, 19, (ACCEPT,))], 6_000)
    assert p.oldest_unacked_offset() == 20  # all done: the next new record


def test_records_in_backoff_count_as_unacknowledged() -> None:
    p, _cfg = backoff(start=0)
    fetch(p, "m", 0)
    ack(p, "m", [(0, 0, (RELEASE,)), (1, 9, (ACCEPT,))], 1_000)
    assert p.offset_view(0).available_at_ms is not None  # in backoff
    assert p.oldest_unacked_offset() == 0


def test_drain_rate_counts_completed_records_not_releases() -> None:
    p, _cfg = make(start=0)
    fetch(p, "m", 0)
    ack(p, "m", [(0, 9, (RELEASE,))], 500)
    assert p.drain_rate(1_000) == 0.0
    fetch(p, "m", 1_000)
    ack(p, "m", [(0, 9, (ACCEPT,) * 5 + (REJECT,) * 4 + (GAP,))], 1_000)
    # 10 records completed, spread over (at least) one second
    assert p.drain_rate(1_000) == pytest.approx(10.0, rel=0.01)
    m = p.metrics()
    assert m.archived_records == 5  # REJECT and GAP archive
    assert drain_eta_s(90, p.drain_rate(1_000)) == pytest.approx(9.0, rel=0.01)


def test_failed_ack_write_neither_completes_nor_counts() -> None:
    p, _cfg = make(start=0)
    fetch(p, "m", 0)
    ack(p, "m", [(0, 9, (ACCEPT,))], 500, ok=False)
    assert p.drain_rate(1_000) == 0.0
    assert p.oldest_unacked_offset() == 0


def test_lock_timeouts_at_the_delivery_limit_archive_and_drain() -> None:
    p, _cfg = make(start=0, delivery_count_limit=1, record_lock_duration_ms=LOCK)
    fetch(p, "m", 0)
    fire(p, LOCK)
    m = p.metrics()
    assert m.lock_timeouts == 10 and m.archived_records == 10
    assert p.drain_rate(LOCK) == pytest.approx(10.0, rel=0.01)
    assert p.oldest_unacked_offset() == 10


# --------------------------------------------------------------------------- the CLI's view


def test_cli_reads_the_figures_of_the_asked_groups_from_the_exposition() -> None:
    text = (
        "# TYPE shoal_share_partition_drain_eta_seconds gauge\n"
        'shoal_share_partition_drain_eta_seconds{group="g",topic="t",partition="0"} +Inf\n'
        'shoal_share_partition_drain_eta_seconds{group="g",topic="t",partition="1"} 12.5\n'
        'shoal_share_partition_drain_eta_seconds{group="other",topic="t",partition="0"} 1\n'
        'shoal_share_partition_oldest_unacked_append_age_seconds{group="g",topic="t",'
        'partition="0"} 3.25\n'
        'shoal_share_partition_acquired_records{group="g",topic="t",partition="0"} 4\n'
        'shoal_share_partition_lag{group="g",topic="t",partition="0"} 9\n'
        'shoal_share_partition_seconds_since_progress{group="g",topic="t",partition="0"} 75\n'
        'shoal_share_partition_acquired_records{group="we\\"ird",topic="t",partition="0"} 2\n'
    )
    got = sf.parse(text, {"g", 'we"ird'})
    assert got[("g", "t", 0)] == sf.PartitionFigures(in_flight=4, oldest_unacked_s=3.25,
                                                     drain_eta_s=math.inf, since_progress_s=75)
    assert got[("g", "t", 1)].drain_eta_s == 12.5 and got[("g", "t", 1)].in_flight is None
    assert got[('we"ird', "t", 0)].in_flight == 2
    assert ("other", "t", 0) not in got
    assert [sf.fmt_seconds(v) for v in (None, -1.0, math.inf, 3.25)] == [None, None, "inf", "3.2"]
    assert [sf.json_seconds(v) for v in (None, math.inf, 3.25)] == [None, None, 3.25]


def test_reset_plan_formats(tmp_path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text("# exported\n\norders, 0, 15\norders,1,0\ng2,orders,2,9\ng1,orders,2,7\n")
    assert read_reset_plan(str(plan), "g1") == {("orders", 0): 15, ("orders", 1): 0,
                                                ("orders", 2): 7}
    plan.write_text("g2,orders,2,9\n")
    with pytest.raises(CliError, match="no line for group 'g1'"):
        read_reset_plan(str(plan), "g1")
    plan.write_text("orders,0,-4\n")
    with pytest.raises(CliError, match="line 1: partition and offset must not be negative"):
        read_reset_plan(str(plan), "g1")
