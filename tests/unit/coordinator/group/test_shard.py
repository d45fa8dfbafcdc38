"""GroupCoordinatorShard: ShareGroupHeartbeat table, topic changes, session expiry on a fake
clock, two-phase share-state initialisation, describe/list/delete, loading, and replay.

Every op runs through ``Ctx.run``, which (like Kafka's GroupMetadataManagerTestContext) checks
that the op did not mutate committed state, pushes each record through the binary serde, replays
it, and keeps the log; ``assert_replay_matches`` rebuilds a fresh shard from that log.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from coordinator.group import serde
from coordinator.group.shard import GroupCoordinatorShard, deletions, initializations
from coordinator.group.share import records as r
from coordinator.group.share.heartbeat import (
    HeartbeatRequest,
    HeartbeatResponse,
    ShareGroupSettings,
)
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.result import CoordinatorResult

A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)
A2 = uuid.UUID(int=0xA2)  # topic "a" re-created
TOPICS = TopicsImage.of({"a": (A, 3), "b": (B, 2)})
G = "grp"


class Ctx:
    """Test context: fake clock, shard, committed log, optional auto-completed initialisation."""

    def __init__(
        self,
        topics: TopicsImage = TOPICS,
        *,
        gated: bool = True,
        auto_init: bool = True,
        non_share: frozenset[str] = frozenset(),
        group_settings: ShareGroupSettings | None = None,
    ) -> None:
        self.now = 0
        self.topics = topics
        self.settings = group_settings or ShareGroupSettings()
        self.auto_init = auto_init
        self.log: list[tuple[bytes, bytes | None]] = []
        self.gated = gated
        self._committed: dict[str, Any] = {}
        self.shard = GroupCoordinatorShard(
            group_config=lambda _g: self.settings,
            is_non_share_group=lambda g: g in non_share,
            require_share_state_initialization=gated,
        )

    def run(self, result: CoordinatorResult) -> CoordinatorResult:  # type: ignore[type-arg]
        assert self.shard.groups == self._committed, "a write op mutated group state"
        for record in result.records:
            key, value = serde.encode_record(record)
            assert serde.decode_record(key, value) == record
            self.log.append((key, value))
            self.shard.replay_record(record)
        self._committed = self.shard.groups
        if self.auto_init:
            for init in initializations(result):
                self.run(
                    self.shard.mark_initialized(
                        init.group_id, init.partitions, self.topics, self.now
                    )
                )
        return result

    def hb(
        self,
        member: str,
        epoch: int,
        subscribe: tuple[str, ...] | None = None,
        *,
        group: str = G,
        rack: str | None = None,
    ) -> HeartbeatResponse:
        return self.heartbeat(
            HeartbeatRequest(group, member, epoch, rack, subscribe, "cid", "/127.0.0.1")
        ).response  # type: ignore[return-value]

    def heartbeat(self, req: HeartbeatRequest) -> CoordinatorResult:  # type: ignore[type-arg]
        return self.run(self.shard.share_group_heartbeat(req, self.topics, self.now))

    def join(
        self, member: str, subscribe: tuple[str, ...] = ("a",), group: str = G
    ) -> HeartbeatResponse:
        """Join, then heartbeat once more so initialized partitions are received."""
        first = self.hb(member, 0, subscribe, group=group)
        assert first.error_code == ErrorCode.none, first
        return self.hb(member, first.member_epoch, group=group)

    def epoch(self, member: str, group: str = G) -> int:
        return self.shard.groups[group].members[member].member_epoch

    def assigned(self, member: str, group: str = G) -> dict[uuid.UUID, frozenset[int]]:
        return dict(self.shard.groups[group].members[member].assigned_partitions)

    def advance(self, ms: int) -> CoordinatorResult:  # type: ignore[type-arg]
        self.now += ms
        return self.run(self.shard.on_timer(self.now, self.topics))

    def change_topics(self, topics: TopicsImage) -> CoordinatorResult:  # type: ignore[type-arg]
        self.topics = topics
        return self.run(self.shard.on_topics_changed(topics, self.now))

    def assert_replay_matches(self) -> None:
        fresh = GroupCoordinatorShard()
        for key, value in self.log:
            fresh.replay_record(serde.decode_record(key, value))
        assert fresh.groups == self.shard.groups


def keys(result: CoordinatorResult) -> list[tuple[int, bool]]:  # type: ignore[type-arg]
    """(record type, is tombstone) per record: a compact view of what an op wrote."""
    return [(rec.key.RECORD_TYPE, rec.value is None) for rec in result.records]


# --------------------------------------------------------------------------- heartbeat table


def _stable_m1(ctx: Ctx) -> None:
    ctx.join("m1")


def _stable_m1_m2(ctx: Ctx) -> None:
    ctx.join("m1")
    ctx.join("m2")
    ctx.hb("m1", ctx.epoch("m1"))


def _full_group(ctx: Ctx) -> None:
    ctx.settings = ShareGroupSettings(max_size=1)
    ctx.join("m1")


def _m1_epoch_bumped_by_m2(ctx: Ctx) -> None:
    ctx.join("m1")
    ctx.join("m2")
    ctx.hb("m1", ctx.epoch("m1"))  # m1 moves to the new epoch; its previous epoch is remembered


def _nothing(_ctx: Ctx) -> None:
    pass


@dataclass(frozen=True)
class Case:
    id: str
    setup: Callable[[Ctx], None]
    request: Callable[[Ctx], HeartbeatRequest]
    error: ErrorCode = ErrorCode.none
    member_epoch: Callable[[Ctx], int] | None = None
    assignment: Any = ...  # ... = not checked; None = not sent; dict = exact
    records: list[tuple[int, bool]] | None = None
    ctx_kwargs: dict[str, Any] = field(default_factory=dict)


def req(
    member: str,
    epoch: int | Callable[[Ctx], int],
    subscribe: tuple[str, ...] | None = None,
    *,
    group: str = G,
    rack: str | None = None,
) -> Callable[[Ctx], HeartbeatRequest]:
    def build(ctx: Ctx) -> HeartbeatRequest:
        e = epoch(ctx) if callable(epoch) else epoch
        return HeartbeatRequest(group, member, e, rack, subscribe, "cid", "/127.0.0.1")

    return build


def cur(member: str) -> Callable[[Ctx], int]:
    return lambda ctx: ctx.epoch(member)


HEARTBEAT_CASES = [
    Case(
        "join-new-group",
        _nothing,
        req("m1", 0, ("a",)),
        member_epoch=lambda c: 1,
        assignment={},
        # member, epoch bump, target member + metadata, current assignment, Initializing
        records=[(10, False), (11, False), (13, False), (12, False), (14, False), (15, False)],
    ),
    Case(
        "join-ungated-assigns-at-once",
        _nothing,
        req("m1", 0, ("a",)),
        member_epoch=lambda c: 1,
        assignment={A: [0, 1, 2]},
        records=[(10, False), (11, False), (13, False), (12, False), (14, False)],
        ctx_kwargs={"gated": False},
    ),
    Case(
        "second-member-joins",
        _stable_m1,
        req("m2", 0, ("a",)),
        member_epoch=lambda c: 3,
        assignment={A: [2]},
        records=[(10, False), (11, False), (13, False), (13, False), (12, False), (14, False)],
    ),
    Case(
        "steady-heartbeat-writes-nothing",
        _stable_m1,
        req("m1", cur("m1")),
        member_epoch=cur("m1"),
        assignment=None,
        records=[],
    ),
    Case(
        "rejoin-known-member-epoch-0",
        _stable_m1,
        req("m1", 0, ("a",)),
        member_epoch=cur("m1"),
        assignment={A: [0, 1, 2]},
        records=[],
    ),
    Case(
        "previous-epoch-accepted",
        _m1_epoch_bumped_by_m2,
        req("m1", lambda c: c.shard.groups[G].members["m1"].previous_member_epoch),
        member_epoch=cur("m1"),
    ),
    Case(
        "leave",
        _stable_m1_m2,
        req("m1", -1),
        member_epoch=lambda c: -1,
        assignment=None,
        records=[(14, True), (13, True), (10, True), (11, False), (13, False), (12, False)],
    ),
    Case(
        "leave-last-member",
        _stable_m1,
        req("m1", -1),
        member_epoch=lambda c: -1,
        records=[(14, True), (13, True), (10, True), (11, False), (12, False)],
    ),
    Case(
        "leave-unknown-member", _stable_m1, req("zz", -1), ErrorCode.unknown_member_id, records=[]
    ),
    Case(
        "fenced-epoch-ahead", _stable_m1, req("m1", 99), ErrorCode.fenced_member_epoch, records=[]
    ),
    Case(
        "fenced-epoch-behind", _m1_epoch_bumped_by_m2, req("m1", 1), ErrorCode.fenced_member_epoch
    ),
    Case("unknown-member", _stable_m1, req("zz", 1), ErrorCode.unknown_member_id, records=[]),
    Case("unknown-group", _nothing, req("m1", 1), ErrorCode.unknown_member_id, records=[]),
    Case(
        "max-size-new-member",
        _full_group,
        req("m2", 0, ("a",)),
        ErrorCode.group_max_size_reached,
        records=[],
    ),
    Case("max-size-existing-member-ok", _full_group, req("m1", 0, ("a",)), member_epoch=cur("m1")),
    Case("member-id-empty", _nothing, req("", 0, ("a",)), ErrorCode.invalid_request),
    Case("member-id-blank", _nothing, req("   ", 0, ("a",)), ErrorCode.invalid_request),
    Case("member-id-37-chars", _nothing, req("x" * 37, 0, ("a",)), ErrorCode.invalid_request),
    Case("member-id-36-chars-ok", _nothing, req("x" * 36, 0, ("a",)), member_epoch=lambda c: 1),
    Case(
        "member-id-not-a-uuid-ok",
        _nothing,
        req("consumer:1/é", 0, ("a",)),
        member_epoch=lambda c: 1,
    ),
    Case("member-id-librdkafka-base64-ok", _nothing, req("q2Xy7Wc1RZOZbV3mMw-Jjw", 0, ("a",))),
    Case("group-id-empty", _nothing, req("m1", 0, ("a",), group=""), ErrorCode.invalid_request),
    Case("epoch-below-minus-one", _stable_m1, req("m1", -2), ErrorCode.invalid_request),
    Case("join-without-subscription", _nothing, req("m1", 0), ErrorCode.invalid_request),
    Case("join-with-empty-subscription", _nothing, req("m1", 0, ()), ErrorCode.invalid_request),
    Case("rack-empty", _nothing, req("m1", 0, ("a",), rack=""), ErrorCode.invalid_request),
    Case("rack-blank", _nothing, req("m1", 0, ("a",), rack="  "), ErrorCode.invalid_request),
    Case("rack-set", _nothing, req("m1", 0, ("a",), rack="r1"), member_epoch=lambda c: 1),
    Case(
        "group-id-of-consumer-group",
        _nothing,
        req("m1", 0, ("a",), group="classic"),
        ErrorCode.group_id_not_found,
        records=[],
        ctx_kwargs={"non_share": frozenset({"classic"})},
    ),
    Case(
        "subscription-change-sends-assignment",
        _stable_m1,
        req("m1", cur("m1"), ("a", "b")),
        member_epoch=lambda c: 3,
        assignment={A: [0, 1, 2]},
        # b is not initialized yet: member, bump, target, current, Initializing(b)
        records=[(10, False), (11, False), (12, False), (14, False), (15, False)],
    ),
    Case(
        "unchanged-subscription-resent",
        _stable_m1,
        req("m1", cur("m1"), ("a",)),
        member_epoch=cur("m1"),
        assignment={A: [0, 1, 2]},
        records=[],
    ),
]


@pytest.mark.parametrize("case", HEARTBEAT_CASES, ids=[c.id for c in HEARTBEAT_CASES])
def test_heartbeat(case: Case) -> None:
    ctx = Ctx(**case.ctx_kwargs)
    case.setup(ctx)
    request = case.request(ctx)
    result = ctx.shard.share_group_heartbeat(request, ctx.topics, ctx.now)
    ctx.run(result)
    resp: HeartbeatResponse = result.response
    assert resp.error_code == case.error, resp
    if case.error != ErrorCode.none:
        assert resp.error_message
        assert resp.assignment is None and resp.member_id is None
    else:
        assert resp.member_id == request.member_id
        if request.member_epoch != -1:
            assert resp.heartbeat_interval_ms == ctx.settings.heartbeat_interval_ms
    if case.member_epoch is not None:
        assert resp.member_epoch == case.member_epoch(ctx)  # evaluated after replay
    if case.assignment is not ...:
        assert resp.assignment == case.assignment
    if case.records is not None:
        assert keys(result) == case.records
    ctx.assert_replay_matches()


def test_join_records_exactly() -> None:
    ctx = Ctx(gated=False)
    result = ctx.heartbeat(HeartbeatRequest(G, "m1", 0, "r1", ("a", "zzz"), "cid", "/h"))
    h = TOPICS.metadata_hash(["a", "zzz"])
    assert list(result.records) == [
        r.new_member_record(
            G,
            "m1",
            rack_id="r1",
            client_id="cid",
            client_host="/h",
            subscribed_topic_names=["a", "zzz"],
        ),
        r.new_share_group_metadata_record(G, 1, h),
        r.new_target_assignment_member_record(G, "m1", {A: [0, 1, 2]}),
        r.new_target_assignment_metadata_record(G, 1, 0),
        r.new_current_assignment_record(
            G, "m1", member_epoch=1, previous_member_epoch=0, assigned_partitions={A: [0, 1, 2]}
        ),
    ]


def test_fenced_member_rejoins_with_epoch_zero() -> None:
    ctx = Ctx()
    ctx.join("m1")
    assert ctx.hb("m1", 42).error_code == ErrorCode.fenced_member_epoch
    again = ctx.hb("m1", 0, ("a",))
    assert again.error_code == ErrorCode.none
    assert again.member_epoch == ctx.epoch("m1")
    assert again.assignment == {A: [0, 1, 2]}


def test_other_members_follow_the_target_on_their_next_heartbeat() -> None:
    ctx = Ctx()
    ctx.join("m1")
    ctx.join("m2")
    assert ctx.assigned("m1") == {A: frozenset({0, 1, 2})}  # not yet reconciled
    resp = ctx.hb("m1", ctx.epoch("m1"))
    assert resp.assignment == {A: [0, 1]}
    assert resp.member_epoch == ctx.shard.groups[G].group_epoch
    ctx.hb("m2", ctx.epoch("m2"))
    assert ctx.assigned("m2") == {A: frozenset({2})}
    ctx.assert_replay_matches()


def test_more_members_than_partitions_share_partitions() -> None:
    ctx = Ctx(TopicsImage.of({"a": (A, 1)}))
    for m in ("m1", "m2", "m3"):
        ctx.join(m)
    for m in ("m1", "m2", "m3"):
        resp = ctx.hb(m, ctx.epoch(m))
        assert ctx.assigned(m) == {A: frozenset({0})}, resp


def test_live_max_size_change() -> None:
    ctx = Ctx()
    ctx.join("m1")
    ctx.settings = ShareGroupSettings(max_size=1)
    assert ctx.hb("m2", 0, ("a",)).error_code == ErrorCode.group_max_size_reached
    ctx.settings = ShareGroupSettings(max_size=2)
    assert ctx.hb("m2", 0, ("a",)).error_code == ErrorCode.none


# --------------------------------------------------------------------------- topic changes


def test_topic_created_after_subscribe_assignment_follows() -> None:
    ctx = Ctx(TopicsImage())
    resp = ctx.join("m1", ("a",))
    assert resp.assignment is None and ctx.assigned("m1") == {}
    result = ctx.change_topics(TopicsImage.of({"a": (A, 2)}))
    assert keys(result)[:1] == [(11, False)]  # epoch bump for the new metadata hash
    assert [i.partitions for i in initializations(result)] == [{A: frozenset({0, 1})}]
    resp = ctx.hb("m1", ctx.epoch("m1"))
    assert resp.assignment == {A: [0, 1]}
    ctx.assert_replay_matches()


def test_topic_created_noticed_by_heartbeat_without_on_topics_changed() -> None:
    ctx = Ctx(TopicsImage())
    ctx.join("m1", ("a",))
    ctx.topics = TopicsImage.of({"a": (A, 2)})  # the shell forgot to call on_topics_changed
    ctx.hb("m1", ctx.epoch("m1"))  # notices the hash change and initializes
    resp = ctx.hb("m1", ctx.epoch("m1"))
    assert resp.assignment == {A: [0, 1]}


def test_topic_deleted_drops_it_from_assignment_and_state_metadata() -> None:
    ctx = Ctx()
    ctx.join("m1", ("a", "b"))
    assert set(ctx.assigned("m1")) == {A, B}
    result = ctx.change_topics(TopicsImage.of({"b": (B, 2)}))
    assert keys(result) == [(15, False), (11, False), (13, False), (12, False)]
    assert A not in ctx.shard.groups[G].initialized
    resp = ctx.hb("m1", ctx.epoch("m1"))
    assert resp.assignment == {B: [0, 1]}
    ctx.assert_replay_matches()


def test_deleted_topic_is_deleting_until_its_share_state_is_deleted() -> None:
    """Kafka's DeletingTopics (record 15): the op asks for the share state of the partitions
    the group held to be deleted; ``mark_deleted`` ends it. A heartbeat in between neither
    plans nor forgets the deletion."""
    ctx = Ctx()
    ctx.join("m1", ("a", "b"))
    ctx.topics = TopicsImage.of({"b": (B, 2)})
    ctx.hb("m1", ctx.epoch("m1"))  # the heartbeat path leaves deleted topics to the topic op
    assert A in ctx.shard.groups[G].initialized and not ctx.shard.groups[G].deleting
    result = ctx.change_topics(ctx.topics)
    assert [(d.group_id, dict(d.partitions)) for d in deletions(result)] == \
        [(G, {A: frozenset({0, 1, 2})})]
    group = ctx.shard.groups[G]
    assert A not in group.initialized and dict(group.deleting) == {A: "a"}
    # Planned again (partitions no longer known) until the deletion is recorded.
    again = ctx.change_topics(ctx.topics)
    assert [dict(d.partitions) for d in deletions(again)] == [{A: frozenset()}]
    ctx.run(ctx.shard.mark_deleted(G, [A]))
    assert not ctx.shard.groups[G].deleting
    assert deletions(ctx.change_topics(ctx.topics)) == ()
    ctx.assert_replay_matches()


def test_topic_recreated_needs_new_initialization() -> None:
    ctx = Ctx()
    ctx.join("m1", ("a",))
    result = ctx.change_topics(TopicsImage.of({"a": (A2, 1), "b": (B, 2)}))
    assert [i.partitions for i in initializations(result)] == [{A2: frozenset({0})}]
    assert ctx.hb("m1", ctx.epoch("m1")).assignment == {A2: [0]}


def test_partition_growth_assigns_new_partitions_after_initialization() -> None:
    ctx = Ctx(auto_init=False)
    first = ctx.hb("m1", 0, ("b",))
    [init] = initializations(ctx.run(ctx.shard.on_topics_changed(ctx.topics, ctx.now))) or [None]
    assert init is None  # already initializing from the join
    ctx.run(ctx.shard.mark_initialized(G, {B: [0, 1]}, ctx.topics, ctx.now))
    assert ctx.hb("m1", first.member_epoch).assignment == {B: [0, 1]}
    result = ctx.change_topics(TopicsImage.of({"a": (A, 3), "b": (B, 4)}))
    [init] = initializations(result)
    assert init.partitions == {B: frozenset({2, 3})}
    assert init.state_epoch == ctx.shard.groups[G].group_epoch
    # not assignable until initialized
    assert ctx.hb("m1", ctx.epoch("m1")).assignment is None
    ctx.run(ctx.shard.mark_initialized(G, init.partitions, ctx.topics, ctx.now))
    assert ctx.hb("m1", ctx.epoch("m1")).assignment == {B: [0, 1, 2, 3]}
    ctx.assert_replay_matches()


def test_unrelated_topic_change_writes_nothing() -> None:
    ctx = Ctx()
    ctx.join("m1", ("a",))
    result = ctx.change_topics(TopicsImage.of({"a": (A, 3), "b": (B, 2), "c": (uuid.uuid4(), 9)}))
    assert result.records == ()


# --------------------------------------------------------------------------- initialisation


def test_initialization_failure_is_retried_by_next_heartbeat() -> None:
    ctx = Ctx(auto_init=False)
    result = ctx.heartbeat(HeartbeatRequest(G, "m1", 0, None, ("a",)))
    [init] = initializations(result)
    assert ctx.shard.partitions_needing_initialization(G, ctx.topics) == {}
    ctx.run(ctx.shard.mark_initialization_failed(G, init.partitions))
    assert ctx.shard.partitions_needing_initialization(G, ctx.topics) == {A: frozenset({0, 1, 2})}
    again = ctx.heartbeat(HeartbeatRequest(G, "m1", 1))
    assert [i.partitions for i in initializations(again)] == [{A: frozenset({0, 1, 2})}]


def test_stale_initializing_is_cleared_by_the_retry_timer() -> None:
    ctx = Ctx(auto_init=False)
    ctx.heartbeat(HeartbeatRequest(G, "m1", 0, None, ("a",)))
    assert ctx.shard.next_deadline() == 30_000  # init retry before the 45 s session timeout
    ctx.hb("m1", 1)  # keep the member alive
    out = ctx.advance(30_000)
    assert out.response.retried_initializations == (G,)
    assert ctx.shard.groups[G].initializing == {}
    result = ctx.heartbeat(HeartbeatRequest(G, "m1", 1))
    assert initializations(result)


def test_mark_initializing_by_hand_and_partial_initialized() -> None:
    ctx = Ctx(auto_init=False, gated=True)
    ctx.join("m1", ("b",))
    ctx.run(ctx.shard.mark_initialization_failed(G, {B: [0, 1]}))
    res = ctx.run(
        ctx.shard.mark_initializing(G, {B: [0, 1, 7], uuid.uuid4(): [0]}, ctx.topics, ctx.now)
    )
    assert res.response.initialization.partitions == {B: frozenset({0, 1})}
    ctx.run(ctx.shard.mark_initialized(G, {B: [1]}, ctx.topics, ctx.now))
    g = ctx.shard.groups[G]
    assert g.initializing_partitions() == {B: frozenset({0})}
    assert g.initialized_partitions() == {B: frozenset({1})}
    assert ctx.hb("m1", ctx.epoch("m1")).assignment == {B: [1]}
    assert (
        ctx.shard.mark_initialized("nope", {}, ctx.topics, 0).response
        == ErrorCode.group_id_not_found
    )
    ctx.assert_replay_matches()


# --------------------------------------------------------------------------- session timeout


def test_session_expiry_fences_member_and_reassigns() -> None:
    ctx = Ctx()
    ctx.join("m1")
    ctx.join("m2")
    ctx.now = 10_000
    ctx.hb("m1", ctx.epoch("m1"))
    ctx.hb("m2", ctx.epoch("m2"))
    assert ctx.shard.next_deadline() == 10_000 + 45_000
    ctx.advance(40_000)
    ctx.hb("m2", ctx.epoch("m2"))  # only m2 keeps heartbeating
    out = ctx.advance(5_000)  # now 55 000: m1's session (armed at 10 000) expires
    assert out.response.expired_members == ((G, "m1"),)
    assert keys(out) == [(14, True), (13, True), (10, True), (11, False), (13, False), (12, False)]
    assert set(ctx.shard.groups[G].members) == {"m2"}
    resp = ctx.hb("m2", ctx.epoch("m2"))
    assert resp.assignment == {A: [0, 1, 2]}
    # the expired member is unknown until it rejoins with epoch 0
    assert ctx.hb("m1", 3).error_code == ErrorCode.unknown_member_id
    assert ctx.hb("m1", 0, ("a",)).error_code == ErrorCode.none
    ctx.assert_replay_matches()


def test_expiry_without_topics_defers_target_to_next_heartbeat() -> None:
    ctx = Ctx()
    ctx.join("m1")
    ctx.join("m2")
    ctx.hb("m2", ctx.epoch("m2"))
    ctx.now = 45_000 - 1
    ctx.hb("m2", ctx.epoch("m2"))
    out = ctx.run(ctx.shard.on_timer(45_000))
    assert keys(out) == [(14, True), (13, True), (10, True), (11, False)]
    g = ctx.shard.groups[G]
    assert g.group_epoch == g.assignment_epoch + 1
    assert ctx.hb("m2", ctx.epoch("m2")).assignment == {A: [0, 1, 2]}


def test_heartbeats_keep_the_session_alive_and_leave_cancels_it() -> None:
    ctx = Ctx()
    ctx.join("m1")
    for _ in range(10):
        ctx.advance(40_000)
        assert ctx.hb("m1", ctx.epoch("m1")).error_code == ErrorCode.none
    ctx.hb("m1", -1)
    assert ("session", G, "m1") not in ctx.shard.timer
    assert ctx.advance(10**6).records == ()


def test_session_timeout_is_read_live_from_group_config() -> None:
    ctx = Ctx()
    ctx.settings = ShareGroupSettings(session_timeout_ms=50_000)
    ctx.join("m1")
    assert ctx.shard.next_deadline() == 50_000
    assert ctx.advance(49_999).response.expired_members == ()
    assert ctx.advance(1).response.expired_members == ((G, "m1"),)
    assert ctx.shard.groups[G].state.value == "Empty"


def test_stale_session_timer_after_failed_append_is_harmless() -> None:
    ctx = Ctx()
    # The join's records are never appended (append failed): the timer fires for nobody.
    ctx.shard.share_group_heartbeat(HeartbeatRequest(G, "ghost", 0, None, ("a",)), ctx.topics, 0)
    assert ctx.advance(45_000).records == ()


# ------------------------------------------------------------------ describe/list/delete/load


def test_describe_list_and_delete() -> None:
    ctx = Ctx()
    ctx.join("m1", group="g1")
    ctx.join("m2", group="g2")
    ctx.hb("m2", -1, group="g2")
    d = ctx.shard.describe("g1")
    assert d.error_code == ErrorCode.none and d.state == "Stable" and d.assignor_name == "simple"
    assert d.group is not None and set(d.group.members) == {"m1"}
    assert ctx.shard.describe("nope").error_code == ErrorCode.group_id_not_found
    assert [(g.group_id, g.state) for g in ctx.shard.list_groups()] == [
        ("g1", "Stable"),
        ("g2", "Empty"),
    ]
    assert [g.group_id for g in ctx.shard.list_groups(["empty"])] == ["g2"]
    assert [g.group_id for g in ctx.shard.list_groups(["Dead"])] == []
    assert ctx.shard.list_groups()[0].group_type == "share"

    non_empty = ctx.run(ctx.shard.delete_group("g1"))
    assert non_empty.response.error_code == ErrorCode.non_empty_group and non_empty.records == ()
    assert ctx.shard.delete_group("nope").response.error_code == ErrorCode.group_id_not_found
    deleted = ctx.run(ctx.shard.delete_group("g2"))
    assert deleted.response.error_code == ErrorCode.none
    assert deleted.response.share_state_to_delete == {A: frozenset({0, 1, 2})}
    assert all(rec.value is None for rec in deleted.records)
    assert keys(deleted)[-1] == (11, True)  # group metadata tombstone last
    assert "g2" not in ctx.shard.groups
    assert ctx.shard.describe("g2").error_code == ErrorCode.group_id_not_found
    ctx.assert_replay_matches()
    # the id can be reused for a fresh group
    assert ctx.hb("m9", 0, ("a",), group="g2").member_epoch == 1


def test_loading_then_on_loaded_rearms_session_timers() -> None:
    live = Ctx()
    live.join("m1")
    live.join("m2")
    loading = GroupCoordinatorShard(loading=True)
    for key, value in live.log:
        loading.replay_record(serde.decode_record(key, value))
    req_ = HeartbeatRequest(G, "m1", live.epoch("m1"))
    assert (
        loading.share_group_heartbeat(req_, TOPICS, 0).response.error_code
        == ErrorCode.coordinator_load_in_progress
    )
    assert loading.describe(G).error_code == ErrorCode.coordinator_load_in_progress
    loading.on_loaded(now_ms=1_000)
    assert loading.next_deadline() == 46_000
    assert loading.share_group_heartbeat(req_, TOPICS, 2_000).response.error_code == ErrorCode.none
    out = loading.on_timer(46_000, TOPICS)
    assert out.response.expired_members == ((G, "m2"),)
    loading.on_unloaded()
    assert loading.groups == {} and loading.next_deadline() is None


# --------------------------------------------------------------------------- replay


def test_replay_of_a_long_scenario_reproduces_the_live_shard() -> None:
    ctx = Ctx()
    ctx.join("m1", ("a",))
    ctx.join("m2", ("a", "b"))
    ctx.hb("m1", ctx.epoch("m1"), ("a", "b"), rack="r1")
    ctx.change_topics(TopicsImage.of({"a": (A, 5), "b": (B, 2)}))
    ctx.join("m3", ("b",))
    for m in ("m1", "m2", "m3"):
        ctx.hb(m, ctx.epoch(m))
    ctx.change_topics(TopicsImage.of({"a": (A, 5)}))
    ctx.hb("m2", -1)
    ctx.now = 100_000
    ctx.advance(0)
    ctx.join("m4", ("a",), group="other")
    ctx.hb("m4", -1, group="other")
    ctx.run(ctx.shard.delete_group("other"))
    ctx.assert_replay_matches()
    assert ctx.shard.groups[G].members == {}


class ShardMachine(RuleBasedStateMachine):
    """Random heartbeats, leaves, topic changes, initialisation answers and time; checks group
    invariants and that a shard rebuilt from the emitted log equals the live one."""

    def __init__(self) -> None:
        super().__init__()
        self.ctx = Ctx(auto_init=False)
        self.pending: list[Any] = []

    @rule(
        member=st.sampled_from(["m1", "m2", "m3", "m4"]),
        subs=st.sampled_from([("a",), ("b",), ("a", "b"), ("c",)]),
    )
    def join(self, member: str, subs: tuple[str, ...]) -> None:
        res = self.ctx.heartbeat(HeartbeatRequest(G, member, 0, None, subs))
        self.pending += initializations(res)

    @rule(member=st.sampled_from(["m1", "m2", "m3", "m4"]), change=st.booleans())
    def heartbeat(self, member: str, change: bool) -> None:
        g = self.ctx.shard.groups.get(G)
        if g is None or member not in g.members:
            return
        subs = ("a", "b") if change else None
        res = self.ctx.heartbeat(
            HeartbeatRequest(G, member, g.members[member].member_epoch, None, subs)
        )
        assert res.response.error_code == ErrorCode.none
        self.pending += initializations(res)

    @rule(member=st.sampled_from(["m1", "m2", "m3", "m4"]))
    def leave(self, member: str) -> None:
        self.ctx.hb(member, -1)

    @rule(ok=st.booleans())
    def answer_initialization(self, ok: bool) -> None:
        if not self.pending:
            return
        init = self.pending.pop(0)
        shard = self.ctx.shard
        op = (
            shard.mark_initialized(init.group_id, init.partitions, self.ctx.topics, self.ctx.now)
            if ok
            else shard.mark_initialization_failed(init.group_id, init.partitions)
        )
        self.ctx.run(op)

    @rule(a=st.sampled_from([0, 1, 3]), b=st.sampled_from([2, 4]), recreate=st.booleans())
    def change_topics(self, a: int, b: int, recreate: bool) -> None:
        topics = {"b": (B, b), "c": (uuid.UUID(int=0xC), 1)}
        if a:
            topics["a"] = (A2 if recreate else A, a)
        self.pending += initializations(self.ctx.change_topics(TopicsImage.of(topics)))

    @rule(ms=st.sampled_from([1_000, 20_000, 46_000]))
    def advance(self, ms: int) -> None:
        self.ctx.advance(ms)

    @invariant()
    def group_invariants(self) -> None:
        g = self.ctx.shard.groups.get(G)
        if g is None:
            return
        assert g.assignment_epoch <= g.group_epoch
        ids = self.ctx.topics.ids()
        for m in g.members.values():
            assert m.member_epoch <= g.group_epoch
            for tid, parts in m.assigned_partitions.items():
                # members only get initialized partitions of topics they subscribed to
                if tid in ids and m.member_epoch == g.assignment_epoch:
                    assert ids[tid].name in m.subscribed_topic_names
                    assert parts <= g.initialized_partitions().get(tid, frozenset())
        assert set(g.target_assignment) <= set(g.members)
        for m in g.members.values():
            if m.member_epoch == g.assignment_epoch:
                assert dict(m.assigned_partitions) == dict(g.target_assignment.get(m.member_id, {}))
        if g.group_epoch == g.assignment_epoch and g.members:
            # the target covers exactly the initialized partitions of subscribed topics
            for name in g.subscribed_topic_names():
                info = self.ctx.topics.get(name)
                if info is None:
                    continue
                targeted = set().union(
                    *(a.get(info.topic_id, set()) for a in g.target_assignment.values())
                )
                assert targeted == set(g.initialized_partitions().get(info.topic_id, ()))

    @invariant()
    def replay_matches(self) -> None:
        self.ctx.assert_replay_matches()


TestShardMachine = ShardMachine.TestCase
TestShardMachine.settings = settings(
    max_examples=80,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
