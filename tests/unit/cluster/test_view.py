"""The local cluster view: applying store events, and the answers routing reads from it."""

from __future__ import annotations

import json

import pytest

from cluster.view import (
    BrokerRegistration,
    ClusterView,
    Endpoint,
    Keys,
    MetadataFormatError,
    PartitionAssignment,
    TopicRecord,
)

KEYS = Keys("/c1")


def reg(n: int) -> BrokerRegistration:
    return BrokerRegistration(n, (Endpoint("EXTERNAL", "h", 9000 + n, "SASL_SSL"),), "r1", "x")


def test_documents_round_trip():
    assert BrokerRegistration.from_json(reg(3).to_json()) == reg(3)
    topic = TopicRecord("t", "id", (PartitionAssignment((1, 2), 1, 4, (1, 2)),), {"a": "b"})
    assert TopicRecord.from_json(topic.to_json()) == topic


def test_events_build_the_view_and_deletes_take_things_away():
    view = ClusterView(KEYS)
    assert view.apply_put(KEYS.broker(1), reg(1).to_json(), 5, 5) == "broker"
    assert view.apply_put(KEYS.broker(2), reg(2).to_json(), 6, 6) == "broker"
    assert view.apply_put(KEYS.controller, json.dumps({"node_id": 2}).encode(), 7, 7) == "controller"
    topic = TopicRecord("t", "id", (PartitionAssignment((1,), 1), PartitionAssignment((2,), 2)))
    assert view.apply_put(KEYS.topic("t"), topic.to_json(), 9, 8) == "topic"
    assert view.controller_id() == 2 and view.controller.epoch == 7
    assert view.topic_revisions["t"] == 9 and view.revision == 9
    assert view.partition_counts() == {1: 1, 2: 1}
    assert [b.node_id for b in view.live_brokers()] == [1, 2]

    assert view.apply_delete(KEYS.broker(2), 10) == "broker"
    assert view.leader_of("t", 0) == 1 and view.leader_of("t", 1) == -1
    assert view.leader_of("t", 2) == -1 and view.leader_of("nope", 0) == -1
    assert view.apply_delete(KEYS.controller, 11) == "controller"
    assert view.controller_id() == -1
    assert view.apply_delete(KEYS.topic("t"), 12) == "topic"
    assert "t" not in view.topics and "t" not in view.topic_revisions


def test_keys_of_other_prefixes_are_not_ours():
    view = ClusterView(KEYS)
    assert view.apply_put(b"/c2/brokers/1", reg(1).to_json(), 3, 3) is None
    assert view.brokers == {}


@pytest.mark.parametrize("value", [b"{not json", b"[1]", b'{"node_id": "x"}', b"\xff"])
def test_an_unreadable_value_names_its_key_and_leaves_the_view_alone(value):
    view = ClusterView(KEYS)
    view.apply_put(KEYS.broker(1), reg(1).to_json(), 3, 3)
    with pytest.raises(MetadataFormatError, match="/c1/brokers/1"):
        view.apply_put(KEYS.broker(1), value, 4, 4)
    assert view.brokers == {1: reg(1)} and view.revision == 3


def test_the_controller_moves_leaders_off_dead_brokers_and_back_with_new_epochs():
    from cluster.election import controller_changes

    def leader_changes(view: ClusterView) -> list[TopicRecord]:
        return controller_changes(view, unclean_default=False)

    view = ClusterView(KEYS)
    for n in (1, 2):
        view.apply_put(KEYS.broker(n), reg(n).to_json(), n, n)
    topic = TopicRecord("t", "id", (PartitionAssignment((1,), 1, 0, (1,)),
                                    PartitionAssignment((2, 1), 2, 3, (2, 1)),
                                    PartitionAssignment((2,), 2, 0, (2,))))
    view.apply_put(KEYS.topic("t"), topic.to_json(), 5, 5)
    assert leader_changes(view) == []

    view.apply_delete(KEYS.broker(2), 6)
    [moved] = leader_changes(view)
    assert moved.partitions == (PartitionAssignment((1,), 1, 0, (1,)),
                                PartitionAssignment((2, 1), 1, 4, (1,)),
                                PartitionAssignment((2,), -1, 1, (2,)))
    view.apply_put(KEYS.topic("t"), moved.to_json(), 7, 5)
    assert leader_changes(view) == []  # offline stays offline: nothing to write again

    view.apply_put(KEYS.broker(2), reg(2).to_json(), 8, 8)
    [back] = leader_changes(view)
    assert back.partitions[2] == PartitionAssignment((2,), 2, 2, (2,))
    assert back.partitions[1] == moved.partitions[1]  # a live leader is not moved back


def test_group_configs_are_kept_per_group_and_their_deletion_is_seen() -> None:
    from cluster.view import ClusterView, Keys

    keys = Keys("/p")
    view = ClusterView(keys)
    assert view.apply_put(keys.group_config("g1"), b'{"share.record.lock.duration.ms":"15000"}',
                          3, 3) == "group_config"
    assert view.group_configs == {"g1": {"share.record.lock.duration.ms": "15000"}}
    assert view.changed_groups == ["g1"]
    assert view.apply_delete(keys.group_config("g1"), 4) == "group_config"
    assert view.group_configs == {} and view.changed_groups == ["g1"]
