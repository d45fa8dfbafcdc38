"""Planning ElectLeaders and reassignments from a view (broker/cluster_admin.py): pure parts."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.cluster_admin import (
    PREFERRED,
    UNCLEAN,
    local_topics,
    plan_elections,
    plan_reassignments,
    reassignments,
)
from cluster.election import Brokers
from cluster.view import NO_LEADER, PartitionAssignment, TopicRecord

EVERYONE = Brokers(frozenset({1, 2, 3}))


def topics() -> dict[str, TopicRecord]:
    return {"t": TopicRecord("t", "i", (PartitionAssignment((1, 2), 2, 5, (1, 2)),
                                        PartitionAssignment((2, 1), 2, 0, (2, 1)),
                                        PartitionAssignment((3,), NO_LEADER, 1, (3,))))}


def test_preferred_election_of_named_partitions_answers_each():
    plan = plan_elections(topics(), EVERYONE, PREFERRED, {"t": [0, 1, 7], "nope": [0]})
    codes = {t: [(p, e) for p, (e, _m) in o] for t, o in plan.outcomes.items()}
    assert codes == {"t": [(0, ErrorCode.none), (1, ErrorCode.election_not_needed),
                           (7, ErrorCode.unknown_topic_or_partition)],
                     "nope": [(0, ErrorCode.unknown_topic_or_partition)]}
    assert plan.writes["t"].partitions[0] == PartitionAssignment((1, 2), 1, 6, (1, 2))
    assert "nope" not in plan.writes


def test_electing_every_partition_leaves_out_those_that_need_nothing():
    plan = plan_elections(topics(), Brokers(frozenset({1, 2})), PREFERRED, None)
    assert [(p, e) for p, (e, _m) in plan.outcomes["t"]] == [
        (0, ErrorCode.none), (2, ErrorCode.preferred_leader_not_available)]


def test_unclean_election_on_a_single_broker_is_never_needed():
    plan = plan_elections(local_topics(1, {"a": 2}), Brokers(frozenset({1})), UNCLEAN,
                          {"a": [0, 1]})
    assert [e for _p, (e, _m) in plan.outcomes["a"]] == [ErrorCode.election_not_needed] * 2
    assert plan.writes == {}


def test_reassignment_plans_validate_targets_and_cancel():
    known = {1, 2, 3}.__contains__
    plan = plan_reassignments(topics(), known, {"t": [(0, (3, 2)), (1, (2, 9)), (2, None),
                                                      (1, (2, 2))]})
    outcomes = plan.outcomes["t"]
    assert [e for _p, (e, _m) in outcomes] == [
        ErrorCode.none, ErrorCode.invalid_replica_assignment,
        ErrorCode.no_reassignment_in_progress, ErrorCode.invalid_replica_assignment]
    assert "[9]" in (outcomes[1][1][1] or "") and "t-1" in (outcomes[1][1][1] or "")
    moving = plan.writes["t"].partitions[0]
    assert (moving.replicas, moving.adding, moving.removing) == ((3, 2, 1), (3,), (1,))
    found = reassignments(plan.writes, None)
    assert found == {"t": [(0, moving)]}
    assert reassignments(plan.writes, {"t": [1]}) == {}


def test_a_replication_factor_change_can_be_refused():
    plan = plan_reassignments(topics(), {1, 2, 3}.__contains__, {"t": [(0, (3,))]},
                              allow_rf_change=False)
    assert plan.outcomes["t"][0][1][0] == ErrorCode.invalid_replication_factor
