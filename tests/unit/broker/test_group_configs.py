"""Share group configs: validation against broker bounds, by_duration parsing, effective values,
persistence, and the group.share.* broker configs behind them."""

from __future__ import annotations

import asyncio
import errno
import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.authz import DefaultAuthorizer
from broker.config import BrokerConfig, ConfigError
from broker.context import RequestContext
from broker.group_configs import (
    FILE_NAME,
    GROUP_CONFIGS,
    GroupConfigLimitError,
    GroupConfigs,
    format_iso_duration_ms,
    parse_auto_offset_reset,
    parse_iso_duration_ms,
)
from broker.handlers import incremental_alter_configs
from protocol.codec import request_module


def configs(tmp_path: Path, **broker: str) -> GroupConfigs:
    return GroupConfigs(tmp_path, BrokerConfig({k.replace("_", "."): v for k, v in broker.items()}))


# (config, value, accepted) against the default broker bounds.
VALIDATION = [
    ("share.session.timeout.ms", "45000", True),
    ("share.session.timeout.ms", "60000", True),
    ("share.session.timeout.ms", "44999", False),
    ("share.session.timeout.ms", "60001", False),
    ("share.session.timeout.ms", "soon", False),
    ("share.heartbeat.interval.ms", "5000", True),
    ("share.heartbeat.interval.ms", "15000", True),
    ("share.heartbeat.interval.ms", "4999", False),
    ("share.heartbeat.interval.ms", "15001", False),
    ("share.record.lock.duration.ms", "15000", True),
    ("share.record.lock.duration.ms", "60000", True),
    ("share.record.lock.duration.ms", "2000", False),
    ("share.record.lock.duration.ms", "60001", False),
    ("share.delivery.count.limit", "2", True),
    ("share.delivery.count.limit", "10", True),
    ("share.delivery.count.limit", "1", False),
    ("share.delivery.count.limit", "11", False),
    ("share.partition.max.record.locks", "100", True),
    ("share.partition.max.record.locks", "4000", True),
    ("share.partition.max.record.locks", "99", False),
    ("share.partition.max.record.locks", "4001", False),
    ("share.assignment.interval.ms", "0", True),
    # Refused, not silently ignored: assignments are computed at once (issue 25).
    ("share.assignment.interval.ms", "1", False),
    ("share.assignment.interval.ms", "15000", False),
    ("share.assignment.interval.ms", "-1", False),
    ("share.assignment.interval.ms", "15001", False),
    ("share.auto.offset.reset", "latest", True),
    ("share.auto.offset.reset", "EARLIEST", True),
    ("share.auto.offset.reset", "by_duration:PT1H", True),
    ("share.auto.offset.reset", "by_duration:P1DT2H3M4.5S", True),
    ("share.auto.offset.reset", "by_duration:PT0S", True),
    ("share.auto.offset.reset", "by_duration:-PT1H", False),
    ("share.auto.offset.reset", "by_duration:PT", False),
    ("share.auto.offset.reset", "by_duration:1h", False),
    ("share.auto.offset.reset", "by_duration:", False),
    ("share.auto.offset.reset", "none", False),
    ("share.auto.offset.reset", "", False),
    ("share.isolation.level", "read_committed", True),
    ("share.isolation.level", "read_uncommitted", True),
    ("share.isolation.level", "serializable", False),
    ("share.renew.acknowledge.enable", "false", True),
    ("share.renew.acknowledge.enable", "TRUE", True),
    ("share.renew.acknowledge.enable", "yes", False),
    ("share.record.locks.count.inflight.only", "true", True),
    ("share.record.locks.count.inflight.only", "1", False),
    ("consumer.session.timeout.ms", "45000", True),
    ("consumer.session.timeout.ms", "60000", True),
    ("consumer.session.timeout.ms", "30000", False),  # below group.consumer.min.session...
    ("consumer.heartbeat.interval.ms", "5000", True),
    ("consumer.heartbeat.interval.ms", "4999", False),
    ("consumer.no.such.config", "1", False),
    ("share.no.such.config", "1", False),
]


@pytest.mark.parametrize(("name", "value", "accepted"), VALIDATION,
                         ids=[f"{n}={v or 'empty'}" for n, v, _ in VALIDATION])
def test_validation(tmp_path: Path, name: str, value: str, accepted: bool) -> None:
    gc = configs(tmp_path)
    if accepted:
        gc.alter("g", {name: value})
        assert name in gc.overrides("g")
    else:
        with pytest.raises(ConfigError) as info:
            gc.alter("g", {name: value})
        assert name in str(info.value) or "unknown group config" in str(info.value)
        assert gc.overrides("g") == {}
        assert not (tmp_path / FILE_NAME).exists()


