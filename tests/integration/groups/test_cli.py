"""Consumer-group tooling against a real broker: confluent-kafka's AdminClient consumer-group
calls, ``shoal consumer-groups`` as a subprocess (golden tables and JSON), and the consumer-group
metrics on the Prometheus endpoint (issue 14).

Every change is checked on the broker's behaviour: after an alter or a reset a fresh consumer of
the group (``assign``, so it starts at the committed offset without joining) receives the
expected record first; a dry run leaves the committed offsets as they were. Classic groups are
used (confluent-kafka ``group.protocol=classic``); the tool reaches consumer-type groups through
the same RPCs. The module's broker has ``group.initial.rebalance.delay.ms=0`` (joins complete at
once) and a metrics listener; names are unique per test.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka.admin import AdminClient

from client.admin_wire import Connection
from tests.conftest import BrokerProcess, free_port
from tests.integration.helpers import create_topic
from tests.integration.share_helpers import poll_until, produce, share_consumer
from tests.integration.admin.test_cli import Cli, wait_for
from tests.integration.admin.test_metrics import Scrape

HOUR_MS = 3_600_000


class GroupsBroker(BrokerProcess):
    """A broker whose joins complete at once, with a metrics listener."""

    def __init__(self, data_dir: Path) -> None:
        self.metrics_port = free_port()
        super().__init__(data_dir, overrides={"group.initial.rebalance.delay.ms": "0"},
                         extra_args=["--metrics-listen", f"127.0.0.1:{self.metrics_port}"])

    def scrape(self) -> Scrape:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return Scrape(r.read().decode())


@pytest.fixture(scope="module")
def gb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupsBroker]:
    b = GroupsBroker(Path(tmp_path_factory.mktemp("consumer-groups")) / "data")
    b.start()
    yield b
    b.stop()


@pytest.fixture
def cli(gb: GroupsBroker) -> Cli:
    return Cli(gb.bootstrap)


# --------------------------------------------------------------------------- helpers


def consumer(bootstrap: str, group: str, **extra: Any) -> KafkaConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    conf.update(extra)
    return KafkaConsumer(conf)


def consume(c: KafkaConsumer, count: int, timeout: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"got {len(got)} of {count} records"
        msg = c.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg)
    return got


def commit_40_of_100(bootstrap: str, topic: str, group: str) -> None:
    """A subscribed member reads 40 of 100 records, commits after them and leaves."""
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 100)
    c = consumer(bootstrap, group, **{"max.poll.interval.ms": 10000})
    c.subscribe([topic])
    try:
        got = consume(c, 40)
        c.commit(message=got[39], asynchronous=False)  # offset 40, with the leader epoch
    finally:
        c.close()


def first_offset(bootstrap: str, group: str, topic: str, partition: int = 0,
                 timeout: float = 20.0) -> int:
    """The offset of the first record a new consumer of the group receives: it starts at the
    group's committed offset (``auto.offset.reset=latest`` would only wait for new records)."""
    c = consumer(bootstrap, group, **{"auto.offset.reset": "latest"})
    c.assign([TopicPartition(topic, partition)])
    try:
        (msg,) = consume(c, 1, timeout)
        return int(msg.offset())
    finally:
        c.close()


def simple_commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit offsets for a group without members (what a standalone consumer does)."""
    c = consumer(bootstrap, group)
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                 asynchronous=False)
    finally:
        c.close()


def produce_timed(bootstrap: str, topic: str, timestamps: list[int]) -> None:
    """Records with the given timestamps, in one batch (ListOffsets by timestamp must find the
    record inside it, not the batch)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 100})
    for i, ts in enumerate(timestamps):
        p.produce(topic, f"t{i}".encode(), partition=0, timestamp=ts)
    assert p.flush(30) == 0


def describe_json(cli: Cli, group: str, *view: str) -> list[dict[str, Any]]:
    doc: list[dict[str, Any]] = json.loads(cli.ok("consumer-groups", "--describe", "--group",
                                                  group, *view, "--output", "json"))
    return doc


