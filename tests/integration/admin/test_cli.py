"""Golden tests of the ``shoal`` admin commands, run as subprocesses against a running broker.

Scenarios (the issue's must-shows): describe with lag after producing 100 and acknowledging 40
(lag 60), reset to earliest on an Empty group and a new consumer receiving everything again,
delete-offsets, delete, topics and configs, JSON output, and failures (one line on stderr, a
non-zero exit code). Names are fixed per test so outputs are literal; ``--list`` runs on a broker
of its own so no other test's groups show up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from tests.conftest import ROOT, BrokerProcess, child_env
from tests.integration.share_helpers import poll_until, produce, share_consumer


def shoal(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    # ``python -m cli.main`` from this checkout (as the broker fixture starts the broker):
    # the ``shoal`` script runs whichever checkout the venv was installed from.
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


class Cli:
    """``shoal`` bound to one broker's --bootstrap-server."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def run(self, command: str, *args: str) -> subprocess.CompletedProcess[str]:
        return shoal(command, "--bootstrap-server", self.bootstrap, *args)

    def ok(self, command: str, *args: str) -> str:
        """Run and return stdout; the command must succeed with nothing on stderr."""
        r = self.run(command, *args)
        assert (r.returncode, r.stderr) == (0, ""), (r.returncode, r.stdout, r.stderr)
        return r.stdout

    def fails(self, command: str, *args: str, code: int = 1) -> str:
        """Run a command that must fail with one line on stderr; returns that line."""
        r = self.run(command, *args)
        assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1, r.stderr
        return r.stderr

    def setup_topic(self, topic: str, group: str, count: int) -> None:
        assert self.ok("topics", "--create", "--topic", topic, "--partitions", "1") == \
            f"Created topic {topic}.\n"
        assert self.ok("configs", "--entity-type", "groups", "--entity-name", group, "--alter",
                       "--add-config", "share.auto.offset.reset=earliest") == \
            f"Completed updating config for group {group}.\n"
        if count:
            produce(self.bootstrap, topic, count)

    def wait_empty(self, group: str, timeout: float = 10.0) -> None:
        """Until the group has no members (a closed consumer's leave is committed)."""
        def empty() -> bool:
            r = self.run("share-groups", "--describe", "--group", group, "--state",
                         "--output", "json")
            return r.returncode == 0 and json.loads(r.stdout)[0]["state"] == "Empty"

        wait_for(empty, timeout)


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


@pytest.fixture
def cli(broker: BrokerProcess) -> Cli:
    return Cli(broker.bootstrap)


def consume_all(bootstrap: str, topic: str, group: str, count: int,
                ack_first: int | None = None) -> list[bytes]:
    """Receive ``count`` records in explicit mode and ACCEPT those at offsets below
    ``ack_first`` (all by default); the rest are released when the consumer closes."""
    consumer: ShareConsumer = share_consumer(bootstrap, group, topic, explicit=True)
    got: list[Any] = []
    try:
        poll_until([consumer], lambda: len(got) >= count, on_message=lambda _i, m: got.append(m))
        for m in got:
            if ack_first is None or m.offset() < ack_first:
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        consumer.commit_sync(15)
    finally:
        consumer.close()
    return [m.value() for m in got]


# --------------------------------------------------------------------------- share-groups