def test_a_typo_gets_did_you_mean_first(tmp_path: Path) -> None:
    gc = configs(tmp_path)
    with pytest.raises(ConfigError) as info:
        gc.alter("g", {"share.auto.offset.rest": "earliest"})
    # First, so a client that cuts the message short (librdkafka) still shows it.
    assert str(info.value).startswith("unknown group config 'share.auto.offset.rest'; did you "
                                      "mean 'share.auto.offset.reset'? the group configs are ")
    with pytest.raises(ConfigError) as info:
        gc.alter("g", {"zzz": "1"})
    assert str(info.value).startswith("unknown group config 'zzz'; the group configs are ")


def test_out_of_bounds_message_names_config_and_range(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"share\.record\.lock\.duration\.ms=2000: must be "
                       r"between 15000 and 60000 \(broker configs "
                       r"group\.share\.min\.record\.lock\.duration\.ms and "
                       r"group\.share\.max\.record\.lock\.duration\.ms\)"):
        configs(tmp_path).alter("g", {"share.record.lock.duration.ms": "2000"})


def test_lowered_broker_bounds_allow_short_values(tmp_path: Path) -> None:
    gc = configs(tmp_path, **{"group.share.min.record.lock.duration.ms": "1000",
                              "group.share.min.session.timeout.ms": "1000",
                              "group.share.min.heartbeat.interval.ms": "100"})
    gc.alter("g", {"share.record.lock.duration.ms": "2000", "share.session.timeout.ms": "1000",
                   "share.heartbeat.interval.ms": "200"})
    c = gc.get("g")
    assert (c.record_lock_duration_ms, c.session_timeout_ms, c.heartbeat_interval_ms) == \
        (2000, 1000, 200)


def test_heartbeat_must_stay_below_session_timeout(tmp_path: Path) -> None:
    gc = configs(tmp_path, **{"group.share.min.session.timeout.ms": "1000"})
    with pytest.raises(ConfigError, match="share.heartbeat.interval.ms .5000. must be less than "
                                          "share.session.timeout.ms .3000."):
        gc.alter("g", {"share.session.timeout.ms": "3000"})
    gc.alter("g", {"share.session.timeout.ms": "46000", "share.heartbeat.interval.ms": "6000"})
    assert gc.get("g").session_timeout_ms == 46000


def test_consumer_group_timeouts_default_to_the_broker_and_are_bounded(tmp_path: Path) -> None:
    gc = configs(tmp_path, **{"group.consumer.session.timeout.ms": "50000"})
    assert gc.consumer_timeouts("g") == (50_000, 5_000)
    gc.alter("g", {"consumer.session.timeout.ms": "60000",
                   "consumer.heartbeat.interval.ms": "7000"})
    assert gc.consumer_timeouts("g") == (60_000, 7_000)
    with pytest.raises(ConfigError, match=r"consumer\.session\.timeout\.ms=70000: must be "
                       r"between 45000 and 60000"):
        gc.alter("g", {"consumer.session.timeout.ms": "70000"})
    lenient = configs(tmp_path / "x", **{"group.consumer.min.session.timeout.ms": "1000"})
    with pytest.raises(ConfigError, match="consumer.heartbeat.interval.ms .5000. must be less"):
        lenient.alter("g", {"consumer.session.timeout.ms": "4000"})


def test_alter_is_all_or_nothing_and_validate_only_changes_nothing(tmp_path: Path) -> None:
    gc = configs(tmp_path)
    with pytest.raises(ConfigError):
        gc.alter("g", {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "99"})
    assert gc.overrides("g") == {}
    gc.alter("g", {"share.auto.offset.reset": "earliest"}, validate_only=True)
    assert gc.overrides("g") == {}
    assert gc.get("g").auto_offset_reset == "latest"


def test_defaults_come_from_broker_configs(tmp_path: Path) -> None:
    c = configs(tmp_path).get("any")
    assert c.session_timeout_ms == 45_000
    assert c.heartbeat_interval_ms == 5_000
    assert c.record_lock_duration_ms == 30_000
    assert c.auto_offset_reset == "latest" and c.auto_offset_reset_duration_ms is None
    assert c.isolation_level == "read_uncommitted"
    assert c.delivery_count_limit == 5
    assert c.partition_max_record_locks == 2000
    assert c.renew_acknowledge_enable is True
    assert c.assignment_interval_ms == 0
    assert c.record_locks_count_inflight_only is False
    broker = configs(tmp_path, **{"group.share.record.lock.duration.ms": "20000",
                                  "group.share.delivery.count.limit": "3"}).get("any")
    assert (broker.record_lock_duration_ms, broker.delivery_count_limit) == (20_000, 3)


