"""Storage faults in the partition log, injected at the file layer (``storage.fileops``).

Issue 12 section 6: a write or sync error takes the log directory offline (Kafka
``LogDirFailureChannel``), a partial append is cut back so nothing torn follows the last whole
batch, a failed fsync is never retried, and an offline log writes nothing more (no seal, flush or
clean-shutdown marker) so the next open recovers what the disk holds.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import fileops
from storage.log_dir import LogDir, LogDirOfflineError
from storage.log_loader import CLEAN_SHUTDOWN_MARKER
from storage.segment_log import LogConfig, PartitionLog

from tests.unit.batches import make_batch

T0 = 1_700_000_000_000


class FaultyOps(fileops.FileOps):
    """Real calls until told to fail. ``short_write`` writes that many bytes of the next write
    before failing it (a disk that fills up mid-batch); every call is counted."""

    def __init__(self) -> None:
        self.fail_write: int | None = None
        self.short_write = 0
        self.fail_sync: int | None = None
        self.syncs = 0
        self.fsyncs = 0  # of them, full fsyncs (a directory's, or a segment's in ``flush``)
        self.truncates: list[int] = []

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        if self.fail_write is not None:
            if self.short_write:
                n, self.short_write = self.short_write, 0
                return super().pwrite(fd, memoryview(data)[:n], pos)
            raise OSError(self.fail_write, "injected: " + errno.errorcode[self.fail_write])
        return super().pwrite(fd, data, pos)

    def fsync(self, fd: int) -> None:
        self._sync()
        self.fsyncs += 1
        super().fsync(fd)

    def fdatasync(self, fd: int) -> None:
        self._sync()
        super().fdatasync(fd)

    def _sync(self) -> None:
        self.syncs += 1
        if self.fail_sync is not None:
            raise OSError(self.fail_sync, "injected: " + errno.errorcode[self.fail_sync])

    def ftruncate(self, fd: int, length: int) -> None:
        self.truncates.append(length)
        super().ftruncate(fd, length)


@pytest.fixture
def ops() -> Iterator[FaultyOps]:
    faulty = FaultyOps()
    previous = fileops.use(faulty)
    try:
        yield faulty
    finally:
        fileops.use(previous)


def batch(i: int) -> bytes:
    return make_batch([(f"k{i}".encode(), b"v" * 200)])


def open_log(directory: Path, health: LogDir | None = None) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(), T0, health)


def test_partial_append_on_disk_full_is_cut_back_and_takes_the_directory_offline(
        tmp_path: Path, ops: FaultyOps) -> None:
    health = LogDir(tmp_path)
    offline: list[LogDir] = []
    health.add_listener(offline.append)
    lg = open_log(tmp_path / "t-0", health)
    for i in range(3):
        lg.append(batch(i), T0)
    size = lg.size_bytes
    seg_file = tmp_path / "t-0" / f"{0:020d}.log"
    ops.fail_write, ops.short_write = errno.ENOSPC, 100
    with pytest.raises(LogDirOfflineError) as info:
        lg.append(batch(3), T0)
    assert info.value.errno == errno.ENOSPC
    assert "t-0" in str(info.value) and "ENOSPC" in str(info.value)
    # The 100 bytes that reached the file are gone again; offsets did not move.
    assert seg_file.stat().st_size == size and lg.log_end_offset == 3
    assert health.offline and offline == [health]
    ops.fail_write = None
    # Offline for good: appends and reads are refused even though the disk "recovered".
    with pytest.raises(LogDirOfflineError):
        lg.append(batch(4), T0)
    with pytest.raises(LogDirOfflineError):
        lg.read(0, 1 << 20)
    syncs = ops.syncs
    lg.close()
    assert ops.syncs == syncs, "an offline log must not sync on close"
    assert not (tmp_path / "t-0" / CLEAN_SHUTDOWN_MARKER).exists()
    # The next start (more space) finds the three acknowledged batches and appends after them.
    again = open_log(tmp_path / "t-0")
    assert again.log_end_offset == 3
    assert again.append(batch(3), T0).base_offset == 3
    again.close()


def test_a_failure_in_one_partition_takes_every_partition_of_the_directory_offline(
        tmp_path: Path, ops: FaultyOps) -> None:
    health = LogDir(tmp_path)
    a, b = open_log(tmp_path / "a-0", health), open_log(tmp_path / "b-0", health)
    a.append(batch(0), T0)
    ops.fail_write = errno.EIO
    with pytest.raises(LogDirOfflineError):
        a.append(batch(1), T0)
    ops.fail_write = None
    with pytest.raises(LogDirOfflineError):
        b.append(batch(0), T0)
    with pytest.raises(LogDirOfflineError):
        b.flush()
    with pytest.raises(LogDirOfflineError):
        PartitionLog.open(tmp_path / "c-0", LogConfig(), T0, health)
    a.close()
    b.close()


@pytest.mark.parametrize("sync", ["flush", "sync_data"])
def test_a_failed_fsync_is_never_retried(tmp_path: Path, ops: FaultyOps, sync: str) -> None:
    health = LogDir(tmp_path)
    lg = open_log(tmp_path / "t-0", health)
    lg.append(batch(0), T0)
    ops.fail_sync = errno.EIO
    with pytest.raises(LogDirOfflineError) as info:
        getattr(lg, sync)()
    assert info.value.errno == errno.EIO and health.offline
    ops.fail_sync = None
    syncs = ops.syncs
    # A retry would be the bug: Linux may report success for pages it dropped after the error.
    for call in (lg.flush, lg.sync_data):
        with pytest.raises(LogDirOfflineError):
            call()
    lg.close()
    assert ops.syncs == syncs
    assert lg.recovery_point == 0


def test_sync_data_syncs_the_directory_once_after_a_roll(tmp_path: Path, ops: FaultyOps) -> None:
    # A coordinator log is only ever synced with sync_data: its directory must be synced after
    # the log is made or rolls (or the new segment's file may vanish in a power loss), and not
    # again on every later write.
    lg = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=1024), T0, LogDir(tmp_path))
    opened = ops.fsyncs
    lg.append(batch(0), T0)
    lg.sync_data()
    assert ops.fsyncs == opened + 1  # the new log's directory
    for i in range(1, 3):
        lg.append(batch(i), T0)
        lg.sync_data()
    assert ops.fsyncs == opened + 1
    while len(list((tmp_path / "t-0").glob("*.log"))) < 2:  # until the log rolls
        lg.append(batch(9), T0)
    lg.sync_data()
    lg.sync_data()
    assert ops.fsyncs == opened + 2
    lg.close()


def test_failed_index_write_keeps_the_append_but_takes_the_directory_offline(
        tmp_path: Path, ops: FaultyOps) -> None:
    health = LogDir(tmp_path)
    lg = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0), T0, health)
    lg.append(batch(0), T0)

    class IndexFails(FaultyOps):
        def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
            if len(data) in (8, 12):  # one offset or time index entry
                raise OSError(errno.EIO, "injected index failure")
            return super().pwrite(fd, data, pos)

    previous = fileops.use(IndexFails())
    try:
        result = lg.append(batch(1), T0)
    finally:
        fileops.use(previous)
    # The records are in the log: answering an error would make the producer duplicate them.
    assert result.base_offset == 1 and lg.log_end_offset == 2
    assert health.offline
    lg.close()
    again = open_log(tmp_path / "t-0")
    assert again.log_end_offset == 2
    again.close()


def test_roll_failure_takes_the_directory_offline(tmp_path: Path, ops: FaultyOps) -> None:
    health = LogDir(tmp_path)
    lg = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=300), T0, health)
    lg.append(batch(0), T0)
    ops.fail_write = errno.ENOSPC  # the seal entry of the old segment cannot be written
    with pytest.raises(LogDirOfflineError):
        lg.append(batch(1), T0)
    assert health.offline and lg.log_end_offset == 1
    ops.fail_write = None
    lg.close()
    again = open_log(tmp_path / "t-0")
    assert again.log_end_offset == 1
    again.close()
