"""``shoal cluster run`` and ``shoal cluster describe`` without a cluster: option parsing and
usage errors, the launcher's plan (ports, node ids, data dirs, command lines, etcd's saved
ports), and the describe command's reading of DescribeCluster/Metadata answers (kio types)
and its table and JSON."""

from __future__ import annotations

import argparse
import json
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from cli import cluster_describe as cd
from cli import cluster_run as cr
from cli.main import main
from client.admin_wire import CliError
from protocol.codec import response_module
from protocol.messages import make


def _parse(*argv: str) -> argparse.Namespace:
    """Parse a ``shoal`` command line without running it."""
    seen: dict[str, argparse.Namespace] = {}

    def grab(args: argparse.Namespace) -> int:
        seen["args"] = args
        return 0

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cr, "run_command", grab)
        mp.setattr(cd, "main", grab)
        # Parsers are built at each main() call, so the patched functions are the ones bound.
        assert main(list(argv)) == 0
    return seen["args"]


# --------------------------------------------------------------------------- run: options


def test_run_defaults_are_those_of_make_cluster() -> None:
    args = _parse("cluster", "run")
    assert (args.brokers, args.port, args.data_dir, args.override) == (
        3, 9092, "./data-cluster", [])


def test_run_takes_brokers_port_data_dir_and_overrides() -> None:
    args = _parse("cluster", "run", "--brokers", "5", "--port", "19092", "--data-dir", "/d",
                  "-o", "broker.rack=r1", "--override", "a=b")
    assert (args.brokers, args.port, args.data_dir, args.override) == (
        5, 19092, "/d", ["broker.rack=r1", "a=b"])


@pytest.mark.parametrize(("brokers", "port", "overrides", "message"), [
    (0, 9092, [], "--brokers 0 is out of range; give 1 to 64"),
    (65, 9092, [], "--brokers 65 is out of range; give 1 to 64"),
    (3, 65534, [], "--port 65534 with 3 brokers needs ports 65534 to 65536, outside 1-65535; "
                   "give a lower --port"),
    (3, 0, [], "--port 0 with 3 brokers needs ports 0 to 2, outside 1-65535; give a lower "
               "--port"),
    (1, 9092, ["nonsense"], "invalid --override 'nonsense'; use NAME=VALUE"),
], ids=["no-brokers", "too-many", "past-65535", "port-0", "override"])
def test_bad_options_are_usage_errors(brokers: int, port: int, overrides: list[str],
                                      message: str) -> None:
    with pytest.raises(CliError) as info:
        cr.check_args(brokers, port, overrides)
    assert (info.value.message, info.value.exit_code) == (message, 2)