def test_overrides_apply_live_and_delete_falls_back(tmp_path: Path) -> None:
    gc = configs(tmp_path)
    gc.alter("g", {"share.auto.offset.reset": "By_Duration:p1d",
                   "share.record.locks.count.inflight.only": "true"})
    c = gc.get("g")
    assert c.auto_offset_reset == "by_duration:PT24H"
    assert c.auto_offset_reset_duration_ms == 86_400_000
    assert c.record_locks_count_inflight_only is True
    assert gc.get("other").auto_offset_reset == "latest"
    gc.alter("g", {"share.auto.offset.reset": None})
    assert gc.get("g").auto_offset_reset == "latest"
    assert gc.overrides("g") == {"share.record.locks.count.inflight.only": True}


def test_effective_configs_are_kept_until_a_group_or_broker_config_changes(tmp_path: Path) -> None:
    """get() is read on every share fetch, so its answer is kept; a group alter and a live
    broker config change each make the next get() see the new value."""
    broker = BrokerConfig({})
    gc = GroupConfigs(tmp_path, broker)
    first = gc.get("g")
    assert gc.get("g") is first and first.record_lock_duration_ms == 30_000
    gc.alter("g", {"share.record.lock.duration.ms": "20000"})
    assert gc.get("g").record_lock_duration_ms == 20_000
    assert gc.get("other").record_lock_duration_ms == 30_000
    broker.set("group.share.assignment.interval.ms", "0")  # the one dynamic share config
    assert gc.get("other").assignment_interval_ms == 0
    assert gc.get("g").record_lock_duration_ms == 20_000


def test_describe_sources(tmp_path: Path) -> None:
    gc = configs(tmp_path, **{"group.share.delivery.count.limit": "4"})
    gc.alter("g", {"share.isolation.level": "read_committed"})
    by_name = {d.name: d for d in gc.describe("g")}
    assert set(by_name) == set(GROUP_CONFIGS)
    assert (by_name["share.isolation.level"].value, by_name["share.isolation.level"].source) == \
        ("read_committed", "group")
    assert (by_name["share.delivery.count.limit"].value,
            by_name["share.delivery.count.limit"].source) == (4, "static")
    assert by_name["share.session.timeout.ms"].source == "default"
    assert by_name["share.auto.offset.reset"].source == "default"


def test_persisted_and_reloaded(tmp_path: Path) -> None:
    gc = configs(tmp_path)
    gc.alter("g1", {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "7"})
    gc.alter("g2", {"share.renew.acknowledge.enable": "false"})
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    assert doc["groups"]["g1"] == {"share.auto.offset.reset": "earliest",
                                   "share.delivery.count.limit": "7"}
    again = configs(tmp_path)
    assert again.get("g1").delivery_count_limit == 7
    assert again.get("g1").auto_offset_reset == "earliest"
    assert again.get("g2").renew_acknowledge_enable is False
    again.alter("g2", {"share.renew.acknowledge.enable": None})
    assert "g2" not in json.loads((tmp_path / FILE_NAME).read_text())["groups"]


def test_stored_values_are_clamped_into_new_bounds_and_bad_entries_dropped(tmp_path: Path) -> None:
    low = configs(tmp_path, **{"group.share.min.record.lock.duration.ms": "1000"})
    low.alter("g", {"share.record.lock.duration.ms": "2000"})
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    doc["groups"]["g"]["share.bogus"] = "1"
    doc["groups"]["g"]["share.delivery.count.limit"] = "many"
    (tmp_path / FILE_NAME).write_text(json.dumps(doc))
    restarted = configs(tmp_path)  # default bounds again: min lock duration 15000
    assert restarted.get("g").record_lock_duration_ms == 15_000
    assert restarted.get("g").delivery_count_limit == 5


DURATIONS = [
    ("PT1H", 3_600_000),
    ("pt1h30m", 5_400_000),
    ("P2D", 172_800_000),
    ("P1DT1S", 86_401_000),
    ("PT0.5S", 500),
    ("PT1,25S", 1_250),
    ("PT0.0009S", 0),
    ("PT1H-30M", 1_800_000),
    ("+PT10S", 10_000),
    ("-PT10S", -10_000),
    ("PT-1.5S", -1_500),
]