def current_offsets(cli: Cli, group: str) -> dict[tuple[str, int], int]:
    return {(r["topic"], r["partition"]): r["current_offset"] for r in describe_json(cli, group)
            if r["topic"] is not None}


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def wait_members(cli: Cli, group: str, count: int) -> None:
    def settled() -> bool:
        r = cli.run("consumer-groups", "--describe", "--group", group, "--state",
                    "--output", "json")
        if r.returncode != 0:
            return False
        (row,) = json.loads(r.stdout)
        return row["state"] == ("Stable" if count else "Empty") and row["members"] == count

    wait_for(settled, 15)


def until(check: Callable[[], bool], timeout: float = 15.0,
          poll: Callable[[], None] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        if poll is not None:
            poll()
        else:
            time.sleep(0.1)


# --------------------------------------------------------------------------- AdminClient


def test_admin_client_consumer_group_calls(gb: GroupsBroker, unique: str) -> None:
    topic, group = unique, f"{unique}-g"
    create_topic(gb.bootstrap, topic, 2)
    produce(gb.bootstrap, topic, 20, partitions=2)
    a = admin(gb.bootstrap)
    c = consumer(gb.bootstrap, group, **{"client.id": "admin-test-client"})
    c.subscribe([topic])
    try:
        consume(c, 20)
        c.commit(asynchronous=False)
        # list_consumer_groups, filtered by type and state (ListGroups v5).
        listed = a.list_consumer_groups(types={ConsumerGroupType.CLASSIC},
                                        states={ConsumerGroupState.STABLE}).result(15)
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and mine[0].type == ConsumerGroupType.CLASSIC
        assert mine[0].state == ConsumerGroupState.STABLE and not mine[0].is_simple_consumer_group
        only_consumer = a.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(15)
        assert group not in {g.group_id for g in only_consumer.valid}
        # describe_consumer_groups: the member and its decoded assignment.
        d = a.describe_consumer_groups([group])[group].result(15)
        assert d.state == ConsumerGroupState.STABLE and d.partition_assignor == "range"
        (member,) = d.members
        assert member.client_id == "admin-test-client" and member.host == "/127.0.0.1"
        assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) \
            == [(topic, 0), (topic, 1)]
        # list_consumer_group_offsets: what the member committed.
        got = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group] \
            .result(15)
        assert {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions} == \
            {(topic, 0): 10, (topic, 1): 10}
        # alter_consumer_group_offsets is refused while the group has a member.
        refused = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0, 3)])])[group].result(15)
        assert [tp.error.code() for tp in refused.topic_partitions] == \
            [KafkaError.UNKNOWN_MEMBER_ID]
    finally:
        c.close()
    until(lambda: a.describe_consumer_groups([group])[group].result(15).state
          == ConsumerGroupState.EMPTY)
    altered = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 7)])])[group].result(15)
    assert all(tp.error is None for tp in altered.topic_partitions)
    # A new consumer of the group starts at the altered offsets.
    assert first_offset(gb.bootstrap, group, topic, 0) == 3
    assert first_offset(gb.bootstrap, group, topic, 1) == 7
    got = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 1)])])[group].result(15)
    assert [(tp.partition, tp.offset) for tp in got.topic_partitions] == [(1, 7)]
    # delete_consumer_groups: gone, and its offsets with it.
    a.delete_consumer_groups([group])[group].result(15)
    assert group not in {g.group_id for g in a.list_consumer_groups().result(15).valid}
    got = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0)])])[group].result(15)
    assert [tp.offset for tp in got.topic_partitions] == [-1001]  # no committed offset


# --------------------------------------------------------------------------- list, describe


