"""Consumer groups (KIP-848) on the group shard, sans-IO with a fake clock.

Every op runs through ``Ctx.run``, which checks the op did not mutate group state, pushes each
record through the binary serde, replays it and keeps the log; ``rebuilt`` loads a fresh shard
from that log (replay gives the same state). Covers join, leave, session expiry, revocation
before reassignment, rebalance-timeout fencing, static members, max size, epoch errors, regex
subscriptions, offsets validation and coexistence with share and classic groups.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from coordinator.group import offsets as off
from coordinator.group.classic import group as cl
from coordinator.group.consumer import records as c
from coordinator.group.consumer.heartbeat import (
    ConsumerGroupSettings,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
)
from coordinator.group.serde import GroupRecordSerde
from coordinator.group.shard import GroupCoordinatorShard
from coordinator.group.share.heartbeat import HeartbeatRequest
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.result import CoordinatorResult

A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)
TOPICS = TopicsImage.of({"a": (A, 6), "b": (B, 2)})
G = "grp"
SERDE = GroupRecordSerde()


class Ctx:
    def __init__(self, topics: TopicsImage = TOPICS,
                 group_settings: ConsumerGroupSettings | None = None) -> None:
        self.now = 0
        self.topics = topics
        self.settings = group_settings or ConsumerGroupSettings()
        self.log: list[tuple[bytes, bytes | None]] = []
        self.shard = self._new_shard()
        self.shard.on_loaded(0)
        self._seen: dict[str, Any] = {}

    def _new_shard(self, loading: bool = False) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(consumer_config=lambda _g: self.settings, loading=loading)

    def run(self, result: CoordinatorResult) -> CoordinatorResult:  # type: ignore[type-arg]
        assert dict(self.shard.consumer.store.groups) == self._seen, "an op mutated state"
        for record in result.records:
            key, value = SERDE.encode(record)
            assert SERDE.decode(key, value) == (record.key, record.value)
            self.log.append((key, value))
            self.shard.replay_record(record)
        self._seen = dict(self.shard.consumer.store.groups)
        return result

    def hb(self, member: str, epoch: int, *, group: str = G, owned: Any = None,
           names: tuple[str, ...] | None = None, **kw: Any) -> ConsumerHeartbeatResponse:
        if epoch == 0:
            kw.setdefault("rebalance_timeout_ms", 10_000)
            if names is None and "subscribed_topic_regex" not in kw:
                names = ("a",)
            owned = {} if owned is None else owned
        req = ConsumerHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                       subscribed_topic_names=names, owned=owned, **kw)
        version = hash(tuple(sorted(self.topics.by_name)))
        res = self.run(self.shard.consumer_group_heartbeat(req, self.topics, self.now,
                                                           topics_version=version))
        response: ConsumerHeartbeatResponse = res.response
        return response

    def sleep(self, ms: int) -> None:
        self.now += ms
        self.run(self.shard.on_timer(self.now))

    def group(self) -> Any:
        return self.shard.consumer.group(G)

    def rebuilt(self) -> GroupCoordinatorShard:
        shard = self._new_shard(loading=True)
        for offset, (key, value) in enumerate(self.log):
            decoded = SERDE.decode(key, value)
            assert decoded is not None
            shard.replay(offset, *decoded)
        shard.commit(len(self.log))
        shard.on_loaded(self.now)
        return shard


def parts(resp: ConsumerHeartbeatResponse, topic: uuid.UUID = A) -> set[int]:
    assert resp.assignment is not None, resp
    return set(resp.assignment.get(topic, []))


def test_first_member_gets_every_partition_and_epoch_one() -> None:
    ctx = Ctx()
    r = ctx.hb("m1", 0)
    assert (r.error_code, r.member_epoch, r.heartbeat_interval_ms) == (ErrorCode.none, 1, 5000)
    assert parts(r) == set(range(6))
    assert ctx.group().state.value == "Stable"
    # Replaying the log gives the same group.
    assert ctx.rebuilt().consumer.group(G) == ctx.group()


def test_revocation_before_reassignment() -> None:
    """A joining member gets nothing its peer still owns: the peer revokes first (its epoch
    unchanged), confirms through its owned partitions, and only then are they handed over."""
    ctx = Ctx()
    ctx.hb("m1", 0)
    r2 = ctx.hb("m2", 0)
    assert r2.member_epoch == 2 and parts(r2) == set()  # all six still owned by m1
    r1 = ctx.hb("m1", 1)
    kept = parts(r1)
    assert len(kept) == 3 and r1.member_epoch == 1  # told to keep 3: revoke the others
    m1 = ctx.group().members["m1"]
    assert m1.state == c.STATE_UNREVOKED_PARTITIONS
    revoked = set(range(6)) - kept
    assert m1.pending_revocation == {A: frozenset(revoked)}
    assert ctx.group().state.value == "Reconciling"
    # m2 still cannot have them while m1 has not confirmed.
    r2 = ctx.hb("m2", 2, owned={})
    assert r2.assignment is None or parts(r2) == set()
    assert ctx.group().members["m2"].state == c.STATE_UNRELEASED_PARTITIONS
    # m1 still reports owning a revoked partition: no progress.
    r1 = ctx.hb("m1", 1, owned={A: frozenset(range(6))})
    assert r1.member_epoch == 1
    r1 = ctx.hb("m1", 1, owned={A: frozenset(kept)})
    assert r1.member_epoch == 2 and ctx.group().members["m1"].state == c.STATE_STABLE
    r2 = ctx.hb("m2", 2, owned={})
    assert parts(r2) == revoked
    assert ctx.group().state.value == "Stable"
    assert ctx.rebuilt().consumer.group(G) == ctx.group()


def test_settling_group_is_told_the_short_heartbeat_interval() -> None:
    """Shoal's settling interval: right after a new target, and while anyone reconciles, members
    are told to heartbeat every 500 ms (so a peer that must revoke hears of it at once); a quiet
    group goes back to the regular interval; 0 answers the regular interval always (Kafka)."""
    ctx = Ctx(group_settings=ConsumerGroupSettings(settling_heartbeat_interval_ms=500))
    assert ctx.hb("m1", 0).heartbeat_interval_ms == 500  # new target just computed
    ctx.now = 1000
    assert ctx.hb("m2", 0).heartbeat_interval_ms == 500  # a second member: m1 must revoke
    ctx.now = 7000  # past one regular interval since the target, but m1 has not revoked yet
    r1 = ctx.hb("m1", 1)
    assert r1.heartbeat_interval_ms == 500 and len(parts(r1)) == 3
    kept = frozenset(parts(r1))
    ctx.hb("m1", 1, owned={A: kept})
    ctx.hb("m2", 2, owned={})
    assert ctx.group().state.value == "Stable"
    assert ctx.hb("m1", 2, owned={A: kept}).heartbeat_interval_ms == 5000
    kafka = Ctx(group_settings=ConsumerGroupSettings(settling_heartbeat_interval_ms=0))
    assert kafka.hb("m1", 0).heartbeat_interval_ms == 5000


def test_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0, rebalance_timeout_ms=3000)
    ctx.hb("m2", 0)
    ctx.hb("m1", 1)  # now UNREVOKED_PARTITIONS
    ctx.sleep(2999)
    assert "m1" in ctx.group().members
    ctx.sleep(1)
    assert "m1" not in ctx.group().members
    r = ctx.hb("m1", 1)
    assert r.error_code == ErrorCode.unknown_member_id
    r2 = ctx.hb("m2", 2, owned={})
    assert r2.member_epoch == 3 and parts(r2) == set(range(6))


def test_leave_hands_partitions_over_and_expiry_fences() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0)
    ctx.hb("m2", 0)
    ctx.hb("m1", 1)
    ctx.hb("m1", 1, owned={A: frozenset(ctx.group().members["m1"].assigned[A])})
    ctx.hb("m2", 2, owned={})
    r = ctx.hb("m2", 2, owned={})
    assert r.error_code == ErrorCode.none
    leave = ctx.hb("m1", -1)
    assert (leave.error_code, leave.member_epoch) == (ErrorCode.none, -1)
    r2 = ctx.hb("m2", 2, owned={A: frozenset(ctx.group().members["m2"].assigned[A])})
    assert parts(r2) == set(range(6)) and r2.member_epoch == 3
    # m2 stops heartbeating: fenced after the session timeout, the group is Empty.
    ctx.sleep(44_999)
    assert "m2" in ctx.group().members
    ctx.sleep(1)
    assert ctx.group().members == {} and ctx.group().state.value == "Empty"
    assert ctx.rebuilt().consumer.group(G) == ctx.group()


def test_epoch_errors() -> None:
    ctx = Ctx()
    assert ctx.hb("m1", 3).error_code == ErrorCode.unknown_member_id  # unknown group
    ctx.hb("m1", 0)
    assert ctx.hb("nobody", 1).error_code == ErrorCode.unknown_member_id
    assert ctx.hb("m1", 2).error_code == ErrorCode.fenced_member_epoch  # ahead
    ctx.hb("m2", 0)
    ctx.hb("m1", 1)
    ctx.hb("m1", 1, owned={A: frozenset(ctx.group().members["m1"].assigned[A])})
    assert ctx.group().members["m1"].member_epoch == 2
    # The previous epoch with owned partitions within the assignment: the bump may be lost.
    ok = ctx.hb("m1", 1, owned={A: frozenset(ctx.group().members["m1"].assigned[A])})
    assert ok.error_code == ErrorCode.none
    stale = ctx.hb("m1", 1, owned={A: frozenset(range(6))})
    assert stale.error_code == ErrorCode.fenced_member_epoch


BAD_REQUESTS = [
    (dict(member_epoch=0, rebalance_timeout_ms=-1, subscribed_topic_names=("a",), owned={}),
     ErrorCode.invalid_request, "RebalanceTimeoutMs"),
    (dict(member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_names=(), owned={}),
     ErrorCode.invalid_request, "SubscribedTopicNames"),
    (dict(member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_names=("a",),
          owned={A: frozenset({0})}), ErrorCode.invalid_request, "TopicPartitions"),
    (dict(member_epoch=-2), ErrorCode.invalid_request, "InstanceId"),
    (dict(member_epoch=-3), ErrorCode.invalid_request, "MemberEpoch"),
    (dict(member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_names=("a",), owned={},
          server_assignor="sticky"), ErrorCode.unsupported_assignor, "uniform, range"),
    (dict(member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_regex="(a", owned={}),
     ErrorCode.invalid_regular_expression, "(a"),
    (dict(member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_regex="(a)\\1", owned={}),
     ErrorCode.invalid_regular_expression, "RE2"),
]


def test_bad_requests_get_kafkas_errors() -> None:
    for fields, code, text in BAD_REQUESTS:
        ctx = Ctx()
        req = ConsumerHeartbeatRequest(group_id=G, member_id="m",
                                       **fields)  # type: ignore[arg-type]
        res = ctx.shard.consumer_group_heartbeat(req, TOPICS, 0)
        assert res.records == () and res.response.error_code == code, (fields, res.response)
        assert text in (res.response.error_message or ""), res.response


def test_catastrophic_regex_is_answered_fast_and_matches_nothing() -> None:
    topics = TopicsImage.of({("a" * 200) + "!": (A, 1), "aaab": (B, 1)})
    ctx = Ctx(topics)
    start = time.monotonic()
    r = ctx.hb("m1", 0, subscribed_topic_regex="(a+)+$")
    assert time.monotonic() - start < 1.0
    assert r.error_code == ErrorCode.none and r.assignment == {}


def test_regex_subscription_follows_topics_and_skips_internal_ones() -> None:
    ctx = Ctx(TopicsImage.of({"orders-1": (A, 2), "other": (B, 1),
                              "__consumer_offsets": (uuid.UUID(int=9), 50)}))
    r = ctx.hb("m1", 0, subscribed_topic_regex="orders-.*|__consumer_offsets")
    assert r.assignment == {A: [0, 1]}
    assert ctx.group().regexes["orders-.*|__consumer_offsets"].topics == {"orders-1"}
    # A matching topic appears: the next heartbeat re-resolves, bumps the epoch, assigns it.
    C = uuid.UUID(int=0xC)
    ctx.topics = TopicsImage.of({"orders-1": (A, 2), "orders-2": (C, 1), "other": (B, 1)})
    r = ctx.hb("m1", 1)
    assert r.member_epoch == 2 and r.assignment == {A: [0, 1], C: [0]}
    assert ctx.rebuilt().consumer.group(G) == ctx.group()
    # Leaving drops the regex record with the last member using it.
    ctx.hb("m1", -1)
    assert ctx.group().regexes == {}


def test_static_member_leaves_temporarily_and_is_replaced_without_rebalance() -> None:
    ctx = Ctx()
    ctx.hb("s1", 0, instance_id="i1")
    ctx.hb("m2", 0)
    ctx.hb("s1", 1, instance_id="i1")
    held = frozenset(ctx.group().members["s1"].assigned[A])
    ctx.hb("s1", 1, instance_id="i1", owned={A: held})
    ctx.hb("m2", 2, owned={})
    epoch = ctx.group().group_epoch
    left = ctx.hb("s1", -2, instance_id="i1")
    assert left.member_epoch == -2 and ctx.group().members["s1"].assigned == {A: held}
    # Another member may not take the instance id while it is held...
    assert ctx.hb("x", 2, instance_id="i1").error_code == ErrorCode.fenced_instance_id
    # ...and a restarted instance (new member id) takes over its partitions at once.
    back = ctx.hb("s1-new", 0, instance_id="i1")
    assert back.error_code == ErrorCode.none and parts(back) == set(held)
    assert "s1" not in ctx.group().members and ctx.group().group_epoch == epoch
    # While it is live, a second instance with the same id is refused.
    dup = ctx.hb("s1-dup", 0, instance_id="i1")
    assert dup.error_code == ErrorCode.unreleased_instance_id
    assert ctx.hb("zz", 1, instance_id="nope").error_code == ErrorCode.unknown_member_id


def test_static_member_that_does_not_return_is_removed_after_the_session_timeout() -> None:
    ctx = Ctx()
    ctx.hb("s1", 0, instance_id="i1")
    ctx.hb("s1", -2, instance_id="i1")
    ctx.sleep(45_000)
    assert ctx.group().members == {}


def test_group_max_size() -> None:
    ctx = Ctx(group_settings=ConsumerGroupSettings(max_size=2))
    ctx.hb("m1", 0)
    ctx.hb("m2", 0)
    r = ctx.hb("m3", 0)
    assert r.error_code == ErrorCode.group_max_size_reached and "2 members" in r.error_message
    assert ctx.hb("m1", 1).error_code == ErrorCode.none


def test_range_assignor_on_request() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0, server_assignor="range")
    ctx.hb("m2", 0, server_assignor="range")
    desc = ctx.shard.describe_consumer(G)
    assert desc.assignor_name == "range"
    assert desc.group is not None
    assert desc.group.target_assignment == {"m1": {A: frozenset({0, 1, 2})},
                                            "m2": {A: frozenset({3, 4, 5})}}


def test_offset_commit_and_fetch_validate_member_epoch() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0)
    p = (off.OffsetCommitPartition("a", 0, 5, -1, ""),)
    commit = ctx.shard.commit_offsets
    assert commit(G, "m1", 7, None, p, 0).response.error_code == ErrorCode.stale_member_epoch
    assert commit(G, "zz", 1, None, p, 0).response.error_code == ErrorCode.unknown_member_id
    assert commit(G, "", -1, None, p, 0).response.error_code == ErrorCode.unknown_member_id
    assert commit(G, "m1", 1, None, p, 0, 8).response.error_code == \
        ErrorCode.unsupported_version
    ok = ctx.run(commit(G, "m1", 1, None, p, 0))
    assert ok.response.partitions == (("a", 0, ErrorCode.none),)
    fetch = ctx.shard.fetch_offsets
    assert fetch(G, [("a", [0])], "m1", 1).partitions[0].offset == 5
    assert fetch(G, [("a", [0])]).partitions[0].offset == 5  # admin fetch
    assert fetch(G, [("a", [0])], "m1", 0).error_code == ErrorCode.stale_member_epoch
    assert fetch(G, [("a", [0])], "zz", 1).error_code == ErrorCode.unknown_member_id
    # An empty group accepts simple commits; its offsets expire after the retention.
    ctx.hb("m1", -1)
    assert ctx.run(commit(G, "", -1, None, p, 0)).response.error_code == ErrorCode.none
    ctx.sleep(cl.ClassicSettings().offsets_retention_ms + 1)
    assert fetch(G, [("a", [0])]).partitions[0].offset == -1


def test_one_group_id_one_type() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0)
    share = ctx.shard.share_group_heartbeat(HeartbeatRequest(
        group_id=G, member_id="s", member_epoch=0, subscribed_topic_names=("a",)), TOPICS, 0)
    assert share.response.error_code == ErrorCode.group_id_not_found
    # A classic JoinGroup is taken in as a classic member (test_migration.py), but not with
    # another protocol type (Kafka's INCONSISTENT_GROUP_PROTOCOL).
    join = ctx.shard.classic_join(cl.JoinRequest(G, "", None, 10_000, 10_000, "connect",
                                                 (("range", b""),), True), 1, 0)
    assert join.response.error_code == ErrorCode.inconsistent_group_protocol
    # A share group's id refuses a consumer heartbeat.
    ctx.run(ctx.shard.share_group_heartbeat(HeartbeatRequest(
        group_id="sg", member_id="s", member_epoch=0, subscribed_topic_names=("a",)), TOPICS, 0))
    r = ctx.hb("m1", 0, group="sg")
    assert r.error_code == ErrorCode.group_id_not_found and "not a consumer group" in \
        (r.error_message or "")
    assert ctx.shard.describe_consumer("sg").error_code == ErrorCode.group_id_not_found
    listed = {g.group_id: (g.group_type, g.state) for g in ctx.shard.list_groups()}
    assert listed[G] == ("consumer", "Stable") and listed["sg"][0] == "share"


def test_delete_group() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0)
    res = ctx.shard.delete_group(G)
    assert res.response.error_code == ErrorCode.non_empty_group
    ctx.hb("m1", -1)
    ctx.run(ctx.shard.commit_offsets(G, "", -1, None,
                                     (off.OffsetCommitPartition("a", 0, 5, -1, ""),), 0))
    res = ctx.run(ctx.shard.delete_group(G))
    assert res.response.error_code == ErrorCode.none
    assert ctx.group() is None and ctx.shard.list_groups() == []
    assert ctx.rebuilt().consumer.store.groups == {}


class ReplayMachine(RuleBasedStateMachine):
    """Random joins, heartbeats (with or without revocation confirmed), leaves and expiries:
    no partition is ever owned twice, and the shard rebuilt from the log equals the live one."""

    def __init__(self) -> None:
        super().__init__()
        self.ctx = Ctx()
        self.epochs: dict[str, int] = {}

    @rule(m=st.sampled_from(["m1", "m2", "m3", "m4"]), names=st.sampled_from([("a",), ("a", "b"),
                                                                                ("b",)]))
    def join(self, m: str, names: tuple[str, ...]) -> None:
        r = self.ctx.hb(m, 0, names=names)
        if r.error_code == ErrorCode.none:
            self.epochs[m] = r.member_epoch

    @rule(m=st.sampled_from(["m1", "m2", "m3", "m4", "static"]), confirm=st.booleans())
    def heartbeat(self, m: str, confirm: bool) -> None:
        g = self.ctx.group()
        if g is not None and m == "static":  # any live static member
            m = next((x.member_id for x in g.members.values()
                      if x.instance_id is not None and x.member_epoch >= 0), "")
        if g is None or m not in g.members or g.members[m].member_epoch < 0:
            return
        member = g.members[m]
        owned = dict(member.assigned) if confirm else None
        r = self.ctx.hb(m, member.member_epoch, owned=owned)
        assert r.error_code == ErrorCode.none, r

    @rule(m=st.sampled_from(["m1", "m2", "m3", "m4"]))
    def leave(self, m: str) -> None:
        g = self.ctx.group()
        if g is not None and m in g.members:
            assert self.ctx.hb(m, -1).error_code == ErrorCode.none

    @rule(instance=st.sampled_from(["i1", "i2"]))
    def static_join(self, instance: str) -> None:
        """A (re)started static instance joins under a fresh member id: it replaces an
        instance that left with -2, and is refused while the instance is live."""
        self.static_seq = getattr(self, "static_seq", 0) + 1
        r = self.ctx.hb(f"{instance}-{self.static_seq}", 0, instance_id=instance)
        assert r.error_code in (ErrorCode.none, ErrorCode.unreleased_instance_id), r

    @rule(instance=st.sampled_from(["i1", "i2"]))
    def static_leave(self, instance: str) -> None:
        g = self.ctx.group()
        member = g.static_member(instance) if g is not None else None
        if member is not None and member.member_epoch >= 0:
            r = self.ctx.hb(member.member_id, -2, instance_id=instance)
            assert r.error_code == ErrorCode.none and r.member_epoch == -2, r

    @rule(ms=st.sampled_from([1000, 11_000, 46_000]))
    def sleep(self, ms: int) -> None:
        self.ctx.sleep(ms)

    @rule(image=st.sampled_from([TOPICS, TopicsImage.of({"a": (A, 8), "b": (B, 2)}),
                                 TopicsImage.of({"a": (A, 8)})]))
    def topics_change(self, image: TopicsImage) -> None:
        """Partitions added, a topic deleted (or back): groups get a new epoch and target."""
        self.ctx.topics = image
        self.ctx.run(self.ctx.shard.on_topics_changed(image, self.ctx.now))

    @rule()
    def settle(self) -> None:
        """Live members that keep heartbeating and confirming converge: the group is Stable and
        every partition of a subscribed topic is owned by exactly one subscriber of it."""
        for _ in range(4):
            g = self.ctx.group()
            if g is None:
                return
            for m in sorted(g.members):
                member = self.ctx.group().members.get(m)
                if member is not None and member.member_epoch >= 0:
                    r = self.ctx.hb(m, member.member_epoch, owned=dict(member.assigned))
                    assert r.error_code == ErrorCode.none, r
        g = self.ctx.group()
        if g is None or not g.members or any(m.member_epoch < 0 for m in g.members.values()):
            return
        assert g.state.value == "Stable", g
        for m in g.members.values():
            assert dict(m.assigned) == dict(g.target_assignment.get(m.member_id, {}))
            topics = self.ctx.topics
            assert all(topics.by_id(t).name in m.subscribed_topic_names for t in m.assigned)
        owned = sorted((t, p) for m in g.members.values() for t, ps in m.assigned.items()
                       for p in ps)
        wanted = sorted((info.topic_id, p) for info in self.ctx.topics.by_name.values()
                        if info.name in g.subscribed_topic_names()
                        for p in range(info.num_partitions))
        assert owned == wanted

    @invariant()
    def exclusive_ownership(self) -> None:
        g = self.ctx.group()
        if g is None:
            return
        seen: set[tuple[uuid.UUID, int]] = set()
        for m in g.members.values():
            for a in (m.assigned, m.pending_revocation):
                for tid, ps in a.items():
                    for p in ps:
                        assert (tid, p) not in seen
                        seen.add((tid, p))

    @invariant()
    def replay_gives_the_same_state(self) -> None:
        assert self.ctx.rebuilt().consumer.store.groups == self.ctx.shard.consumer.store.groups


TestReplay = ReplayMachine.TestCase
TestReplay.settings = settings(max_examples=40, stateful_step_count=25, deadline=None,
                               suppress_health_check=[HealthCheck.too_slow])


def test_protocol_switch_on_empty_groups_keeps_the_offsets() -> None:
    """An empty consumer group's id may be joined by a classic member and vice versa (Kafka's
    online upgrade/downgrade of empty groups); the committed offsets stay."""
    ctx = Ctx()
    ctx.hb("m1", 0)
    ctx.run(ctx.shard.commit_offsets(G, "m1", 1, None,
                                     (off.OffsetCommitPartition("a", 0, 7, -1, ""),), 0))
    ctx.hb("m1", -1)
    join = ctx.run(ctx.shard.classic_join(cl.JoinRequest(
        G, "", None, 10_000, 10_000, "consumer", (("range", b""),), True), 1, 0))
    assert join.response.error_code == ErrorCode.member_id_required
    assert ctx.group() is None
    assert ctx.shard.fetch_offsets(G, [("a", [0])]).partitions[0].offset == 7
    # The classic group is Empty (no member joined yet): a consumer join takes the id back.
    assert ctx.hb("m2", 0).error_code == ErrorCode.none
    assert ctx.shard.fetch_offsets(G, [("a", [0])]).partitions[0].offset == 7
    assert [g.group_type for g in ctx.shard.list_groups()] == ["consumer"]


def test_offset_delete_refuses_subscribed_topics() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0)  # subscribes to "a"
    for topic in ("a", "b"):
        ctx.run(ctx.shard.commit_offsets(G, "m1", 1, None,
                                         (off.OffsetCommitPartition(topic, 0, 3, -1, ""),), 0))
    res = ctx.run(ctx.shard.delete_offsets(G, (("a", 0), ("b", 0))))
    assert res.response == (ErrorCode.none, (("a", 0, ErrorCode.group_subscribed_to_topic),
                                             ("b", 0, ErrorCode.none)))
    fetched = ctx.shard.fetch_offsets(G, [("a", [0]), ("b", [0])]).partitions
    assert [p.offset for p in fetched] == [3, -1]


def test_a_reverted_leave_keeps_the_member_and_its_session_timer() -> None:
    """A leave whose append failed is reverted: the member is back and still expires (timers
    are never cancelled by ops, their handlers re-check)."""
    ctx = Ctx()
    ctx.hb("m1", 0)
    req = ConsumerHeartbeatRequest(group_id=G, member_id="m1", member_epoch=-1)
    res = ctx.shard.consumer_group_heartbeat(req, TOPICS, ctx.now)
    start = ctx.shard.end_offset
    for i, rec in enumerate(res.records):
        ctx.shard.replay(start + i, rec.key, rec.value)
    assert "m1" not in ctx.group().members
    ctx.shard.revert(start)
    assert "m1" in ctx.group().members
    ctx.sleep(45_000)
    assert ctx.group().members == {}
