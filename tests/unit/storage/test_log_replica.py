"""storage/log_replica.py with the appends of storage/segment_log.py: a partition log as a replica.

Leader appends stamp their epoch and feed the leader-epoch cache, follower appends keep the
leader's offsets and epochs, truncation removes a divergent tail durably, the high watermark is
checkpointed. Real files in tmp_path; a "crash" is a copy of the directory taken while the log
is open (what ``kill -9`` leaves).
"""

from __future__ import annotations

import errno
import shutil
import struct
import threading
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.record_batch import iter_batches
from storage import fileops
from storage.leader_epoch import EpochEntry as E
from storage.log import LogClosedError, UnexpectedOffsetError
from storage.log_dir import LogDirOfflineError
from storage.log_loader import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
)
from storage.segment_log import LogConfig, PartitionLog

from tests.unit.batches import make_batch

T0 = 1_700_000_000_000


def config(**overrides: int) -> LogConfig:
    base: dict[str, int] = {"segment_bytes": 1024, "index_interval_bytes": 128}
    base.update(overrides)
    return LogConfig(**base)  # type: ignore[arg-type]


def batch(i: int, n: int = 1, epoch: int = -1) -> bytes:
    """A produced batch (producers send partitionLeaderEpoch -1)."""
    return make_batch([(f"k{i}-{j}".encode(), b"v" * 60) for j in range(n)],
                      timestamp_ms=T0 + i, partition_leader_epoch=epoch)


def open_log(directory: Path, **overrides: int) -> PartitionLog:
    return PartitionLog.open(directory, config(**overrides), T0)


def everything(log: PartitionLog) -> bytes:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        res = log.read(offset, 1 << 20)
        if not res.data:
            break
        out.append(res.data)
        offset = res.next_offset
    return b"".join(out)


def epochs_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.partition_leader_epoch) for _, h in iter_batches(data)]


def crc_ok(data: bytes) -> bool:
    return all(crc32c.crc32c(data[p + 21: p + h.total_size]) == h.crc
               for p, h in iter_batches(data))


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "t-0"


# -- leader appends ---------------------------------------------------------------------------


def test_leader_append_stamps_its_epoch_and_records_where_it_starts(log_dir: Path) -> None:
    log = open_log(log_dir)
    log.append(batch(0, 3), T0, leader_epoch=2)
    log.append(batch(1), T0, leader_epoch=2)
    log.append(batch(2, 2), T0, leader_epoch=5)
    data = everything(log)
    assert epochs_of(data) == [(0, 2), (3, 2), (4, 5)]
    assert crc_ok(data)  # the epoch sits outside the CRC
    assert log.latest_epoch == 5
    assert log.epoch_entries() == [E(2, 0), E(5, 4)]
    assert (log_dir / "leader-epoch-checkpoint").read_text() == "0\n2\n2 0\n5 4\n"
    assert log.end_offset_for_epoch(2) == (2, 4)
    assert log.end_offset_for_epoch(5) == (5, 6)
    assert log.end_offset_for_epoch(9) == (-1, -1)
    log.close()
    again = open_log(log_dir)
    assert again.epoch_entries() == [E(2, 0), E(5, 4)]
    again.close()


def test_append_without_an_epoch_leaves_batches_and_cache_alone(log_dir: Path) -> None:
    log = open_log(log_dir)
    raw = batch(0, epoch=-1)
    log.append(raw, T0)
    assert everything(log) == raw
    assert log.latest_epoch == -1
    assert log.end_offset_for_epoch(0) == (-1, -1)
    assert not (log_dir / "leader-epoch-checkpoint").exists()
    log.close()


def test_stale_leader_epoch_is_stamped_but_not_recorded(log_dir: Path) -> None:
    log = open_log(log_dir)
    log.append(batch(0), T0, leader_epoch=4)
    log.append(batch(1), T0, leader_epoch=3)
    assert log.epoch_entries() == [E(4, 0)]
    assert epochs_of(everything(log)) == [(0, 4), (1, 3)]
    log.close()


# -- follower appends -------------------------------------------------------------------------