def test_describe_offsets_shows_lag_60_after_acking_40_of_100(cli: Cli) -> None:
    cli.setup_topic("cli-lag", "cli-lag-group", 100)
    consume_all(cli.bootstrap, "cli-lag", "cli-lag-group", 100, ack_first=40)
    cli.wait_empty("cli-lag-group")
    assert cli.ok("share-groups", "--describe", "--group", "cli-lag-group") == (
        "GROUP         TOPIC   PARTITION START-OFFSET LAG\n"
        "cli-lag-group cli-lag 0         40           60\n")
    assert cli.ok("share-groups", "--describe", "--group", "cli-lag-group", "--offsets",
                  "--verbose") == (
        "GROUP         TOPIC   PARTITION LEADER-EPOCH START-OFFSET LAG\n"
        "cli-lag-group cli-lag 0         0            40           60\n")
    assert json.loads(cli.ok("share-groups", "--describe", "--group", "cli-lag-group",
                             "--output", "json")) == [
        {"group": "cli-lag-group", "topic": "cli-lag", "partition": 0, "start_offset": 40,
         "lag": 60}]
    assert cli.ok("share-groups", "--describe", "--group", "cli-lag-group", "--members") == \
        "Share group 'cli-lag-group' has no active members.\n"
    state = cli.ok("share-groups", "--describe", "--group", "cli-lag-group", "--state")
    header, row = state.splitlines()
    assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"]
    assert row.split()[0] == "cli-lag-group" and row.split()[-2:] == ["Empty", "0"]


def test_describe_members_and_state_of_an_active_group(cli: Cli) -> None:
    cli.setup_topic("cli-members", "cli-members-group", 1)
    consumer = share_consumer(cli.bootstrap, "cli-members-group", "cli-members",
                              **{"client.id": "golden-client"})
    try:
        got: list[Any] = []
        poll_until([consumer], lambda: len(got) >= 1, on_message=lambda _i, m: got.append(m))
        (member,) = json.loads(cli.ok("share-groups", "--describe", "--group",
                                      "cli-members-group", "--members", "--verbose",
                                      "--output", "json"))
        assert member["group"] == "cli-members-group"
        assert (member["host"], member["client_id"], member["partitions"]) == \
            ("/127.0.0.1", "golden-client", 1)
        assert member["assignment"] == "cli-members:0" and member["member_epoch"] > 0
        out = cli.ok("share-groups", "--describe", "--group", "cli-members-group", "--members")
        header, row = out.splitlines()
        assert header.split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                  "ASSIGNMENT"]
        assert row.split() == ["cli-members-group", member["consumer_id"], "/127.0.0.1",
                               "golden-client", "1", "cli-members:0"]
        (state,) = json.loads(cli.ok("share-groups", "--describe", "--group",
                                     "cli-members-group", "--state", "--verbose",
                                     "--output", "json"))
        assert (state["state"], state["members"]) == ("Stable", 1)
        assert state["group_epoch"] >= state["assignment_epoch"] > 0
    finally:
        consumer.close()


def test_reset_to_earliest_then_a_new_consumer_receives_everything(cli: Cli) -> None:
    cli.setup_topic("cli-reset", "cli-reset-group", 100)
    first = consume_all(cli.bootstrap, "cli-reset", "cli-reset-group", 100)
    cli.wait_empty("cli-reset-group")
    describe = ("share-groups", "--describe", "--group", "cli-reset-group")
    assert cli.ok(*describe) == (
        "GROUP           TOPIC     PARTITION START-OFFSET LAG\n"
        "cli-reset-group cli-reset 0         100          0\n")
    reset = ("share-groups", "--reset-offsets", "--group", "cli-reset-group", "--topic",
             "cli-reset", "--to-earliest")
    plan = ("GROUP           TOPIC     PARTITION NEW-OFFSET\n"
            "cli-reset-group cli-reset 0         0\n")
    assert cli.ok(*reset, "--dry-run") == plan
    # Without --execute it is a dry run too, and says so on stderr.
    r = cli.run(*reset)
    assert (r.returncode, r.stdout) == (0, plan)
    assert "dry run" in r.stderr and r.stderr.count("\n") == 1
    assert cli.ok(*describe).splitlines()[1].split()[-2:] == ["100", "0"]

    assert cli.ok(*reset, "--execute") == plan
    assert cli.ok(*describe) == (
        "GROUP           TOPIC     PARTITION START-OFFSET LAG\n"
        "cli-reset-group cli-reset 0         0            100\n")
    again = share_consumer(cli.bootstrap, "cli-reset-group", "cli-reset")
    got: list[bytes] = []
    try:
        poll_until([again], lambda: len(got) >= 100,
                   on_message=lambda _i, m: got.append(m.value()))
        assert sorted(got) == sorted(first)
        # A group with a member cannot be reset.
        err = cli.fails(*reset, "--execute")
        assert err == ("shoal share-groups: share group 'cli-reset-group' is Stable with 1 "
                       "member(s); stop its consumers before resetting offsets\n")
    finally:
        again.close()


