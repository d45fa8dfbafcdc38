"""``shoal cluster describe`` against today's single broker (no etcd): one broker, itself the
controller, every partition (internal topics included) led by it, nothing offline; the same
facts as JSON; a broker that is not running is one line on stderr and exit status 1."""

from __future__ import annotations

import json

from tests.conftest import BrokerProcess, free_port
from tests.integration.admin.test_cli import shoal

INTERNAL = {"__consumer_offsets", "__share_group_state", "__transaction_state"}


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    r = shoal("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
              "--partitions", str(partitions))
    assert r.returncode == 0, r.stderr


def test_single_broker_is_the_whole_cluster_and_its_controller(broker: BrokerProcess,
                                                               unique: str) -> None:
    _create(broker.bootstrap, unique, 3)
    r = shoal("cluster", "describe", "--bootstrap-server", broker.bootstrap, "--json")
    assert (r.returncode, r.stderr) == (0, "")
    doc = json.loads(r.stdout)
    assert doc["controller_id"] == 1 and doc["cluster_id"]
    assert doc["brokers"] == [{"node_id": 1, "host": "127.0.0.1", "port": broker.port,
                               "rack": None, "leaders": len(doc["partitions"])}]
    mine = [p for p in doc["partitions"] if p["topic"] == unique]
    assert mine == [{"topic": unique, "partition": i, "leader": 1, "leader_epoch": 0,
                     "replicas": [1], "isr": [1], "internal": False, "offline": False}
                    for i in range(3)]
    internal = {p["topic"] for p in doc["partitions"] if p["internal"]}
    assert internal and internal <= INTERNAL
    assert doc["offline_partitions"] == []


def test_table_lists_the_broker_and_each_partition(broker: BrokerProcess, unique: str) -> None:
    _create(broker.bootstrap, unique, 2)
    r = shoal("cluster", "describe", "--bootstrap-server", broker.bootstrap,
              "--exclude-internal")
    assert (r.returncode, r.stderr) == (0, "")
    lines = r.stdout.splitlines()
    assert lines[:2] == [lines[0], "Controller: 1"] and lines[0].startswith("Cluster id: ")
    assert lines[3].split() == ["BROKER", "HOST:PORT", "RACK", "CONTROLLER", "LEADERS"]
    assert lines[4].split()[:4] == ["1", broker.bootstrap, "-", "yes"]
    rows = [line.split() for line in lines if line.startswith(unique + " ")]
    assert rows == [[unique, "0", "1", "0", "1", "1"], [unique, "1", "1", "0", "1", "1"]]
    assert not any(line.startswith("__") for line in lines)
    assert lines[-1] == "Offline partitions: none"


def test_no_broker_is_one_line_and_status_1() -> None:
    port = free_port()
    r = shoal("cluster", "describe", "--bootstrap-server", f"127.0.0.1:{port}")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"shoal cluster describe: cannot connect to 127.0.0.1:{port}: "
                        "Connection refused; check --bootstrap-server and that the broker is "
                        "running\n")
