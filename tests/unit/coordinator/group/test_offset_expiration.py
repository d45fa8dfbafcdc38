"""Offsets of topics a group with members no longer subscribes to expire (issue 25, section 4).

Kafka's offset expiration condition, sans IO with an injected clock: a Stable classic
``consumer`` group and a consumer-protocol group with members keep the offsets of the topics they
subscribe to however old, and lose those of other topics ``offsets.retention.minutes`` after their
last commit, checked at least every ``offsets.retention.check.interval.ms``, even while the
group keeps committing; the group itself stays.
"""

from __future__ import annotations

from coordinator.group import offsets as off
from coordinator.group.classic import group as cl
from coordinator.group.shard import GroupCoordinatorShard

from tests.unit.coordinator.group.test_classic import Harness, subscribed_pair
from tests.unit.coordinator.group.test_consumer_groups import G, Ctx

RETENTION = 60_000
CHECK = 20_000
SETTINGS = cl.ClassicSettings(initial_rebalance_delay_ms=0, offsets_retention_ms=RETENTION,
                              offsets_retention_check_interval_ms=CHECK)


class ConsumerCtx(Ctx):
    def _new_shard(self, loading: bool = False) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(consumer_config=lambda _g: self.settings,
                                     classic_config=lambda _g: SETTINGS, loading=loading)


def committed(fetched: off.OffsetFetchResponse) -> dict[tuple[str, int], int]:
    return {(p.topic, p.partition): p.offset for p in fetched.partitions}


def test_a_consumer_group_loses_the_offsets_of_a_topic_it_does_not_subscribe_to() -> None:
    ctx = ConsumerCtx()
    epoch = ctx.hb("m1", 0, names=("a",)).member_epoch

    def commit(*parts: tuple[str, int, int]) -> None:
        res = ctx.run(ctx.shard.commit_offsets(G, "m1", epoch, None, tuple(
            off.OffsetCommitPartition(t, p, o, -1, "") for t, p, o in parts), ctx.now))
        assert all(code.value == 0 for *_, code in res.response.partitions), res.response

    commit(("a", 0, 10), ("b", 0, 20))  # "b": a topic the group does not subscribe to
    # The member keeps heartbeating and committing "a" every 5 s; "b" is never committed again.
    while ctx.now < RETENTION - 5_000:
        ctx.sleep(5_000)
        epoch = ctx.hb("m1", epoch).member_epoch
        commit(("a", 0, 10 + ctx.now // 1000))
    assert committed(ctx.shard.fetch_offsets(G, None))[("b", 0)] == 20  # not yet
    while ctx.now < RETENTION + CHECK + 5_000:
        ctx.sleep(5_000)
        epoch = ctx.hb("m1", epoch).member_epoch
    offsets = committed(ctx.shard.fetch_offsets(G, None))
    assert ("b", 0) not in offsets  # expired although the group commits all the time
    assert ("a", 0) in offsets  # subscribed: kept, however old its last commit
    assert ctx.group() is not None and "m1" in ctx.group().members
    # A reloaded shard agrees (the expiry was a tombstone record).
    assert committed(ctx.rebuilt().fetch_offsets(G, None)) == offsets


def test_a_subscribed_topic_of_a_consumer_group_is_kept_past_the_retention() -> None:
    ctx = ConsumerCtx()
    epoch = ctx.hb("m1", 0, names=("a",)).member_epoch
    ctx.run(ctx.shard.commit_offsets(G, "m1", epoch, None, (
        off.OffsetCommitPartition("a", 0, 5, -1, ""),), ctx.now))
    while ctx.now < 3 * RETENTION:
        ctx.sleep(5_000)
        epoch = ctx.hb("m1", epoch).member_epoch
    assert committed(ctx.shard.fetch_offsets(G, None)) == {("a", 0): 5}
    # Once the member leaves, the group is empty and the old offset goes at the next check.
    ctx.hb("m1", -1)
    ctx.sleep(RETENTION + 1)
    assert committed(ctx.shard.fetch_offsets(G, None)) == {}


def test_a_stable_classic_group_loses_the_offsets_of_topics_it_does_not_subscribe_to() -> None:
    h = Harness(SETTINGS)
    m1, m2, gen = subscribed_pair(h, ("t",), ("t",))
    assert h.group().subscribed == frozenset({"t"})
    h.commit(m1, gen, {("t", 0): 1, ("u", 0): 2})
    while h.now < 1_000 + RETENTION + CHECK + 5_000:
        h.tick(5_000)
        assert h.heartbeat(m1, gen).value == 0 and h.heartbeat(m2, gen).value == 0
        h.commit(m1, gen, {("t", 0): h.now})  # the group commits all the time
    assert h.group().state is cl.ClassicState.STABLE
    offsets = committed(h.shard.fetch_offsets("g", None))
    assert ("u", 0) not in offsets and ("t", 0) in offsets
    assert h.shard.classic.has("g")  # the group with members stays