def test_reset_to_offset_latest_and_datetime(cli: Cli) -> None:
    cli.setup_topic("cli-reset-to", "cli-reset-to-group", 10)
    base = ("share-groups", "--reset-offsets", "--group", "cli-reset-to-group", "--topic",
            "cli-reset-to:0", "--execute", "--output", "json")

    def start_offset() -> int:
        (row,) = json.loads(cli.ok("share-groups", "--describe", "--group",
                                   "cli-reset-to-group", "--output", "json"))
        value: int = row["start_offset"]
        return value

    assert json.loads(cli.ok(*base, "--to-offset", "7")) == [
        {"group": "cli-reset-to-group", "topic": "cli-reset-to", "partition": 0,
         "new_offset": 7}]
    assert start_offset() == 7
    cli.ok(*base, "--to-offset", "500")  # clamped to the log end
    assert start_offset() == 10
    cli.ok(*base, "--to-datetime", "2000-01-01T00:00:00.000")  # before every record
    assert start_offset() == 0
    cli.ok(*base, "--to-latest")
    assert start_offset() == 10
    # After every record: the log end, as Kafka's tool does.
    assert json.loads(cli.ok(*base, "--to-datetime", "2999-01-01T00:00:00"))[0]["new_offset"] \
        == 10


def test_delete_offsets(cli: Cli) -> None:
    cli.setup_topic("cli-delo", "cli-delo-group", 20)
    consume_all(cli.bootstrap, "cli-delo", "cli-delo-group", 20, ack_first=5)
    cli.wait_empty("cli-delo-group")
    r = cli.run("share-groups", "--delete-offsets", "--group", "cli-delo-group",
                "--topic", "cli-delo", "--topic", "cli-nowhere")
    assert r.returncode == 1  # one topic failed
    assert r.stdout == (
        "TOPIC       STATUS\n"
        "cli-delo    Successful\n"
        "cli-nowhere Error: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this "
        "topic-partition.\n")
    assert cli.ok("share-groups", "--describe", "--group", "cli-delo-group") == \
        "Share group 'cli-delo-group' has no offset information.\n"
    r = cli.run("share-groups", "--delete-offsets", "--group", "cli-delo-group",
                "--topic", "cli-delo")
    assert (r.returncode, r.stdout) == (1, (
        "TOPIC    STATUS\n"
        "cli-delo Error: UNKNOWN_TOPIC_OR_PARTITION: There is no offset information to "
        "delete.\n"))
    err = cli.fails("share-groups", "--delete-offsets", "--group", "cli-no-group",
                    "--topic", "cli-delo")
    assert err == ("shoal share-groups: cannot delete the offsets of share group "
                   "'cli-no-group': GROUP_ID_NOT_FOUND: Group cli-no-group not found.; list "
                   "share groups with --list\n")
    # With its offsets gone the group starts over from share.auto.offset.reset (earliest).
    assert len(consume_all(cli.bootstrap, "cli-delo", "cli-delo-group", 20)) == 20


def test_delete_group(cli: Cli) -> None:
    cli.setup_topic("cli-del", "cli-del-group", 3)
    consumer = share_consumer(cli.bootstrap, "cli-del-group", "cli-del")
    try:
        got: list[Any] = []
        poll_until([consumer], lambda: len(got) >= 3, on_message=lambda _i, m: got.append(m))
        err = cli.fails("share-groups", "--delete", "--group", "cli-del-group")
        assert err == ("shoal share-groups: share group 'cli-del-group' could not be deleted: "
                       "NON_EMPTY_GROUP; stop its consumers first\n")
    finally:
        consumer.close()
    cli.wait_empty("cli-del-group")
    assert cli.ok("share-groups", "--delete", "--group", "cli-del-group") == \
        "Deletion of requested share groups ('cli-del-group') was successful.\n"
    err = cli.fails("share-groups", "--describe", "--group", "cli-del-group")
    assert err == ("shoal share-groups: share group 'cli-del-group' does not exist; list share "
                   f"groups with shoal share-groups --bootstrap-server {cli.bootstrap} --list\n")
    # Its group configs went with it.
    assert cli.ok("configs", "--entity-type", "groups", "--entity-name", "cli-del-group",
                  "--describe") == "NAME VALUE SOURCE\n"
    err = cli.fails("share-groups", "--delete", "--group", "cli-del-group")
    assert "GROUP_ID_NOT_FOUND" in err


