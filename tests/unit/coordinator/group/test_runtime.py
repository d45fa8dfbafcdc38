"""GroupCoordinatorShard on the coordinator runtime over real partition logs: ops append ShareGroup*
records, a reload from the log gives an equal shard, failed appends and fsyncs revert, pruning
keeps what a reload needs, and timers re-armed on load expire members."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.clock import SystemClock
from coordinator.group.serde import GroupRecordSerde, decode_record
from coordinator.group.shard import GroupCoordinatorShard, initializations
from coordinator.group.share import records as r
from coordinator.group.share.heartbeat import HeartbeatRequest, ShareGroupSettings
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.loop import (
    CoordinatorFailure,
    CoordinatorRuntime,
    PartitionStatus,
)
from coordinator.runtime.records import decode_batches
from coordinator.runtime.result import CoordinatorResult
from storage.segment_log import LogConfig, PartitionLog

from tests.unit.coordinator.runtime.support import LogProxy

A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)
TOPICS = TopicsImage.of({"a": (A, 3), "b": (B, 2)})
GROWN = TopicsImage.of({"a": (A, 5), "b": (B, 2)})  # topic "a" got two more partitions
T0 = 1_700_000_000_000
G = "grp"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


class Ctx:
    """A runtime of group shards over one real log; ``op`` runs a shard op and completes the
    share-state initialisations it asks for (as the service does with a persister)."""

    def __init__(self, rt: CoordinatorRuntime[GroupCoordinatorShard], log: Any,
                 removed: list[tuple[str, str]]) -> None:
        self.rt = rt
        self.log = log
        self.removed = removed
        self.topics = TOPICS

    @property
    def shard(self) -> GroupCoordinatorShard:
        shard = self.rt.shard(0)
        assert shard is not None
        return shard

    async def op(self, fn: Callable[[GroupCoordinatorShard, int], CoordinatorResult[Any, Any]],
                 *, auto_init: bool = True) -> Any:
        inits: list[Any] = []

        def run(shard: GroupCoordinatorShard, now: int) -> CoordinatorResult[Any, Any]:
            result = fn(shard, now)
            inits.extend(initializations(result))
            return result

        out = await self.rt.write(0, run)
        if auto_init and not isinstance(out, CoordinatorFailure):
            for init in inits:
                await self.op(lambda s, now, i=init: s.mark_initialized(
                    i.group_id, i.partitions, self.topics, now))
        return out

    async def hb(self, member: str, epoch: int, topics: tuple[str, ...] | None = None,
                 group: str = G) -> Any:
        req = HeartbeatRequest(group, member, epoch, None, topics, "cid", "/127.0.0.1")
        return await self.op(lambda s, now: s.share_group_heartbeat(req, self.topics, now))

    async def join(self, member: str, topics: tuple[str, ...] = ("a",), group: str = G) -> Any:
        first = await self.hb(member, 0, topics, group)
        assert first.error_code == ErrorCode.none, first
        return await self.hb(member, first.member_epoch, group=group)

    def epoch(self, member: str, group: str = G) -> int:
        return self.shard.groups[group].members[member].member_epoch

    def records(self) -> list[r.Record]:
        data = self.log.read(self.log.log_start_offset, 1 << 24).data
        return [decode_record(k, v) for _, k, v in decode_batches(data)]


@asynccontextmanager
async def group_runtime(
    directory: Path,
    *,
    clock: Callable[[], int] | None = None,
    settings: ShareGroupSettings | None = None,
    segment_bytes: int = 1 << 20,
    proxy: bool = False,
    hold_reads: bool = False,
) -> AsyncIterator[Ctx]:
    """A runtime with one partition over the log in ``directory`` (reopened if it exists)."""
    inner = PartitionLog.open(directory, LogConfig(segment_bytes=segment_bytes), T0)
    lg: Any = LogProxy(inner) if proxy or hold_reads else inner
    if hold_reads:
        import threading

        lg.read_gate = threading.Event()
    removed: list[tuple[str, str]] = []

    def factory(_p: int) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(group_config=lambda _g: settings or ShareGroupSettings(),
                                     loading=True, on_member_removed=lambda g, m: removed.append((g, m)))

    rt: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
        factory, GroupRecordSerde(), clock_ms=clock or Clock(), name="test-groups")
    ctx = Ctx(rt, lg, removed)
    try:
        if hold_reads:
            ctx.load_task = asyncio.get_running_loop().create_task(rt.load(0, lg))  # type: ignore[attr-defined]
        else:
            await rt.load(0, lg)
        yield ctx
    finally:
        if hold_reads:
            lg.read_gate.set()
        await rt.close()
        inner.close()


async def build_scenario(ctx: Ctx) -> None:
    """Members join and leave two groups, subscriptions and topics change."""
    await ctx.join("m1", ("a",))
    await ctx.join("m2", ("a", "b"))
    await ctx.hb("m1", ctx.epoch("m1"), ("a", "b"))
    await ctx.join("o1", ("b",), group="other")
    await ctx.join("o2", ("b",), group="other")
    await ctx.hb("o2", -1, group="other")
    ctx.topics = GROWN
    await ctx.op(lambda s, now: s.on_topics_changed(ctx.topics, now))
    for m in ("m1", "m2"):
        await ctx.hb(m, ctx.epoch(m))
    await ctx.join("m3", ("b",))
    for m in ("m1", "m2", "m3"):  # everyone catches up with the latest target
        await ctx.hb(m, ctx.epoch(m))


async def test_ops_append_records_and_a_reload_gives_an_equal_shard(tmp_path: Path) -> None:
    async with group_runtime(tmp_path / "log") as ctx:
        await build_scenario(ctx)
        live = ctx.shard.groups
        committed = ctx.shard.committed_groups
        assert committed == live  # every answer was released after commit
        records = ctx.records()
        assert ctx.log.log_end_offset == len(records) == ctx.shard.end_offset
        assert {rec.key.RECORD_TYPE for rec in records} == {10, 11, 12, 13, 14, 15}
    g = live[G]
    assert set(g.members) == {"m1", "m2", "m3"} and set(live["other"].members) == {"o1"}
    assert g.initialized_partitions() == {A: frozenset(range(5)), B: frozenset(range(2))}
    assert not g.initializing
    async with group_runtime(tmp_path / "log") as again:
        again.topics = GROWN
        assert again.shard.loaded
        assert again.shard.groups == live
        assert again.shard.committed_groups == live
        for mid, m in live[G].members.items():  # epochs and assignments survive
            reloaded = again.shard.groups[G].members[mid]
            assert (reloaded.member_epoch, reloaded.previous_member_epoch) == (
                m.member_epoch, m.previous_member_epoch)
            assert reloaded.assigned_partitions == m.assigned_partitions
        assert again.shard.groups[G].target_assignment == g.target_assignment
        assert (again.shard.groups[G].group_epoch, again.shard.groups[G].assignment_epoch) == (
            g.group_epoch, g.assignment_epoch)
        # A member carries on at its epoch after the reload, without rejoining.
        resp = await again.hb("m1", live[G].members["m1"].member_epoch)
        assert resp.error_code == ErrorCode.none
        assert resp.member_epoch == live[G].members["m1"].member_epoch
        # Initialized partitions stay initialized: nothing asks for initialisation again.
        asked: list[Any] = []
        await again.op(lambda s, now: _record_inits(
            s.share_group_heartbeat(HeartbeatRequest(G, "m2", again.epoch("m2")), GROWN, now),
            asked))
        assert asked == []


def _record_inits(result: CoordinatorResult[Any, Any], out: list[Any]) -> CoordinatorResult[Any, Any]:
    out.extend(initializations(result))
    return result


async def test_initializing_state_is_durable_and_retried_at_once_after_a_reload(
        tmp_path: Path) -> None:
    async with group_runtime(tmp_path / "log") as ctx:
        resp = await ctx.op(lambda s, now: s.share_group_heartbeat(
            HeartbeatRequest(G, "m1", 0, None, ("a",)), TOPICS, now), auto_init=False)
        assert resp.error_code == ErrorCode.none and resp.assignment == {}
        assert ctx.shard.groups[G].initializing_partitions() == {A: frozenset({0, 1, 2})}
        # The "process" dies before the persister answers.
    clock = Clock()
    async with group_runtime(tmp_path / "log", clock=clock) as again:
        shard = again.shard
        assert shard.groups[G].initializing_partitions() == {A: frozenset({0, 1, 2})}
        assert shard.next_deadline() == T0  # the init-retry timer is due at once
        for _ in range(200):  # the runtime runs it: Initializing is cleared (durably)
            if not again.shard.committed_group(G).initializing:  # type: ignore[union-attr]
                break
            await asyncio.sleep(0.005)
        assert again.shard.committed_group(G).initializing == {}  # type: ignore[union-attr]
        # The next heartbeat plans the initialisation again; once answered, m1 gets them.
        resp = await again.hb("m1", again.epoch("m1"))
        resp = await again.hb("m1", again.epoch("m1"))
        assert resp.assignment == {A: [0, 1, 2]}


async def test_a_failed_append_reverts_the_shard(tmp_path: Path) -> None:
    async with group_runtime(tmp_path / "log", proxy=True) as ctx:
        await ctx.join("m1")
        before, end = ctx.shard.groups, ctx.log.log_end_offset
        ctx.log.fail_append = OSError("disk full")
        out = await ctx.hb("m2", 0, ("a", "b"))
        assert isinstance(out, CoordinatorFailure)
        assert out.error == ErrorCode.coordinator_not_available
        assert ctx.shard.groups == before and ctx.shard.committed_groups == before
        assert ctx.log.log_end_offset == end and ctx.shard.end_offset == end
        ctx.log.fail_append = None
        assert (await ctx.join("m2", ("a", "b"))).error_code == ErrorCode.none
        live = ctx.shard.groups
    async with group_runtime(tmp_path / "log") as again:
        assert again.shard.groups == live


async def test_a_failed_fsync_commits_nothing_more_and_stops_the_partition(
        tmp_path: Path) -> None:
    # Issue 12 section 6: after a failed fsync the partition used to reload from its log, which
    # counted the unsynced records as committed, and to fsync again on the next write.
    async with group_runtime(tmp_path / "log", proxy=True) as ctx:
        await ctx.join("m1")
        committed = ctx.shard.groups
        ctx.log.fail_flush = OSError("fsync failed")
        out = await ctx.hb("m2", 0, ("a",))
        assert isinstance(out, CoordinatorFailure)
        assert out.error == ErrorCode.kafka_storage_error
        assert ctx.rt.status(0) is PartitionStatus.FAILED
        assert "m2" not in ctx.shard.groups[G].members and ctx.shard.groups == committed
        later = await ctx.hb("m1", ctx.epoch("m1"))
        assert isinstance(later, CoordinatorFailure) and later.error == ErrorCode.not_coordinator
    # A restart recovers whatever the disk holds (here the unsynced records did reach it).
    async with group_runtime(tmp_path / "log") as again:
        assert "m1" in again.shard.groups[G].members


async def test_a_loading_partition_answers_load_in_progress(tmp_path: Path) -> None:
    async with group_runtime(tmp_path / "log") as ctx:
        await ctx.join("m1")
        live = ctx.shard.groups
    async with group_runtime(tmp_path / "log", hold_reads=True) as loading:
        await asyncio.sleep(0)
        assert loading.rt.status(0) is PartitionStatus.LOADING
        out = await loading.hb("m1", 1)
        assert isinstance(out, CoordinatorFailure)
        assert out.error == ErrorCode.coordinator_load_in_progress
        loading.log.read_gate.set()
        await loading.load_task  # type: ignore[attr-defined]
        assert loading.shard.groups == live
        assert (await loading.hb("m1", live[G].members["m1"].member_epoch)).error_code == \
            ErrorCode.none


async def test_timers_rearmed_on_load_expire_members(tmp_path: Path) -> None:
    async with group_runtime(tmp_path / "log") as ctx:
        await ctx.join("m1")
        await ctx.join("m2")
    short = ShareGroupSettings(session_timeout_ms=150, heartbeat_interval_ms=50)
    clock = SystemClock().now_ms
    async with group_runtime(tmp_path / "log", clock=clock, settings=short) as again:
        shard = again.shard
        assert sorted(k[2] for k in shard.timer.keys() if k[0] == "session") == ["m1", "m2"]
        keep = again.epoch("m1")
        for _ in range(40):  # m1 keeps heartbeating, m2 is silent: the runtime's timer fences it
            assert (await again.hb("m1", keep)).error_code == ErrorCode.none
            keep = again.epoch("m1")
            if again.removed:
                break
            await asyncio.sleep(0.05)
        assert again.removed == [(G, "m2")]  # reported once the fencing records are durable
        assert set(again.shard.committed_group(G).members) == {"m1"}  # type: ignore[union-attr]
        live = again.shard.groups
    async with group_runtime(tmp_path / "log") as third:
        assert third.shard.groups == live


async def test_expiry_of_silent_members_commits_without_other_writes(tmp_path: Path) -> None:
    """Timer ops have no waiting client: their records still commit (and get reported)."""
    async with group_runtime(tmp_path / "log") as ctx:
        await ctx.join("m1")
        await ctx.join("m2")
    short = ShareGroupSettings(session_timeout_ms=100, heartbeat_interval_ms=50)
    async with group_runtime(tmp_path / "log", clock=SystemClock().now_ms, settings=short) as again:
        for _ in range(100):
            if len(again.removed) == 2:
                break
            await asyncio.sleep(0.02)
        assert sorted(again.removed) == [(G, "m1"), (G, "m2")]
        group = again.shard.committed_group(G)
        assert group is not None and group.members == {} and group.state.value == "Empty"
        assert again.rt.committed_offset(0) == again.log.log_end_offset


async def test_pruning_keeps_what_a_reload_needs(tmp_path: Path) -> None:
    """Every live key's latest record is kept (a key never rewritten pins the log start: there
    is no compaction of old keys yet)."""
    async with group_runtime(tmp_path / "log", segment_bytes=1024) as ctx:
        for i in range(30):  # churn: members come and go, the group epoch climbs
            await ctx.join(f"m{i}", ("a",))
            await ctx.hb(f"m{i}", -1)
        # A later member rewrites every group-level key (b becomes initialized: record 15).
        await ctx.join("stay", ("a", "b"))
        assert ctx.log.segment_count > 1
        start = await ctx.rt.prune(0)
        assert start is not None and start > 0
        assert start == ctx.log.log_start_offset <= ctx.shard.last_redundant_offset()  # type: ignore[operator]
        live = ctx.shard.groups
    async with group_runtime(tmp_path / "log", segment_bytes=1024) as again:
        assert again.log.log_start_offset == start
        assert again.shard.groups == live


async def test_other_consumer_offsets_record_types_are_skipped_on_load(tmp_path: Path) -> None:
    """``__consumer_offsets`` also carries record types the group coordinator does not serve
    (streams groups, type 17); the group serde leaves them to others (decode gives None) and the
    load skips them."""
    from coordinator.runtime.records import encode_batch

    async with group_runtime(tmp_path / "log") as ctx:
        await ctx.join("m1")
        ctx.log.append(encode_batch([(b"\x00\x11\x00\x01g", b"\x00\x03junk")], T0), T0)
        await ctx.join("m2")
        live = ctx.shard.groups
    assert GroupRecordSerde().decode(b"\x00\x11\x00\x01g", b"") is None
    async with group_runtime(tmp_path / "log") as again:
        stats = again.rt.stats(0)
        assert stats is not None and stats.load is not None and stats.load.skipped == 1
        assert again.shard.groups == live
