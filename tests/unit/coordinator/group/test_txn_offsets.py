"""Transactional offsets (TxnOffsetCommit) in the group coordinator: pending per producer until
the end-transaction marker, on the coordinator runtime over a real partition log.

The runtime appends a TxnOffsetCommit's records as a transactional batch and the marker as a
control batch; a reload replays both. The property test runs random interleavings of
transactional commits, plain commits, markers, OffsetDeletes and failed appends against a small
model of Kafka's rules, then checks that the live shard, and a shard reloaded from the (pruned)
log, both hold exactly the model's committed and pending offsets.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from coordinator.group import offsets as off
from coordinator.group.classic import records as cr
from coordinator.group.serde import GroupRecordSerde
from coordinator.group.shard import GroupCoordinatorShard
from coordinator.runtime.loop import CoordinatorFailure, CoordinatorRuntime
from coordinator.runtime.records import CONTROL_COMMIT, decode_log_batches
from protocol.record_batch import validate_batches
from storage.segment_log import LogConfig, PartitionLog

from tests.unit.coordinator.runtime.support import LogProxy
from tests.unit.coordinator.group.test_consumer_groups import Ctx as ConsumerCtx
from tests.unit.coordinator.group.test_classic import Harness, stable_pair

T0 = 1_700_000_000_000
G = "g"
TOPIC = "t"


def parts(*pairs: tuple[int, int], metadata: str = "") -> tuple[off.OffsetCommitPartition, ...]:
    return tuple(off.OffsetCommitPartition(TOPIC, p, o, -1, metadata) for p, o in pairs)


class Ctx:
    def __init__(self, rt: CoordinatorRuntime[GroupCoordinatorShard], log: LogProxy) -> None:
        self.rt = rt
        self.log = log

    @property
    def shard(self) -> GroupCoordinatorShard:
        shard = self.rt.shard(0)
        assert shard is not None
        return shard

    async def txn(self, pid: int, *pairs: tuple[int, int], epoch: int = 0, group: str = G,
                  member: str = "", generation: int = -1) -> Any:
        out = await self.rt.write_transactional(0, pid, epoch, lambda s, now: s.txn_commit_offsets(
            group, pid, epoch, member, generation, None, parts(*pairs), now))
        return out if isinstance(out, CoordinatorFailure) else out.partitions

    async def plain(self, *pairs: tuple[int, int], group: str = G) -> Any:
        out = await self.rt.write(0, lambda s, now: s.commit_offsets(
            group, "", -1, None, parts(*pairs), now))
        return out if isinstance(out, CoordinatorFailure) else out.partitions

    async def end(self, pid: int, commit: bool, epoch: int = 0) -> Any:
        return await self.rt.complete_transaction(0, pid, epoch, 7, commit)

    async def delete(self, *partitions: int, group: str = G) -> Any:
        return await self.rt.write(0, lambda s, _now: s.delete_offsets(
            group, tuple((TOPIC, p) for p in partitions)))

    def fetch(self, *partitions: int, stable: bool = False,
              shard: GroupCoordinatorShard | None = None) -> dict[int, tuple[int, ErrorCode]]:
        res = (shard or self.shard).fetch_offsets(G, [(TOPIC, list(partitions))],
                                                  require_stable=stable)
        assert res.error_code == ErrorCode.none
        return {p.partition: (p.offset, p.error_code) for p in res.partitions}


@asynccontextmanager
async def runtime(directory: Path, segment_bytes: int = 1 << 20) -> AsyncIterator[Ctx]:
    inner = PartitionLog.open(directory, LogConfig(segment_bytes=segment_bytes), T0)
    lg = LogProxy(inner)
    rt: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
        lambda _p: GroupCoordinatorShard(loading=True), GroupRecordSerde(),
        clock_ms=lambda: T0, name="test-txn", prune_interval_ms=0)
    try:
        loaded = await rt.load(0, lg)
        assert not isinstance(loaded, CoordinatorFailure), loaded
        yield Ctx(rt, lg)
    finally:
        await rt.close()
        inner.close()


NONE = ErrorCode.none
UNSTABLE = ErrorCode.unstable_offset_commit


async def test_offsets_pend_until_the_commit_marker(tmp_path: Path) -> None:
    async with runtime(tmp_path / "log") as ctx:
        assert await ctx.txn(1, (0, 10), (1, 11)) == ((TOPIC, 0, NONE), (TOPIC, 1, NONE))
        assert ctx.fetch(0, 1, 2) == {0: (-1, NONE), 1: (-1, NONE), 2: (-1, NONE)}
        assert ctx.fetch(0, 1, 2, stable=True) == {0: (-1, UNSTABLE), 1: (-1, UNSTABLE),
                                                   2: (-1, NONE)}
        assert ctx.shard.classic.has(G)  # a simple group exists while its offsets pend
        assert await ctx.end(1, commit=True) == NONE
        assert ctx.fetch(0, 1, stable=True) == {0: (10, NONE), 1: (11, NONE)}
        # The log: one transactional batch of producer 1, then its COMMIT control batch.
        data = ctx.log.read(0, 1 << 20).data
        validate_batches(bytearray(data), 1 << 20)
        batches = list(decode_log_batches(data))
        assert [(b.producer_id, b.transactional, b.control, len(b.records)) for b in batches] \
            == [(1, True, False, 2), (1, True, True, 1)]
        key = batches[1].records[0][1]
        assert int.from_bytes(key[2:4], "big") == CONTROL_COMMIT
    async with runtime(tmp_path / "log") as again:  # the reload replays both
        assert again.fetch(0, 1, stable=True) == {0: (10, NONE), 1: (11, NONE)}


async def test_offsets_stay_unstable_until_the_marker_is_durable(tmp_path: Path) -> None:
    """Between the marker's replay and its fsync the committed view still has the old offset,
    so a RequireStable fetch must still say unstable (not answer the old offset as stable)."""
    async with runtime(tmp_path / "log") as ctx:
        await ctx.plain((0, 5))
        await ctx.txn(1, (0, 10))
        ctx.log.hold_flushes()
        ending = asyncio.get_running_loop().create_task(ctx.end(1, commit=True))
        assert ctx.log.flush_started is not None
        await asyncio.wait_for(ctx.log.flush_started.wait(), 5)
        assert not ctx.shard.classic.pending.txns  # replayed, not yet durable
        assert ctx.fetch(0, stable=True) == {0: (-1, UNSTABLE)}
        assert ctx.fetch(0) == {0: (5, NONE)}
        ctx.log.release_flushes()
        assert await ending == NONE
        assert ctx.fetch(0, stable=True) == {0: (10, NONE)}


async def test_one_drain_appends_plain_transactional_and_control_batches_in_order(
        tmp_path: Path) -> None:
    """Writes queued together go out in one append: consecutive plain records share a batch,
    a transactional write and a marker get batches of their own, offsets stay dense."""
    async with runtime(tmp_path / "log") as ctx:
        await ctx.txn(3, (2, 1))  # something pending for the marker below
        start = ctx.log.log_end_offset
        appends = ctx.log.appends
        results = await asyncio.gather(
            ctx.plain((0, 5)), ctx.plain((1, 6)), ctx.txn(4, (0, 7), (1, 8)), ctx.plain((2, 9)),
            ctx.end(3, commit=False), ctx.plain((0, 10)))
        assert ctx.log.appends == appends + 1
        assert results[4] == NONE
        data = ctx.log.read(start, 1 << 20).data
        layout = [(b.producer_id, b.transactional, b.control, [r[0] for r in b.records])
                  for b in decode_log_batches(data)]
        s = start
        assert layout == [(-1, False, False, [s, s + 1]), (4, True, False, [s + 2, s + 3]),
                          (-1, False, False, [s + 4]), (3, True, True, [s + 5]),
                          (-1, False, False, [s + 6])]
        # Producer 4's offsets pend; producer 3's (partition 2) were aborted.
        expected = ({0: (-1, UNSTABLE), 1: (-1, UNSTABLE), 2: (9, NONE)},
                    {0: (10, NONE), 1: (6, NONE), 2: (9, NONE)})
        assert (ctx.fetch(0, 1, 2, stable=True), ctx.fetch(0, 1, 2)) == expected
    async with runtime(tmp_path / "log") as again:
        assert (again.fetch(0, 1, 2, stable=True), again.fetch(0, 1, 2)) == expected


async def test_abort_drops_the_pending_offsets(tmp_path: Path) -> None:
    async with runtime(tmp_path / "log") as ctx:
        await ctx.plain((0, 5))
        await ctx.txn(1, (0, 10), (1, 11))
        assert await ctx.end(1, commit=False) == NONE
        assert ctx.fetch(0, 1, stable=True) == {0: (5, NONE), 1: (-1, NONE)}
        assert not ctx.shard.classic.pending.txns
        assert await ctx.end(1, commit=True) == NONE  # nothing pending: still NONE


async def test_the_later_record_wins_between_plain_and_transactional_commits(
        tmp_path: Path) -> None:
    async with runtime(tmp_path / "log") as ctx:
        await ctx.txn(1, (0, 10))
        await ctx.plain((0, 20))  # appended after the pending one: it wins at the commit
        await ctx.plain((1, 21))
        await ctx.txn(2, (1, 12))  # appended after the plain one: it wins
        await ctx.end(1, commit=True)
        await ctx.end(2, commit=True)
        assert ctx.fetch(0, 1) == {0: (20, NONE), 1: (12, NONE)}


async def test_deleting_offsets_drops_pending_ones_and_a_pending_group_is_not_empty(
        tmp_path: Path) -> None:
    async with runtime(tmp_path / "log") as ctx:
        await ctx.txn(1, (0, 10), (1, 11))
        deleted = await ctx.rt.write(0, lambda s, _now: s.delete_group(G))
        assert deleted.error_code == ErrorCode.non_empty_group
        assert await ctx.delete(0) == (NONE, ((TOPIC, 0, NONE),))
        await ctx.end(1, commit=True)
        assert ctx.fetch(0, 1) == {0: (-1, NONE), 1: (11, NONE)}
        deleted = await ctx.rt.write(0, lambda s, _now: s.delete_group(G))
        assert deleted.error_code == NONE
        assert ctx.fetch(0, 1) == {0: (-1, NONE), 1: (-1, NONE)}
        assert not ctx.shard.classic.has(G)


async def test_an_older_producer_epoch_is_fenced(tmp_path: Path) -> None:
    async with runtime(tmp_path / "log") as ctx:
        await ctx.txn(1, (0, 10), epoch=3)
        fenced = ErrorCode.invalid_producer_epoch
        assert await ctx.txn(1, (1, 11), epoch=2) == ((TOPIC, 1, fenced),)
        assert await ctx.end(1, commit=True, epoch=2) == fenced
        assert ctx.fetch(0, stable=True) == {0: (-1, UNSTABLE)}
        assert await ctx.txn(1, (1, 11), epoch=4) == ((TOPIC, 1, NONE),)  # a newer epoch
        assert await ctx.end(1, commit=True, epoch=4) == NONE
        assert ctx.fetch(0, 1) == {0: (10, NONE), 1: (11, NONE)}


async def test_a_failed_append_reverts_pending_offsets_and_markers(tmp_path: Path) -> None:
    async with runtime(tmp_path / "log") as ctx:
        await ctx.txn(1, (0, 10))
        ctx.log.fail_append = OSError("disk")
        failed = await ctx.txn(1, (1, 11))
        assert isinstance(failed, CoordinatorFailure)
        assert (await ctx.end(1, commit=True)).error == ErrorCode.coordinator_not_available
        ctx.log.fail_append = None
        assert set(ctx.shard.classic.pending.keys(G)) == {cr.OffsetCommitKey(G, TOPIC, 0)}
        assert ctx.fetch(0) == {0: (-1, NONE)}
        assert await ctx.end(1, commit=True) == NONE
        assert ctx.fetch(0, 1) == {0: (10, NONE), 1: (-1, NONE)}


async def test_metadata_too_large_and_empty_group_id(tmp_path: Path) -> None:
    async with runtime(tmp_path / "log") as ctx:
        big = "x" * 5000  # offset.metadata.max.bytes is 4096 by default
        out = await ctx.rt.write_transactional(0, 1, 0, lambda s, now: s.txn_commit_offsets(
            G, 1, 0, "", -1, None, parts((0, 1), metadata=big) + parts((1, 2)), now))
        assert out.partitions == ((TOPIC, 0, ErrorCode.offset_metadata_too_large),
                                  (TOPIC, 1, NONE))
        assert await ctx.txn(1, (0, 1), group="") == ((TOPIC, 0, ErrorCode.invalid_group_id),)


# ------------------------------------------------------------------ member checks (sans IO)


def test_classic_group_member_checks() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    p = parts((0, 5))

    def code(member: str, generation: int, instance: str | None = None, group: str = G) -> Any:
        res = h.shard.txn_commit_offsets(group, 9, 0, member, generation, instance, p, h.now)
        return res.response.partitions[0][2]

    assert code(leader, gen) == NONE
    assert code("stranger", gen) == ErrorCode.unknown_member_id
    assert code(leader, gen + 1) == ErrorCode.illegal_generation
    assert code(leader, -1) == ErrorCode.illegal_generation  # a member id names the member
    assert code("", -1) == NONE  # v0-v2: no member fields, allowed whatever the state
    assert code("", 3, group="unknown") == ErrorCode.illegal_generation
    assert code("", -1, group="unknown") == NONE  # makes a simple group
    h.join(member=leader)  # a rebalance starts: unlike OffsetCommit, not refused
    assert code(leader, gen) == NONE


def test_static_member_is_fenced_by_instance_id() -> None:
    h = Harness()
    w, first = h.join(instance="i1")
    res = h.answer(w, first)
    assert res.error_code == NONE
    _, synced = h.sync(res.member_id, res.generation_id, ((res.member_id, b""),), instance="i1")
    assert synced.error_code == NONE
    out = h.shard.txn_commit_offsets(G, 9, 0, "old-id", res.generation_id, "i1", parts((0, 1)),
                                     h.now)
    assert out.response.partitions[0][2] == ErrorCode.fenced_instance_id


def test_consumer_group_member_epoch_checks() -> None:
    ctx = ConsumerCtx()
    ctx.hb("m1", 0)
    p = (off.OffsetCommitPartition("a", 0, 5, -1, ""),)

    def code(member: str, epoch: int) -> Any:
        res = ctx.shard.txn_commit_offsets("grp", 9, 0, member, epoch, None, p, 0)
        return res.response.partitions[0][2]

    assert code("m1", 1) == NONE
    assert code("m1", 7) == ErrorCode.illegal_generation  # stale member epoch
    assert code("zz", 1) == ErrorCode.unknown_member_id
    assert code("", -1) == ErrorCode.unknown_member_id  # the group has members
    ctx.hb("m1", -1)
    assert code("", -1) == NONE  # empty now: a simple commit


def test_share_group_id_is_not_found() -> None:
    from coordinator.group.share.heartbeat import HeartbeatRequest
    from coordinator.group.topics_image import TopicsImage

    shard = GroupCoordinatorShard(require_share_state_initialization=False)
    res = shard.share_group_heartbeat(HeartbeatRequest("sg", "m", 0, None, ("a",)),
                                      TopicsImage.of({}), 0)
    for rec in res.records:
        shard.replay_record(rec)
    out = shard.txn_commit_offsets("sg", 1, 0, "", -1, None, parts((0, 1)), 0)
    assert out.response.partitions[0][2] == ErrorCode.group_id_not_found


# ------------------------------------------------------------------ replay property

PIDS = (1, 2)
PARTS = (0, 1)
op_st = st.one_of(
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.sampled_from(PARTS)),
    st.tuples(st.just("plain"), st.sampled_from(PARTS)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from(PARTS)),
    st.tuples(st.just("fail"), st.sampled_from(("txn", "end", "plain")), st.sampled_from(PIDS),
              st.sampled_from(PARTS)),
)


class Model:
    """Kafka's rules in a few lines: committed[p] = (offset, order), pending[pid][p] = ..."""

    def __init__(self) -> None:
        self.committed: dict[int, tuple[int, int]] = {}
        self.pending: dict[int, dict[int, tuple[int, int]]] = {}
        self.order = 0

    def txn(self, pid: int, p: int, value: int) -> None:
        self.order += 1
        self.pending.setdefault(pid, {})[p] = (value, self.order)

    def plain(self, p: int, value: int) -> None:
        self.order += 1
        self.committed[p] = (value, self.order)

    def end(self, pid: int, commit: bool) -> None:
        self.order += 1
        for p, (value, order) in sorted(self.pending.pop(pid, {}).items()):
            if commit and (p not in self.committed or order > self.committed[p][1]):
                self.committed[p] = (value, order)

    def delete(self, p: int) -> None:
        self.committed.pop(p, None)
        for pid in list(self.pending):
            self.pending[pid].pop(p, None)
            if not self.pending[pid]:
                del self.pending[pid]

    def expected(self) -> tuple[dict[int, int], set[int]]:
        return ({p: v for p, (v, _) in self.committed.items()},
                {p for offsets in self.pending.values() for p in offsets})