def test_follower_append_keeps_offsets_and_epochs_and_learns_epochs(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a")
    for i in range(6):
        leader.append(batch(i, 2), T0, leader_epoch=1 if i < 3 else 3)
    follower = open_log(tmp_path / "b")
    res = follower.append_as_follower(leader.read(0, 1 << 20).data, T0)
    assert (res.base_offset, res.last_offset) == (0, 11)
    assert follower.log_end_offset == 12
    assert everything(follower) == everything(leader)
    assert follower.epoch_entries() == [E(1, 0), E(3, 6)]
    leader.close()
    follower.close()


def test_follower_append_below_the_log_end_is_refused(log_dir: Path) -> None:
    log = open_log(log_dir)
    log.append(batch(0, 3), T0, leader_epoch=1)
    again = bytearray(batch(1))
    struct.pack_into(">q", again, 0, 2)
    with pytest.raises(UnexpectedOffsetError, match="below the log end offset 3") as info:
        log.append_as_follower(bytes(again), T0)
    assert isinstance(info.value, ValueError)
    assert log.log_end_offset == 3
    log.close()


def test_follower_append_with_decreasing_offsets_is_refused(log_dir: Path) -> None:
    log = open_log(log_dir)
    first = bytearray(batch(0, 2, epoch=1))
    second = bytearray(batch(1, 2, epoch=1))
    struct.pack_into(">q", first, 0, 5)
    struct.pack_into(">q", second, 0, 6)  # inside the first batch
    with pytest.raises(UnexpectedOffsetError, match="increasing offsets"):
        log.append_as_follower(bytes(first + second), T0)
    assert log.log_end_offset == 0
    assert log.epoch_entries() == []
    log.close()


def test_follower_append_after_a_compaction_gap(log_dir: Path) -> None:
    log = open_log(log_dir)
    gap = bytearray(batch(0, 2, epoch=1))
    struct.pack_into(">q", gap, 0, 7)
    res = log.append_as_follower(bytes(gap), T0)
    assert (res.base_offset, res.last_offset) == (7, 8)
    assert log.log_end_offset == 9
    assert log.read(0, 1 << 20).first_offset == 7
    assert log.epoch_entries() == [E(1, 7)]
    log.close()


# -- truncation -------------------------------------------------------------------------------


def fill(log: PartitionLog, count: int, epoch_of: dict[int, int] | None = None) -> None:
    for i in range(count):
        log.append(batch(i, 2), T0, leader_epoch=(epoch_of or {}).get(i, 1))


def test_truncate_to_cuts_segments_indexes_and_epochs(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 40, {i: 1 if i < 10 else 2 if i < 30 else 4 for i in range(40)})
    assert log.segment_count > 3
    log.flush()
    log.set_high_watermark(70)
    before = everything(log)
    assert log.truncate_to(30) == 30
    assert log.log_end_offset == 30
    assert log.recovery_point == 30
    assert log.high_watermark == 30
    assert log.epoch_entries() == [E(1, 0), E(2, 20)]
    assert log.end_offset_for_epoch(2) == (2, 30)
    kept = everything(log)
    assert kept == before[: len(kept)] and epochs_of(kept)[-1] == (28, 2)
    assert read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT) == 30
    assert read_checkpoint(log_dir / HIGH_WATERMARK_CHECKPOINT) == 30
    # Appends carry on from the new end, with a new epoch.
    res = log.append(batch(99, 2), T0, leader_epoch=5)
    assert res.base_offset == 30
    assert log.epoch_entries() == [E(1, 0), E(2, 20), E(5, 30)]
    assert log.offset_for_timestamp(T0 + 99) == (30, T0 + 99)
    log.close()
    again = open_log(log_dir)
    assert again.log_end_offset == 32
    assert everything(again) == kept + everything_from(again, 30)
    assert again.epoch_entries() == [E(1, 0), E(2, 20), E(5, 30)]
    again.close()


def everything_from(log: PartitionLog, offset: int) -> bytes:
    return log.read(offset, 1 << 20).data


def test_truncate_inside_a_batch_removes_the_whole_batch(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 5)
    assert log.truncate_to(7) == 6
    assert log.log_end_offset == 6
    assert log.append(batch(9), T0).base_offset == 6
    log.close()


