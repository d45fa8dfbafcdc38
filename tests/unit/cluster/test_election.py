"""Leader election, ISR upkeep and reassignment steps (cluster/election.py): pure, no I/O."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from cluster.election import (
    Brokers,
    ElectionError,
    assignment_problem,
    cancel_reassignment,
    controller_changes,
    elect_preferred,
    elect_unclean,
    movable_leaderships,
    rebalance_targets,
    settle,
    start_reassignment,
)
from cluster.view import (
    NO_LEADER,
    BrokerRegistration,
    ClusterView,
    Endpoint,
    Keys,
    PartitionAssignment,
    TopicRecord,
)

KEYS = Keys("/e")
NODES = (1, 2, 3, 4, 5)


def reg(n: int, shutting_down: bool = False) -> BrokerRegistration:
    return BrokerRegistration(n, (Endpoint("PLAINTEXT", "h", 9000 + n, "PLAINTEXT"),), None,
                              "x", shutting_down)


def view_of(brokers: dict[int, bool], topics: list[TopicRecord]) -> ClusterView:
    view = ClusterView(KEYS)
    rev = 1
    for n, down in brokers.items():
        view.apply_put(KEYS.broker(n), reg(n, down).to_json(), rev, rev)
        rev += 1
    for t in topics:
        view.apply_put(KEYS.topic(t.name), t.to_json(), rev, rev)
        rev += 1
    return view


@st.composite
def partitions(draw: st.DrawFn) -> PartitionAssignment:
    replicas = tuple(draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=4, unique=True)))
    isr = tuple(r for r in replicas if draw(st.booleans())) or replicas[:1]
    leader = draw(st.sampled_from((*isr, NO_LEADER)))
    return PartitionAssignment(replicas, leader, draw(st.integers(0, 50)), isr)


brokers_st = st.builds(
    lambda live, down: Brokers(frozenset(live), frozenset(d for d in down if d in live)),
    st.sets(st.sampled_from(NODES)), st.sets(st.sampled_from(NODES)))


@settings(max_examples=400)
@given(partitions(), brokers_st, st.booleans())
def test_election_invariants(p, brokers, unclean):
    new = settle(p, brokers, unclean)
    # The ISR is never emptied.
    assert new.isr
    # A new leader comes from the old ISR, unless unclean election is on.
    if new.leader != p.leader and new.leader != NO_LEADER:
        assert new.leader in new.isr and new.leader in brokers.live
        if not unclean:
            assert new.leader in p.isr
    # The leader epoch goes up on every change of leader, and only then.
    if new.leader != p.leader:
        assert new.leader_epoch == p.leader_epoch + 1
    else:
        assert new.leader_epoch == p.leader_epoch
    # A dead broker leaves the ISR unless it is the last member.
    dead_left = [r for r in new.isr if r not in brokers.live]
    assert not dead_left or new.isr == tuple(dead_left) and len(dead_left) == 1
    # An available ISR member means there is a live leader.
    if any(brokers.available(r) for r in p.isr):
        assert new.leader != NO_LEADER
    # Settling twice changes nothing more.
    assert settle(new, brokers, unclean) == new


@settings(max_examples=200)
@given(partitions(), brokers_st, st.booleans())
def test_leader_epochs_never_decrease_over_a_run_of_changes(p, brokers, unclean):
    epochs = [p.leader_epoch]
    for live in (frozenset(), brokers.live, frozenset(NODES), frozenset({1})):
        p = settle(p, Brokers(live), unclean)
        epochs.append(p.leader_epoch)
    assert epochs == sorted(epochs)


def test_a_dead_leader_is_replaced_by_the_first_live_isr_replica_and_leaves_the_isr():
    p = PartitionAssignment((1, 2, 3), 1, 7, (1, 2, 3))
    new = settle(p, Brokers(frozenset({2, 3})), unclean=False)
    assert (new.leader, new.leader_epoch, new.isr) == (2, 8, (2, 3))


def test_the_last_isr_member_stays_and_the_partition_goes_offline_until_it_returns():
    p = PartitionAssignment((1, 2), 1, 0, (1,))
    offline = settle(p, Brokers(frozenset({2})), unclean=False)
    assert (offline.leader, offline.leader_epoch, offline.isr) == (NO_LEADER, 1, (1,))
    back = settle(offline, Brokers(frozenset({1, 2})), unclean=False)
    assert (back.leader, back.leader_epoch, back.isr) == (1, 2, (1,))


def test_unclean_election_picks_a_live_replica_outside_the_isr_only_when_enabled():
    p = PartitionAssignment((1, 2), NO_LEADER, 3, (1,))
    assert settle(p, Brokers(frozenset({2})), unclean=False) == p
    new = settle(p, Brokers(frozenset({2})), unclean=True)
    assert (new.leader, new.leader_epoch, new.isr) == (2, 4, (2,))


def test_a_shutting_down_leader_hands_over_but_leads_on_when_it_is_the_only_isr_member():
    p = PartitionAssignment((1, 2, 3), 1, 0, (1, 2, 3))
    moved = settle(p, Brokers(frozenset({1, 2, 3}), frozenset({1})), unclean=False)
    assert (moved.leader, moved.leader_epoch, moved.isr) == (2, 1, (2, 3))
    alone = PartitionAssignment((1,), 1, 0, (1,))
    assert settle(alone, Brokers(frozenset({1}), frozenset({1})), unclean=False) == alone


def test_controller_changes_follow_the_topic_config_for_unclean_election():
    t = TopicRecord("t", "id", (PartitionAssignment((1, 2), NO_LEADER, 0, (1,)),),
                    {"unclean.leader.election.enable": "true"})
    [changed] = controller_changes(view_of({2: False}, [t]), unclean_default=False)
    assert changed.partitions[0].leader == 2
    strict = TopicRecord("u", "id", t.partitions, {"unclean.leader.election.enable": "false"})
    assert controller_changes(view_of({2: False}, [strict]), unclean_default=True) == []


def test_preferred_election_moves_the_leader_to_the_first_replica_in_sync():
    p = PartitionAssignment((1, 2), 2, 4, (1, 2))
    everyone = Brokers(frozenset({1, 2}))
    new = elect_preferred(p, everyone, "t-0")
    assert (new.leader, new.leader_epoch) == (1, 5)
    with pytest.raises(ElectionError) as e:
        elect_preferred(new, everyone, "t-0")
    assert e.value.error == ErrorCode.election_not_needed
    with pytest.raises(ElectionError) as e:
        elect_preferred(PartitionAssignment((1, 2), 2, 4, (2,)), everyone, "t-0")
    assert e.value.error == ErrorCode.preferred_leader_not_available
    assert "not in the ISR" in e.value.message and "t-0" in e.value.message


def test_unclean_elect_leaders_answers_as_kafka():
    live = Brokers(frozenset({2}))
    with pytest.raises(ElectionError) as e:
        elect_unclean(PartitionAssignment((2,), 2, 0, (2,)), live, "t-0")
    assert e.value.error == ErrorCode.election_not_needed
    with pytest.raises(ElectionError) as e:
        elect_unclean(PartitionAssignment((1,), NO_LEADER, 0, (1,)), live, "t-0")
    assert e.value.error == ErrorCode.eligible_leaders_not_available
    new = elect_unclean(PartitionAssignment((1, 2), NO_LEADER, 0, (1,)), live, "t-0")
    assert (new.leader, new.isr) == (2, (2,))


def test_a_reassignment_completes_once_the_target_is_in_sync_and_moves_a_removed_leader():
    p = PartitionAssignment((1, 2), 1, 3, (1, 2))
    moving = start_reassignment(p, (3, 2))
    assert (moving.replicas, moving.adding, moving.removing) == ((3, 2, 1), (3,), (1,))
    assert (moving.target, moving.original) == ((3, 2), (2, 1))
    everyone = Brokers(frozenset({1, 2, 3}))
    assert settle(moving, everyone, unclean=False) == moving  # 3 not in sync yet
    caught_up = PartitionAssignment(moving.replicas, 1, 3, (1, 2, 3), moving.adding,
                                    moving.removing)  # the leader added it (replication)
    done = settle(caught_up, everyone, unclean=False)
    assert done == PartitionAssignment((3, 2), 3, 4, (2, 3))
    assert len(done.to_doc()) == 4


def test_a_reassignment_can_be_cancelled_back_to_the_original_replicas():
    p = PartitionAssignment((1, 2), 1, 3, (1, 2))
    moving = start_reassignment(p, (3, 4))
    assert cancel_reassignment(moving, "t-0") == p  # the target went first: same order here
    with pytest.raises(ElectionError) as e:
        cancel_reassignment(p, "t-0")
    assert e.value.error == ErrorCode.no_reassignment_in_progress
    assert start_reassignment(p, (1, 2)) == p


def test_partition_documents_stay_backward_compatible():
    old = json.dumps({"name": "t", "topic_id": "i", "partitions": [[[1, 2], 1, 0, [1, 2]]]})
    record = TopicRecord.from_json(old.encode())
    assert record.partitions[0] == PartitionAssignment((1, 2), 1, 0, (1, 2))
    moving = start_reassignment(record.partitions[0], (3,))
    again = TopicRecord.from_json(TopicRecord("t", "i", (moving,)).to_json())
    assert again.partitions[0] == moving and len(moving.to_doc()) == 6
    assert BrokerRegistration.from_json(reg(1, True).to_json()).shutting_down
    assert b"shutting_down" not in reg(1).to_json()


def test_assignment_problems_name_the_fault():
    known = {1, 2, 3}.__contains__
    assert assignment_problem([1, 2], known) is None
    assert "empty" in (assignment_problem([], known) or "")
    assert "twice" in (assignment_problem([1, 1], known) or "")
    assert "[9]" in (assignment_problem([1, 9], known) or "")


def test_rebalance_targets_only_brokers_above_the_imbalance_percentage():
    topics = {"t": TopicRecord("t", "i", tuple(
        PartitionAssignment((1, 2), 2 if i < 3 else 1, 1, (1, 2)) for i in range(10)))}
    everyone = Brokers(frozenset({1, 2}))
    assert rebalance_targets(topics, everyone, 10) == [("t", 0), ("t", 1), ("t", 2)]
    assert rebalance_targets(topics, everyone, 30) == []
    assert rebalance_targets(topics, Brokers(frozenset({1, 2}), frozenset({1})), 10) == []


def test_controlled_shutdown_waits_only_for_leaderships_that_can_move():
    t = TopicRecord("t", "i", (PartitionAssignment((1, 2), 1, 0, (1, 2)),
                               PartitionAssignment((1,), 1, 0, (1,)),
                               PartitionAssignment((2, 1), 2, 0, (2, 1))))
    view = view_of({1: True, 2: False}, [t])
    assert movable_leaderships(view, 1) == [("t", 0)]
    [after] = controller_changes(view, unclean_default=False)
    assert [p.leader for p in after.partitions] == [2, 1, 2]
    assert [p.isr for p in after.partitions] == [(2,), (1,), (2,)]


@settings(max_examples=300)
@given(partitions(), st.lists(st.sampled_from(NODES), min_size=1, max_size=4, unique=True),
       brokers_st, st.booleans())
def test_a_reassignment_ends_on_its_target_with_a_leader_and_isr_inside_it(p, target, brokers,
                                                                          unclean):
    target = tuple(target)
    moving = start_reassignment(p, target)
    assert set(moving.replicas) == set(p.replicas) | set(target)
    assert moving.target == target or (not moving.reassigning and moving.replicas == target)
    # Every target replica catches up (the leader adds them to the ISR), then it completes.
    caught_up = PartitionAssignment(moving.replicas, moving.leader, moving.leader_epoch,
                                    moving.isr + tuple(r for r in target if r not in moving.isr),
                                    moving.adding, moving.removing)
    done = settle(caught_up, brokers, unclean)
    assert done.replicas == target and not done.reassigning
    assert set(done.isr) <= set(target) and done.isr
    assert done.leader == NO_LEADER or done.leader in done.isr
    assert done.leader_epoch >= p.leader_epoch