def observed(ctx: Ctx, shard: GroupCoordinatorShard) -> tuple[dict[int, int], set[int]]:
    got = ctx.fetch(*PARTS, shard=shard)
    stable = ctx.fetch(*PARTS, stable=True, shard=shard)
    return ({p: o for p, (o, _) in got.items() if o >= 0},
            {p for p, (_, e) in stable.items() if e == UNSTABLE})


async def run_ops(ops: list[tuple[Any, ...]], directory: Path) -> None:
    model = Model()
    value = 100
    async with runtime(directory, segment_bytes=600) as ctx:
        for op in ops:
            value += 1
            if op[0] == "txn":
                assert await ctx.txn(op[1], (op[2], value)) == ((TOPIC, op[2], NONE),)
                model.txn(op[1], op[2], value)
            elif op[0] == "plain":
                assert await ctx.plain((op[1], value)) == ((TOPIC, op[1], NONE),)
                model.plain(op[1], value)
            elif op[0] == "end":
                assert await ctx.end(op[1], op[2]) == NONE
                model.end(op[1], op[2])
            elif op[0] == "delete":
                code, _ = await ctx.delete(op[1])
                assert code in (NONE, ErrorCode.group_id_not_found)
                if code == NONE:
                    model.delete(op[1])
                    model.order += 1
            else:  # the same op, but its append fails: nothing changes
                ctx.log.fail_append = OSError("injected")
                kind = op[1]
                out = await (ctx.txn(op[2], (op[3], value)) if kind == "txn" else
                             ctx.end(op[2], True) if kind == "end" else ctx.plain((op[3], value)))
                ctx.log.fail_append = None
                assert isinstance(out, CoordinatorFailure)
            assert observed(ctx, ctx.shard) == model.expected(), op
        await ctx.rt.prune(0)  # pruning keeps every record a reload needs
    async with runtime(directory, segment_bytes=600) as again:
        assert observed(again, again.shard) == model.expected()
        pending = {pid: set(t.offsets) for pid, t in again.shard.classic.pending.txns.items()}
        assert pending == {pid: {cr.OffsetCommitKey(G, TOPIC, p) for p in offsets}
                           for pid, offsets in model.pending.items()}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op_st, max_size=25))
