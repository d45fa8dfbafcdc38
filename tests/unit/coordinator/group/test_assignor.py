"""Simple share assignor: examples of Kafka's rule (each partition to ceil(S/P) members,
counts within one) and hypothesis properties (coverage, subscriptions respected, balance,
stickiness/fixed point, initialisation gating)."""

from __future__ import annotations

import math
import uuid
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group.share.assignor import assign
from coordinator.group.topics_image import TopicsImage

A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)
C = uuid.UUID(int=0xC)
TOPICS = TopicsImage.of({"a": (A, 3), "b": (B, 2), "c": (C, 1)})


def counts(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(p) for p in a.values()) for m, a in result.items()}


CASES = [
    ("one-member-gets-all", {"m1": ["a"]}, {"m1": {A: {0, 1, 2}}}),
    (
        "two-members-three-partitions",
        {"m1": ["a"], "m2": ["a"]},
        {"m1": {A: {0, 1}}, "m2": {A: {2}}},
    ),
    (
        "more-members-than-partitions-share",
        {"m1": ["c"], "m2": ["c"], "m3": ["c"]},
        {"m1": {C: {0}}, "m2": {C: {0}}, "m3": {C: {0}}},
    ),
    ("unknown-topic-ignored", {"m1": ["nope"]}, {"m1": {}}),
    ("heterogeneous", {"m1": ["a"], "m2": ["b"]}, {"m1": {A: {0, 1, 2}}, "m2": {B: {0, 1}}}),
]


@pytest.mark.parametrize(("members", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_examples(
    members: dict[str, list[str]], expected: dict[str, dict[uuid.UUID, set[int]]]
) -> None:
    result = assign(members, TOPICS)
    assert {m: {t: set(p) for t, p in a.items()} for m, a in result.items()} == expected


def test_five_members_two_partitions_uses_ceil_rule() -> None:
    # k = ceil(5/2) = 3 holders per partition, 6 slots: one member gets both partitions.
    members = {f"m{i}": ["b"] for i in range(5)}
    result = assign(members, TOPICS)
    holders = Counter(p for a in result.values() for p in a.get(B, ()))
    assert holders == {0: 3, 1: 3}
    assert sorted(counts(result).values()) == [1, 1, 1, 1, 2]


def test_homogeneous_balances_across_topics() -> None:
    # 2 members, two 3-partition topics: the odd partition of each topic goes to a different
    # member (3 + 3), not both to the first member by id (4 + 2).
    topics = TopicsImage.of({"a": (A, 3), "d": (uuid.UUID(int=0xD), 3)})
    result = assign({"m1": ["a", "d"], "m2": ["a", "d"]}, topics)
    assert counts(result) == {"m1": 3, "m2": 3}


def test_sticky_when_a_member_joins() -> None:
    before = assign({"m1": ["a"], "m2": ["a"]}, TOPICS)
    after = assign({"m1": ["a"], "m2": ["a"], "m3": ["a"]}, TOPICS, previous=before)
    for m in ("m1", "m2"):
        assert after[m][A] <= before[m][A]  # old members keep what they can
    assert sorted(counts(after).values()) == [1, 1, 1]


def test_assignable_gates_partitions() -> None:
    result = assign({"m1": ["a"]}, TOPICS, assignable={A: frozenset({1})})
    assert result == {"m1": {A: frozenset({1})}}
    assert assign({"m1": ["a"]}, TOPICS, assignable={}) == {"m1": {}}


# --------------------------------------------------------------------------- properties

TOPIC_NAMES = ["t0", "t1", "t2", "t3"]
_image = st.lists(st.integers(1, 7), min_size=4, max_size=4).map(
    lambda ns: TopicsImage.of(
        {n: (uuid.UUID(int=i + 1), c) for i, (n, c) in enumerate(zip(TOPIC_NAMES, ns, strict=True))}
    )
)
_members = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3),
    st.lists(st.sampled_from(TOPIC_NAMES + ["missing"]), max_size=4),
    max_size=12,
)


def _check_invariants(members, topics: TopicsImage, result) -> None:  # type: ignore[no-untyped-def]
    assert set(result) == set(members)
    for name in TOPIC_NAMES:
        info = topics.by_name[name]
        subs = [m for m in members if name in members[m]]
        held = {m: result[m].get(info.topic_id, frozenset()) for m in members}
        # subscriptions respected
        for m in members:
            if m not in subs:
                assert not held[m]
        if not subs:
            continue
        # every partition assigned, to exactly ceil(S/P) members
        k = math.ceil(len(subs) / info.num_partitions)
        holders = Counter(p for m in subs for p in held[m])
        assert set(holders) == set(range(info.num_partitions))
        assert set(holders.values()) == {k}
        # per-topic balance within one
        sizes = [len(held[m]) for m in subs]
        assert max(sizes) - min(sizes) <= 1


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(_members, _image)
def test_properties(members, topics) -> None:  # type: ignore[no-untyped-def]
    result = assign(members, topics)
    _check_invariants(members, topics, result)
    # deterministic and a fixed point of stickiness
    assert assign(members, topics) == result
    assert assign(members, topics, previous=result) == result


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.text("abcdefgh", min_size=1, max_size=3), max_size=12, unique=True),
    st.lists(st.sampled_from(TOPIC_NAMES), min_size=1, max_size=4, unique=True),
    _image,
)
def test_homogeneous_totals_within_one(member_ids, subscription, topics) -> None:  # type: ignore[no-untyped-def]
    members = {m: subscription for m in member_ids}
    result = assign(members, topics)
    if member_ids:
        totals = counts(result).values()
        assert max(totals) - min(totals) <= 1


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(_members, _members, _image, _image)
def test_arbitrary_previous_keeps_invariants(members, old_members, topics, old_topics) -> None:  # type: ignore[no-untyped-def]
    previous = assign(old_members, old_topics)
    result = assign(members, topics, previous=previous)
    _check_invariants(members, topics, result)
    assert assign(members, topics, previous=result) == result


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(_members, _image, st.data())
def test_only_assignable_partitions_are_assigned(members, topics, data) -> None:  # type: ignore[no-untyped-def]
    assignable = {
        info.topic_id: frozenset(data.draw(st.sets(st.integers(0, info.num_partitions - 1))))
        for info in topics.by_name.values()
    }
    result = assign(members, topics, assignable=assignable)
    for a in result.values():
        for tid, parts in a.items():
            assert parts <= assignable[tid]
    for name, info in topics.by_name.items():
        if any(name in subs for subs in members.values()):
            assigned = set().union(*(a.get(info.topic_id, set()) for a in result.values()))
            assert assigned == assignable[info.topic_id]
