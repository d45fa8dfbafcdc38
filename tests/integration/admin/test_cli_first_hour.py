"""CLI rough edges from a new user's first hour, against a real broker."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess, free_port
from tests.integration.rawclient import RawClient, request
from tests.integration.admin.test_cli import Cli


def test_add_config_takes_kafkas_bracket_form(broker: BrokerProcess, unique: str) -> None:
    cli = Cli(broker.bootstrap)
    cli.ok("topics", "--create", "--topic", unique, "--partitions", "1")
    assert cli.ok("configs", "--entity-type", "topics", "--entity-name", unique, "--alter",
                  "--add-config", "cleanup.policy=[compact,delete],retention.ms=60000") == \
        f"Completed updating config for topic {unique}.\n"
    described = cli.ok("configs", "--entity-type", "topics", "--entity-name", unique,
                       "--describe").split()
    assert described[described.index("cleanup.policy") + 1] == "compact,delete"
    err = cli.fails("configs", "--entity-type", "topics", "--entity-name", unique, "--alter",
                    "--add-config", "cleanup.policy=compact,delete", code=2)
    assert "'cleanup.policy=[compact,delete]'" in err


def test_delete_offsets_of_a_missing_partition_is_not_successful(broker: BrokerProcess,
                                                                 unique: str) -> None:
    cli = Cli(broker.bootstrap)
    cli.ok("topics", "--create", "--topic", unique, "--partitions", "2")
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(unique, b"x", partition=0)
    p.flush(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique,
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(unique, 0, 1)], asynchronous=False)
    c.close()
    r = cli.run("consumer-groups", "--delete-offsets", "--group", unique,
                "--topic", f"{unique}:0,5")
    assert r.returncode == 1, (r.stdout, r.stderr)
    rows = {line.split()[1]: line.split(None, 2)[2] for line in r.stdout.splitlines()[1:]}
    assert rows == {"0": "Successful",
                    "5": f"Error: topic '{unique}' has no partition 5 (it has 2)"}
    # The broker says so too, as Kafka does, to clients that skip the CLI's check.
    m = RawClient.request_module(47, 0)
    with RawClient(broker.bootstrap) as raw:
        resp = raw.call(47, 0, request(47, 0, group_id=unique, topics=(m.OffsetDeleteRequestTopic(
            name=unique, partitions=(m.OffsetDeleteRequestPartition(partition_index=7),)),)))
    assert resp.error_code == ErrorCode.none
    assert [(p.partition_index, p.error_code) for t in resp.topics for p in t.partitions] == [
        (7, ErrorCode.unknown_topic_or_partition)]

def test_users_describe_without_rights_says_what_failed(broker: BrokerProcess) -> None:
    """A plain broker lets only super users list SCRAM users: one line saying what failed and
    what to do, not a result for a user named ''."""
    err = Cli(broker.bootstrap).fails("users", "--describe")
    assert err.startswith("shoal users: cannot describe SCRAM credentials: "
                          "CLUSTER_AUTHORIZATION_FAILED"), err
    assert "super user" in err and "user ''" not in err and err.count("\n") == 1


def test_the_metrics_port_is_named_as_not_kafka_at_once(tmp_path: Path) -> None:
    metrics = free_port()
    b = BrokerProcess(tmp_path / "data", overrides={"metrics.listen": f"127.0.0.1:{metrics}"})
    b.start()
    try:
        started = time.monotonic()
        err = Cli(f"127.0.0.1:{metrics}").fails("topics", "--list")
        assert time.monotonic() - started < 8  # not the 10 s the metrics server waits
        assert err == (f"shoal topics: 127.0.0.1:{metrics} is an HTTP server (a metrics "
                       "port?), not a Kafka listener; check --bootstrap-server\n")
    finally:
        b.stop()


def test_a_share_subscription_to_a_missing_topic_is_not_silent(fresh_broker: BrokerProcess,
                                                               unique: str) -> None:
    fresh_broker.start()
    missing = f"{unique}-typo"
    consumers = [ShareConsumer({"bootstrap.servers": fresh_broker.bootstrap, "group.id": unique})
                 for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([missing])
        cli = Cli(fresh_broker.bootstrap)
        deadline = time.monotonic() + 30
        while True:
            for c in consumers:
                assert len(c.poll(0.5)) == 0
            r = cli.run("share-groups", "--describe", "--group", unique, "--members")
            if r.returncode == 0 and len(r.stdout.splitlines()) == 3:  # both members joined
                break
            assert time.monotonic() < deadline, (r.stdout, r.stderr)
        assert r.stderr == (f"shoal share-groups: warning: members of share group {unique!r} "
                            f"subscribe to topic {missing!r}, which does not exist; they get no "
                            "records from it until it is created\n")
    finally:
        for c in consumers:
            c.close()
    warnings = [line for line in fresh_broker.logs().splitlines()
                if f"subscribes to topic {missing}, which does not exist" in line]
    assert len(warnings) == 1, warnings  # two members, many heartbeats: one warning
    assert f"share group {unique}:" in warnings[0] and "WARNING" in warnings[0]
