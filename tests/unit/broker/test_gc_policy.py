"""broker/gc_policy.py: survivors of full collections are frozen (so later full collections
walk less), and garbage cycles among frozen objects are still reclaimed once memory grows."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from broker import gc_policy
from broker.gc_policy import GcPolicy


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


@pytest.fixture
def policy() -> Iterator[GcPolicy]:
    p = GcPolicy()
    p.start()
    yield p
    p.stop()
    gc.unfreeze()
    gc.collect()


def test_survivors_of_a_full_collection_are_frozen(policy: GcPolicy) -> None:
    kept = [Node() for _ in range(1000)]
    before = gc.get_freeze_count()
    gc.collect()  # a full collection: what survived it leaves the collector's sight
    assert gc.get_freeze_count() >= before + len(kept)
    assert not any(n is kept[0] for n in gc.get_objects(generation=2))


def test_frozen_cycles_are_reclaimed_once_memory_grew(policy: GcPolicy,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    node, ref = cycle()
    gc.collect()  # the cycle survives (still referenced) and is frozen
    del node
    gc.collect()
    assert ref() is not None  # frozen garbage: not collected by ordinary collections
    assert not policy.reclaim_if_due()  # memory has not grown: it waits
    monkeypatch.setattr(gc_policy, "_peak_rss", lambda: policy.baseline * 2 + (64 << 20) + 1)
    assert policy.reclaim_if_due()
    assert ref() is None
    assert policy.reclaims == 1


def test_stop_leaves_the_collector_as_it_was(policy: GcPolicy) -> None:
    policy.stop()
    frozen = gc.get_freeze_count()
    kept = [Node() for _ in range(1000)]
    gc.collect()
    assert gc.get_freeze_count() == frozen
    assert kept


def test_full_collections_are_spaced_out_while_it_runs_and_restored_after() -> None:
    """A tenth as many full collections (gc_policy.THRESHOLDS): a broker holding requests of
    tens of thousands of elements ran one every half second, each a pause of the event loop
    (the hostile bench measures the pauses); the collector's own thresholds come back at stop."""
    before = gc.get_threshold()
    p = GcPolicy()
    p.start()
    try:
        assert gc.get_threshold() == gc_policy.THRESHOLDS
        assert gc_policy.THRESHOLDS[:2] == before[:2]
        assert gc_policy.THRESHOLDS[2] >= 10 * before[2]
    finally:
        p.stop()
        gc.unfreeze()
        gc.collect()
    assert gc.get_threshold() == before
