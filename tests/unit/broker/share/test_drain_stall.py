"""Drain ETA and "seconds since progress" once completions stop (broker/share/drain.py), with
an injected clock: every call takes ``now``."""

from __future__ import annotations

import math

import pytest

from broker.share.drain import (
    STALL_AFTER_MS,
    DecayingRate,
    drain_eta_s,
    since_progress_s,
)
from tests.unit.broker.share.test_backoff import fetch
from tests.unit.broker.share.test_partition import ACCEPT, RELEASE, ack, make

MINUTE = 60_000


def test_the_rate_remembers_its_last_event() -> None:
    r = DecayingRate()
    assert r.last_event_ms is None
    r.record(3, 1_000)
    r.record(0, 5_000)  # no event
    assert r.last_event_ms == 1_000
    r.record(1, 2_500)
    assert r.last_event_ms == 2_500


@pytest.mark.parametrize(("lag", "now", "last", "idle"), [
    (0, 90_000, None, 0.0),
    (-1, 90_000, 10_000, 0.0),
    (5, 90_000, None, math.inf),
    (5, 90_000, 10_000, 80.0),
    (5, 10_000, 12_000, 0.0),
], ids=["no-lag", "unknown-lag", "never", "80s", "clock-behind"])
def test_since_progress(lag: int, now: int, last: int | None, idle: float) -> None:
    assert since_progress_s(lag, now, last) == idle


def test_the_eta_turns_infinite_once_nothing_completed_for_the_stall_interval() -> None:
    just_before = (STALL_AFTER_MS - 1) / 1000
    assert drain_eta_s(100, 20.0, just_before) == 5.0
    assert drain_eta_s(100, 20.0, STALL_AFTER_MS / 1000) == math.inf
    assert drain_eta_s(0, 0.0, math.inf) == 0.0  # nothing waits: done, never "stalled"


def test_a_partition_whose_consumers_stop_reads_stalled_after_a_minute_not_ten() -> None:
    """The report: 3 minutes after the last completion, with no members, the ETA was 41 s."""
    p, _cfg = make(start=0)
    log = [(b, b + 9) for b in range(0, 600, 10)]
    for second in range(30):  # a consumer completes 10 records a second for 30 s
        now = second * 1000
        assert fetch(p, "m", now, log=log) == [(second * 10, second * 10 + 9, 1)]
        ack(p, "m", [(second * 10, second * 10 + 9, (ACCEPT,))], now)
    last = 29_000
    assert p.last_progress_ms() == last
    lag = 300  # records 300-599 still wait; the consumer is gone

    def eta(now: int) -> float:
        return drain_eta_s(lag, p.drain_rate(now), since_progress_s(lag, now,
                                                                     p.last_progress_ms()))

    assert 20 < eta(last + 1_000) < 60  # still draining, as far as anyone can tell
    assert since_progress_s(lag, last + 3 * MINUTE, p.last_progress_ms()) == 180.0
    assert p.drain_rate(last + 3 * MINUTE) > 0.1  # the average alone still looks alive ...
    assert eta(last + 3 * MINUTE) == math.inf      # ... but the ETA says stalled
    assert eta(last + STALL_AFTER_MS - 1) < math.inf
    assert eta(last + STALL_AFTER_MS) == math.inf


def test_releases_are_not_progress() -> None:
    p, _cfg = make(start=0)
    fetch(p, "m", 0)
    ack(p, "m", [(0, 9, (RELEASE,))], 500)
    assert p.last_progress_ms() is None
    assert since_progress_s(10, 5_000, p.last_progress_ms()) == math.inf
