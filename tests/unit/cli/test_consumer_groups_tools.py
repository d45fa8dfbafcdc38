"""Pure parts of the consumer-group tooling: ``shoal consumer-groups`` usage errors (in-process:
they are refused before any connection), reset-plan parsing and rules
(``cli/reset_plan.py``), ``client/admin_groups.py`` (consumer-protocol assignment
decoding, ConsumerGroupDescribe and the DescribeGroups fallback), and the consumer-group
metrics collector over a fake broker (lag, state, members, the series bound)."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest

from broker import broker_metrics
from cli import main
from broker.broker_metrics import BrokerMetrics
from cli import consumer_groups as cg
from client import admin_groups as ag
from cli import reset_plan as rp
from coordinator.group.service import ConsumerGroupView
from coordinator.group.offsets import FetchedOffset

TP = ("t", 0)


# --------------------------------------------------------------------------- usage


def _shoal(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Exit code and stderr of ``shoal consumer-groups`` against a port nobody listens on."""
    try:
        code = main.main(["consumer-groups", "--bootstrap-server", "127.0.0.1:1", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


USAGE = [
    ((), "one of the arguments --list --describe --reset-offsets --delete-offsets --delete is "
     "required"),
    (("--describe",), "--describe needs --group or --all-groups"),
    (("--describe", "--group", "g", "--members", "--state"),
     "use one of --offsets, --members and --state"),
    (("--reset-offsets", "--group", "g", "--topic", "t"),
     "--reset-offsets needs one of --to-earliest, --to-latest, --to-current, --to-offset, "
     "--shift-by, --to-datetime, --by-duration, --from-file"),
    (("--reset-offsets", "--group", "g", "--to-earliest"),
     "--reset-offsets needs --topic or --all-topics"),
    (("--reset-offsets", "--group", "g", "--from-file", "p.csv", "--topic", "t"),
     "--from-file names its partitions; leave out --topic and --all-topics"),
    (("--reset-offsets", "--group", "g", "--group", "h", "--topic", "t", "--to-latest"),
     "--reset-offsets needs exactly one --group"),
    (("--list", "--type", "streams"),
     "invalid group type 'streams'; use one of classic, consumer, share"),
    (("--list", "--state", "Sleeping"), "invalid state 'Sleeping'; use one of Empty, "
     "PreparingRebalance, CompletingRebalance, Assigning, Reconciling, Stable, Dead"),
    (("--describe", "--group", "g", "--to-earliest"),
     "--to-*, --shift-by, --by-duration, --from-file, --dry-run, --execute and --export go "
     "with --reset-offsets"),
    (("--describe", "--group", "g", "--type"), "--type goes with --list"),
    (("--delete-offsets", "--group", "g"),
     "--delete-offsets needs one --group and at least one --topic"),
]


@pytest.mark.parametrize(("args", "message"), USAGE, ids=[str(i) for i in range(len(USAGE))])
def test_usage_errors_are_one_line_with_exit_2(capsys: pytest.CaptureFixture[str],
                                               args: tuple[str, ...], message: str) -> None:
    assert _shoal(capsys, *args) == \
        (2, f"shoal consumer-groups: {message}; see shoal consumer-groups --help\n")


def test_bad_reset_input_is_refused_before_connecting(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Any) -> None:
    base = ("--reset-offsets", "--group", "g")
    code, err = _shoal(capsys, *base, "--topic", "t", "--to-datetime", "yesterday")
    assert code == 2 and err.startswith(
        "shoal consumer-groups: invalid --to-datetime 'yesterday'; use YYYY-MM-DDThh:mm:ss.sss")
    code, err = _shoal(capsys, *base, "--topic", "t", "--by-duration", "3 hours")
    assert (code, err) == (2, "shoal consumer-groups: invalid --by-duration '3 hours'; use an "
                           "ISO-8601 duration PnDTnHnMnS, for example PT1H30M or P1DT12H\n")
    plan = tmp_path / "bad.csv"
    plan.write_text("t,zero,1\n")
    assert _shoal(capsys, *base, "--from-file", str(plan)) == (
        2, f"shoal consumer-groups: --from-file {plan} line 1: partition and offset must be "
        "integers in 't,zero,1'\n")
    assert _shoal(capsys, *base, "--from-file", str(tmp_path / "none.csv")) == (
        2, f"shoal consumer-groups: cannot read --from-file {tmp_path / 'none.csv'}: No such "
        "file or directory\n")
    # Good input gets as far as the connection.
    code, err = _shoal(capsys, *base, "--topic", "t", "--by-duration", "PT1H")
    assert code == 1 and err.startswith("shoal consumer-groups: cannot connect to 127.0.0.1:1")


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
    assert ag.decode_assignment(_assignment(3, {"b": [2, 0], "a": [1]})) == \
        {"a": [1], "b": [0, 2]}
    assert ag.decode_assignment(_assignment(0, {})) == {}
    assert ag.decode_assignment(b"") == {}
    assert ag.decode_assignment(_assignment(1, {"a": [1]})[:-9]) == {}  # cut inside partitions
    assert ag.decode_assignment(struct.pack(">hi", 0, 1 << 30)) == {}  # absurd count
    assert ag.decode_assignment(b"\xff\xff") == {}


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


# --------------------------------------------------------------------------- consumer-type groups


class _FakeConn:
    """A coordinator connection that serves ConsumerGroupDescribe (api 69) and DescribeGroups
    (api 15) from canned answers and records what was asked."""

    address = "127.0.0.1:9092"

    def __init__(self, answers: dict[int, Any]) -> None:
        self.answers = answers
        self.asked: list[int] = []

    def supports(self, api_key: int) -> bool:
        return api_key in self.answers

    def call(self, api_key: int, _body: str, **_fields: Any) -> tuple[int, Any]:
        self.asked.append(api_key)
        return 1, self.answers[api_key]


def _cluster(conn: _FakeConn) -> Any:
    node = SimpleNamespace(node_id=1, address=conn.address)
    return SimpleNamespace(coordinator=lambda _gid: (node, conn), any=conn)


def _tps(**parts: list[int]) -> Any:
    return SimpleNamespace(topic_partitions=[SimpleNamespace(topic_name=t, partitions=ps)
                                             for t, ps in parts.items()])


def test_a_consumer_group_is_described_with_consumer_group_describe(
        capsys: pytest.CaptureFixture[str]) -> None:
    member = SimpleNamespace(member_id="m1", instance_id=None, client_id="c1",
                             client_host="/10.0.0.1", member_epoch=7,
                             assignment=_tps(orders=[1, 0]),
                             target_assignment=_tps(orders=[0, 1, 2]))
    conn = _FakeConn({69: SimpleNamespace(groups=[SimpleNamespace(
        error_code=0, error_message=None, group_id="g", group_state="Reconciling",
        group_epoch=8, assignment_epoch=8, assignor_name="uniform", members=[member])])})
    g = ag.describe_group(_cluster(conn), "g")
    assert g is not None and conn.asked == [69]
    assert (g.group_type, g.state, g.strategy, g.group_epoch, g.assignment_epoch) == \
        ("consumer", "Reconciling", "uniform", 8, 8)
    assert g.members == [ag.Member("m1", None, "c1", "/10.0.0.1", {"orders": [0, 1]}, 7,
                                   {"orders": [0, 1, 2]})]
    args = SimpleNamespace(verbose=True, output="table")
    assert cg._describe_members([g], args) == 0  # type: ignore[arg-type]
    assert capsys.readouterr().out.splitlines() == [
        "GROUP CONSUMER-ID GROUP-INSTANCE-ID HOST      CLIENT-ID #PARTITIONS MEMBER-EPOCH "
        "ASSIGNMENT TARGET-ASSIGNMENT",
        "g     m1          -                 /10.0.0.1 c1        2           7            "
        "orders:0,1 orders:0,1,2"]


def test_a_classic_group_falls_back_to_describe_groups() -> None:
    not_consumer = SimpleNamespace(groups=[SimpleNamespace(
        error_code=69, error_message="Group g is not a consumer group.", group_id="g")])
    classic = SimpleNamespace(groups=[SimpleNamespace(
        error_code=0, group_id="g", group_state="Stable", protocol_type="consumer",
        protocol_data="range", members=[SimpleNamespace(
            member_id="m1", group_instance_id="i1", client_id="c1", client_host="/h",
            member_assignment=_assignment(3, {"orders": [2]}))])])
    conn = _FakeConn({69: not_consumer, 15: classic})
    g = ag.describe_group(_cluster(conn), "g")
    assert g is not None and conn.asked == [69, 15]
    assert (g.group_type, g.state, g.strategy) == ("classic", "Stable", "range")
    assert g.members == [ag.Member("m1", "i1", "c1", "/h", {"orders": [2]})]