@pytest.mark.parametrize(("text", "ms"), DURATIONS, ids=[t for t, _ in DURATIONS])
def test_iso_duration(text: str, ms: int) -> None:
    assert parse_iso_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "P1DT", "1H", "PT1.5M", "P1H", "PT1S2M", "P1W"])
def test_iso_duration_invalid(text: str) -> None:
    with pytest.raises(ValueError):
        parse_iso_duration_ms(text)


@pytest.mark.parametrize(("ms", "text"), [(0, "PT0S"), (500, "PT0.5S"), (3_600_000, "PT1H"),
                                          (5_400_000, "PT1H30M"), (172_800_000, "PT48H"),
                                          (3_661_001, "PT1H1M1.001S")])
def test_iso_duration_format(ms: int, text: str) -> None:
    assert format_iso_duration_ms(ms) == text
    assert parse_iso_duration_ms(text) == ms


def test_auto_offset_reset_normalized() -> None:
    assert parse_auto_offset_reset(" Latest ") == ("latest", None)
    assert parse_auto_offset_reset("by_duration:P1DT12H") == ("by_duration:PT36H", 129_600_000)
    with pytest.raises(ConfigError, match="must not be negative"):
        parse_auto_offset_reset("by_duration:-P1D")


# ----------------------------------------------------------------------- broker configs


BROKER_CASES = [
    ({}, None),
    ({"group.share.record.lock.duration.ms": "10000"}, "between"),
    ({"group.share.record.lock.duration.ms": "10000",
      "group.share.min.record.lock.duration.ms": "1000"}, None),
    ({"group.share.min.record.lock.duration.ms": "999"}, "between 1000 and 30000"),
    ({"group.share.delivery.count.limit": "11"}, "between 2 and 10"),
    ({"group.share.partition.max.record.locks": "5000"}, "between"),
    ({"group.share.min.session.timeout.ms": "70000"}, "must not be greater"),
    ({"group.share.heartbeat.interval.ms": "15000",
      "group.share.session.timeout.ms": "15000",
      "group.share.min.session.timeout.ms": "1000"}, "less than"),
    ({"group.share.max.size": "0"}, "between 1 and 1000"),
    ({"group.share.max.size": "1000", "group.share.max.share.sessions": "999"}, "at least"),
    ({"group.share.assignors": "uniform"}, "one of"),
    ({"group.share.persister.class.name": "x"}, None),  # internal Kafka config: accepted
]


@pytest.mark.parametrize(("overrides", "problem"), BROKER_CASES,
                         ids=[",".join(f"{k}={v}" for k, v in o.items()) or "defaults"
                              for o, _ in BROKER_CASES])
def test_broker_share_configs(overrides: dict[str, str], problem: str | None) -> None:
    if problem is None:
        BrokerConfig(overrides)
    else:
        with pytest.raises(ConfigError, match=problem):
            BrokerConfig(overrides)


def test_dynamic_assignment_interval_other_than_0_is_refused() -> None:
    """Shoal computes assignments at once: an interval would be ignored, so it is refused."""
    cfg = BrokerConfig()
    assert cfg.get("group.share.assignment.interval.ms") == 0
    with pytest.raises(ConfigError, match="must be 0"):
        cfg.set("group.share.assignment.interval.ms", "2000")
    assert cfg.get("group.share.assignment.interval.ms") == 0
    with pytest.raises(ConfigError, match="must be 0"):
        BrokerConfig({"group.share.assignment.interval.ms": "1000"})
    with pytest.raises(ConfigError, match="cannot be changed while the broker runs"):
        cfg.set("group.share.record.lock.duration.ms", "20000")


# ------------------------------------------------- IncrementalAlterConfigs on many groups (issue 25)

def _alter_request(groups: list[str], validate_only: bool = False, **configs: str | None) -> Any:
    m = request_module(44, 1)
    return m.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=tuple(
        m.AlterConfigsResource(resource_type=32, resource_name=g, configs=tuple(
            m.AlterableConfig(name=k.replace("_", "."), config_operation=1 if v is None else 0,
                              value=v) for k, v in configs.items()))
        for g in groups))