def test_truncate_at_or_after_the_end_is_a_no_op(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 3)
    assert log.truncate_to(6) == 6
    assert log.truncate_to(100) == 6
    assert log.log_end_offset == 6
    with pytest.raises(ValueError):
        log.truncate_to(-1)
    log.close()
    with pytest.raises(LogClosedError):
        log.truncate_to(0)


def test_truncate_to_a_segment_boundary_and_to_zero(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 30)
    bases = sorted(int(p.stem) for p in log_dir.glob("*.log"))
    assert log.truncate_to(bases[2]) == bases[2]
    assert sorted(int(p.stem) for p in log_dir.glob("*.log")) == bases[:3]
    assert log.truncate_to(0) == 0
    assert log.log_end_offset == 0 and log.epoch_entries() == []
    assert log.append(batch(1), T0, leader_epoch=3).base_offset == 0
    log.close()
    again = open_log(log_dir)
    assert again.log_end_offset == 1
    again.close()


def test_crash_after_truncation_and_new_appends_keeps_both(log_dir: Path, tmp_path: Path) -> None:
    log = open_log(log_dir)
    fill(log, 30)
    log.flush()  # recovery point at 60: the truncation must lower it before new appends
    log.truncate_to(21)
    assert log.log_end_offset == 20
    for i in range(5):
        log.append(batch(100 + i, 2), T0, leader_epoch=7)
    expected = everything(log)
    crashed = shutil.copytree(log_dir, tmp_path / "crash")
    log.close()
    again = open_log(crashed)
    assert again.recovered_from == 20
    assert again.log_end_offset == 30
    assert everything(again) == expected
    assert again.epoch_entries() == [E(1, 0), E(7, 20)]
    again.close()


def test_epoch_entries_past_the_end_are_trimmed_on_open(log_dir: Path, tmp_path: Path) -> None:
    # A crash between cutting the files and trimming the cache leaves entries past the end.
    log = open_log(log_dir)
    fill(log, 10, {i: 1 if i < 5 else 3 for i in range(10)})
    log.close()
    (log_dir / "leader-epoch-checkpoint").write_text("0\n3\n1 0\n3 10\n6 40\n")
    again = open_log(log_dir)
    assert again.epoch_entries() == [E(1, 0), E(3, 10)]
    assert (log_dir / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n3 10\n"
    again.close()


def test_truncate_fully_and_start_at(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 20)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert (log.recovery_point, log.high_watermark) == (500, 500)
    assert log.epoch_entries() == [] and log.latest_epoch == -1
    assert [p.name for p in log_dir.glob("*.log")] == [f"{500:020d}.log"]
    assert log.append(batch(1), T0, leader_epoch=9).base_offset == 500
    log.close()
    again = open_log(log_dir)
    assert (again.log_start_offset, again.log_end_offset) == (500, 501)
    assert again.epoch_entries() == [E(9, 500)]
    assert read_checkpoint(log_dir / LOG_START_CHECKPOINT) == 500
    again.close()


def test_crash_after_truncating_fully_and_appending(log_dir: Path, tmp_path: Path) -> None:
    log = open_log(log_dir)
    fill(log, 20)
    log.flush()
    log.truncate_fully_and_start_at(7)
    for i in range(4):
        log.append(batch(50 + i, 2), T0, leader_epoch=3)
    expected = everything(log)
    crashed = shutil.copytree(log_dir, tmp_path / "crash")
    log.close()
    again = open_log(crashed)
    assert (again.log_start_offset, again.log_end_offset) == (7, 15)
    assert everything(again) == expected
    assert again.epoch_entries() == [E(3, 7)]
    again.close()


def test_truncate_below_the_log_start_empties_the_log(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 20)
    log.delete_records_before(30)
    assert log.truncate_to(10) == 10
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    log.close()


def test_truncation_drops_aborted_transactions_past_the_end(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 10)
    log.add_aborted_txn((7, 2, 5, 2))
    log.add_aborted_txn((8, 9, 15, 9))
    log.truncate_to(12)
    assert log.aborted_txns(0, 20) == [(7, 2, 5, 2)]
    log.close()
    again = open_log(log_dir)
    assert again.aborted_txns(0, 20) == [(7, 2, 5, 2)]
    again.close()


def test_truncate_storage_fault_takes_the_directory_offline(log_dir: Path) -> None:
    class FailTruncate(fileops.FileOps):
        def ftruncate(self, fd: int, length: int) -> None:
            raise OSError(errno.EIO, "injected")

    log = open_log(log_dir)
    fill(log, 10)
    previous = fileops.use(FailTruncate())
    try:
        with pytest.raises(LogDirOfflineError):
            log.truncate_to(5)
    finally:
        fileops.use(previous)
    assert log.log_dir.offline
    with pytest.raises(LogDirOfflineError):
        log.append(batch(1), T0)
    log.close()


# -- high watermark and the log start ---------------------------------------------------------


def test_high_watermark_is_clamped_and_checkpointed(log_dir: Path) -> None:
    log = open_log(log_dir)
    assert log.high_watermark == 0
    fill(log, 5)
    assert log.set_high_watermark(100) == 10
    assert log.set_high_watermark(4) == 4
    assert not (log_dir / HIGH_WATERMARK_CHECKPOINT).exists()
    log.flush()
    assert read_checkpoint(log_dir / HIGH_WATERMARK_CHECKPOINT) == 4
    log.set_high_watermark(6)
    log.checkpoint_high_watermark()  # without a flush
    assert read_checkpoint(log_dir / HIGH_WATERMARK_CHECKPOINT) == 6
    log.set_high_watermark(8)
    log.close()
    again = open_log(log_dir)
    assert again.high_watermark == 8
    again.close()


def test_a_log_without_a_high_watermark_checkpoint_opens_at_its_end(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 5)
    log.close()
    assert not (log_dir / HIGH_WATERMARK_CHECKPOINT).exists()  # never set: nothing written
    again = open_log(log_dir)
    assert again.high_watermark == 10
    again.close()


def test_moving_the_log_start_trims_the_epoch_cache(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 30, {i: 1 if i < 10 else 2 if i < 20 else 3 for i in range(30)})
    log.delete_records_before(25)
    assert log.epoch_entries() == [E(2, 25), E(3, 40)]
    log.enforce_retention(T0, 60)  # removes the segments below the start offset
    assert log.epoch_entries()[0].epoch == 2
    assert log.epoch_entries()[0].start_offset == log.log_start_offset
    log.close()
    again = open_log(log_dir)
    assert again.epoch_entries() == log.epoch_entries()
    again.close()


# -- properties -------------------------------------------------------------------------------

# (records in the batch, epoch bump before it)
_steps = st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1, max_size=25)


