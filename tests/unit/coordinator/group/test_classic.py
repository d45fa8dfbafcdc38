"""Classic consumer groups in the group shard (``coordinator/group/classic/group.py``), sans IO.

A tiny harness plays the runtime: it encodes each op's records with the group serde, decodes
and replays them at the next offsets and commits (so deferred answers are released), and keeps
the log so a fresh shard can reload it (the replay property)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group.classic import group as cl
from coordinator.group.classic import records as cr
from coordinator.group import offsets as off
from coordinator.group.serde import GroupRecordSerde
from coordinator.group.shard import GroupCoordinatorShard

G = "g"
SERDE = GroupRecordSerde()
SETTINGS = cl.ClassicSettings(initial_rebalance_delay_ms=0, max_size=3,
                              offset_metadata_max_bytes=10, offsets_retention_ms=60_000)


class Harness:
    def __init__(self, settings: cl.ClassicSettings = SETTINGS) -> None:
        self.settings = settings
        self.delivered: dict[int, Any] = {}
        self.shard = self._new(loading=False)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.waiter = 0
        self.now = 1_000

    def _new(self, loading: bool) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(classic_config=lambda _g: self.settings,
                                     deliver=self.delivered.__setitem__, loading=loading)

    def run(self, result: Any) -> Any:
        for record in result.records:
            key, value = SERDE.encode(record)
            self.log.append((key, value))
            decoded = SERDE.decode(key, value)
            assert decoded is not None
            self.shard.replay(self.shard.end_offset, *decoded)
        self.shard.commit(self.shard.end_offset)
        return result.response

    def join(self, member: str = "", instance: str | None = None,
             protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),),
             session: int = 10_000, rebalance: int = 30_000, group: str = G,
             protocol_type: str = "consumer", skip_assignment: bool = True) -> tuple[int, Any]:
        self.waiter += 1
        req = cl.JoinRequest(group, member, instance, session, rebalance, protocol_type,
                             protocols, require_known_member_id=True, client_id="c",
                             skip_assignment_supported=skip_assignment)
        return self.waiter, self.run(self.shard.classic_join(req, self.waiter, self.now))

    def answer(self, waiter: int, response: Any) -> Any:
        return self.delivered.get(waiter) if response is cl.PENDING else response

    def join_new(self, **kw: Any) -> tuple[int, str]:
        """A v4+ join: MEMBER_ID_REQUIRED, then the rejoin (pending). Returns (waiter, id)."""
        _, first = self.join(**kw)
        assert first.error_code == ErrorCode.member_id_required
        waiter, res = self.join(member=first.member_id, **kw)
        assert res is cl.PENDING
        return waiter, first.member_id

    def sync(self, member: str, generation: int, assignments: tuple[tuple[str, bytes], ...] = (),
             instance: str | None = None) -> tuple[int, Any]:
        self.waiter += 1
        req = cl.SyncRequest(G, member, generation, instance, "consumer", "range", assignments)
        return self.waiter, self.run(self.shard.classic_sync(req, self.waiter, self.now))

    def heartbeat(self, member: str, generation: int, instance: str | None = None) -> ErrorCode:
        return self.run(self.shard.classic_heartbeat(G, member, generation, instance, self.now))  # type: ignore[no-any-return]

    def leave(self, *members: cl.LeaveMember) -> cl.LeaveResponse:
        return self.run(self.shard.classic_leave(G, members, self.now))  # type: ignore[no-any-return]

    def tick(self, ms: int) -> None:
        self.now += ms
        self.run(self.shard.on_timer(self.now))

    def delete_offsets(self, *parts: tuple[str, int], group: str = G) -> Any:
        return self.run(self.shard.delete_offsets(group, parts))

    def commit(self, member: str, generation: int, offsets: dict[tuple[str, int], int],
               metadata: str = "", group: str = G) -> off.OffsetCommitResponse:
        parts = tuple(off.OffsetCommitPartition(t, p, o, -1, metadata)
                      for (t, p), o in offsets.items())
        return self.run(self.shard.commit_offsets(  # type: ignore[no-any-return]
            group, member, generation, None, parts, self.now))

    def reload(self) -> GroupCoordinatorShard:
        fresh = self._new(loading=True)
        for offset, (key, value) in enumerate(self.log):
            decoded = SERDE.decode(key, value)
            assert decoded is not None
            fresh.replay(offset, *decoded)
        fresh.commit(len(self.log))
        fresh.on_loaded(self.now)
        return fresh

    def group(self) -> cl.ClassicGroup:
        return self.shard.classic.groups[G]


def stable_pair(h: Harness) -> tuple[str, str, int]:
    """Two members joined and synced; returns (leader, follower, generation).

    With no initial delay the first member completes generation 1 alone; the second member's
    join starts generation 2, which completes when the first rejoins."""
    w1, m1 = h.join_new()
    assert h.delivered[w1].generation_id == 1
    w2, m2 = h.join_new()
    assert w2 not in h.delivered
    w1, r1 = h.join(member=m1)
    assert r1 is cl.PENDING
    j1, j2 = h.delivered[w1], h.delivered[w2]
    assert j1.error_code == j2.error_code == ErrorCode.none
    assert j1.generation_id == j2.generation_id == 2
    leader = j1.leader
    assert leader == j2.leader and leader in (m1, m2)
    lead_answer = j1 if leader == m1 else j2
    assert {m.member_id for m in lead_answer.members} == {m1, m2}
    follower = m2 if leader == m1 else m1
    fw, fres = h.sync(follower, 2)
    assert fres is cl.PENDING
    _, lres = h.sync(leader, 2, ((leader, b"A"), (follower, b"B")))
    assert (lres.error_code, lres.assignment) == (ErrorCode.none, b"A")
    assert (h.delivered[fw].error_code, h.delivered[fw].assignment) == (ErrorCode.none, b"B")
    assert h.group().state is cl.ClassicState.STABLE
    return leader, follower, 2


def test_join_sync_heartbeat_and_the_group_metadata_record() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    assert h.heartbeat(follower, gen) == ErrorCode.none
    assert h.heartbeat(follower, gen + 1) == ErrorCode.illegal_generation
    assert h.heartbeat("nobody", gen) == ErrorCode.unknown_member_id
    key, value = h.log[-1]
    decoded = SERDE.decode(key, value)
    assert decoded is not None
    assert decoded[0] == cr.GroupMetadataKey(G)
    meta = decoded[1]
    assert isinstance(meta, cr.GroupMetadataValue)
    assert (meta.generation, meta.protocol, meta.leader) == (gen, "range", leader)
    assert {m.member_id: m.assignment for m in meta.members} == {leader: b"A", follower: b"B"}


def test_a_leave_rebalances_the_rest() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    res = h.leave(cl.LeaveMember(follower, None))
    assert res.members[0][1] == ErrorCode.none
    assert h.group().state is cl.ClassicState.PREPARING
    assert h.heartbeat(leader, gen) == ErrorCode.rebalance_in_progress
    w, r = h.join(member=leader)
    j = h.answer(w, r)
    assert (j.error_code, j.generation_id, j.leader) == (ErrorCode.none, gen + 1, leader)
    assert [m.member_id for m in j.members] == [leader]
    assert h.leave(cl.LeaveMember("nobody", None)).members[0][1] == ErrorCode.unknown_member_id


def test_session_expiry_removes_the_member_and_rebalances() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    h.tick(5_000)
    assert h.heartbeat(leader, gen) == ErrorCode.none
    h.tick(6_000)  # the follower's 10 s session has run out; the leader heartbeat at +5 s
    assert follower not in h.group().members
    assert h.group().state is cl.ClassicState.PREPARING
    assert h.heartbeat(follower, gen) == ErrorCode.unknown_member_id


def test_rebalance_timeout_drops_members_that_did_not_rejoin() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    w, r = h.join(member=leader, protocols=(("range", b"new"),))  # the leader rejoins
    assert r is cl.PENDING
    for _ in range(4):  # the follower keeps heartbeating but never rejoins
        h.tick(7_000)
        h.heartbeat(follower, gen)
    h.tick(3_000)
    j = h.delivered[w]
    assert (j.error_code, j.generation_id) == (ErrorCode.none, gen + 1)
    assert [m.member_id for m in j.members] == [leader]


def test_static_member_rejoins_without_rebalance_and_the_old_id_is_fenced() -> None:
    h = Harness()
    w1, r1 = h.join(instance="i-1")  # static members are admitted without MEMBER_ID_REQUIRED
    assert r1 is cl.PENDING
    j = h.delivered[w1]
    old = j.member_id
    h.sync(old, j.generation_id, ((old, b"A"),))
    assert h.group().state is cl.ClassicState.STABLE
    # A second static member makes the first a non-leader candidate check simple:
    w2, r2 = h.join(instance="i-2")
    assert r2 is cl.PENDING
    h.join(member=old, instance="i-1")  # the first member rejoins: generation 2 completes
    assert h.delivered[w2].error_code == ErrorCode.none
    gen = h.group().generation
    leader = h.group().leader
    other = next(m for m in h.group().members if m != leader)
    inst = h.group().members[other].group_instance_id
    h.sync(other, gen)
    h.sync(leader, gen, ((leader, b"L"), (other, b"O")))
    assert h.group().state is cl.ClassicState.STABLE
    _, again = h.join(instance=inst)
    assert again.error_code == ErrorCode.none and again.generation_id == gen
    assert again.member_id != other and h.group().generation == gen
    assert h.group().state is cl.ClassicState.STABLE
    assert h.heartbeat(other, gen, instance=inst) == ErrorCode.fenced_instance_id
    _, s = h.sync(again.member_id, gen, instance=inst)
    assert s.assignment == b"O"


def test_group_max_size_and_join_validation() -> None:
    h = Harness()
    for _ in range(3):
        h.join_new()
    _, res = h.join()
    assert res.error_code == ErrorCode.group_max_size_reached
    _, res = h.join(session=1)
    assert res.error_code == ErrorCode.invalid_session_timeout
    h2 = Harness()
    h2.join_new()
    _, res = h2.join(protocols=(("roundrobin", b""),))
    assert res.error_code == ErrorCode.inconsistent_group_protocol
    _, res = h2.join(member="made-up")
    assert res.error_code == ErrorCode.unknown_member_id


def test_offset_commit_validation_and_fetch() -> None:
    h = Harness()
    simple = h.commit("", -1, {("t", 0): 5}, group="solo")
    assert simple.partitions == (("t", 0, ErrorCode.none),)
    fetched = h.shard.fetch_offsets("solo", [("t", [0, 1])])
    assert [(p.partition, p.offset) for p in fetched.partitions] == [(0, 5), (1, -1)]
    leader, follower, gen = stable_pair(h)
    assert h.commit(follower, gen, {("t", 0): 1}).error_code == ErrorCode.none
    assert h.commit(follower, gen + 1, {("t", 0): 2}).error_code == ErrorCode.illegal_generation
    assert h.commit("x", gen, {("t", 0): 2}).error_code == ErrorCode.unknown_member_id
    assert h.commit("", -1, {("t", 0): 2}).error_code == ErrorCode.unknown_member_id
    big = h.commit(leader, gen, {("t", 1): 2}, metadata="x" * 11)
    assert big.partitions == (("t", 1, ErrorCode.offset_metadata_too_large),)
    assert [(p.topic, p.partition, p.offset) for p in
            h.shard.fetch_offsets(G, None).partitions] == [("t", 0, 1)]
    h.join(member=leader, protocols=(("range", b"changed"),))  # leader rejoins: rebalance
    h.tick(1)
    assert h.group().state is cl.ClassicState.PREPARING
    assert h.commit(follower, gen, {("t", 0): 3}).error_code == ErrorCode.none  # still allowed


def test_empty_group_offsets_expire_after_retention() -> None:
    h = Harness()
    h.commit("", -1, {("t", 0): 5}, group="solo")
    h.tick(59_000)
    assert h.shard.fetch_offsets("solo", None).partitions
    h.tick(2_000)
    assert h.shard.fetch_offsets("solo", None).partitions == ()
    assert not h.shard.classic.has("solo")


def test_replaying_the_records_gives_the_same_groups_and_offsets() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    h.commit(follower, gen, {("t", 0): 7, ("t", 1): 9}, metadata="m")
    h.commit("", -1, {("u", 0): 3}, group="solo")
    fresh = h.reload()
    assert fresh.classic.store.values == h.shard.classic.store.values
    assert fresh.classic.store.keys_per_group == h.shard.classic.store.keys_per_group == {
        "g": 3, "solo": 1}
    g, f = h.group(), fresh.classic.groups[G]
    assert (f.state, f.generation, f.leader, f.protocol, f.protocol_type) == (
        g.state, g.generation, g.leader, g.protocol, g.protocol_type)
    assert {m: x.assignment for m, x in f.members.items()} == \
        {m: x.assignment for m, x in g.members.items()}
    assert fresh.fetch_offsets(G, None) == h.shard.fetch_offsets(G, None)
    assert fresh.fetch_offsets("solo", None) == h.shard.fetch_offsets("solo", None)
    # The reloaded members keep their generation: heartbeats carry on.
    h.shard = fresh
    assert h.heartbeat(follower, gen) == ErrorCode.none
    assert [(x.group_id, x.group_type) for x in fresh.list_groups()] == [
        ("g", "classic"), ("solo", "classic")]


def test_a_failed_append_reverts_the_offsets() -> None:
    h = Harness()
    result = h.shard.commit_offsets("solo", "", -1, None, (
        off.OffsetCommitPartition("t", 0, 5, -1, ""),), h.now)
    base = h.shard.end_offset
    for record in result.records:
        h.shard.replay(h.shard.end_offset, *SERDE.key_value(record))
    assert h.shard.classic.has("solo")
    h.shard.revert(base)
    assert h.shard.fetch_offsets("solo", None).partitions == ()
    assert not h.shard.classic.has("solo")


def test_the_initial_rebalance_delay_waits_for_more_members() -> None:
    h = Harness(replace(SETTINGS, initial_rebalance_delay_ms=3_000))
    w1, m1 = h.join_new()
    h.tick(2_000)
    w2, m2 = h.join_new()  # extends the wait to +3 s from now
    h.tick(2_000)
    assert w1 not in h.delivered and w2 not in h.delivered
    h.tick(1_000)
    j1, j2 = h.delivered[w1], h.delivered[w2]
    assert j1.generation_id == j2.generation_id == 1
    assert {m.member_id for m in j1.members + j2.members} == {m1, m2}


def test_classic_record_bytes_are_kafkas() -> None:
    """Offset commits: key version 1 (group, topic, partition), value version 3; group metadata:
    key version 2, value version 3; older offset value versions (v1 with an expire timestamp)
    and key version 0 are read too."""
    key = cr.OffsetCommitKey("g", "t", 3)
    value = cr.OffsetCommitValue(42, 7, "m", 1000)
    kb, vb = cr.encode_key(key), cr.encode_value(value)
    assert kb == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert vb == (b"\x00\x03" + (42).to_bytes(8, "big") + (7).to_bytes(4, "big") + b"\x00\x01m"
                  + (1000).to_bytes(8, "big"))
    assert SERDE.decode(kb, vb) == (key, value)
    v1 = b"\x00\x01" + (42).to_bytes(8, "big") + b"\x00\x01m" + (1000).to_bytes(8, "big") + \
        (2000).to_bytes(8, "big")
    assert SERDE.decode(b"\x00\x00" + kb[2:], v1) == (key, cr.OffsetCommitValue(42, -1, "m", 1000))
    meta = cr.GroupMetadataValue("consumer", 5, "range", "a", 99, (
        cr.MemberMetadata("a", None, "c", "/h", 300, 10, b"sub", b"asg"),))
    gk = cr.GroupMetadataKey("g")
    assert cr.encode_key(gk) == b"\x00\x02\x00\x01g"
    encoded = cr.encode_value(meta)
    assert encoded is not None and encoded[:2] == b"\x00\x03"
    assert SERDE.decode(cr.encode_key(gk), encoded) == (gk, meta)
    assert SERDE.decode(cr.encode_key(gk), None) == (gk, None)


def test_share_describe_of_a_classic_group_says_it_is_not_a_share_group() -> None:
    h = Harness()
    h.commit("", -1, {("t", 0): 1}, group="solo")
    res = h.shard.describe("solo")
    assert (res.error_code, res.error_message) == (
        ErrorCode.group_id_not_found, "Group solo is not a share group.")


def subscription(*topics: str, version: int = 3) -> bytes:
    """Consumer protocol subscription metadata as clients write it (topics, user data, then the
    later versions' owned partitions / generation / rack, which the broker skips)."""
    out = version.to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    out += (0xFFFFFFFF).to_bytes(4, "big")  # null user data
    if version >= 1:
        out += (0).to_bytes(4, "big")  # no owned partitions
    return out


def subscribed_pair(h: Harness, first: tuple[str, ...], second: tuple[str, ...]
                    ) -> tuple[str, str, int]:
    """Two members subscribed to ``first`` and ``second``, joined and synced."""
    w1, m1 = h.join_new(protocols=(("range", subscription(*first)),))
    h.sync(m1, 1, ((m1, b"A"),))
    w2, m2 = h.join_new(protocols=(("range", subscription(*second)),))
    h.join(member=m1, protocols=(("range", subscription(*first)),))
    gen = h.group().generation
    leader = h.group().leader
    assert leader is not None
    other = m2 if leader == m1 else m1
    h.sync(other, gen)
    h.sync(leader, gen, ((m1, b"A"), (m2, b"B")))
    assert h.group().state is cl.ClassicState.STABLE
    return m1, m2, gen


def test_offset_delete_refuses_only_the_topics_the_members_subscribe_to() -> None:
    """As Kafka's OffsetMetadataManager.deleteOffsets with ClassicGroup.isSubscribedToTopic."""
    h = Harness()
    m1, m2, gen = subscribed_pair(h, ("t",), ("t", "u"))
    assert h.group().subscribed == frozenset({"t", "u"})
    h.commit(m1, gen, {("t", 0): 1, ("u", 0): 2, ("v", 0): 3, ("v", 1): 4})
    top, parts = h.delete_offsets(("t", 0), ("u", 0), ("v", 0), ("w", 0))
    assert top == ErrorCode.none
    assert parts == (("t", 0, ErrorCode.group_subscribed_to_topic),
                     ("u", 0, ErrorCode.group_subscribed_to_topic),
                     ("v", 0, ErrorCode.none), ("w", 0, ErrorCode.none))
    left = [(p.topic, p.partition) for p in h.shard.fetch_offsets(G, None).partitions]
    assert left == [("t", 0), ("u", 0), ("v", 1)]
    # The subscription survives a reload (read again from the GroupMetadata record).
    assert h.reload().classic.groups[G].subscribed == frozenset({"t", "u"})
    # Once the members are gone the group is Empty: everything may go.
    h.leave(cl.LeaveMember(m1, None), cl.LeaveMember(m2, None))
    assert h.group().state is cl.ClassicState.EMPTY
    _, parts = h.delete_offsets(("t", 0), ("u", 0))
    assert [code for _, _, code in parts] == [ErrorCode.none, ErrorCode.none]
    assert [(p.topic, p.partition) for p in h.shard.fetch_offsets(G, None).partitions] == \
        [("v", 1)]


def test_offset_delete_with_unreadable_metadata_or_another_protocol_type() -> None:
    h = Harness()
    w, m = h.join_new(protocols=(("range", b"\x00\x01"),))  # not a subscription
    h.sync(m, 1, ((m, b"A"),))
    assert h.group().subscribed is None
    h.commit(m, 1, {("t", 0): 1})
    _, parts = h.delete_offsets(("t", 0), ("other", 0))
    assert [code for _, _, code in parts] == [ErrorCode.group_subscribed_to_topic] * 2
    # A Kafka Connect group (protocol type "connect") with members: NON_EMPTY_GROUP.
    _, first = h.join(group="connect-g", protocol_type="connect")
    h.join(member=first.member_id, group="connect-g", protocol_type="connect")
    h.commit("", -1, {("t", 0): 1}, group="solo")
    assert h.delete_offsets(("t", 0), group="connect-g") == (ErrorCode.non_empty_group, ())
    assert h.delete_offsets(("t", 0), group="solo") == (ErrorCode.none, (
        ("t", 0, ErrorCode.none),))
    assert h.delete_offsets(("t", 0), group="nope") == (ErrorCode.group_id_not_found, ())


def test_a_replaced_static_leader_skips_assignment_without_a_rebalance() -> None:
    """KIP-814 (JoinGroup v9): Kafka replaces a static leader rejoining a Stable group in place
    and tells it it leads but must not assign; before v9 it is told the old id leads."""
    for v9 in (True, False):
        h = Harness()
        w1, r1 = h.join(instance="i-1")
        old = h.delivered[w1].member_id
        h.sync(old, 1, ((old, b"A"),))
        w2, _ = h.join(instance="i-2")
        h.join(member=old, instance="i-1")
        gen = h.group().generation
        leader = h.group().leader
        assert leader is not None
        other = next(m for m in h.group().members if m != leader)
        leader_instance = h.group().members[leader].group_instance_id
        h.sync(other, gen)
        h.sync(leader, gen, ((leader, b"L"), (other, b"O")))
        _, res = h.join(instance=leader_instance, skip_assignment=v9)
        assert res.error_code == ErrorCode.none and res.generation_id == gen
        assert res.member_id != leader
        assert h.group().state is cl.ClassicState.STABLE and h.group().generation == gen
        assert h.group().leader == res.member_id
        if v9:
            assert res.skip_assignment and res.leader == res.member_id
            assert {m.member_id for m in res.members} == {res.member_id, other}
        else:
            assert not res.skip_assignment and res.leader == leader and res.members == ()
        # The other member goes on without a rebalance; the new leader keeps its assignment.
        assert h.heartbeat(other, gen) == ErrorCode.none
        _, synced = h.sync(res.member_id, gen, instance=leader_instance)
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"L")
        assert h.heartbeat(leader, gen, instance=leader_instance) == \
            ErrorCode.fenced_instance_id