def test_describe_offsets_shows_lag_60_after_committing_40_of_100(cli: Cli, unique: str) -> None:
    topic, group = "cg-lag", "cg-lag-group"
    commit_40_of_100(cli.bootstrap, topic, group)
    wait_members(cli, group, 0)
    assert cli.ok("consumer-groups", "--describe", "--group", group) == (
        "GROUP        TOPIC  PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST "
        "CLIENT-ID\n"
        "cg-lag-group cg-lag 0         40             100            60  -           -    -\n"
        "Consumer group 'cg-lag-group' has no active members.\n")
    assert describe_json(cli, group, "--offsets", "--verbose") == [
        {"group": group, "topic": topic, "partition": 0, "leader_epoch": 0,
         "current_offset": 40, "log_end_offset": 100, "lag": 60, "consumer_id": None,
         "host": None, "client_id": None}]
    (state,) = describe_json(cli, group, "--state")
    assert (state["assignment_strategy"], state["state"], state["members"]) == \
        (None, "Empty", 0)  # an Empty group has no protocol any more, as in Kafka
    assert state["coordinator_id"].endswith("(1)")
    assert cli.ok("consumer-groups", "--describe", "--group", group, "--members") == \
        "Consumer group 'cg-lag-group' has no active members.\n"
    every = json.loads(cli.ok("consumer-groups", "--describe", "--all-groups", "--state",
                              "--output", "json"))
    assert [(r["state"], r["members"]) for r in every if r["group"] == group] == [("Empty", 0)]
    assert all(r["group"] != "cg-no-group" for r in every)


def test_describe_an_active_group_and_what_it_refuses(cli: Cli, unique: str) -> None:
    topic, group = unique, f"{unique}-g"
    create_topic(cli.bootstrap, topic, 2)
    produce(cli.bootstrap, topic, 10, partitions=2)
    c = consumer(cli.bootstrap, group, **{"client.id": "cg-active-client"})
    c.subscribe([topic])
    try:
        consume(c, 10)
        c.commit(asynchronous=False)
        wait_members(cli, group, 1)
        (m,) = describe_json(cli, group, "--members", "--verbose")
        assert (m["host"], m["client_id"], m["partitions"], m["assignment"]) == \
            ("/127.0.0.1", "cg-active-client", 2, f"{topic}:0,1")
        rows = describe_json(cli, group)
        assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
                 r["consumer_id"], r["client_id"]) for r in rows] == [
            (0, 5, 5, 0, m["consumer_id"], "cg-active-client"),
            (1, 5, 5, 0, m["consumer_id"], "cg-active-client")]
        (state,) = describe_json(cli, group, "--state")
        assert (state["state"], state["members"]) == ("Stable", 1)
        # A group with a member: no reset, no delete, no offset deletion.
        err = cli.fails("consumer-groups", "--reset-offsets", "--group", group, "--topic",
                        topic, "--to-earliest", "--execute")
        assert err == (f"shoal consumer-groups: consumer group '{group}' is Stable with 1 "
                       "member(s); offsets can only be reset while the group is inactive: "
                       "stop its consumers first\n")
        err = cli.fails("consumer-groups", "--delete", "--group", group)
        assert err == (f"shoal consumer-groups: consumer group '{group}' could not be deleted: "
                       "NON_EMPTY_GROUP; stop its consumers first\n")
        r = cli.run("consumer-groups", "--delete-offsets", "--group", group, "--topic",
                    f"{topic}:0")
        assert r.returncode == 1
        assert r.stdout.splitlines()[1].split()[:3] == \
            [topic, "0", "Error:"] and "GROUP_SUBSCRIBED_TO_TOPIC" in r.stdout
    finally:
        c.close()
    assert current_offsets(cli, group) == {(topic, 0): 5, (topic, 1): 5}  # nothing changed