def leader_run(log: PartitionLog, steps: list[tuple[int, bool]], first_epoch: int = 0,
               seed: int = 0) -> None:
    epoch = first_epoch
    for i, (n, bump) in enumerate(steps):
        epoch += bump
        log.append(batch(seed + i, n), T0 + i, leader_epoch=epoch)


def replicate(leader: PartitionLog, follower: PartitionLog, max_bytes: int) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read(follower.log_end_offset, max_bytes).data
        follower.append_as_follower(data, T0)


def same(a: PartitionLog, b: PartitionLog) -> None:
    assert b.log_end_offset == a.log_end_offset
    assert everything(b) == everything(a)
    assert b.epoch_entries() == a.epoch_entries()


@settings(max_examples=40, deadline=None)
@given(steps=_steps, max_bytes=st.integers(1, 2000))
def test_leader_and_follower_logs_are_identical(tmp_path_factory: pytest.TempPathFactory,
                                               steps: list[tuple[int, bool]],
                                               max_bytes: int) -> None:
    base = tmp_path_factory.mktemp("prop")
    a, b = open_log(base / "a"), open_log(base / "b", segment_bytes=700)
    leader_run(a, steps)
    replicate(a, b, max_bytes)
    same(a, b)
    a.close()
    b.close()
    b2 = open_log(base / "b", segment_bytes=700)
    assert b2.epoch_entries() == a.epoch_entries()
    b2.close()