def test_refused_joins_and_unused_member_ids_leave_no_group_behind() -> None:
    h = Harness()
    _, res = h.join(group="x", protocols=())
    assert res.error_code == ErrorCode.inconsistent_group_protocol
    _, res = h.join(group="x", protocol_type="")
    assert res.error_code == ErrorCode.inconsistent_group_protocol
    assert "x" not in h.shard.classic.groups
    _, first = h.join(group="y")  # MEMBER_ID_REQUIRED, never used
    assert first.error_code == ErrorCode.member_id_required
    assert "y" in h.shard.classic.groups
    h.tick(10_001)
    assert "y" not in h.shard.classic.groups
    assert [g.group_id for g in h.shard.list_groups()] == []


def test_an_assignment_past_message_max_bytes_is_refused_and_the_group_rebalances() -> None:
    """As Kafka, whose append of the GroupMetadata record fails (RECORD_LIST_TOO_LARGE) and
    answers every member's SyncGroup UNKNOWN_SERVER_ERROR: nothing is written."""
    h = Harness(replace(SETTINGS, max_record_bytes=2_000))
    w1, m1 = h.join_new()
    w2, m2 = h.join_new()
    h.join(member=m1)
    leader = h.delivered[w1].leader
    follower = m2 if leader == m1 else m1
    fw, _ = h.sync(follower, 2)
    logged = len(h.log)
    _, res = h.sync(leader, 2, ((leader, b"x" * 1_500), (follower, b"y" * 1_500)))
    assert res.error_code == ErrorCode.unknown_server_error
    assert "message.max.bytes (2000)" in res.detail and "group g generation 2" in res.detail
    assert h.delivered[fw].error_code == ErrorCode.unknown_server_error
    assert len(h.log) == logged  # no GroupMetadata record
    assert h.group().state is cl.ClassicState.PREPARING
    assert all(m.assignment == b"" for m in h.group().members.values())
    # Both rejoin and a smaller assignment goes through.
    w1, _ = h.join(member=leader)
    w2, _ = h.join(member=follower)
    gen = h.delivered[w1].generation_id
    assert gen == 3
    fw, _ = h.sync(follower, gen)
    _, res = h.sync(leader, gen, ((leader, b"x"), (follower, b"y")))
    assert res.error_code == ErrorCode.none and h.delivered[fw].assignment == b"y"