def test_list_shows_share_and_consumer_groups_with_their_types(cli: Cli, unique: str) -> None:
    topic, classic, share = unique, f"{unique}-classic", f"{unique}-share"
    create_topic(cli.bootstrap, topic, 1)
    produce(cli.bootstrap, topic, 1)
    simple_commit(cli.bootstrap, classic, topic, {0: 1})
    sc = share_consumer(cli.bootstrap, share, topic)
    try:
        poll_until([sc], lambda: share in cli.ok("consumer-groups", "--list"))
    finally:
        sc.close()

    def mine(out: str) -> list[str]:
        return [line for line in out.splitlines() if unique in line or line.startswith("GROUP")]

    def rows(*args: str) -> list[list[str]]:
        return [line.split() for line in mine(cli.ok("consumer-groups", "--list", *args))]

    assert rows("--type") == [["GROUP", "TYPE"], [classic, "Classic"], [share, "Share"]]
    wait_for(lambda: [share, "Share", "Empty"] in rows("--type", "--state"), 15)  # left
    assert rows("--type", "--state") == [
        ["GROUP", "TYPE", "STATE"], [classic, "Classic", "Empty"], [share, "Share", "Empty"]]
    assert mine(cli.ok("consumer-groups", "--list")) == [classic, share]
    assert rows("--type", "share") == [["GROUP", "TYPE"], [share, "Share"]]
    assert rows("--type", "classic,consumer") == [["GROUP", "TYPE"], [classic, "Classic"]]
    assert rows("--state", "empty", "--type", "consumer") == [["GROUP", "TYPE", "STATE"]]
    doc = json.loads(cli.ok("consumer-groups", "--list", "--type", "--state", "--output",
                            "json"))
    assert [g for g in doc if unique in g["group"]] == [
        {"group": classic, "type": "Classic", "state": "Empty"},
        {"group": share, "type": "Share", "state": "Empty"}]
    # The other verbs are for consumer groups: a share group's id points to share-groups.
    err = cli.fails("consumer-groups", "--describe", "--group", share)
    assert err == (f"shoal consumer-groups: group '{share}' is a share group; use shoal "
                   f"share-groups --bootstrap-server {cli.bootstrap} --describe --group "
                   f"{share}\n")
    err = cli.fails("consumer-groups", "--delete", "--group", share)
    assert err == (f"shoal consumer-groups: consumer group '{share}' could not be deleted: it "
                   "is a share group; delete it with shoal share-groups --delete\n")


# --------------------------------------------------------------------------- reset


RESETS = [
    ("to-earliest", ["--to-earliest"], 0),
    ("to-latest", ["--to-latest"], 10),
    ("to-offset", ["--to-offset", "3"], 3),
    ("shift-by", ["--shift-by", "-2"], 3),
    ("to-datetime", ["--to-datetime", "2020-01-01T00:00:06.000+00:00"], 6),
    ("by-duration", ["--by-duration", "PT3H30M"], 7),
    ("from-file", ["--from-file", "PLAN"], 4),
]


@pytest.mark.parametrize(("verb", "rule", "expected"), RESETS, ids=[r[0] for r in RESETS])
def test_reset_dry_run_changes_nothing_and_execute_moves_the_group(
        cli: Cli, unique: str, tmp_path: Path, verb: str, rule: list[str],
        expected: int) -> None:
    topic, group = unique, f"{unique}-g"
    create_topic(cli.bootstrap, topic, 1)
    if verb == "by-duration":  # records 10 h .. 1 h old: the one 3 h old is offset 7
        now = int(time.time() * 1000)
        produce_timed(cli.bootstrap, topic, [now - (10 - i) * HOUR_MS for i in range(10)])
    else:  # one record a second from 2020-01-01T00:00:00Z
        produce_timed(cli.bootstrap, topic, [1577836800000 + i * 1000 for i in range(10)])
    simple_commit(cli.bootstrap, group, topic, {0: 5})
    if verb == "from-file":
        plan = tmp_path / "plan.csv"
        plan.write_text(f"{topic},0,4\n")
        rule = ["--from-file", str(plan)]
    scope = [] if verb == "from-file" else ["--topic", topic]
    reset = ("consumer-groups", "--reset-offsets", "--group", group, *scope, *rule)
    table = ("GROUP TOPIC PARTITION NEW-OFFSET\n"
             f"{group} {topic} 0 {expected}\n")

    def squeeze(text: str) -> str:
        return "\n".join(" ".join(line.split()) for line in text.splitlines()) + "\n"

    assert squeeze(cli.ok(*reset, "--dry-run")) == table
    assert current_offsets(cli, group) == {(topic, 0): 5}
    assert first_offset(cli.bootstrap, group, topic) == 5

    assert squeeze(cli.ok(*reset, "--execute")) == table
    assert current_offsets(cli, group) == {(topic, 0): expected}
    if expected == 10:  # at the log end: the next record produced comes first
        produce(cli.bootstrap, topic, 1)
    assert first_offset(cli.bootstrap, group, topic) == expected


