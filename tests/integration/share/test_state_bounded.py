"""The share-state log stays bounded: 1,000,000 acknowledgements on one share-partition.

Drives the share coordinator service in-process (the same runtime, shard and fsync'd segment log
the broker uses) with acknowledgement-shaped writes: each acknowledges one more offset and moves
the start offset along behind it. Snapshots every 500 updates make older records redundant and
the runtime moves the log start offset past them, deleting whole segments. Throughout the run the
partition's directory holds at most a few snapshots' worth of records and bytes.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from coordinator.runtime.loop import CoordinatorRuntime
from coordinator.share.runtime_service import ShareCoordinatorService, ShareRecordSerde, ShareStateShard
from persister.api import (
    ACKNOWLEDGED,
    InitializeParams,
    PersisterStateBatch,
    ReadParams,
    SharePartitionKey,
    WriteParams,
)
from storage.segment_log import LogConfig, PartitionLog

ACKS = 1_000_000
PER_CALL = 200  # acknowledgements per WriteShareGroupState-sized call
WRITERS = 4  # calls in flight at once
UPDATES_PER_SNAPSHOT = 500
SEGMENT_BYTES = 64 * 1024
WINDOW = 50  # the start offset trails the newest acknowledgement by this much
KEY = SharePartitionKey("bounded", uuid.UUID(int=42), 0)


def dir_bytes(path: Path) -> int:
    # Pruning deletes old segments in a worker thread, so a file listed here may be gone by
    # the time it is measured; it no longer counts.
    total = 0
    for f in path.iterdir():
        try:
            total += f.stat().st_size
        except FileNotFoundError:
            pass
    return total


def ack(i: int) -> WriteParams:
    return WriteParams(KEY, 0, 0, max(0, i - WINDOW), -1, (PersisterStateBatch(i, i, ACKNOWLEDGED, 1),))


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_one_million_acknowledgements_keep_the_log_bounded(tmp_path: Path) -> None:
    directory = tmp_path / "__share_group_state-0"
    lg = PartitionLog.open(directory, LogConfig(segment_bytes=SEGMENT_BYTES, retention_ms=-1), 0)
    clock = lambda: time.time_ns() // 1_000_000  # noqa: E731
    runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
        ShareCoordinatorService.shard_factory(
            snapshot_update_records_per_snapshot=UPDATES_PER_SNAPSHOT, partition_exists=None),
        ShareRecordSerde(), clock_ms=clock, prune_interval_ms=0)
    svc = ShareCoordinatorService(runtime, num_partitions=1, clock_ms=clock, cold_snapshot_interval_ms=None)
    await svc.load_all(lambda _p: lg)
    assert (await svc.initialize_state([InitializeParams(KEY, 0, 0)]))[0].error == ErrorCode.none

    max_records = max_bytes = max_segments = 0
    next_ack = 0
    started = time.perf_counter()

    async def writer() -> None:
        nonlocal next_ack, max_records, max_bytes, max_segments
        while next_ack < ACKS:
            first = next_ack
            next_ack = min(ACKS, first + PER_CALL)
            out = await svc.write_state([ack(i) for i in range(first, next_ack)])
            assert {r.error for r in out} == {ErrorCode.none}
            max_records = max(max_records, lg.log_end_offset - lg.log_start_offset)
            max_bytes = max(max_bytes, dir_bytes(directory))
            max_segments = max(max_segments, lg.segment_count)

    await asyncio.gather(*(writer() for _ in range(WRITERS)))
    elapsed = time.perf_counter() - started
    stats = runtime.stats(0)
    assert stats is not None
    print(f"\n{ACKS} acknowledgements in {elapsed:.1f} s ({ACKS / elapsed:,.0f}/s); "
          f"{stats.records} records appended, {stats.flushes} fsyncs, {stats.prunes} prunes; "
          f"on disk at most {max_records} records, {max_bytes / 1024:.0f} KiB, "
          f"{max_segments} segments; log start {lg.log_start_offset}, end {lg.log_end_offset}")

    snapshot_worth = UPDATES_PER_SNAPSHOT + 1
    assert stats.records >= ACKS
    # Pruning runs at most once per interval, so the last one may predate the final writes by
    # up to an interval's worth of records; one more now brings the start up to the snapshots.
    await runtime.prune(0)
    assert lg.log_start_offset > ACKS - 4 * snapshot_worth
    # The log never grows with the run: at most a few snapshots' worth of bytes and segments,
    # and a bounded number of records. Pruning runs in a worker thread, so on a loaded machine
    # the start offset can trail the writers by a few prunes' worth (3,683 records was seen
    # in CI with four suites in parallel); 16 snapshots' worth is 0.8% of the run.
    assert max_records <= 16 * snapshot_worth
    assert max_segments <= 8
    assert max_bytes <= 8 * SEGMENT_BYTES
    read = (await svc.read_state([ReadParams(KEY, 0)]))[0]
    assert (read.error, read.start_offset) == (ErrorCode.none, ACKS - 1 - WINDOW)
    assert read.state_batches == (PersisterStateBatch(ACKS - 1 - WINDOW, ACKS - 1, ACKNOWLEDGED, 1),)
    await runtime.close()

    # The pruned log still rebuilds the same state.
    runtime2: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
        ShareCoordinatorService.shard_factory(
            snapshot_update_records_per_snapshot=UPDATES_PER_SNAPSHOT, partition_exists=None),
        ShareRecordSerde(), clock_ms=clock)
    svc2 = ShareCoordinatorService(runtime2, num_partitions=1, clock_ms=clock, cold_snapshot_interval_ms=None)
    await svc2.load_all(lambda _p: lg)
    again = (await svc2.read_state([ReadParams(KEY, 0)]))[0]
    assert again == read
    await runtime2.close()
    lg.close()
    assert sorted(os.listdir(directory))  # still a partition directory