def test_commit_validation_order_as_kafka() -> None:
    """ClassicGroup.validateOffsetCommit: generation -1 commits to an Empty (or unknown) group
    whatever the member id; otherwise the member, then its generation, then
    REBALANCE_IN_PROGRESS while the leader's assignment is awaited."""
    h = Harness()
    assert h.commit("anyone", -1, {("t", 0): 1}, group="solo").error_code == ErrorCode.none
    assert h.commit("anyone", -1, {("t", 0): 2}, group="solo").error_code == ErrorCode.none
    assert h.commit("x", 3, {("t", 0): 2}, group="nope").error_code == \
        ErrorCode.group_id_not_found
    leader, follower, gen = stable_pair(h)
    w, _ = h.join(member=leader, protocols=(("range", b"changed"),))  # PreparingRebalance
    assert h.commit(follower, gen, {("t", 0): 3}).error_code == ErrorCode.none
    h.join(member=follower)  # both rejoined: CompletingRebalance, generation gen + 1
    assert h.group().state is cl.ClassicState.COMPLETING
    assert h.commit(follower, gen, {("t", 0): 4}).error_code == ErrorCode.illegal_generation
    assert h.commit("x", gen + 1, {("t", 0): 4}).error_code == ErrorCode.unknown_member_id
    assert h.commit("", -1, {("t", 0): 4}).error_code == ErrorCode.unknown_member_id
    assert h.commit(follower, gen + 1, {("t", 0): 4}).error_code == \
        ErrorCode.rebalance_in_progress