def test_reset_scopes_clamping_export_and_the_default_dry_run(cli: Cli, unique: str,
                                                              tmp_path: Path) -> None:
    topic, group = unique, f"{unique}-g"
    create_topic(cli.bootstrap, topic, 3)
    produce(cli.bootstrap, topic, 30, partitions=3)
    simple_commit(cli.bootstrap, group, topic, {0: 5, 1: 5})
    base = ("consumer-groups", "--reset-offsets", "--group", group)
    # Without --execute it is a dry run, and says so.
    r = cli.run(*base, "--topic", f"{topic}:1", "--to-earliest")
    assert r.returncode == 0 and r.stdout.splitlines()[1].split() == [group, topic, "1", "0"]
    assert r.stderr == ("shoal consumer-groups: no --execute, so this is a dry run; nothing "
                        "was changed\n")
    # --all-topics: the partitions the group has offsets for; out-of-range offsets clamp.
    r = cli.run(*base, "--all-topics", "--shift-by", "100", "--execute", "--output", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [
        {"group": group, "topic": topic, "partition": 0, "new_offset": 10},
        {"group": group, "topic": topic, "partition": 1, "new_offset": 10}]
    assert r.stderr.splitlines() == [
        f"shoal consumer-groups: warning: new offset 105 of {topic}-{p} is after its log end "
        "offset; using 10" for p in (0, 1)]
    # --export writes the plan as CSV, which --from-file reads back.
    exported = cli.ok(*base, "--topic", topic, "--to-offset", "2", "--export")
    assert exported == f"{topic},0,2\n{topic},1,2\n{topic},2,2\n"
    plan = tmp_path / "plan.csv"
    plan.write_text(exported)
    cli.ok(*base, "--from-file", str(plan), "--execute")
    assert current_offsets(cli, group) == {(topic, 0): 2, (topic, 1): 2, (topic, 2): 2}
    assert first_offset(cli.bootstrap, group, topic, 2) == 2
    # Shifting a partition with no committed offset is refused; so are unknown topics.
    simple_commit(cli.bootstrap, f"{group}-2", topic, {0: 1})
    err = cli.fails("consumer-groups", "--reset-offsets", "--group", f"{group}-2", "--topic",
                    topic, "--shift-by", "1", "--execute")
    assert err == (f"shoal consumer-groups: cannot plan the reset of group '{group}-2': "
                   f"partition {topic}-1 has no committed offset to shift from; reset it with "
                   "--to-earliest, --to-latest or --to-offset\n")
    err = cli.fails(*base, "--topic", "cg-no-such-topic", "--to-earliest", "--execute")
    assert err == ("shoal consumer-groups: topic 'cg-no-such-topic' does not exist; check the "
                   f"name with shoal topics --bootstrap-server {cli.bootstrap} --list\n")
    err = cli.fails(*base, "--topic", f"{topic}:7", "--to-earliest")
    assert err == (f"shoal consumer-groups: topic '{topic}' has no partition 7 (it has 3); fix "
                   "the partitions to reset\n")


# --------------------------------------------------------------------------- delete


def test_delete_offsets_and_delete_group(cli: Cli, unique: str) -> None:
    topic, other, group = unique, f"{unique}-b", f"{unique}-g"
    create_topic(cli.bootstrap, topic, 2)
    create_topic(cli.bootstrap, other, 1)
    produce(cli.bootstrap, topic, 4, partitions=2)
    produce(cli.bootstrap, other, 2)
    simple_commit(cli.bootstrap, group, topic, {0: 1, 1: 2})
    simple_commit(cli.bootstrap, group, other, {0: 1})
    assert cli.ok("consumer-groups", "--delete-offsets", "--group", group, "--topic",
                  f"{topic}:1") == (
        f"TOPIC{' ' * (len(topic) - 5)} PARTITION STATUS\n"
        f"{topic} 1         Successful\n")
    assert current_offsets(cli, group) == {(topic, 0): 1, (other, 0): 1}
    out = cli.ok("consumer-groups", "--delete-offsets", "--group", group, "--topic", topic,
                 "--output", "json")
    assert json.loads(out) == [
        {"topic": topic, "partition": 0, "status": "Successful"},
        {"topic": topic, "partition": 1, "status": "Successful"}]
    assert current_offsets(cli, group) == {(other, 0): 1}
    # With its offset gone a new consumer falls back to auto.offset.reset (latest: waits).
    c = consumer(cli.bootstrap, group, **{"auto.offset.reset": "latest"})
    c.assign([TopicPartition(topic, 0)])
    try:
        assert c.poll(1.5) is None
    finally:
        c.close()
    err = cli.fails("consumer-groups", "--delete-offsets", "--group", group, "--topic",
                    "cg-no-such-topic")
    assert err.startswith("shoal consumer-groups: topic 'cg-no-such-topic' does not exist; ")
    err = cli.fails("consumer-groups", "--delete-offsets", "--group", f"{group}-none",
                    "--topic", topic)
    assert err == (f"shoal consumer-groups: consumer group '{group}-none' does not exist; list "
                   f"groups with shoal consumer-groups --bootstrap-server {cli.bootstrap} "
                   "--list\n")

    assert cli.ok("consumer-groups", "--delete", "--group", group) == \
        f"Deletion of requested consumer groups ('{group}') was successful.\n"
    err = cli.fails("consumer-groups", "--describe", "--group", group)
    assert err == (f"shoal consumer-groups: consumer group '{group}' does not exist; list "
                   f"groups with shoal consumer-groups --bootstrap-server {cli.bootstrap} "
                   "--list\n")
    err = cli.fails("consumer-groups", "--delete", "--group", group)
    assert err.startswith(f"shoal consumer-groups: consumer group '{group}' could not be "
                          "deleted: GROUP_ID_NOT_FOUND")


# --------------------------------------------------------------------------- KIP-848 groups


def serves_consumer_protocol(bootstrap: str) -> bool:
    """Whether the broker advertises ConsumerGroupHeartbeat (api 68)."""
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 5.0)
    try:
        return 68 in conn.versions
    finally:
        conn.close()