def test_replaying_the_log_gives_the_live_offsets(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(run_ops(ops, Path(d) / "log"))


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_replay_without_runtime_matches(commit: bool) -> None:
    """The shard's replay hooks alone (as the loader calls them) give the live answer."""
    shard = GroupCoordinatorShard()
    key = cr.OffsetCommitKey(G, TOPIC, 0)
    shard.replay_transactional(0, 5, 1, key, cr.OffsetCommitValue(42, -1, "", T0))
    shard.replay_end_transaction(1, 5, 1, commit)
    shard.commit(2)
    res = shard.fetch_offsets(G, [(TOPIC, [0])], require_stable=True)
    assert res.partitions[0].offset == (42 if commit else -1)
    assert shard.end_offset == 2


# ------------------------------------------------------------------ the service (contract)


async def test_service_txn_commit_and_complete_transaction(tmp_path: Path) -> None:
    """``GroupCoordinatorService.txn_commit_offsets`` / ``complete_transaction`` as the transaction
    coordinator calls them, over four real partitions, surviving a restart."""
    from tests.unit.coordinator.group.test_service import CountingPersister, service

    persister = CountingPersister()
    p0 = parts((0, 40))
    async with service(tmp_path, persister) as (svc, _logs):
        partition = svc.partition_for(G)
        res = await svc.txn_commit_offsets("tx", G, 77, 2, "", -1, None, p0)
        assert res.partitions == ((TOPIC, 0, NONE),)
        stable = svc.fetch_offsets(G, [(TOPIC, [0])], require_stable=True)
        assert stable.partitions[0].error_code == UNSTABLE
        # Another partition of __consumer_offsets has nothing pending: NONE, nothing changes.
        other = (partition + 1) % svc.num_partitions
        assert await svc.complete_transaction(other, 77, 2, 0, True) == NONE
        assert await svc.complete_transaction(svc.num_partitions, 77, 2, 0, True) == \
            ErrorCode.not_coordinator
        assert await svc.complete_transaction(partition, 77, 1, 0, True) == \
            ErrorCode.invalid_producer_epoch
        await svc.txn_commit_offsets("tx", G, 78, 0, "", -1, None, parts((1, 50)))
    async with service(tmp_path, persister) as (svc, _logs):  # pending survives a restart
        assert svc.fetch_offsets(G, [(TOPIC, [0, 1])], require_stable=True).partitions[0] \
            .error_code == UNSTABLE
        assert await svc.complete_transaction(partition, 77, 2, 0, True) == NONE
        assert await svc.complete_transaction(partition, 78, 0, 0, False) == NONE
        got = svc.fetch_offsets(G, [(TOPIC, [0, 1])], require_stable=True)
        assert [(p.offset, p.error_code) for p in got.partitions] == [(40, NONE), (-1, NONE)]
