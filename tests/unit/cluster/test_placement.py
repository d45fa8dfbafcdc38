"""Partition placement: distinct replicas, even spread by count, racks spread when they can be."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.placement import Candidate, PlacementError, place

brokers_st = st.lists(st.tuples(st.integers(0, 50), st.sampled_from([None, "r1", "r2", "r3"])),
                      min_size=1, max_size=8, unique_by=lambda b: b[0])


@given(brokers_st, st.integers(0, 60), st.integers(1, 3))
def test_every_partition_gets_distinct_live_replicas(raw, count, replication):
    brokers = [Candidate(n, r) for n, r in raw]
    if replication > len(brokers):
        with pytest.raises(PlacementError, match="larger than the"):
            place(count, replication, brokers)
        return
    placed = place(count, replication, brokers)
    ids = {b.node_id for b in brokers}
    assert len(placed) == count
    for replicas in placed:
        assert len(set(replicas)) == replication and set(replicas) <= ids


@given(brokers_st, st.integers(0, 60), st.integers(1, 3))
def test_replicas_and_leaders_are_spread_evenly_over_empty_brokers(raw, count, replication):
    brokers = [Candidate(n, None) for n, _ in raw]
    if replication > len(brokers):
        return
    placed = place(count, replication, brokers)
    replicas = Counter(r for p in placed for r in p)
    loads = [replicas.get(b.node_id, 0) for b in brokers]
    assert max(loads) - min(loads) <= 1
    leaders = Counter(p[0] for p in placed)
    counts = [leaders.get(b.node_id, 0) for b in brokers]
    # Replica counts are kept within one; leaders, chosen among each partition's replicas,
    # within two.
    assert max(counts) - min(counts) <= 2


@given(st.integers(1, 30))
def test_replicas_of_a_partition_sit_on_different_racks_when_there_are_enough(count):
    brokers = [Candidate(1, "a"), Candidate(2, "a"), Candidate(3, "b"), Candidate(4, "b"),
               Candidate(5, "c")]
    for replicas in place(count, 3, brokers):
        racks = [b.rack for r in replicas for b in brokers if b.node_id == r]
        assert len(set(racks)) == 3


def test_new_partitions_go_to_the_least_loaded_brokers_first():
    brokers = [Candidate(1, None), Candidate(2, None), Candidate(3, None)]
    assert place(2, 1, brokers, load={1: 5, 2: 0, 3: 1}) == [(2,), (3,)]


def test_a_replication_factor_below_one_is_refused():
    with pytest.raises(PlacementError, match="at least 1"):
        place(1, 0, [Candidate(1, None)])
