"""combine_state_batches: table cases plus a property test against a per-offset reference model."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.share.batch_combiner import combine_state_batches
from persister.api import PersisterStateBatch


def b(first: int, last: int, state: int, count: int) -> PersisterStateBatch:
    return PersisterStateBatch(first, last, state, count)


CASES = [
    ("empty", [], -1, []),
    ("single", [b(0, 5, 0, 1)], -1, [b(0, 5, 0, 1)]),
    ("disjoint-with-gap-kept-apart", [b(10, 12, 0, 1), b(0, 5, 0, 1)], -1, [b(0, 5, 0, 1), b(10, 12, 0, 1)]),
    ("contiguous-equal-coalesced", [b(0, 5, 2, 1), b(6, 9, 2, 1)], -1, [b(0, 9, 2, 1)]),
    ("contiguous-different-kept", [b(0, 5, 2, 1), b(6, 9, 0, 1)], -1, [b(0, 5, 2, 1), b(6, 9, 0, 1)]),
    ("overlapping-equal-joined", [b(0, 5, 0, 1), b(3, 9, 0, 1)], -1, [b(0, 9, 0, 1)]),
    ("duplicate", [b(0, 5, 4, 3), b(0, 5, 4, 3)], -1, [b(0, 5, 4, 3)]),
    (
        "higher-count-wins-over-higher-state",
        [b(0, 9, 4, 1), b(3, 5, 0, 2)],
        -1,
        [b(0, 2, 4, 1), b(3, 5, 0, 2), b(6, 9, 4, 1)],
    ),
    ("same-count-higher-state-wins", [b(0, 9, 2, 1), b(3, 5, 0, 1)], -1, [b(0, 9, 2, 1)]),
    (
        "same-count-archived-beats-acked",
        [b(0, 9, 2, 1), b(3, 5, 4, 1)],
        -1,
        [b(0, 2, 2, 1), b(3, 5, 4, 1), b(6, 9, 2, 1)],
    ),
    ("lower-count-never-wins", [b(0, 9, 0, 3), b(0, 9, 4, 2)], -1, [b(0, 9, 0, 3)]),
    ("prune-whole-batches-below-start", [b(0, 4, 2, 1), b(5, 9, 0, 1)], 5, [b(5, 9, 0, 1)]),
    ("trim-batch-straddling-start", [b(0, 9, 0, 1)], 4, [b(4, 9, 0, 1)]),
    ("start-beyond-everything", [b(0, 9, 0, 1)], 10, []),
    ("minus-one-start-prunes-nothing", [b(0, 9, 0, 1)], -1, [b(0, 9, 0, 1)]),
    (
        "nested-and-chained",
        [b(0, 20, 0, 1), b(5, 15, 2, 1), b(8, 10, 0, 2), b(15, 25, 2, 1)],
        -1,
        [b(0, 4, 0, 1), b(5, 7, 2, 1), b(8, 10, 0, 2), b(11, 25, 2, 1)],
    ),
]


@pytest.mark.parametrize(("batches", "start", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_combine(batches: list[PersisterStateBatch], start: int, expected: list[PersisterStateBatch]) -> None:
    assert combine_state_batches(batches, start) == tuple(expected)


def test_rejects_inverted_batch() -> None:
    with pytest.raises(ValueError):
        combine_state_batches([b(5, 4, 0, 1)])


# -- property test against the per-offset model -------------------------------------------------

batch = st.builds(
    lambda first, width, state, count: b(first, first + width, state, count),
    st.integers(0, 60),
    st.integers(0, 15),
    st.sampled_from([0, 1, 2, 4]),
    st.integers(0, 4),
)
batch_lists = st.lists(batch, max_size=8)
starts = st.integers(-1, 70)


def model(batches: list[PersisterStateBatch], start: int) -> dict[int, tuple[int, int]]:
    """offset -> (count, state): max over covering batches, nothing below a non-negative start."""
    per_offset: dict[int, tuple[int, int]] = {}
    for x in batches:
        for offset in range(x.first_offset, x.last_offset + 1):
            info = (x.delivery_count, x.delivery_state)
            per_offset[offset] = max(per_offset.get(offset, info), info)
    return {o: info for o, info in per_offset.items() if start < 0 or o >= start}


def expand(batches: tuple[PersisterStateBatch, ...]) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for x in batches:
        for offset in range(x.first_offset, x.last_offset + 1):
            assert offset not in out, "overlapping output batches"
            out[offset] = (x.delivery_count, x.delivery_state)
    return out


@given(batch_lists, starts)
def test_matches_per_offset_model(batches: list[PersisterStateBatch], start: int) -> None:
    result = combine_state_batches(batches, start)
    assert expand(result) == model(batches, start)
    for x in result:
        assert x.first_offset <= x.last_offset
        assert start < 0 or x.first_offset >= start
    for prev, nxt in pairwise(result):
        assert prev.last_offset < nxt.first_offset
        if prev.last_offset + 1 == nxt.first_offset:
            assert (prev.delivery_state, prev.delivery_count) != (nxt.delivery_state, nxt.delivery_count)


@given(batch_lists, batch_lists, starts)
def test_combining_in_steps_equals_combining_at_once(
    stored: list[PersisterStateBatch], incoming: list[PersisterStateBatch], start: int
) -> None:
    # What makes ShareUpdate replay equal to a fresh ShareSnapshot of the same write.
    at_once = combine_state_batches(stored + incoming, start)
    stepwise = combine_state_batches(
        combine_state_batches(stored, start) + combine_state_batches(incoming, start), start
    )
    assert stepwise == at_once
    assert combine_state_batches(at_once, start) == at_once  # idempotent
    assert combine_state_batches(incoming + stored, start) == at_once  # order does not matter