def test_a_consumer_protocol_group_through_the_same_tools(gb: GroupsBroker, cli: Cli,
                                                          unique: str) -> None:
    assert serves_consumer_protocol(gb.bootstrap), "ConsumerGroupHeartbeat is not advertised"
    topic, group = unique, f"{unique}-g"
    create_topic(gb.bootstrap, topic, 1)
    produce(gb.bootstrap, topic, 10)
    c = KafkaConsumer({"bootstrap.servers": gb.bootstrap, "group.id": group,
                       "group.protocol": "consumer", "auto.offset.reset": "earliest",
                       "enable.auto.commit": False, "client.id": "kip848-client"})
    c.subscribe([topic])
    try:
        got = consume(c, 10)
        c.commit(message=got[6], asynchronous=False)  # offset 7
        (state,) = describe_json(cli, group, "--state", "--verbose")
        assert (state["state"], state["members"]) == ("Stable", 1)
        assert state["assignment_strategy"] in ("uniform", "range")
        assert state["group_epoch"] >= state["target_assignment_epoch"] >= 1
        (m,) = describe_json(cli, group, "--members", "--verbose")
        assert (m["client_id"], m["partitions"], m["assignment"], m["target_assignment"]) == \
            ("kip848-client", 1, f"{topic}:0", f"{topic}:0")
        assert m["member_epoch"] >= 1
        assert [(r["current_offset"], r["log_end_offset"], r["lag"], r["consumer_id"])
                for r in describe_json(cli, group)] == [(7, 10, 3, m["consumer_id"])]
        assert [line.split() for line in cli.ok("consumer-groups", "--list", "--type",
                                                "consumer").splitlines()
                if group in line] == [[group, "Consumer"]]
        a = admin(gb.bootstrap)  # kept: a dropped AdminClient never answers its futures
        d = a.describe_consumer_groups([group])[group].result(15)
        assert d.type == ConsumerGroupType.CONSUMER and len(d.members) == 1
        s = gb.scrape()
        assert s.value("shoal_consumer_group_members", group=group, type="consumer") == 1
        assert s.value("shoal_consumer_group_lag", group=group, topic=topic, partition="0") == 3
        err = cli.fails("consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
                        "--to-earliest", "--execute")
        assert "is Stable with 1 member(s)" in err
    finally:
        c.close()
    wait_members(cli, group, 0)
    cli.ok("consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
           "--shift-by", "-5", "--execute")
    assert current_offsets(cli, group) == {(topic, 0): 2}
    again = KafkaConsumer({"bootstrap.servers": gb.bootstrap, "group.id": group,
                           "group.protocol": "consumer", "auto.offset.reset": "latest",
                           "enable.auto.commit": False})
    again.subscribe([topic])
    try:
        assert consume(again, 1)[0].offset() == 2  # resumes at the reset offset
    finally:
        again.close()
    wait_members(cli, group, 0)
    assert cli.ok("consumer-groups", "--delete", "--group", group) == \
        f"Deletion of requested consumer groups ('{group}') was successful.\n"


