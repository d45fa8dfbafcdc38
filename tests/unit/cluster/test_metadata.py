"""The routing interface: a single broker leads everything; a member answers from the view."""

from __future__ import annotations

from cluster.metadata import NO_LEADER, EtcdMetadata, LocalMetadata, Node, PartitionInfo
from cluster.view import BrokerRegistration, ClusterView, Endpoint, Keys, PartitionAssignment, TopicRecord


def test_a_single_broker_is_the_only_node_the_controller_and_every_leader() -> None:
    md = LocalMetadata(5, {"PLAINTEXT": ("h", 9092)}, {"t": 3}.get, rack="r1")
    assert not md.clustered
    assert md.live_nodes("PLAINTEXT") == [Node(5, "h", 9092, "r1")]
    assert md.live_nodes("SSL") == [] and md.node(6, "PLAINTEXT") is None
    assert md.controller_id() == 5
    assert md.partition("t", 2) == PartitionInfo(5, 0, (5,), (5,))
    assert md.partition("t", 3) is None and md.partition("u", 0) is None
    assert md.is_leader("t", 0) and not md.is_leader("t", 3)


def _view() -> ClusterView:
    keys = Keys("/x")
    view = ClusterView(keys)
    for n, port in ((1, 9001), (2, 9002)):
        reg = BrokerRegistration(n, (Endpoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),
                                     Endpoint("INTERNAL", "10.0.0.1", port + 100, "SSL")),
                                 f"rack{n}", "i")
        view.apply_put(keys.broker(n), reg.to_json(), 1, 1)
    record = TopicRecord("t", "id", (PartitionAssignment((1,), 1, 3, (1,)),
                                     PartitionAssignment((3,), 3, 0, (3,))))
    view.apply_put(keys.topic("t"), record.to_json(), 2, 2)
    return view


def test_a_member_answers_per_listener_and_a_dead_leader_is_no_leader() -> None:
    md = EtcdMetadata(1, _view())
    assert md.clustered
    assert md.live_nodes("INTERNAL") == [Node(1, "10.0.0.1", 9101, "rack1"),
                                         Node(2, "10.0.0.1", 9102, "rack2")]
    assert md.node(2, "PLAINTEXT") == Node(2, "127.0.0.1", 9002, "rack2")
    assert md.node(3, "PLAINTEXT") is None and md.node(1, "NOPE") is None
    assert md.controller_id() == NO_LEADER
    assert md.partition("t", 0) == PartitionInfo(1, 3, (1,), (1,))
    # Broker 3 is not registered: its partition is offline.
    assert md.partition("t", 1) == PartitionInfo(NO_LEADER, 0, (3,), (3,), offline_replicas=(3,))
    assert md.is_leader("t", 0) and not md.is_leader("t", 1)
    assert not EtcdMetadata(2, _view()).is_leader("t", 0)


def test_a_broker_that_left_stays_in_metadata_answers_for_a_grace_period_only() -> None:
    # Clients move a partition to its new leader before they drop the old broker (librdkafka
    # drops a broker missing from Metadata, and would take the partition along): Metadata
    # lists a broker that left for a few seconds; it leads nothing meanwhile, and the other
    # answers (live brokers, endpoints for KIP-951 hints, DescribeCluster) drop it at once.
    view, now = _view(), [100.0]
    md = EtcdMetadata(2, view, clock=lambda: now[0], departed_grace_s=3.0)
    view.apply_delete(view.keys.broker(1), 3)
    md.brokers_changed()
    assert [n.node_id for n in md.live_nodes("PLAINTEXT")] == [2]
    assert md.node(1, "PLAINTEXT") is None and md.partition("t", 0).leader == NO_LEADER
    now[0] = 102.9
    assert md.metadata_nodes("PLAINTEXT") == [Node(1, "127.0.0.1", 9001, "rack1"),
                                              Node(2, "127.0.0.1", 9002, "rack2")]
    now[0] = 103.0
    assert [n.node_id for n in md.metadata_nodes("PLAINTEXT")] == [2]
    # Back (registered again): live, and listed as such.
    reg = BrokerRegistration(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9001, "PLAINTEXT"),),
                             "rack1", "j")
    view.apply_put(view.keys.broker(1), reg.to_json(), 4, 4)
    md.brokers_changed()
    assert [n.node_id for n in md.metadata_nodes("PLAINTEXT")] == [1, 2]
