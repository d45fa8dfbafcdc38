"""Benchmark: restart with 10,000 share-partitions' state.

Builds share state for ``--groups`` x ``--partitions`` share-partitions (default 100 x 100 =
10,000) through the broker's own share coordinator (in-process ``Broker``, real
``__share_group_state`` logs, fsync on): each is initialized and then gets ``--writes``
acknowledgement-shaped writes. Then it measures how long loading ``__share_group_state`` takes
when the broker starts again:

- after a clean stop (the coordinator snapshots and prunes on shutdown: about one record per key);
- after a crash (a copy of the data directory taken while the broker ran, as SIGKILL leaves it:
  every record since each key's last snapshot is replayed).

Each restart is repeated ``--repeat`` times (a crash restart always on a fresh copy of the crash
image, since stopping the broker compacts it); the RESULT line gives the median and the best of
each, and the cost per replayed record. Prints one line per restart and one RESULT line.
Run: ``.venv/bin/python bench/share_state_restart.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.app import Broker  # noqa: E402
from broker.config import BrokerConfig  # noqa: E402
from persister.api import (  # noqa: E402
    ACKNOWLEDGED,
    InitializeParams,
    PersisterStateBatch,
    ReadParams,
    SharePartitionKey,
    WriteParams,
)

CHUNK = 500  # keys per state call


async def build(data: Path, crash_copy: Path, groups: int, partitions: int, writes: int) -> int:
    broker = Broker(BrokerConfig({"log.dirs": str(data)}))
    await broker.start()
    try:
        topic = broker.create_topic("bench", partitions)
        keys = [SharePartitionKey(f"group-{g}", topic.topic_id, p)
                for g in range(groups) for p in range(partitions)]
        svc = broker.share_coordinator
        started = time.perf_counter()
        for i in range(0, len(keys), CHUNK):
            out = await svc.initialize_state([InitializeParams(k, 0, 0) for k in keys[i:i + CHUNK]])
            assert all(r.error.value == 0 for r in out), out[:3]
        for w in range(writes):
            calls = [svc.write_state([
                WriteParams(k, 0, 0, w, -1, (PersisterStateBatch(w, w + 4, ACKNOWLEDGED, 1),))
                for k in keys[i:i + CHUNK]]) for i in range(0, len(keys), CHUNK)]
            for out in await asyncio.gather(*calls):
                assert all(r.error.value == 0 for r in out), out[:3]
        elapsed = time.perf_counter() - started
        total = len(keys) * (writes + 1)
        rt = svc.runtime
        stats = [s for p in rt.partitions() if (s := rt.stats(p)) is not None]
        calls, fsyncs = sum(s.writes for s in stats), sum(s.flushes for s in stats)
        print(f"built state: {len(keys)} share-partitions, {total} state writes in {elapsed:.1f} s "
              f"({total / elapsed:,.0f} writes/s; {calls} runtime events, {fsyncs} fsyncs)")
        shutil.copytree(data, crash_copy)  # what a SIGKILL now would leave on disk
    finally:
        await broker.stop()
    return len(keys)


Digest = dict[SharePartitionKey, tuple[object, ...]]


async def restart(data: Path, label: str, keys: int, probe: SharePartitionKey | None = None,
                  expect: Digest | None = None) -> tuple[float, int, Digest]:
    """Start a broker on ``data`` and check every key loaded (and, with ``expect``, to the same
    state); returns (load ms, records replayed, the loaded state)."""
    # A real restart is a new process: do not let what this one still holds (the build, earlier
    # restarts' state) cost the load garbage-collector passes.
    gc.collect()
    gc.freeze()
    broker = Broker(BrokerConfig({"log.dirs": str(data)}))
    started = time.perf_counter()
    await broker.start()
    total_ms = (time.perf_counter() - started) * 1000
    try:
        svc = broker.share_coordinator
        rt = svc.runtime
        records = sum(s.load.records for p in rt.partitions()
                      if (s := rt.stats(p)) is not None and s.load is not None)
        loaded = sum(len(shard.states) for p in rt.partitions() if (shard := rt.shard(p)) is not None)
        assert loaded == keys, (loaded, keys)
        if probe is not None:
            topic = broker.topics.get("bench")
            assert topic is not None
            got = await svc.read_state([ReadParams(SharePartitionKey(probe.group_id, topic.topic_id,
                                                                     probe.partition), 0)])
            assert got[0].error.value == 0
        print(f"{label}: loaded {loaded} share-partitions ({records} records) from "
              f"{rt.partitions().__len__()} partitions in {svc.load_ms:.0f} ms "
              f"(broker start {total_ms:.0f} ms)")
        digest = {key: (e.state.state_epoch, e.state.leader_epoch, e.state.start_offset,
                         e.state.delivery_complete_count, e.state.state_batches)
                  for p in rt.partitions() if (shard := rt.shard(p)) is not None
                  for key, e in shard.states.items()}
        # A clean stop re-snapshots (new snapshot epochs and timestamps): compare the rest.
        assert expect is None or digest == expect, "crash and clean restarts loaded different state"
        return float(svc.load_ms or 0.0), records, digest
    finally:
        await broker.stop()
        gc.unfreeze()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--writes", type=int, default=10, help="acknowledgement writes per share-partition")
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3, help="restarts of each kind")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data, crash = work / "data", work / "crash"
    try:
        keys = await build(data, crash, args.groups, args.partitions, args.writes)
        probe = SharePartitionKey("group-0", None, 0)  # type: ignore[arg-type]
        clean = [await restart(data, f"restart after clean stop #{i + 1}", keys, probe)
                 for i in range(args.repeat)]
        crash_runs = []
        for i in range(args.repeat):
            image = work / f"crash-{i}"
            shutil.copytree(crash, image)
            crash_runs.append(await restart(image, f"restart after crash #{i + 1}", keys, probe,
                                            expect=clean[0][2]))
            shutil.rmtree(image, ignore_errors=True)
        print(f"RESULT share-state load for {keys} share-partitions: "
              f"clean {_figure(clean)}; crash {_figure(crash_runs)} (target < 2000 ms)")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


def _figure(runs: list[tuple[float, int, Digest]]) -> str:
    times = [ms for ms, _, _ in runs]
    records = runs[0][1]
    median = statistics.median(times)
    return (f"median {median:.0f} ms, best {min(times):.0f} ms ({records} records, "
            f"{median * 1000 / max(records, 1):.1f} us/record)")


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
