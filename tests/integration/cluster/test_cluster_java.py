"""Apache Kafka's Java clients (kafka-clients 4.1.0) against a 3-broker Shoal cluster.

The same scenarios as tests/integration/java run against one broker; here every bootstrap is
the cluster, so the Java clients find partition leaders, the share coordinator and the group
coordinator on different brokers, as they would on Apache Kafka. The transactional scenarios
add what only a cluster has: WriteTxnMarkers from the transaction coordinator to data
partitions other brokers lead, and transactional offset commits reaching the group
coordinator's broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster.conftest import Cluster, Etcd
from tests.integration.java.test_java_clients import offsets_counts, run_scenarios, scenario

SCENARIOS = ["txn_consume_transform_produce", "share_explicit", "share_implicit",
             "share_two_members", "share_lock_timeout", "consumer_consumer", "consumer_classic",
             "txn_read_committed", "txn_fencing", "admin_share_groups", "admin_configs"]


@pytest.fixture(scope="module")
def java_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from tests.integration.cluster.conftest import Etcd as EtcdServer

    root = tmp_path_factory.mktemp("java-cluster")
    etcd: Etcd = EtcdServer(root / "etcd")
    etcd.start()
    cluster = Cluster(root, etcd, overrides={"group.initial.rebalance.delay.ms": "0",
                                             "group.share.min.record.lock.duration.ms": "1000"})
    try:
        cluster.start()
        bootstrap = cluster.bootstrap
        yield run_scenarios(bootstrap, bootstrap, SCENARIOS, Path(root / "classes"), timeout=300)
    finally:
        cluster.stop()
        etcd.close()


def test_java_share_consumer_explicit_and_implicit_on_a_cluster(java_cluster: dict[str, Any]
                                                                ) -> None:
    r = scenario(java_cluster, "share_explicit")
    assert offsets_counts(r["first"]) == [(0, "accept-me", 1), (1, "release-me", 1),
                                          (2, "reject-me", 1)]
    assert offsets_counts(r["again"]) == [(1, "release-me", 2)]
    r = scenario(java_cluster, "share_implicit")
    assert offsets_counts(r["second"]) == [(5, "f", 1)]


def test_java_share_members_and_lock_timeout_on_a_cluster(java_cluster: dict[str, Any]) -> None:
    r = scenario(java_cluster, "share_two_members")
    assert r["distinct"] == r["produced"] == 200 and r["to_both"] == []
    r = scenario(java_cluster, "share_lock_timeout")
    # The 1 s lock lapsed and the other member got the record; on a loaded machine the lock can
    # lapse once more before that member's fetch reaches the leader (count 3).
    [(offset, value, count)] = offsets_counts(r["other"])
    assert (offset, value) == (0, "held") and count >= 2


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_consumer_group_on_a_cluster(java_cluster: dict[str, Any], protocol: str) -> None:
    r = scenario(java_cluster, f"consumer_{protocol}")
    assert sorted(r["first"]) == [f"first-{i}" for i in range(10)]
    assert r["committed_total"] == 10
    assert sorted(r["resumed"]) == ["second-0", "second-1", "second-2"]


def test_java_transactions_read_committed_on_a_cluster(java_cluster: dict[str, Any]) -> None:
    """A transactional KafkaProducer's committed records, and not its aborted ones, reach a
    read_committed KafkaConsumer; the offsets sent to the transaction are the group's."""
    r = scenario(java_cluster, "txn_read_committed")
    assert r["producer_epoch"] == 3
    assert r["group_offset"] == 3
    assert r["read_committed"] == ["c0", "c1", "c2", "c3"]
    assert r["read_uncommitted"] == ["c0", "c1", "c2", "a0", "a1", "c3"]
    assert r["read_committed_end"] == r["read_uncommitted_end"] == 9
    r = scenario(java_cluster, "txn_fencing")
    assert r["zombie_send"] == "InvalidProducerEpochException"
    assert r["zombie_abort"] == "ProducerFencedException"
    assert r["quiet_commit"] == "ProducerFencedException"
    assert r["read_committed"] == ["fresh", "fresh-2"]


def test_java_consume_transform_produce_across_brokers(java_cluster: dict[str, Any]) -> None:
    """A read_committed consumer group and a transactional producer copy 60 records between two
    6-partition topics whose partitions several brokers lead: the output holds every input
    once for read_committed, the aborted transaction's records only for read_uncommitted, and
    the group's committed offsets cover the input exactly."""
    r = scenario(java_cluster, "txn_consume_transform_produce")
    out = sorted(f"out-{i}" for i in range(60))
    aborted = [f"aborted-{i}" for i in range(6)]
    assert r["copied"] == 60 and r["transactions"] >= 1
    assert r["read_committed"] == out
    assert r["read_uncommitted"] == sorted(out + aborted)
    assert r["committed_offsets_total"] == 60
    # The markers of a transaction went to partition leaders other than its coordinator.
    leaders = r["output_leaders"]
    assert len(set(leaders)) >= 2
    assert any(leader != r["txn_coordinator"] for leader in leaders)


def test_java_admin_share_groups_and_configs_on_a_cluster(java_cluster: dict[str, Any]) -> None:
    """Admin's share-group verbs (list, describe, list/alter/delete offsets, delete) and configs
    (describe, incremental alter, a group config) answer on a cluster as on one broker."""
    r = scenario(java_cluster, "admin_share_groups")
    assert r["consumed"] == [f"m{i}" for i in range(10)]
    assert r["listed"] == ["Share/Stable"] and r["state"] == "Stable"
    assert len(r["members"]) == 1
    assert r["offsets_live"] == 10
    assert r["state_after_close"] == "Empty"
    assert r["offsets_altered"] == 3
    assert r["after_alter"] == [f"m{i}" for i in range(3, 10)]
    assert r["offsets_deleted"] is None
    assert r["listed_after_delete"] == []
    r = scenario(java_cluster, "admin_configs")
    assert r["created"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert r["set"] == {"value": "7200000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert r["appended"] == {"value": "delete,compact", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert r["deleted"] == {"value": "604800000", "source": "DEFAULT_CONFIG"}
    assert r["bad_value"] == "InvalidConfigurationException"
    assert r["group"] == {"value": "20000", "source": "DYNAMIC_GROUP_CONFIG"}