@settings(max_examples=40, deadline=None)
@given(common=_steps, ours=_steps, theirs=_steps, max_bytes=st.integers(200, 3000))
def test_truncate_then_reappend_equals_never_having_diverged(
        tmp_path_factory: pytest.TempPathFactory, common: list[tuple[int, bool]],
        ours: list[tuple[int, bool]], theirs: list[tuple[int, bool]], max_bytes: int) -> None:
    base = tmp_path_factory.mktemp("prop")
    a, b = open_log(base / "a"), open_log(base / "b")
    # Both replicate the common history; then B leads a while (epoch 100+) and A, elected
    # instead, writes its own tail (epoch 200+): B must truncate where it diverged.
    leader_run(a, common)
    replicate(a, b, max_bytes)
    leader_run(b, ours, first_epoch=100, seed=1000)
    leader_run(a, theirs, first_epoch=200, seed=2000)
    # Kafka's follower rule: ask the leader where B's latest epoch ends.
    _, end = a.end_offset_for_epoch(b.latest_epoch)
    b.truncate_to(min(end, b.log_end_offset))
    assert b.log_end_offset <= a.log_end_offset
    replicate(a, b, max_bytes)
    same(a, b)
    a.close()
    b.close()


def test_a_failed_epoch_checkpoint_appends_nothing(log_dir: Path) -> None:
    class FailSync(fileops.FileOps):
        def fsync(self, fd: int) -> None:
            raise OSError(errno.EIO, "injected")

    log = open_log(log_dir)
    log.append(batch(0), T0, leader_epoch=1)
    previous = fileops.use(FailSync())
    try:
        with pytest.raises(LogDirOfflineError):
            log.append(batch(1), T0, leader_epoch=2)
    finally:
        fileops.use(previous)
    assert log.log_end_offset == 1
    assert log.epoch_entries() == [E(1, 0)]
    log.close()


def test_crash_after_a_follower_gap_cuts_the_tail_to_refetch(log_dir: Path,
                                                            tmp_path: Path) -> None:
    log = open_log(log_dir)
    log.append_as_follower(batch(0, 2, epoch=1), T0)
    log.flush()
    gap = bytearray(batch(1, 2, epoch=1))
    struct.pack_into(">q", gap, 0, 10)
    log.append_as_follower(bytes(gap), T0)
    assert log.log_end_offset == 12
    crashed = shutil.copytree(log_dir, tmp_path / "crash")
    log.close()
    again = open_log(crashed)
    # The unflushed batch after the gap is cut like a torn write; the follower fetches it
    # again from its new end, and appends it again.
    assert again.log_end_offset == 2
    again.append_as_follower(bytes(gap), T0)
    assert again.log_end_offset == 12
    again.close()


def test_truncation_racing_flushes_keeps_the_recovery_point_below_the_end(
        log_dir: Path, tmp_path: Path) -> None:
    log = open_log(log_dir)
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            log.flush()

    worker = threading.Thread(target=flusher)
    worker.start()
    try:
        for round_ in range(30):
            for i in range(6):
                log.append(batch(i, 2), T0, leader_epoch=round_)
            log.truncate_to(log.log_end_offset - 5)
            assert log.recovery_point <= log.log_end_offset
    finally:
        stop.set()
        worker.join()
    expected = everything(log)
    crashed = shutil.copytree(log_dir, tmp_path / "crash")
    log.close()
    again = open_log(crashed)
    assert everything(again) == expected
    again.close()


def test_truncate_into_a_compaction_gap(log_dir: Path) -> None:
    log = open_log(log_dir)
    for base in (0, 10, 20):
        b = bytearray(batch(base, 2, epoch=base // 10))
        struct.pack_into(">q", b, 0, base)
        log.append_as_follower(bytes(b), T0)
    log.flush()
    assert log.epoch_entries() == [E(0, 0), E(1, 10), E(2, 20)]
    assert log.truncate_to(5) == 5  # no batch holds 5: the log ends there
    assert log.epoch_entries() == [E(0, 0)]
    assert [o for o, _ in epochs_of(everything(log))] == [0]
    again = bytearray(batch(10, 2, epoch=3))
    struct.pack_into(">q", again, 0, 10)
    log.append_as_follower(bytes(again), T0)
    assert [o for o, _ in epochs_of(everything(log))] == [0, 10]
    assert log.epoch_entries() == [E(0, 0), E(3, 10)]
    log.close()
    reopened = open_log(log_dir)
    assert reopened.log_end_offset == 12
    assert [o for o, _ in epochs_of(everything(reopened))] == [0, 10]
    reopened.close()
