"""The leader's view of its followers: high watermark, caught-up times and ISR proposals."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.replication.leader_state import PartitionLeader

LAG = 30_000


def leader(isr: tuple[int, ...] = (1, 2, 3), hw: int = 0, leo: int = 0,
           now: int = 0) -> PartitionLeader:
    return PartitionLeader(1, 5, (1, 2, 3), isr, hw, leo, now)


def test_high_watermark_waits_for_every_in_sync_follower() -> None:
    pl = leader()
    assert not pl.advance(10)  # neither follower has fetched yet: unknown log ends
    pl.follower_fetched(2, 10, 10, 1)
    assert not pl.advance(10)  # follower 3 still unknown
    pl.follower_fetched(3, 4, 10, 1)
    assert pl.advance(10)
    assert pl.high_watermark == 4
    pl.follower_fetched(3, 10, 10, 2)
    assert pl.advance(10) and pl.high_watermark == 10


def test_followers_outside_the_isr_do_not_hold_the_high_watermark() -> None:
    pl = leader(isr=(1, 2))
    pl.follower_fetched(2, 7, 7, 1)
    pl.follower_fetched(3, 0, 7, 1)  # far behind, not in the ISR
    assert pl.advance(7) and pl.high_watermark == 7


def test_high_watermark_never_moves_back() -> None:
    pl = leader(hw=8, leo=8)
    pl.follower_fetched(2, 3, 8, 1)
    pl.follower_fetched(3, 3, 8, 1)
    assert not pl.advance(8)
    assert pl.high_watermark == 8


def test_a_follower_that_stops_fetching_is_due_to_leave_the_isr() -> None:
    pl = leader()
    pl.follower_fetched(2, 0, 0, 1_000)
    pl.follower_fetched(3, 0, 0, 1_000)
    assert pl.proposal(20_000, LAG) is None
    pl.follower_fetched(2, 0, 0, 40_000)  # 2 keeps fetching, caught up; 3 is silent
    assert pl.proposal(40_000, LAG) == (1, 2)
    # While that change is written, nothing else is proposed and the old ISR holds the HW.
    assert pl.proposal(80_000, LAG) is None
    assert pl.maximal_isr() == (1, 2, 3)
    pl.update_assignment((1, 2, 3), (1, 2), 40_100)
    assert pl.isr == (1, 2) and pl.pending_isr is None


def test_a_follower_fetching_behind_a_steady_stream_counts_as_caught_up() -> None:
    pl = leader()
    # Each fetch reaches the leader's end as it was at the previous fetch, never the current.
    for i in range(1, 100):
        pl.follower_fetched(2, (i - 1) * 10, i * 10, i * 1_000)
        pl.follower_fetched(3, (i - 1) * 10, i * 10, i * 1_000)
    assert pl.shrink_due(99_000, LAG) == ()


def test_a_follower_that_falls_behind_is_due_to_leave() -> None:
    pl = leader()
    for i in range(1, 100):
        pl.follower_fetched(2, i * 10, i * 10, i * 1_000)
        pl.follower_fetched(3, 5, i * 10, i * 1_000)  # stuck at offset 5
    assert pl.shrink_due(99_000, LAG) == (3,)


def test_a_caught_up_replica_is_proposed_back_into_the_isr() -> None:
    pl = leader(isr=(1, 2), hw=0, leo=50)  # this epoch began at offset 50
    pl.follower_fetched(2, 60, 60, 1)
    pl.advance(60)
    pl.follower_fetched(3, 40, 60, 1)
    assert pl.expand_due() == ()  # behind the high watermark
    pl.follower_fetched(3, 60, 60, 2)
    assert pl.proposal(2, LAG) == (1, 2, 3)
    # While the expansion is written, 3 already holds the high watermark back.
    assert pl.maximal_isr() == (1, 2, 3)


def test_a_failed_write_is_proposed_again() -> None:
    pl = leader()
    pl.follower_fetched(2, 0, 0, 40_000)
    pl.follower_fetched(3, 0, 0, 0)
    assert pl.proposal(40_000, LAG) == (1, 2)
    pl.change_failed()
    assert pl.proposal(40_001, LAG) == (1, 2)


def test_replicas_added_and_removed_by_the_view() -> None:
    pl = leader()
    pl.update_assignment((1, 2, 3, 4), (1, 2, 3), 5)
    assert 4 in pl.followers
    pl.update_assignment((1, 2), (1, 2), 6)
    assert set(pl.followers) == {2}


events = st.lists(st.tuples(st.sampled_from([2, 3]), st.integers(0, 5), st.integers(0, 3)),
                  max_size=60)


@settings(max_examples=200, deadline=None)
@given(events)
def test_high_watermark_invariants(steps: list[tuple[int, int, int]]) -> None:
    """Whatever the fetches and appends: the high watermark never exceeds the leader's log end
    or the log end of any ISR follower, and it never decreases."""
    pl = leader()
    leo = 0
    follower_end = {2: 0, 3: 0}
    last_hw = 0
    now = 0
    for replica, appended, progress in steps:
        now += 10
        leo += appended
        follower_end[replica] = min(leo, follower_end[replica] + progress)
        pl.follower_fetched(replica, follower_end[replica], leo, now)
        pl.advance(leo)
        assert pl.high_watermark <= leo
        assert all(pl.high_watermark <= follower_end[r] for r in pl.isr if r != 1)
        assert pl.high_watermark >= last_hw
        last_hw = pl.high_watermark
