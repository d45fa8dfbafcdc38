"""coordinator/runtime/loop.py over a real PartitionLog: serial order, respond after commit,
group commit, revert on failure, loading, timers, pruning and shutdown."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from kio.schema.errors import ErrorCode

from coordinator.runtime.loop import CoordinatorFailure, PartitionStatus
from coordinator.runtime.records import decode_batches, encode_batch
from coordinator.runtime.result import CoordinatorResult

from tests.unit.coordinator.runtime.support import (
    T0, KVShard, LogProxy, TimedKVShard, get, kv_runtime, open_log, put,
)


def log_records(lg) -> list[tuple[int, bytes, bytes | None]]:
    out = []
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        chunk = lg.read(offset, 1 << 20)
        out += [r for r in decode_batches(chunk.data) if r[0] >= lg.log_start_offset]
        offset = chunk.next_offset
    return out


async def test_ops_run_serially_in_submission_order(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p0")
    rt = kv_runtime()
    await rt.load(0, lg)
    ran: list[int] = []

    def op(i: int):
        def run(shard: KVShard, now: int) -> CoordinatorResult:
            ran.append(i)
            # Each op sees every earlier op's record, committed or not.
            assert shard.data.get("k") == (str(i - 1) if i else None)
            return CoordinatorResult(records=(("k", str(i)),), response=i)
        return run

    results = await asyncio.gather(*(rt.write(0, op(i)) for i in range(300)))
    assert results == list(range(300)) == ran
    assert [(o, k, v) for o, k, v in log_records(lg)] == [(i, b"k", str(i).encode()) for i in range(300)]
    shard = rt.shard(0)
    assert shard is not None and shard.committed_offset == 300 and shard.data == {"k": "299"}
    await rt.close()
    lg.close()


async def test_response_waits_for_the_fsync(tmp_path: Path) -> None:
    lg = LogProxy(open_log(tmp_path / "p0"))
    rt = kv_runtime()
    await rt.load(0, lg)
    lg.hold_flushes()
    task = asyncio.create_task(rt.write(0, put("a", "1")))
    assert lg.flush_started is not None
    await lg.flush_started.wait()
    shard = rt.shard(0)
    assert shard is not None
    # Appended and replayed, but not durable: no answer yet, and reads see the committed view.
    assert not task.done()
    assert lg.log_end_offset == 1 and shard.data == {"a": "1"}
    assert await rt.read(0, lambda s: s.committed_view()) == {}
    lg.release_flushes()
    assert await task == "ok"
    assert await rt.read(0, lambda s: s.committed_view()) == {"a": "1"}
    assert lg.flushes == 1  # one data sync made the write durable
    await rt.close()
    lg.close()


async def test_an_op_without_records_waits_for_earlier_records(tmp_path: Path) -> None:
    lg = LogProxy(open_log(tmp_path / "p0"))
    rt = kv_runtime()
    await rt.load(0, lg)
    lg.hold_flushes()
    w = asyncio.create_task(rt.write(0, put("a", "1")))
    assert lg.flush_started is not None
    await lg.flush_started.wait()
    r = asyncio.create_task(rt.write(0, get("a")))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not w.done() and not r.done()
    lg.release_flushes()
    assert await asyncio.gather(w, r) == ["ok", "1"]
    # With nothing pending, such an op answers at once.
    assert await rt.write(0, get("a")) == "1"
    await rt.close()
    lg.close()


async def test_group_commit_shares_fsyncs(tmp_path: Path) -> None:
    lg = LogProxy(open_log(tmp_path / "p0"))
    rt = kv_runtime()
    await rt.load(0, lg)
    lg.hold_flushes()
    first = asyncio.create_task(rt.write(0, put("k0", "v")))
    assert lg.flush_started is not None
    await lg.flush_started.wait()
    # 199 writes arrive while the first fsync is in flight: they share the next one.
    rest = [asyncio.create_task(rt.write(0, put(f"k{i}", "v"))) for i in range(1, 200)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert lg.log_end_offset == 200
    lg.release_flushes()
    assert await asyncio.gather(first, *rest) == ["ok"] * 200
    stats = rt.stats(0)
    assert stats is not None
    assert lg.flushes == stats.flushes == 2
    assert stats.writes == stats.flushed_writes == 200 and stats.max_writes_per_flush == 199
    assert stats.appends <= 3  # one drain for the first, one or two for the rest
    await rt.close()
    lg.close()


async def test_many_concurrent_writers_use_few_fsyncs(tmp_path: Path) -> None:
    lg = LogProxy(open_log(tmp_path / "p0"))
    rt = kv_runtime()
    await rt.load(0, lg)

    async def writer(w: int) -> None:
        for i in range(20):
            assert await rt.write(0, put(f"w{w}", str(i))) == "ok"

    await asyncio.gather(*(writer(w) for w in range(100)))
    stats = rt.stats(0)
    assert stats is not None and stats.writes == 2000
    assert lg.flushes < 2000 / 10, f"{lg.flushes} fsyncs for 2000 writes"
    await rt.close()
    lg.close()


async def test_failed_append_reverts_and_fails_only_that_drain(tmp_path: Path) -> None:
    lg = LogProxy(open_log(tmp_path / "p0"))
    rt = kv_runtime()
    await rt.load(0, lg)
    assert await rt.write(0, put("a", "1")) == "ok"
    lg.fail_append = OSError("disk full")
    out = await asyncio.gather(rt.write(0, put("a", "2")), rt.write(0, put("b", "1")))
    assert all(isinstance(o, CoordinatorFailure) and o.error == ErrorCode.coordinator_not_available
               for o in out)
    shard = rt.shard(0)
    assert shard is not None and shard.data == {"a": "1"} and shard.end == 1
    lg.fail_append = None
    assert await rt.write(0, put("c", "1")) == "ok"
    assert [r[0] for r in log_records(lg)] == [0, 1]  # offsets still line up with the log
    assert shard.data == {"a": "1", "c": "1"} and shard.where["c"] == 1
    await rt.close()
    lg.close()


async def test_failed_fsync_commits_nothing_more_and_is_never_retried(tmp_path: Path) -> None:
    # Issue 12 section 6: the runtime used to reload the partition from its log after a failed
    # fsync, counting the failed record as committed, and to fsync again on the next write (a
    # second fsync may report success for pages the kernel dropped).
    lg = LogProxy(open_log(tmp_path / "p0"))
    rt = kv_runtime()
    await rt.load(0, lg)
    assert await rt.write(0, put("a", "1")) == "ok"
    flushes = lg.flushes
    lg.hold_flushes()
    first = asyncio.create_task(rt.write(0, put("a", "2")))
    assert lg.flush_started is not None
    await lg.flush_started.wait()
    # Appended while the failing fsync is in flight: waits for it, then fails with it.
    second = asyncio.create_task(rt.write(0, put("b", "1")))
    await asyncio.sleep(0.01)
    lg.fail_flush = OSError(5, "Input/output error")
    lg.release_flushes()
    out = await asyncio.gather(first, second)
    assert [o.error for o in out] == [ErrorCode.kafka_storage_error] * 2, out
    assert rt.status(0) is PartitionStatus.FAILED
    assert rt.committed_offset(0) == 1
    shard = rt.shard(0)
    assert shard is not None and shard.committed_view() == {"a": "1"} and shard.end == 1
    later = await rt.write(0, put("c", "1"))
    assert isinstance(later, CoordinatorFailure) and later.error == ErrorCode.not_coordinator
    read = await rt.read(0, lambda s: s.committed_view())
    assert isinstance(read, CoordinatorFailure)
    await rt.close()
    assert lg.flushes == flushes  # no fsync after the failed one, not even on close
    lg.close()


async def test_a_raising_op_fails_alone(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p0")
    rt = kv_runtime()
    await rt.load(0, lg)

    def boom(shard: KVShard, now: int) -> CoordinatorResult:
        raise RuntimeError("bug")

    out = await rt.write_many(0, [put("a", "1"), boom, put("!bad", "x"), put("b", "2")])
    assert out[0] == out[3] == "ok"
    assert [o.error for o in out[1:3]] == [ErrorCode.unknown_server_error] * 2
    assert [(k, v) for _, k, v in log_records(lg)] == [(b"a", b"1"), (b"b", b"2")]
    await rt.close()
    lg.close()


async def test_load_replays_the_log_into_equal_state(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p0", segment_bytes=2048)
    rt = kv_runtime()
    await rt.load(0, lg)
    for i in range(200):
        await rt.write_many(0, [put(f"k{i % 17}", str(i)), put(f"k{i % 5}", None)])
    live = rt.shard(0)
    assert live is not None
    expected = dict(live.data)
    await rt.close()
    lg.close()

    lg = open_log(tmp_path / "p0", segment_bytes=2048)
    rt = kv_runtime(clock=lambda: T0 + 5)
    summary = await rt.load(0, lg)
    loaded = rt.shard(0)
    assert loaded is not None and loaded.loaded_at == T0 + 5
    assert loaded.data == expected and loaded.committed_offset == lg.log_end_offset
    assert not isinstance(summary, CoordinatorFailure) and summary.end_offset == lg.log_end_offset
    await rt.close()
    assert loaded.unloaded
    lg.close()


async def test_unknown_record_types_are_skipped_on_load(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p0")
    rt = kv_runtime()
    await rt.load(0, lg)
    await rt.write_many(0, [put("a", "1"), put("?future", "x"), put("b", "2")])
    await rt.close()
    rt = kv_runtime()
    summary = await rt.load(0, lg)
    assert not isinstance(summary, CoordinatorFailure) and (summary.records, summary.skipped) == (2, 1)
    assert await rt.read(0, lambda s: s.data) == {"a": "1", "b": "2"}
    await rt.close()
    lg.close()


async def test_requests_during_load_and_for_unknown_partitions(tmp_path: Path) -> None:
    lg = LogProxy(open_log(tmp_path / "p0"))
    lg.inner.append(encode_batch([(b"a", b"1")], T0), T0)
    lg.read_gate = threading.Event()
    rt = kv_runtime()
    loading = asyncio.create_task(rt.load(0, lg))
    await asyncio.sleep(0)
    assert rt.status(0) is PartitionStatus.LOADING
    w = await rt.write(0, put("b", "2"))
    r = await rt.read(0, lambda s: s.data)
    assert isinstance(w, CoordinatorFailure) and w.error == ErrorCode.coordinator_load_in_progress
    assert isinstance(r, CoordinatorFailure) and r.error == ErrorCode.coordinator_load_in_progress
    other = await rt.write(1, put("b", "2"))
    assert isinstance(other, CoordinatorFailure) and other.error == ErrorCode.not_coordinator
    lg.read_gate.set()
    await loading
    assert rt.status(0) is PartitionStatus.ACTIVE
    assert await rt.write(0, get("a")) == "1"
    await rt.close()
    lg.close()


async def test_timers_run_as_write_ops(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p0")
    now = [T0]
    rt = kv_runtime(clock=lambda: now[0])
    await rt.load(0, lg)
    assert rt.schedule(0, "tick", T0, put("tick", "1"))
    assert rt.schedule(0, "later", T0 + 60_000, put("later", "1"))
    assert rt.cancel(0, "later")
    assert not rt.schedule(3, "x", T0, put("x", "1"))  # not held here
    done = asyncio.Event()

    def finish(shard: KVShard, n: int) -> CoordinatorResult:
        done.set()
        return CoordinatorResult()

    rt.schedule(0, "done", T0, finish)
    await done.wait()
    assert await rt.write(0, get("tick")) == "1"  # the timer op's record is committed
    assert await rt.write(0, get("later")) is None
    assert [k for _, k, _ in log_records(lg)] == [b"tick"]
    await rt.close()
    lg.close()


async def test_repeating_timer(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p0")
    now = [T0]
    rt = kv_runtime(clock=lambda: now[0])
    await rt.load(0, lg)
    runs: list[int] = []
    fired = asyncio.Event()

    def tick(shard: KVShard, n: int) -> CoordinatorResult:
        runs.append(n)
        fired.set()
        return CoordinatorResult(records=(("ticks", str(len(runs))),))

    rt.schedule(0, "tick", T0, tick, repeat_ms=1000)
    await fired.wait()
    fired.clear()
    now[0] = T0 + 1000  # the fake clock moved: the re-armed timer is due
    # An earlier deadline re-arms the loop timer, which then finds both due at the new time.
    rt.schedule(0, "nudge", T0 + 999, lambda s, n: CoordinatorResult())
    await fired.wait()
    assert runs == [T0, T0 + 1000]
    await rt.close()
    lg.close()


async def test_timed_shard_deadlines_run_on_timer(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p0")
    rt = kv_runtime(shard=TimedKVShard)
    await rt.load(0, lg)

    def put_with_ttl(shard: TimedKVShard, now: int) -> CoordinatorResult:
        shard.ttl["session"] = now  # soft state: due at once
        return CoordinatorResult(records=(("session", "alive"),), response="ok")

    assert await rt.write(0, put_with_ttl) == "ok"
    # The deadline is due at once: the runtime queued shard.on_timer as a write right after the
    # drain, so it runs before this op, whose answer waits until the tombstone is committed.
    assert await rt.write(0, get("session")) is None
    assert [(k, v) for _, k, v in log_records(lg)] == [(b"session", b"alive"), (b"session", None)]
    assert await rt.read(0, lambda s: s.committed_view()) == {}
    await rt.close()
    lg.close()


async def test_pruning_moves_the_log_start_and_keeps_state(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p0", segment_bytes=1024)
    rt = kv_runtime(prune_interval_ms=0)
    await rt.load(0, lg)
    for r in range(100):
        first = [r * 20 + w * 4 for w in range(5)]
        writes = [rt.write_many(0, [put(f"k{i % 3}", str(i)) for i in range(f, f + 4)]) for f in first]
        assert await asyncio.gather(*writes) == [["ok"] * 4] * 5
    stats = rt.stats(0)
    assert stats is not None and stats.prunes > 0  # pruning ran by itself, after commits
    assert lg.log_start_offset > 1000
    assert await rt.prune(0) == lg.log_start_offset >= 2000 - 3  # the last record of each key
    assert lg.segment_count <= 2
    expected = await rt.read(0, lambda s: dict(s.data))
    await rt.close()
    rt = kv_runtime()
    await rt.load(0, lg)
    assert await rt.read(0, lambda s: s.data) == expected
    await rt.close()
    lg.close()


async def test_without_fsync_writes_commit_on_append(tmp_path: Path) -> None:
    lg = LogProxy(open_log(tmp_path / "p0"))
    rt = kv_runtime(fsync=False)
    await rt.load(0, lg)
    assert await asyncio.gather(*(rt.write(0, put(f"k{i}", "v")) for i in range(50))) == ["ok"] * 50
    assert lg.flushes == 0 and rt.committed_offset(0) == 50
    await rt.close()
    lg.close()


async def test_bounded_inbox(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p0")
    rt = kv_runtime(max_queued_writes=2, max_batch_records=1)
    await rt.load(0, lg)
    out = await asyncio.gather(*(rt.write(0, put(f"k{i}", "v")) for i in range(20)))
    assert out == ["ok"] * 20
    await rt.close()
    lg.close()


async def test_close_flushes_what_was_appended_then_refuses(tmp_path: Path) -> None:
    lg = LogProxy(open_log(tmp_path / "p0"))
    rt = kv_runtime()
    await rt.load(0, lg)
    lg.hold_flushes()
    w = asyncio.create_task(rt.write(0, put("a", "1")))
    assert lg.flush_started is not None
    await lg.flush_started.wait()
    closing = asyncio.create_task(rt.close())
    await asyncio.sleep(0)
    lg.release_flushes()
    await closing
    assert await w == "ok"
    after = await rt.write(0, put("b", "1"))
    assert isinstance(after, CoordinatorFailure) and after.error == ErrorCode.not_coordinator
    lg.close()


async def test_writes_the_replicas_cannot_confirm_fail_at_once(tmp_path: Path) -> None:
    """A replicated partition this broker stopped leading (or a stopping broker): the waiting
    writes get NOT_COORDINATOR when the replicated wait says so, not only at the unload, and a
    write made by the closing code itself cannot deadlock the close."""
    lg = open_log(tmp_path / "p0")
    rt = kv_runtime()
    await rt.load(0, lg)
    leading = True

    async def replicated(_partition: int, _offset: int) -> bool:
        return leading

    rt.replicated = replicated
    assert await rt.write(0, put("a", "1")) == "ok"
    leading = False
    lost = await asyncio.wait_for(rt.write(0, put("b", "1")), 5)
    assert isinstance(lost, CoordinatorFailure) and lost.error == ErrorCode.not_coordinator
    assert await rt.read(0, lambda s: s.committed_view()) == {"a": "1"}
    await asyncio.wait_for(rt.close(), 5)
    lg.close()


async def test_close_does_not_answer_unreplicated_writes_as_committed(tmp_path: Path) -> None:
    """At close, a write of a replicated partition still waiting for its in-sync replicas is
    failed, not answered after a last local fsync: a new leader may not have it."""
    lg = open_log(tmp_path / "p0")
    rt = kv_runtime()
    await rt.load(0, lg)
    confirm = asyncio.Event()
    asked = asyncio.Event()

    async def replicated(_partition: int, _offset: int) -> bool:
        asked.set()
        await confirm.wait()
        return True

    rt.replicated = replicated
    w = asyncio.create_task(rt.write(0, put("a", "1")))
    await asked.wait()
    await rt.close()
    out = await w
    assert isinstance(out, CoordinatorFailure) and out.error == ErrorCode.not_coordinator
    lg.close()