def test_a_bad_option_exits_2_with_one_line(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    assert main(["cluster", "run", "--brokers", "0", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == "shoal cluster run: --brokers 0 is out of range; give 1 to 64\n"
    assert not (tmp_path / "etcd").exists()


def test_a_broker_port_in_use_is_refused_before_anything_starts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["cluster", "run", "--brokers", "1", "--port", str(port),
                     "--data-dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"shoal cluster run: port {port} (broker 1) is in use; ")
    assert not (tmp_path / "d").exists()


# --------------------------------------------------------------------------- run: the plan


def test_broker_i_gets_node_id_i_port_p_plus_i_minus_1_and_its_own_data_dir() -> None:
    plans = cr.broker_plans(["shoal"], "etcd://127.0.0.1:2379", 3, 9092, "./data-cluster",
                            ["broker.rack=r1"])
    assert [(p.node_id, p.address, p.data_dir, p.log) for p in plans] == [
        (1, "127.0.0.1:9092", "./data-cluster/broker-1", "./data-cluster/broker-1.log"),
        (2, "127.0.0.1:9093", "./data-cluster/broker-2", "./data-cluster/broker-2.log"),
        (3, "127.0.0.1:9094", "./data-cluster/broker-3", "./data-cluster/broker-3.log")]
    assert plans[1].command == (
        "shoal", "broker", "--cluster", "etcd://127.0.0.1:2379", "--node-id", "2",
        "--config", "./data-cluster/broker-2.properties", "--data-dir",
        "./data-cluster/broker-2", "--override", "broker.rack=r1")


def test_members_listen_for_clients_and_call_each_other_as_a_super_user() -> None:
    props = dict(line.split("=", 1) for line in cr.broker_properties(9093, 9193, "s3").splitlines()
                 if line and not line.startswith("#"))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9093,INTERNAL://127.0.0.1:9193"
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["super.users"] == "User:broker"
    assert 'username="broker" password="s3" user_broker="s3"' in \
        props["listener.name.internal.plain.sasl.jaas.config"]


def test_etcd_command_uses_its_data_dir_and_both_ports() -> None:
    plan = cr.EtcdPlan(23790, 23800, "d/etcd", "d/etcd.log")
    assert plan.endpoint == "etcd://127.0.0.1:23790"
    cmd = plan.command
    assert cmd[0] == "etcd"
    flags = dict(zip(cmd[1::2], cmd[2::2]))
    assert flags["--data-dir"] == "d/etcd"
    assert flags["--listen-client-urls"] == flags["--advertise-client-urls"] == \
        "http://127.0.0.1:23790"
    assert flags["--listen-peer-urls"] == "http://127.0.0.1:23800"
    assert flags["--initial-cluster"] == "shoal=http://127.0.0.1:23800"


def test_brokers_run_as_the_shoal_script_or_this_python(tmp_path: Path) -> None:
    script = tmp_path / "shoal"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert cr.shoal_command(str(script), sys.executable) == [str(script)]
    assert cr.shoal_command("/x/cli/main.py", "/v/bin/python") == [
        "/v/bin/python", "-m", "cli.main"]


def test_etcd_ports_are_saved_and_reused_while_free(tmp_path: Path) -> None:
    first = cr.etcd_ports(tmp_path, avoid=set())
    assert first[0] != first[1]
    assert json.loads((tmp_path / "cluster.json").read_text()) == {
        "etcd_client_port": first[0], "etcd_peer_port": first[1]}
    assert cr.etcd_ports(tmp_path, avoid=set()) == first
    with socket.socket() as busy:  # the saved client port is taken: new ports, saved
        busy.bind(("127.0.0.1", first[0]))
        second = cr.etcd_ports(tmp_path, avoid=set())
    assert first[0] not in second
    assert json.loads((tmp_path / "cluster.json").read_text())["etcd_client_port"] == second[0]


def test_exit_text_names_the_signal() -> None:
    assert cr.exit_text(-9) == "signal 9 (SIGKILL)"
    assert cr.exit_text(2) == "status 2"


# --------------------------------------------------------------------------- describe: options


def test_describe_defaults_to_the_first_local_broker_and_a_table() -> None:
    args = _parse("cluster", "describe")
    assert (args.bootstrap_server, args.output, args.exclude_internal) == (
        "127.0.0.1:9092", "table", False)


def test_describe_json_flag_is_output_json() -> None:
    assert _parse("cluster", "describe", "--bootstrap-server", "h:1", "--json").output == "json"
    assert _parse("cluster", "describe", "--output", "json").output == "json"


# --------------------------------------------------------------------------- describe: answers

TOPIC_ID = uuid.UUID(int=7)


def _describe_cluster(error: ErrorCode = ErrorCode.none, controller: int = 2) -> Any:
    m = response_module(cd.DESCRIBE_CLUSTER, 2)
    brokers = tuple(make(m.DescribeClusterBroker, broker_id=i, host="10.0.0.%d" % i,
                         port=9092, rack=rack, is_fenced=False)
                    for i, rack in ((3, "b"), (1, "a"), (2, None)))
    return make(m.DescribeClusterResponse, throttle_time=0, error_code=error,
                error_message="nope" if error else None, endpoint_type=1, cluster_id="c-1",
                controller_id=controller, brokers=brokers, cluster_authorized_operations=0)


def _metadata(topics: list[tuple[str, ErrorCode, bool, list[tuple[int, int]]]]) -> Any:
    """topics: (name, error, internal, [(leader, epoch) per partition])."""
    m = response_module(3, 12)
    entries = tuple(
        make(m.MetadataResponseTopic, error_code=error, name=name, topic_id=TOPIC_ID,
             is_internal=internal, topic_authorized_operations=0, partitions=tuple(
                 make(m.MetadataResponsePartition,
                      error_code=ErrorCode.leader_not_available if leader < 0 else
                      ErrorCode.none, partition_index=i, leader_id=leader,
                      leader_epoch=epoch, replica_nodes=(abs(leader),),
                      isr_nodes=() if leader < 0 else (leader,), offline_replicas=())
                 for i, (leader, epoch) in enumerate(parts)))
        for name, error, internal, parts in topics)
    return make(m.MetadataResponse, throttle_time=0, brokers=(), cluster_id="c-1",
                controller_id=2, topics=entries, cluster_authorized_operations=0)


def _description() -> cd.ClusterDescription:
    cluster_id, controller, brokers = cd.brokers_from_describe_cluster(_describe_cluster())
    parts = cd.partitions_from_metadata(_metadata([
        ("orders", ErrorCode.none, False, [(1, 0), (-1, 4), (3, 2)]),
        ("__share_group_state", ErrorCode.none, False, [(2, 1)]),
        ("__transaction_state", ErrorCode.unknown_topic_or_partition, False, []),
    ]))
    return cd.ClusterDescription(cluster_id, controller, brokers, parts)


def test_brokers_are_listed_by_id_with_racks() -> None:
    d = _description()
    assert (d.cluster_id, d.controller_id) == ("c-1", 2)
    assert [(b.node_id, b.host, b.rack) for b in d.brokers] == [
        (1, "10.0.0.1", "a"), (2, "10.0.0.2", None), (3, "10.0.0.3", "b")]


def test_describe_cluster_error_says_what_failed() -> None:
    with pytest.raises(CliError, match="^DescribeCluster failed: .*nope"):
        cd.brokers_from_describe_cluster(_describe_cluster(ErrorCode.cluster_authorization_failed))


def test_missing_topics_are_left_out_and_internal_names_are_internal() -> None:
    d = _description()
    assert [(p.topic, p.partition, p.internal) for p in d.partitions] == [
        ("orders", 0, False), ("orders", 1, False), ("orders", 2, False),
        ("__share_group_state", 0, True)]
    assert [(p.topic, p.partition) for p in d.offline] == [("orders", 1)]
    assert d.leader_counts() == {1: 1, 2: 1, 3: 1}
    assert [p.topic for p in d.without_internal().partitions] == ["orders"] * 3


def test_table_shows_brokers_placement_and_offline_partitions() -> None:
    d = _description()
    ordered = cd.ClusterDescription(d.cluster_id, d.controller_id, d.brokers, tuple(
        sorted(d.partitions, key=lambda p: (p.topic, p.partition))))
    assert cd.render_table(ordered) == (
        "Cluster id: c-1\n"
        "Controller: 2\n"
        "\n"
        "BROKER HOST:PORT     RACK CONTROLLER LEADERS\n"
        "1      10.0.0.1:9092 a    -          1\n"
        "2      10.0.0.2:9092 -    yes        1\n"
        "3      10.0.0.3:9092 b    -          1\n"
        "\n"
        "TOPIC               PARTITION LEADER EPOCH REPLICAS ISR\n"
        "__share_group_state 0         2      1     2        2\n"
        "orders              0         1      0     1        1\n"
        "orders              1         none   4     1\n"
        "orders              2         3      2     3        3\n"
        "\n"
        "Offline partitions:\n"
        "TOPIC  PARTITION REPLICAS\n"
        "orders 1         1\n")


def test_table_says_when_nothing_is_offline() -> None:
    d = _description().without_internal()
    healthy = cd.ClusterDescription(d.cluster_id, -1, d.brokers,
                                    tuple(p for p in d.partitions if not p.offline))
    text = cd.render_table(healthy)
    assert text.startswith("Cluster id: c-1\nController: none\n")
    assert text.endswith("\nOffline partitions: none\n")


def test_json_has_the_same_facts() -> None:
    doc = cd.as_json(_description())
    assert json.loads(json.dumps(doc)) == doc
    assert doc["cluster_id"] == "c-1" and doc["controller_id"] == 2
    assert doc["brokers"][0] == {"node_id": 1, "host": "10.0.0.1", "port": 9092, "rack": "a",
                                 "leaders": 1}
    assert doc["partitions"][1] == {"topic": "orders", "partition": 1, "leader": -1,
                                    "leader_epoch": 4, "replicas": [1], "isr": [],
                                    "internal": False, "offline": True}
    assert doc["offline_partitions"] == [{"topic": "orders", "partition": 1, "replicas": [1]}]