def test_list_with_and_without_state(tmp_path: Path) -> None:
    own = BrokerProcess(tmp_path / "data")
    own.start()
    try:
        cli = Cli(own.bootstrap)
        assert cli.ok("share-groups", "--list") == ""
        cli.setup_topic("cli-list", "cli-list-idle", 1)
        consume_all(cli.bootstrap, "cli-list", "cli-list-idle", 1)
        cli.wait_empty("cli-list-idle")
        consumer = share_consumer(cli.bootstrap, "cli-list-busy", "cli-list")
        try:
            wait_for(lambda: "cli-list-busy" in cli.ok("share-groups", "--list"))
            # the consumer joins on its first poll
            assert cli.ok("share-groups", "--list") == "cli-list-busy\ncli-list-idle\n"
            assert cli.ok("share-groups", "--list", "--state") == (
                "GROUP         STATE\n"
                "cli-list-busy Stable\n"
                "cli-list-idle Empty\n")
            assert cli.ok("share-groups", "--list", "--state", "stable") == (
                "GROUP         STATE\n"
                "cli-list-busy Stable\n")
            assert json.loads(cli.ok("share-groups", "--list", "--output", "json")) == [
                {"group": "cli-list-busy"}, {"group": "cli-list-idle"}]
        finally:
            consumer.close()
    finally:
        own.stop()


# --------------------------------------------------------------------------- topics, configs


def test_topics_create_list_describe_alter_delete(cli: Cli) -> None:
    assert cli.ok("topics", "--create", "--topic", "cli-topic", "--partitions", "2",
                  "--config", "retention.ms=60000") == "Created topic cli-topic.\n"
    err = cli.fails("topics", "--create", "--topic", "cli-topic")
    assert err == ("shoal topics: cannot create topic 'cli-topic': TOPIC_ALREADY_EXISTS: "
                   "topic 'cli-topic' already exists; use --if-not-exists to ignore\n")
    assert cli.ok("topics", "--create", "--topic", "cli-topic", "--if-not-exists") == ""
    assert "cli-topic\n" in cli.ok("topics", "--list")
    assert all(not n.startswith("__")
               for n in cli.ok("topics", "--list", "--exclude-internal").split())
    out = cli.ok("topics", "--describe", "--topic", "cli-topic")
    head, row, blank, part_head, *parts = out.splitlines()
    assert head.split() == ["TOPIC", "TOPIC-ID", "PARTITIONS", "REPLICATION-FACTOR", "CONFIGS"]
    assert row.split()[0] == "cli-topic" and row.split()[2:] == ["2", "1", "retention.ms=60000"]
    assert blank == ""
    assert [part_head.split(), *(p.split() for p in parts)] == [
        ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"],
        ["cli-topic", "0", "1", "1", "1"], ["cli-topic", "1", "1", "1", "1"]]
    doc = json.loads(cli.ok("topics", "--describe", "--topic", "cli-topic", "--output", "json"))
    (topic,) = doc["topics"]
    assert (topic["topic"], topic["partitions"], topic["replication_factor"], topic["configs"]) \
        == ("cli-topic", 2, 1, "retention.ms=60000")
    assert [(p["partition"], p["replicas"], p["isr"]) for p in doc["partitions"]] == \
        [(0, "1", "1"), (1, "1", "1")]
    assert cli.ok("topics", "--alter", "--topic", "cli-topic", "--partitions", "3") == \
        "Topic cli-topic now has 3 partitions.\n"
    assert cli.ok("topics", "--delete", "--topic", "cli-topic") == (
        "TOPIC     STATUS\n"
        "cli-topic Deleted\n")
    r = cli.run("topics", "--delete", "--topic", "cli-topic")
    assert r.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.stdout
    err = cli.fails("topics", "--describe", "--topic", "cli-topic")
    assert err.startswith("shoal topics: topic 'cli-topic' does not exist; ")


