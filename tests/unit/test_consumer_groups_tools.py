"""Pure parts of the consumer-group tooling: reset-plan parsing and rules
(``broker/cli/reset_plan.py``), consumer-protocol assignment decoding, and the consumer-group
metrics collector over a fake broker (lag, state, members, the series bound)."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest

from broker import broker_metrics
from broker.broker_metrics import BrokerMetrics
from broker.cli import reset_plan as rp
from broker.cli.consumer_groups import decode_assignment
from broker.group_service import ConsumerGroupView
from coordinator.group.classic import FetchedOffset

TP = ("t", 0)


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(("text", "ms"), [
    ("PT1H", 3_600_000), ("P1D", 86_400_000), ("P1DT2H30M", 95_400_000), ("PT0.5S", 500),
    ("pt90m", 5_400_000), ("PT1M30.25S", 90_250), ("P0D", 0),
], ids=["hour", "day", "mixed", "fraction", "lower-case", "minutes-seconds", "zero"])
def test_parse_duration(text: str, ms: int) -> None:
    assert rp.parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "P1H", "PT1D", "3 hours", "-PT1H",
                                  "P1DT"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(rp.PlanError):
        rp.parse_duration(text)


def test_parse_datetime_with_and_without_zone() -> None:
    assert rp.parse_datetime("2020-01-01T00:00:06.000+00:00") == 1577836806000
    assert rp.parse_datetime("2020-01-01T01:00:00Z") == 1577840400000
    with pytest.raises(rp.PlanError, match="invalid --to-datetime 'noon'"):
        rp.parse_datetime("noon")


def test_parse_topic_specs() -> None:
    assert rp.parse_topic_specs(["a", "b:1,0", "b:2", "c:0", "c"]) == \
        {"a": None, "b": [0, 1, 2], "c": None}
    for bad in ["x:one", ":1", "x:", "x:-1"]:
        with pytest.raises(rp.PlanError):
            rp.parse_topic_specs([bad])


def test_parse_plan_csv_reads_both_of_kafkas_forms() -> None:
    text = "t,0,5\n\n t , 1 , 7 \ng,u,0,3\nother,u,0,9\n"
    assert rp.parse_plan_csv(text, "g") == {("t", 0): 5, ("t", 1): 7, ("u", 0): 3}
    assert rp.format_plan_csv({("t", 1): 7, ("t", 0): 5}) == "t,0,5\nt,1,7\n"
    with pytest.raises(rp.PlanError, match="line 2: 't,0' is not topic,partition,offset"):
        rp.parse_plan_csv("t,0,1\nt,0\n", "g")
    with pytest.raises(rp.PlanError, match="must not be negative"):
        rp.parse_plan_csv("t,0,-1\n", "g")
    with pytest.raises(rp.PlanError, match="no offsets for group 'g'"):
        rp.parse_plan_csv("h,t,0,1\n", "g")


# --------------------------------------------------------------------------- rules


def _plan(rule: rp.Rule, committed: int | None = 50, at: int | None = None) -> rp.Plan:
    return rp.plan(rule, [TP], committed={} if committed is None else {TP: committed},
                   earliest={TP: 10}, latest={TP: 100}, at_time=None if at is None else {TP: at})


@pytest.mark.parametrize(("rule", "offset", "clamped"), [
    (rp.Rule(rp.EARLIEST), 10, False),
    (rp.Rule(rp.LATEST), 100, False),
    (rp.Rule(rp.TO_OFFSET, 40), 40, False),
    (rp.Rule(rp.TO_OFFSET, 500), 100, True),
    (rp.Rule(rp.TO_OFFSET, 0), 10, True),
    (rp.Rule(rp.SHIFT_BY, -20), 30, False),
    (rp.Rule(rp.SHIFT_BY, -45), 10, True),
    (rp.Rule(rp.SHIFT_BY, 60), 100, True),
    (rp.Rule(rp.FROM_FILE, {TP: 70}), 70, False),
    (rp.Rule(rp.FROM_FILE, {TP: 7}), 10, True),
], ids=["earliest", "latest", "offset", "offset-past-end", "offset-before-start", "shift-back",
        "shift-before-start", "shift-past-end", "file", "file-before-start"])
def test_plan_rules_and_clamping(rule: rp.Rule, offset: int, clamped: bool) -> None:
    got = _plan(rule)
    assert got.offsets == {TP: offset}
    assert bool(got.clamped) == clamped


def test_plan_by_time_current_and_shift_without_a_committed_offset() -> None:
    assert _plan(rp.Rule(rp.CURRENT)).offsets == {TP: 50}
    assert _plan(rp.Rule(rp.CURRENT), committed=None).offsets == {TP: 100}
    assert _plan(rp.Rule(rp.TIMESTAMP, 123), at=42).offsets == {TP: 42}
    assert _plan(rp.Rule(rp.TIMESTAMP, 123), at=-1).offsets == {TP: 100}  # none that new
    with pytest.raises(rp.PlanError, match="t-0 has no committed offset to shift from"):
        _plan(rp.Rule(rp.SHIFT_BY, 1), committed=None)


# --------------------------------------------------------------------------- assignment bytes


def _assignment(version: int, topics: dict[str, list[int]], user_data: bytes = b"x") -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for name, parts in topics.items():
        raw = name.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(parts)}i", len(parts),
                                                               *parts)
    return out + struct.pack(">i", len(user_data)) + user_data


def test_decode_assignment() -> None:
    assert decode_assignment(_assignment(3, {"b": [2, 0], "a": [1]})) == {"a": [1], "b": [0, 2]}
    assert decode_assignment(_assignment(0, {})) == {}
    assert decode_assignment(b"") == {}
    assert decode_assignment(_assignment(1, {"a": [1]})[:-9]) == {}  # cut inside partitions
    assert decode_assignment(struct.pack(">hi", 0, 1 << 30)) == {}  # absurd count
    assert decode_assignment(b"\xff\xff") == {}


# --------------------------------------------------------------------------- metrics


def _broker(groups: list[ConsumerGroupView], ends: dict[tuple[str, int], int]) -> Any:
    logs = SimpleNamespace(get=lambda t, p: None if (t, p) not in ends else
                           SimpleNamespace(log_end_offset=ends[(t, p)]))
    return SimpleNamespace(started=True, logs=logs, connections=(),
                           share_groups=SimpleNamespace(consumer_groups=lambda: groups))


def _samples(m: BrokerMetrics, name: str) -> dict[tuple[str, ...], float]:
    fam = next(f for f in m._collect_consumer_groups() if f.name == name)
    return dict(fam.samples)


def test_consumer_group_metrics_lag_state_and_members() -> None:
    groups = [
        ConsumerGroupView("g", "classic", "Stable", 2, (
            FetchedOffset("t", 0, 40, 0, ""), FetchedOffset("t", 1, 5, 0, ""),
            FetchedOffset("gone", 0, 3, 0, ""))),
        ConsumerGroupView("h", "consumer", "Empty", None, ()),
    ]
    m = BrokerMetrics.__new__(BrokerMetrics)
    m._broker = _broker(groups, {("t", 0): 100, ("t", 1): 5})
    m._series_capped = False
    assert _samples(m, "shoal_consumer_group_lag") == {("g", "t", "0"): 60, ("g", "t", "1"): 0}
    assert _samples(m, "shoal_consumer_group_committed_offset") == \
        {("g", "t", "0"): 40, ("g", "t", "1"): 5}
    assert _samples(m, "shoal_consumer_group_lag_sum") == {("g",): 60, ("h",): 0}
    assert _samples(m, "shoal_consumer_group_members") == {("g", "classic"): 2}
    assert _samples(m, "shoal_consumer_group_state") == \
        {("g", "classic", "Stable"): 1, ("h", "consumer", "Empty"): 1}
    assert _samples(m, "shoal_consumer_groups") == \
        {("classic", "Stable"): 1, ("consumer", "Empty"): 1}


def test_consumer_group_partition_series_are_bounded(monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(broker_metrics, "MAX_CONSUMER_GROUP_PARTITION_SERIES", 3)
    offsets = tuple(FetchedOffset("t", p, 1, 0, "") for p in range(5))
    m = BrokerMetrics.__new__(BrokerMetrics)
    m._broker = _broker([ConsumerGroupView("g", "classic", "Empty", 0, offsets)],
                        {("t", p): 11 for p in range(5)})
    m._series_capped = False
    assert len(_samples(m, "shoal_consumer_group_lag")) == 3
    assert _samples(m, "shoal_consumer_group_lag_sum") == {("g",): 50}  # every partition
    assert "per-partition committed offset and lag series are cut" in caplog.text