# --------------------------------------------------------------------------- metrics


def test_metrics_show_lag_that_falls_to_zero_after_commits(gb: GroupsBroker,
                                                           unique: str) -> None:
    topic, group = unique, f"{unique}-g"
    where = {"group": group, "topic": topic, "partition": "0"}
    commit_40_of_100(gb.bootstrap, topic, group)
    s = gb.scrape()
    assert s.value("shoal_consumer_group_committed_offset", **where) == 40
    assert s.value("shoal_consumer_group_lag", **where) == 60
    assert s.value("shoal_consumer_group_lag_sum", group=group) == 60
    assert s.value("shoal_consumer_group_members", group=group, type="classic") == 0
    assert s.value("shoal_consumer_group_state", group=group, type="classic", state="Empty") == 1
    assert s.value("shoal_consumer_groups", type="classic", state="Empty") >= 1
    assert s.types["shoal_consumer_group_lag"] == "gauge"

    c = consumer(gb.bootstrap, group)
    c.subscribe([topic])
    try:
        got = consume(c, 60)
        assert got[0].offset() == 40
        s = gb.scrape()
        assert s.value("shoal_consumer_group_members", group=group, type="classic") == 1
        assert s.value("shoal_consumer_group_state", group=group, type="classic",
                       state="Stable") == 1
        assert s.value("shoal_consumer_group_lag", **where) == 60  # nothing committed yet
        c.commit(asynchronous=False)
        s = gb.scrape()
        assert s.value("shoal_consumer_group_committed_offset", **where) == 100
        assert s.value("shoal_consumer_group_lag", **where) == 0
        assert s.value("shoal_consumer_group_lag_sum", group=group) == 0
        produce(gb.bootstrap, topic, 5)  # new records are lag until committed
        assert gb.scrape().value("shoal_consumer_group_lag", **where) == 5
    finally:
        c.close()
