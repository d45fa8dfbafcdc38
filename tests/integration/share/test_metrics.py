"""Age and drain metrics of share groups against a real broker process and a real ShareConsumer.

Must-show (issue 16, "Metrics"): the age of the oldest unacknowledged record grows while a
consumer holds a record and drops once it is acknowledged; in-flight and acknowledgement counters
move; the drain ETA is there while lag > 0 and acknowledgements flow; after a restart the
figures exist for the group's share-partitions before any consumer fetches.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer

from tests.integration.helpers import create_topic
from tests.integration.share_helpers import poll_until, produce, set_group_configs, share_consumer
from tests.integration.admin.test_cli import Cli
from tests.integration.admin.test_metrics import MetricsBroker, Scrape, scrape
from tests.unit.broker.test_metrics import assert_valid_exposition

AGE = "shoal_share_partition_oldest_unacked_append_age_seconds"
ETA = "shoal_share_partition_drain_eta_seconds"


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsBroker]:
    b = MetricsBroker(Path(tmp_path_factory.mktemp("share-metrics")) / "data")
    b.start()
    yield b
    b.stop()


def _setup(b: MetricsBroker, name: str, count: int) -> list[bytes]:
    create_topic(b.bootstrap, name, 1)
    set_group_configs(b.bootstrap, name, {"share.auto.offset.reset": "earliest"})
    return produce(b.bootstrap, name, count)


def _scrape_until(b: MetricsBroker, done: Any, timeout: float = 10.0) -> Scrape:
    deadline = time.monotonic() + timeout
    while True:
        s = scrape(b)
        if done(s):
            return s
        assert time.monotonic() < deadline, s.text[-3000:]
        time.sleep(0.1)


def _fetch_all(c: Any, count: int) -> list[Any]:
    got: list[Any] = []
    poll_until([c], lambda: len(got) >= count, on_message=lambda _i, m: got.append(m))
    return got


def test_age_grows_while_a_record_is_held_and_drops_once_acknowledged(mb, unique) -> None:
    _setup(mb, unique, 20)
    where = {"group": unique, "topic": unique, "partition": "0"}
    c = share_consumer(mb.bootstrap, unique, unique, explicit=True)
    try:
        got = _fetch_all(c, 20)
        held = min(got, key=lambda m: m.offset())
        for m in got:
            if m is not held:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(15)
        first = _scrape_until(mb, lambda s: s.value(
            "shoal_share_acknowledgements_total", **where, type="accept") == 19)
        assert first.value("shoal_share_partition_acquired_records", **where) == 1
        assert first.value("shoal_share_partition_lag", **where) == 1
        assert first.value("shoal_share_partition_loaded", **where) == 1
        age1 = first.value(AGE, **where)
        assert age1 is not None and age1 >= 0
        # Acknowledgements flow and one record waits: the ETA is there and finite.
        eta = first.value(ETA, **where)
        assert eta is not None and 0 < eta < math.inf
        assert first.value("shoal_share_partition_drain_rate", **where) > 0
        assert first.value("shoal_share_group_drain_eta_seconds", group=unique) == eta
        idle = first.value("shoal_share_partition_seconds_since_progress", **where)
        assert idle is not None and 0 <= idle < 30  # the acknowledgements just completed
        assert first.value("shoal_share_group_seconds_since_progress", group=unique) == idle
        time.sleep(1.2)
        second = scrape(mb)
        age2 = second.value(AGE, **where)
        assert age2 is not None and age2 >= age1 + 1.0, (age1, age2)  # the record is held
        assert second.value("shoal_share_group_oldest_unacked_append_age_seconds",
                            group=unique) == age2

        c.acknowledge(held, AcknowledgeType.ACCEPT)
        c.commit_sync(15)
        after = _scrape_until(mb, lambda s: s.value("shoal_share_partition_lag", **where) == 0)
    finally:
        c.close()
    assert after.value(AGE, **where) == 0  # nothing unacknowledged any more
    assert after.value(ETA, **where) == 0
    assert after.value("shoal_share_partition_acquired_records", **where) == 0
    assert after.value("shoal_share_acknowledgements_total", **where, type="accept") == 20
    assert after.types[AGE] == "gauge"
    assert_valid_exposition(after.text)  # every family typed once, +Inf/floats well formed
    assert after.types["shoal_share_archived_records_total"] == "counter"


def test_released_and_rejected_records_age_and_archive(mb, unique) -> None:
    """Released records keep their age (redelivery does not reset it); rejected ones are
    archived, counted and no longer lag."""
    _setup(mb, unique, 10)
    where = {"group": unique, "topic": unique, "partition": "0"}
    c = share_consumer(mb.bootstrap, unique, unique, explicit=True)
    try:
        got = _fetch_all(c, 10)
        for m in got:
            c.acknowledge(m, AcknowledgeType.REJECT if m.offset() >= 5 else
                          AcknowledgeType.RELEASE)
        c.commit_sync(15)
        s = _scrape_until(mb, lambda s: s.value(
            "shoal_share_acknowledgements_total", **where, type="reject") == 5)
    finally:
        c.close()
    assert s.value("shoal_share_archived_records_total", **where) == 5
    assert s.value("shoal_share_acknowledgements_total", **where, type="release") == 5
    assert s.value("shoal_share_partition_lag", **where) == 5
    assert s.value("shoal_share_partition_acquired_records", **where) == 0
    assert s.value(AGE, **where) > 0  # released records wait: they count
    time.sleep(0.5)
    assert scrape(mb).value(AGE, **where) >= s.value(AGE, **where) + 0.4


def test_after_a_restart_figures_exist_before_any_fetch(tmp_path: Path, unique: str) -> None:
    b = MetricsBroker(tmp_path / "data")
    b.start()
    try:
        _setup(b, unique, 10)
        where = {"group": unique, "topic": unique, "partition": "0"}
        c = share_consumer(b.bootstrap, unique, unique, explicit=True)
        try:
            for m in _fetch_all(c, 10):
                c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 3 else
                              AcknowledgeType.RELEASE)
            c.commit_sync(15)
        finally:
            c.close()
        b.stop()
        b.start()
        s = _scrape_until(b, lambda s: s.value("shoal_share_partition_lag", **where) is not None)
        assert s.value("shoal_share_partition_loaded", **where) == 0  # nobody fetched yet
        assert s.value("shoal_share_partitions", group=unique) in (None, 0)
        assert s.value("shoal_share_partition_lag", **where) == 7
        assert s.value("shoal_share_partition_start_offset", **where) == 3
        assert s.value("shoal_share_partition_acquired_records", **where) == 0
        assert s.value(AGE, **where) > 0  # the released records were appended before
        assert s.value(ETA, **where) == math.inf  # nothing completes: never, at this rate
        # Not loaded here: no progress known, and the operator sees it directly.
        assert s.value("shoal_share_partition_seconds_since_progress", **where) == math.inf
        assert s.value("shoal_share_group_lag", group=unique) == 7
        assert "shoal_share_partition_drain_eta_seconds{" in s.text
        assert f'{ETA}{{group="{unique}",topic="{unique}",partition="0"}} +Inf' in s.text
        assert_valid_exposition(s.text)
    finally:
        b.stop()


# --------------------------------------------------------------------------- offset resets


def _offsets_received(bootstrap: str, group: str, topic: str, count: int) -> list[int]:
    c = share_consumer(bootstrap, group, topic, explicit=True)
    try:
        got = _fetch_all(c, count)
        for m in got:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(15)
        time.sleep(0.3)  # nothing below the reset offset may follow
        for m in c.poll(0.5):
            got.append(m)
    finally:
        c.close()
    return sorted(m.offset() for m in got)


def test_reset_to_offset_dry_run_changes_nothing_and_execute_moves_the_start(mb, unique) -> None:
    _setup(mb, unique, 30)
    cli = Cli(mb.bootstrap)
    assert len(_offsets_received(mb.bootstrap, unique, unique, 30)) == 30
    cli.wait_empty(unique)
    describe = ("share-groups", "--describe", "--group", unique, "--output", "json")
    before = json.loads(cli.ok(*describe))
    assert [r["start_offset"] for r in before] == [30]
    reset = ("share-groups", "--reset-offsets", "--group", unique, "--topic", f"{unique}:0",
             "--to-offset", "25")
    plan = json.loads(cli.ok(*reset, "--dry-run", "--output", "json"))
    assert plan == [{"group": unique, "topic": unique, "partition": 0, "new_offset": 25}]
    assert [r["start_offset"] for r in json.loads(cli.ok(*describe))] == [30]  # unchanged
    assert json.loads(cli.ok(*reset, "--execute", "--output", "json")) == plan
    assert [r["start_offset"] for r in json.loads(cli.ok(*describe))] == [25]
    assert _offsets_received(mb.bootstrap, unique, unique, 5) == [25, 26, 27, 28, 29]


def test_reset_from_file_creates_a_group_that_did_not_exist(mb, unique, tmp_path) -> None:
    create_topic(mb.bootstrap, unique, 2)
    p = Producer({"bootstrap.servers": mb.bootstrap, "linger.ms": 5})
    for i in range(20):
        p.produce(unique, f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    cli = Cli(mb.bootstrap)
    plan = tmp_path / "plan.csv"
    plan.write_text(f"# reset plan\n{unique},0,7\n\nother-group,{unique},1,0\n"
                    f"{unique},{unique},1,4\n")
    describe = ("share-groups", "--describe", "--group", unique)
    reset = ("share-groups", "--reset-offsets", "--group", unique, "--from-file", str(plan))
    assert cli.ok(*reset, "--dry-run") == (
        f"GROUP{' ' * (len(unique) - 5)} TOPIC{' ' * (len(unique) - 5)} PARTITION NEW-OFFSET\n"
        f"{unique} {unique} 0         7\n"
        f"{unique} {unique} 1         4\n")
    err = cli.fails(*describe)  # a dry run creates nothing
    assert "does not exist" in err
    cli.ok(*reset, "--execute")
    rows = json.loads(cli.ok(*describe, "--output", "json"))
    assert [(r["partition"], r["start_offset"], r["lag"]) for r in rows] == [(0, 7, 3),
                                                                            (1, 4, 6)]
    got = _offsets_received(mb.bootstrap, unique, unique, 9)
    assert got == [4, 5, 6, 7, 7, 8, 8, 9, 9]  # p0: 7-9, p1: 4-9


def test_reset_plan_errors_and_clamping(mb, unique, tmp_path) -> None:
    _setup(mb, unique, 5)
    cli = Cli(mb.bootstrap)
    reset = ("share-groups", "--reset-offsets", "--group", unique, "--from-file")
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{unique},zero,1\n")
    assert cli.fails(*reset, str(bad), code=2) == (
        f"shoal share-groups: {bad} line 1: partition and offset must be integers, got "
        "'zero' and '1'\n")
    bad.write_text(f"{unique},0\n")
    assert "expected topic,partition,offset" in cli.fails(*reset, str(bad), code=2)
    bad.write_text(f"{unique},0,1\n{unique},0,2\n")
    assert "appears twice" in cli.fails(*reset, str(bad), code=2)
    bad.write_text(f"{unique},3,1\n")
    assert cli.fails(*reset, str(bad)) == (
        f"shoal share-groups: topic '{unique}' in {bad} has no partition 3 (it has 1); "
        "fix the plan\n")
    bad.write_text("no-such-topic-x,0,1\n")
    assert "does not exist" in cli.fails(*reset, str(bad))
    assert "cannot read the reset plan" in cli.fails(*reset, str(tmp_path / "missing.csv"),
                                                     code=2)
    big = tmp_path / "big.csv"
    big.write_text(f"{unique},0,500\n")
    r = cli.run(*reset, str(big), "--execute", "--output", "json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == (f"shoal share-groups: warning: offset 500 of {unique}-0 is past the "
                        "log end offset 5; using 5\n")
    assert json.loads(r.stdout)[0]["new_offset"] == 5
    assert "--from-file names its own topics; drop --topic and --all-topics" in cli.fails(
        "share-groups", "--reset-offsets", "--group", unique, "--topic", unique, "--from-file",
        str(big), code=2)


# --------------------------------------------------------------------------- CLI describe


def test_cli_describe_shows_in_flight_age_and_eta(mb, unique) -> None:
    _setup(mb, unique, 10)
    cli = Cli(mb.bootstrap)
    where = {"group": unique, "topic": unique, "partition": "0"}
    describe = ("share-groups", "--describe", "--group", unique)
    c = share_consumer(mb.bootstrap, unique, unique, explicit=True)
    try:
        got = _fetch_all(c, 10)
        for m in got[:-2]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(15)
        _scrape_until(mb, lambda s: s.value("shoal_share_partition_lag", **where) == 2)
        time.sleep(0.3)
        # The coordinator serves metrics: the CLI finds them through its metrics.listen.
        header, row = cli.ok(*describe).splitlines()
        assert header.split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG",
                                  "IN-FLIGHT", "OLDEST-UNACKED-S", "DRAIN-ETA-S",
                                  "SINCE-PROGRESS-S"]
        cells = row.split()
        assert cells[:6] == [unique, unique, "0", "8", "2", "2"]
        assert float(cells[6]) >= 0.3
        assert 0 < float(cells[7]) < math.inf
        # Eight records completed: a finite time since (the page may be the one rendered for
        # the scrape above, cached for up to metrics.render.cache.ms, so no lower bound).
        assert 0 <= float(cells[8]) < math.inf
        (doc,) = json.loads(cli.ok(*describe, "--output", "json"))
        assert doc["in_flight"] == 2 and doc["lag"] == 2 and doc["start_offset"] == 8
        assert doc["oldest_unacked_s"] >= 0.3 and doc["drain_eta_s"] > 0
        assert doc["since_progress_s"] is not None and doc["since_progress_s"] >= 0
        url = f"http://127.0.0.1:{mb.metrics_port}/metrics"
        (same,) = json.loads(cli.ok(*describe, "--output", "json", "--metrics-url", url))
        assert same["in_flight"] == 2
    finally:
        c.close()
    # Released on close: nothing in flight, and the released records keep their age.
    cli.wait_empty(unique)
    _scrape_until(mb, lambda s: s.value("shoal_share_partition_acquired_records", **where) == 0)
    row = cli.ok(*describe).splitlines()[1].split()
    assert row[4:6] == ["2", "0"] and float(row[6]) > 0
    bad = cli.run(*describe, "--metrics-url", "http://127.0.0.1:1/metrics")
    assert bad.returncode == 1 and "cannot read metrics at http://127.0.0.1:1/metrics" in \
        bad.stderr
