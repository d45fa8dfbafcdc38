"""Benchmark: the cost of fsync on the acknowledgement path, and how well group commit batches.

``--writers`` share-partitions acknowledge concurrently, each sending its next
WriteShareGroupState only after the previous one is answered (as a share-partition leader does),
through ``CoordinatorPersister`` -> ``ShareCoordinatorService`` -> ``CoordinatorRuntime`` -> the
segment log of ``__share_group_state`` (50 partitions). Runs once with
``share.coordinator.append.fsync`` on and once off and prints throughput, latency percentiles
and writes per fsync. Run: ``.venv/bin/python bench/share_state_fsync.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.runtime.loop import DEFAULT_IO_THREADS, CoordinatorRuntime  # noqa: E402
from coordinator.share.runtime_service import (  # noqa: E402
    ShareCoordinatorService,
    ShareRecordSerde,
    ShareStateShard,
)
from persister.api import (  # noqa: E402
    ACKNOWLEDGED,
    InitializeParams,
    PersisterStateBatch,
    SharePartitionKey,
    WriteParams,
)
from persister.coordinator_persister import CoordinatorPersister  # noqa: E402
from storage.segment_log import LogConfig, PartitionLog  # noqa: E402

PARTITIONS = 50


async def run(directory: Path, fsync: bool, writers: int, seconds: float, io_threads: int) -> None:
    logs = [PartitionLog.open(directory / f"__share_group_state-{p}", LogConfig(segment_bytes=1 << 20), 0)
            for p in range(PARTITIONS)]
    clock = lambda: time.time_ns() // 1_000_000  # noqa: E731
    runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
        ShareCoordinatorService.shard_factory(snapshot_update_records_per_snapshot=500,
                                              partition_exists=None),
        ShareRecordSerde(), clock_ms=clock, fsync=fsync, io_threads=io_threads)
    svc = ShareCoordinatorService(runtime, num_partitions=PARTITIONS, clock_ms=clock,
                                  cold_snapshot_interval_ms=None)
    await svc.load_all(logs.__getitem__)
    persister = CoordinatorPersister(svc)
    topic = uuid.uuid4()
    keys = [SharePartitionKey("bench", topic, i) for i in range(writers)]
    await svc.initialize_state([InitializeParams(k, 0, 0) for k in keys])
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def writer(key: SharePartitionKey) -> None:
        i = 0
        while time.perf_counter() < stop:
            t = time.perf_counter()
            ack = PersisterStateBatch(i, i, ACKNOWLEDGED, 1)
            r = await persister.write(WriteParams(key, 0, 0, i, -1, (ack,)))
            latencies.append(time.perf_counter() - t)
            assert r.error.value == 0, r
            i += 1

    started = time.perf_counter()
    await asyncio.gather(*(writer(k) for k in keys))
    elapsed = time.perf_counter() - started
    stats = [s for p in range(PARTITIONS) if (s := runtime.stats(p)) is not None]
    writes = sum(s.writes for s in stats)
    flushes = sum(s.flushes for s in stats)
    appends = sum(s.appends for s in stats)
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    per_fsync = f"{writes / flushes:.1f} writes/fsync ({flushes} fsyncs)" if flushes else "no fsyncs"
    rate = len(latencies) / elapsed
    print(f"fsync={'on ' if fsync else 'off'} writers={writers:4d}: {rate:9,.0f} writes/s, "
          f"p50 {q[49] * 1000:6.2f} ms, p99 {q[98] * 1000:6.2f} ms, {writes / appends:.1f} writes/append, "
          f"{per_fsync}")
    await runtime.close()
    for lg in logs:
        lg.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 50, 500])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--io-threads", type=int, default=None,
                    help="runtime fsync/load threads (default: the runtime's)")
    args = ap.parse_args()
    for writers in args.writers:
        for fsync in (True, False):
            work = Path(tempfile.mkdtemp(prefix="shoal-fsync-"))
            try:
                await run(work, fsync, writers, args.seconds, args.io_threads or DEFAULT_IO_THREADS)
            finally:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