class Spied:
    """A GroupConfigs whose writes are recorded (and can be made to fail): the real file is
    still written."""

    def __init__(self, tmp_path: Path, **broker: str) -> None:
        self.configs = configs(tmp_path, **broker)
        self.writes: list[tuple[int, int, dict[str, Any]]] = []  # (thread, groups, visible)
        self.fail: OSError | None = None
        real_write = self.configs.write

        def write(overrides: Any) -> None:
            # What readers see while the file is being written: the old overrides.
            self.writes.append((threading.get_ident(), len(overrides),
                                self.configs.overrides("g-0")))
            if self.fail is not None:
                raise self.fail
            real_write(overrides)

        self.configs.write = write  # type: ignore[method-assign]

    def alter(self, req: Any) -> list[tuple[int, str | None]]:
        broker = SimpleNamespace(group_configs=self.configs, authorizer=DefaultAuthorizer(),
                                 member=None)
        ctx = RequestContext(broker=broker, api_key=44, api_version=1,  # type: ignore[arg-type]
                             correlation_id=1, client_id="t", client_host="127.0.0.1",
                             connection_id=1)

        async def run() -> Any:
            return await incremental_alter_configs.handle(ctx, req)

        res = asyncio.run(run())
        return [(int(r.error_code), r.error_message) for r in res.responses]


def test_a_request_of_many_groups_is_written_once_off_the_loop_before_it_applies(
        tmp_path: Path) -> None:
    spied = Spied(tmp_path)
    groups = [f"g-{i}" for i in range(1000)]
    answers = spied.alter(_alter_request(groups, share_auto_offset_reset="earliest"))
    assert answers == [(0, None)] * 1000
    assert len(spied.writes) == 1
    thread, written, visible_while_writing = spied.writes[0]
    assert thread != threading.get_ident()  # a worker thread, not the event loop's
    assert written == 1000
    assert visible_while_writing == {}  # durable before visible
    assert spied.configs.overrides("g-0") == {"share.auto.offset.reset": "earliest"}
    stored = json.loads((tmp_path / FILE_NAME).read_text())["groups"]
    assert len(stored) == 1000
    # validate_only writes nothing.
    assert spied.alter(_alter_request(groups, True, share_isolation_level="x"))[0][0] == \
        ErrorCode.invalid_config
    assert spied.alter(_alter_request(groups, True, share_isolation_level="read_committed")) \
        == [(0, None)] * 1000
    assert len(spied.writes) == 1


def test_a_failed_write_changes_nothing_and_says_so(tmp_path: Path) -> None:
    spied = Spied(tmp_path)
    spied.alter(_alter_request(["g-0"], share_auto_offset_reset="earliest"))
    spied.fail = OSError(errno.ENOSPC, "No space left on device")
    answers = spied.alter(_alter_request(["g-0", "g-1"], share_auto_offset_reset="latest"))
    assert [code for code, _ in answers] == [ErrorCode.kafka_storage_error] * 2
    assert "No space left on device" in (answers[0][1] or "")
    assert spied.configs.value("g-0", "share.auto.offset.reset") == "earliest"
    assert spied.configs.overrides("g-1") == {}
    assert GroupConfigs(tmp_path, BrokerConfig()).overrides("g-0") == {
        "share.auto.offset.reset": "earliest"}


def test_configs_for_one_group_too_many_are_a_policy_violation(tmp_path: Path) -> None:
    spied = Spied(tmp_path, group_config_max_groups="3")
    answers = spied.alter(_alter_request([f"g-{i}" for i in range(5)],
                                         share_auto_offset_reset="earliest"))
    assert [code for code, _ in answers] == [0, 0, 0, ErrorCode.policy_violation,
                                              ErrorCode.policy_violation]
    assert "group.config.max.groups" in (answers[3][1] or "")
    assert len(json.loads((tmp_path / FILE_NAME).read_text())["groups"]) == 3
    # A group that has configs may change them; removing a group's configs makes room.
    assert spied.alter(_alter_request(["g-1"], share_isolation_level="read_committed")) == [
        (0, None)]
    assert spied.alter(_alter_request(["g-3"], share_auto_offset_reset="earliest"))[0][0] == \
        ErrorCode.policy_violation
    assert spied.alter(_alter_request(["g-0"], share_auto_offset_reset=None)) == [(0, None)]
    assert spied.configs.overrides("g-0") == {}
    assert spied.alter(_alter_request(["g-3"], share_auto_offset_reset="earliest")) == [
        (0, None)]
    with pytest.raises(GroupConfigLimitError):
        spied.configs.alter("g-4", {"share.auto.offset.reset": "earliest"})