def test_configs_alter_and_describe_group_configs(cli: Cli) -> None:
    group = ("configs", "--entity-type", "groups", "--entity-name", "cli-cfg-group")
    assert cli.ok(*group, "--alter", "--add-config",
                  "share.auto.offset.reset=earliest,share.record.lock.duration.ms=45000") == \
        "Completed updating config for group cli-cfg-group.\n"
    assert cli.ok(*group, "--describe") == (
        "NAME                          VALUE    SOURCE\n"
        "share.auto.offset.reset       earliest GROUP_CONFIG\n"
        "share.record.lock.duration.ms 45000    GROUP_CONFIG\n")
    assert cli.ok(*group, "--alter", "--delete-config", "share.record.lock.duration.ms") == \
        "Completed updating config for group cli-cfg-group.\n"
    assert cli.ok(*group, "--describe") == (
        "NAME                    VALUE    SOURCE\n"
        "share.auto.offset.reset earliest GROUP_CONFIG\n")
    every = json.loads(cli.ok(*group, "--describe", "--all", "--output", "json"))
    assert {"name": "share.delivery.count.limit", "value": "5", "source": "DEFAULT_CONFIG"} \
        in every or any(c["name"] == "share.delivery.count.limit" for c in every)
    err = cli.fails(*group, "--alter", "--add-config", "share.auto.offset.reset=sideways")
    assert err.startswith("shoal configs: cannot alter the configs of group 'cli-cfg-group': "
                          "INVALID_CONFIG: ") and err.endswith("; nothing was changed\n")


# --------------------------------------------------------------------------- failures


def test_failures_are_one_line_with_a_non_zero_exit(cli: Cli) -> None:
    down = Cli("127.0.0.1:1")
    assert down.fails("share-groups", "--list") == (
        "shoal share-groups: cannot connect to 127.0.0.1:1: Connection refused; check "
        "--bootstrap-server and that the broker is running\n")
    assert down.fails("topics", "--list").startswith("shoal topics: cannot connect to ")
    # Usage errors exit 2, also on one line.
    assert cli.fails("share-groups", code=2) == (
        "shoal share-groups: one of the arguments --list --describe --reset-offsets "
        "--delete-offsets --delete is required; see shoal share-groups --help\n")
    assert cli.fails("share-groups", "--describe", code=2) == (
        "shoal share-groups: --describe needs --group or --all-groups; see shoal share-groups "
        "--help\n")
    assert cli.fails("share-groups", "--reset-offsets", "--group", "g", "--topic", "t",
                     code=2).startswith("shoal share-groups: --reset-offsets needs one of ")
    assert cli.fails("share-groups", "--list", "--state", "Sleeping", code=2) == (
        "shoal share-groups: invalid state 'Sleeping'; use one of Empty, Stable, Dead; see "
        "shoal share-groups --help\n")
    assert cli.fails("share-groups", "--bootstrap-server", "nonsense", "--list", code=2) \
        .startswith("shoal share-groups: invalid broker address 'nonsense'")
    err = cli.fails("share-groups", "--reset-offsets", "--group", "cli-fail-group", "--topic",
                    "cli-no-such-topic", "--to-earliest", "--execute")
    assert err == ("shoal share-groups: topic 'cli-no-such-topic' does not exist; check the "
                   f"name with shoal topics --bootstrap-server {cli.bootstrap} --list\n")
    assert cli.fails("share-groups", "--describe", "--group", "cli-fail-group").startswith(
        "shoal share-groups: share group 'cli-fail-group' does not exist; ")
