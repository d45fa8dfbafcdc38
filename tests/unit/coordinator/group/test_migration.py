"""Online migration between classic and consumer groups (``consumer/migration.py``) and classic
members inside consumer groups (``consumer/classic_members.py``), driven through the shard with
an injected clock. Every record goes through the serde, and ``rebuilt`` replays the log into a
fresh shard, as a restart does.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group import offsets as off
from coordinator.group.classic import group as cl
from coordinator.group.classic import records as cr
from coordinator.group.consumer import records as c
from coordinator.group.consumer.heartbeat import ConsumerGroupSettings
from coordinator.group.consumer.migration import MigrationPolicy
from coordinator.group.consumer.protocol import decode_assignment, encode_assignment
from coordinator.group.shard import GroupCoordinatorShard
from tests.unit.coordinator.group.test_consumer_groups import A, TOPICS, Ctx

G = "grp"


def subscription(topics: tuple[str, ...], owned: dict[str, set[int]] | None = None,
                 version: int = 1) -> bytes:
    """A consumer-protocol subscription (Kafka's ConsumerProtocolSubscription)."""
    out = bytearray(struct.pack(">hi", version, len(topics)))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    if version >= 1:
        items = sorted((owned or {}).items())
        out += struct.pack(">i", len(items))
        for t, ps in items:
            out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
            for p in sorted(ps):
                out += struct.pack(">i", p)
    return bytes(out)


class MixedCtx(Ctx):
    """``Ctx`` whose shard also delivers deferred classic answers into ``answers``."""

    def __init__(self, policy: str = "bidirectional") -> None:
        self.answers: dict[int, Any] = {}
        self.next_waiter = 0
        super().__init__(group_settings=ConsumerGroupSettings(migration_policy=policy))

    def _new_shard(self, loading: bool = False) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(consumer_config=lambda _g: self.settings, loading=loading,
                                     deliver=self.answers.__setitem__)

    def join(self, member: str, owned: dict[str, set[int]] | None = None,
             protocol_type: str = "consumer", instance: str | None = None) -> Any:
        """JoinGroup; the answer (immediate or delivered), or the waiter id still pending."""
        self.next_waiter += 1
        w = self.next_waiter
        req = cl.JoinRequest(G, member, instance, 10_000, 10_000, protocol_type,
                             (("range", subscription(("a",), owned)),), False,
                             client_id="cli")
        res = self.run(self.shard.classic_join(req, w, self.now, self.topics))
        if res.response is cl.PENDING:
            return self.answers.pop(w, w)
        return res.response

    def sync(self, member: str, generation: int,
             assignments: tuple[tuple[str, bytes], ...] = ()) -> Any:
        self.next_waiter += 1
        w = self.next_waiter
        req = cl.SyncRequest(G, member, generation, None, "consumer", "range", assignments)
        res = self.run(self.shard.classic_sync(req, w, self.now, self.topics))
        return self.answers.pop(w, w) if res.response is cl.PENDING else res.response

    def beat(self, member: str, generation: int) -> ErrorCode:
        res = self.run(self.shard.classic_heartbeat(G, member, generation, None, self.now))
        code: ErrorCode = res.response
        return code

    def stable_classic_group(self) -> tuple[str, str]:
        """Two classic members in a Stable generation 1: p0-2 to the leader, p3-5 to the other."""
        w1, w2 = self.join(""), self.join("")
        self.sleep(3001)  # the initial rebalance delay
        j1, j2 = self.answers.pop(w1), self.answers.pop(w2)
        leader, other = (j1, j2) if j1.leader == j1.member_id else (j2, j1)
        pending = self.sync(other.member_id, 1)
        given = ((leader.member_id, encode_assignment({"a": frozenset({0, 1, 2})}, 1)),
                 (other.member_id, encode_assignment({"a": frozenset({3, 4, 5})}, 1)))
        assert self.sync(leader.member_id, 1, given).error_code == ErrorCode.none
        assert self.answers.pop(pending).error_code == ErrorCode.none
        return leader.member_id, other.member_id


def assigned_by_member(ctx: MixedCtx) -> dict[str, set[int]]:
    group = ctx.shard.consumer.group(G)
    return {mid: set(m.assigned.get(A, ())) for mid, m in group.members.items()}


def test_a_consumer_join_upgrades_a_classic_group_and_its_members_keep_their_partitions() -> None:
    ctx = MixedCtx()
    lead, other = ctx.stable_classic_group()
    r = ctx.hb("new", 0)
    assert r.error_code == ErrorCode.none
    group = ctx.shard.consumer.group(G)
    assert G not in ctx.shard.classic.groups  # one type per id
    assert group.group_epoch == 2 and group.members[lead].classic is not None
    assert group.members["new"].classic is None
    # The classic members still own what they had, at their generation: nothing is owned
    # twice, and the newcomer waits for what they must give up.
    assert assigned_by_member(ctx)[lead] == {0, 1, 2} and \
        assigned_by_member(ctx)[other] == {3, 4, 5}
    assert not parts_or_empty(r)
    # The classic members learn of the rebalance from their heartbeat and rejoin.
    assert ctx.beat(lead, 1) == ErrorCode.rebalance_in_progress
    for mid, had in ((lead, {0, 1, 2}), (other, {3, 4, 5})):
        j = ctx.join(mid, owned={"a": had})
        assert j.error_code == ErrorCode.none and j.member_id == mid and j.leader == ""
        s = ctx.sync(mid, j.generation_id)
        assert s.error_code == ErrorCode.none
        kept = decode_assignment(s.assignment).get("a", frozenset())
        assert kept <= had  # a classic member first gives up what moves
        # Having revoked, it rejoins and is at the group epoch.
        j = ctx.join(mid, owned={"a": set(kept)})
        assert j.generation_id == 2
        assert ctx.sync(mid, 2).error_code == ErrorCode.none
        assert ctx.beat(mid, 2) == ErrorCode.none
    r = ctx.hb("new", r.member_epoch, owned={})
    owners = assigned_by_member(ctx)
    assert sorted(p for ps in owners.values() for p in ps) == list(range(6))
    assert owners["new"] and owners[lead] and owners[other]
    # A restart replays to the same group, classic members included.
    rebuilt = ctx.rebuilt()
    assert rebuilt.consumer.group(G) == ctx.shard.consumer.group(G)
    assert G not in rebuilt.classic.groups


def parts_or_empty(r: Any) -> set[int]:
    return set((r.assignment or {}).get(A, []))


def test_waiting_classic_joins_are_told_to_rejoin_when_the_group_is_upgraded() -> None:
    ctx = MixedCtx()
    ctx.stable_classic_group()
    waiting = ctx.join("")  # a third member: the group is rebalancing, its join waits
    assert isinstance(waiting, int)
    assert ctx.hb("new", 0).error_code == ErrorCode.none
    assert ctx.answers.pop(waiting).error_code == ErrorCode.rebalance_in_progress


def test_policies_that_refuse_the_upgrade_keep_todays_answers() -> None:
    for policy in ("disabled", "downgrade", "DOWNGRADE"):
        ctx = MixedCtx(policy)
        ctx.stable_classic_group()
        r = ctx.hb("new", 0)
        assert r.error_code == ErrorCode.group_id_not_found
        assert "not a consumer group" in (r.error_message or "")
        assert ctx.shard.consumer.group(G) is None and G in ctx.shard.classic.groups


def test_a_group_of_another_protocol_type_is_not_upgraded() -> None:
    ctx = MixedCtx()
    req = cl.JoinRequest(G, "", None, 10_000, 10_000, "connect", (("v1", b"x"),), False)
    ctx.run(ctx.shard.classic_join(req, 99, 0, TOPICS))
    assert ctx.hb("new", 0).error_code == ErrorCode.group_id_not_found


def upgraded(policy: str = "bidirectional") -> tuple[MixedCtx, str, str, int]:
    ctx = MixedCtx(policy)
    lead, other = ctx.stable_classic_group()
    r = ctx.hb("new", 0)
    assert r.error_code == ErrorCode.none
    return ctx, lead, other, r.member_epoch


def test_the_last_consumer_member_leaving_downgrades_the_group_durably() -> None:
    ctx, lead, other, epoch = upgraded()
    r = ctx.hb("new", -1)
    assert (r.error_code, r.member_epoch) == (ErrorCode.none, -1)
    assert ctx.shard.consumer.group(G) is None
    g = ctx.shard.classic.groups[G]
    assert g.state is cl.ClassicState.PREPARING and set(g.members) == {lead, other}
    # One generation past the group epoch (see migration.py's deliberate difference).
    assert g.generation == 3 and g.protocol == "range"
    # The records: the consumer group's tombstones, then the classic GroupMetadata.
    rebuilt = ctx.rebuilt()
    assert rebuilt.consumer.group(G) is None
    value = rebuilt.classic.store.values[cr.GroupMetadataKey(G)]
    assert value.generation == 3 and {m.member_id for m in value.members} == {lead, other}
    assert set(rebuilt.classic.groups[G].members) == {lead, other}
    # Its members rejoin the classic rebalance and a new generation starts; after a restart
    # too (the rebalance itself is soft state).
    assert ctx.beat(lead, 2) == ErrorCode.illegal_generation
    assert rebuilt.classic.heartbeat(G, lead, 2, None, ctx.now) == ErrorCode.illegal_generation
    w1 = ctx.join(lead)
    j2 = ctx.join(other)
    j1 = ctx.answers.pop(w1)
    assert j1.error_code == j2.error_code == ErrorCode.none
    assert j1.generation_id == 4 and j1.leader == lead


def test_policies_that_refuse_the_downgrade_keep_a_consumer_group() -> None:
    for policy in ("upgrade", "disabled"):
        ctx = MixedCtx("bidirectional")
        lead, other = ctx.stable_classic_group()
        assert ctx.hb("new", 0).error_code == ErrorCode.none
        ctx.settings = ConsumerGroupSettings(migration_policy=policy)
        assert ctx.hb("new", -1).error_code == ErrorCode.none
        group = ctx.shard.consumer.group(G)
        assert group is not None and set(group.members) == {lead, other}
        assert G not in ctx.shard.classic.groups


def test_a_session_timeout_of_the_last_consumer_member_downgrades_too() -> None:
    ctx, lead, other, _ = upgraded()
    # The classic members keep heartbeating (and rejoin when told); the consumer member goes
    # silent, and its session timeout (45 s) downgrades the group.
    for _ in range(6):
        ctx.sleep(9_000)
        group = ctx.shard.consumer.group(G)
        if group is None:
            break
        for mid in (lead, other):
            m = group.members[mid]
            if ctx.beat(mid, m.member_epoch) == ErrorCode.rebalance_in_progress:
                j = ctx.join(mid, owned={"a": set(m.assigned.get(A, ()))})
                assert ctx.sync(mid, j.generation_id).error_code in (
                    ErrorCode.none, ErrorCode.rebalance_in_progress)
    assert ctx.shard.consumer.group(G) is None
    assert set(ctx.shard.classic.groups[G].members) == {lead, other}
    assert ctx.rebuilt().consumer.group(G) is None


def test_classic_member_errors_as_kafka() -> None:
    ctx, lead, other, _ = upgraded()
    assert ctx.beat("nobody", 1) == ErrorCode.unknown_member_id
    assert ctx.beat("new", 2) == ErrorCode.unknown_member_id  # uses the consumer protocol
    assert ctx.beat(lead, 7) == ErrorCode.illegal_generation
    assert ctx.sync(lead, 7).error_code == ErrorCode.illegal_generation
    assert ctx.sync(lead, 1).error_code == ErrorCode.rebalance_in_progress
    assert ctx.join("", protocol_type="connect").error_code == \
        ErrorCode.inconsistent_group_protocol
    # A dynamic member of JoinGroup v4+ is given its id first.
    req = cl.JoinRequest(G, "", None, 10_000, 10_000, "consumer",
                         (("range", subscription(("a",))),), True)
    first = ctx.run(ctx.shard.classic_join(req, 50, ctx.now, TOPICS)).response
    assert first.error_code == ErrorCode.member_id_required and first.member_id
    assert ctx.join(first.member_id).error_code == ErrorCode.none
    # Offsets: a classic member commits with its generation (any OffsetCommit version).
    p = (off.OffsetCommitPartition("a", 0, 5, -1, ""),)
    commit = ctx.shard.commit_offsets
    assert commit(G, lead, 9, None, p, ctx.now, 2).response.error_code == \
        ErrorCode.illegal_generation
    ok = ctx.run(commit(G, lead, 1, None, p, ctx.now, 2))
    assert ok.response.partitions == (("a", 0, ErrorCode.none),)


def test_classic_leave_removes_the_member_and_bumps_the_epoch() -> None:
    ctx, lead, other, _ = upgraded()
    before = ctx.shard.consumer.group(G).group_epoch
    res = ctx.run(ctx.shard.classic_leave(G, (cl.LeaveMember(other, None),
                                              cl.LeaveMember("zz", None)), ctx.now))
    assert [e for _, e in res.response.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    group = ctx.shard.consumer.group(G)
    assert other not in group.members and group.group_epoch == before + 1


def test_member_metadata_round_trips_with_classic_metadata() -> None:
    from coordinator.group import serde
    meta = c.ClassicMemberMetadata(45_000, (c.ClassicProtocol("range", b"\x00\x01"),
                                            c.ClassicProtocol("roundrobin", b"")))
    rec = c.new_member_record(G, "m", instance_id=None, rack_id="r", client_id="c",
                              client_host="h", subscribed_topic_names=("a",),
                              subscribed_topic_regex=None, rebalance_timeout_ms=1,
                              server_assignor=None, classic=meta)
    key, value = serde.encode_record(rec)
    assert serde.decode_record(key, value) == rec
    plain = c.new_member_record(G, "m", instance_id=None, rack_id=None, client_id="c",
                                client_host="h", subscribed_topic_names=(),
                                subscribed_topic_regex=None, rebalance_timeout_ms=1,
                                server_assignor=None)
    key, value = serde.encode_record(plain)
    assert serde.decode_record(key, value) == plain


def test_policy_names_are_kafkas_and_case_insensitive() -> None:
    assert MigrationPolicy.parse("Bidirectional").upgrades
    assert MigrationPolicy.parse("upgrade").upgrades and \
        not MigrationPolicy.parse("upgrade").downgrades
    assert not MigrationPolicy.parse("DISABLED").downgrades


def test_a_classic_member_that_does_not_sync_or_rejoin_in_time_is_fenced() -> None:
    ctx, lead, other, _ = upgraded()
    # Told to rejoin (its generation is behind), "other" never does: fenced after its rebalance
    # timeout (10 s); "lead" rejoins but never syncs: fenced after its rebalance timeout too.
    assert ctx.beat(other, 1) == ErrorCode.rebalance_in_progress
    assert ctx.join(lead, owned={"a": {0, 1, 2}}).error_code == ErrorCode.none
    ctx.sleep(5_000)
    assert set(ctx.shard.consumer.group(G).members) == {lead, other, "new"}
    ctx.hb("new", ctx.shard.consumer.group(G).members["new"].member_epoch)
    ctx.sleep(5_001)
    assert set(ctx.shard.consumer.group(G).members) == {"new"}


def test_a_classic_group_larger_than_the_consumer_max_size_is_not_upgraded() -> None:
    ctx = MixedCtx()
    ctx.stable_classic_group()
    ctx.settings = ConsumerGroupSettings(max_size=1)
    r = ctx.hb("new", 0)
    assert r.error_code == ErrorCode.group_id_not_found and "max.size" in (r.error_message or "")
    assert G in ctx.shard.classic.groups
    # At the size, the group could convert, but the newcomer does not fit (as Kafka).
    ctx.settings = ConsumerGroupSettings(max_size=2)
    assert ctx.hb("new", 0).error_code == ErrorCode.group_max_size_reached
    assert G in ctx.shard.classic.groups and ctx.shard.consumer.group(G) is None


def test_offsets_of_a_consumer_group_emptied_by_classic_leaves_expire() -> None:
    ctx, lead, other, _ = upgraded()
    ctx.settings = ConsumerGroupSettings(migration_policy="upgrade")
    assert ctx.hb("new", -1).error_code == ErrorCode.none  # no downgrade: still a consumer group
    p = (off.OffsetCommitPartition("a", 0, 5, -1, ""),)
    gen = ctx.shard.consumer.group(G).members[lead].member_epoch
    assert ctx.run(ctx.shard.commit_offsets(G, lead, gen, None, p, ctx.now)).response \
        .partitions == (("a", 0, ErrorCode.none),)
    ctx.run(ctx.shard.classic_leave(G, (cl.LeaveMember(lead, None),
                                        cl.LeaveMember(other, None)), ctx.now))
    assert not ctx.shard.consumer.group(G).members
    assert ctx.shard.fetch_offsets(G, [("a", [0])]).partitions[0].offset == 5
    ctx.sleep(cl.ClassicSettings().offsets_retention_ms + 1)
    assert ctx.shard.fetch_offsets(G, [("a", [0])]).partitions[0].offset == -1


def test_offsets_committed_before_the_last_consumer_member_leaves_expire() -> None:
    """The leave's records are replayed after the op, so the retention clock is armed for the
    group the op empties (it was not: such offsets stayed until a reload)."""
    ctx = Ctx()
    epoch = ctx.hb("m1", 0).member_epoch
    p = (off.OffsetCommitPartition("a", 0, 5, -1, ""),)
    ctx.run(ctx.shard.commit_offsets(G, "m1", epoch, None, p, ctx.now))
    ctx.hb("m1", -1)
    ctx.sleep(cl.ClassicSettings().offsets_retention_ms + 1)
    assert ctx.shard.fetch_offsets(G, [("a", [0])]).partitions[0].offset == -1
