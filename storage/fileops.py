"""The OS calls that change partition files on disk, behind one seam.

Every write, truncate and sync of a partition's segment, index and checkpoint files goes through
``OPS`` (a ``FileOps``), so tests can swap in an implementation that fails the way disks do
(``OSError`` with ``EIO`` or ``ENOSPC``, short writes) without a faulty device. Reads and
``open``/``close`` are not routed here: a failing read is reported where it happens and leaves
nothing half-done on disk.

Rules the callers keep (Kafka ``LogDirFailureChannel``, behaviour only): a failed ``fsync`` or
``fdatasync`` is never retried (on Linux a later sync may report success for pages the kernel
already dropped), and any failed write or sync takes the log directory offline
(``storage.log_dir``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# sync_file_range(2) flag: start writeback of the range's dirty pages, do not wait.
_SYNC_FILE_RANGE_WRITE = 2


def _libc_sync_file_range() -> object | None:
    """libc's ``sync_file_range`` (Linux), or None where it is missing (then writeback is left
    to the kernel; nothing depends on it)."""
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _libc_sync_file_range()


class FileOps:
    """The real OS calls. Subclass and install with ``use`` to inject faults."""

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        return os.pwrite(fd, data, pos)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def start_writeback(self, fd: int) -> None:
        """Start writing the file's dirty pages to the disk without waiting for them
        (``sync_file_range(SYNC_FILE_RANGE_WRITE)``): a later fdatasync has less left to write.
        Durability is unchanged: only a sync makes data durable. A no-op where unavailable."""
        if _sync_file_range is not None:
            if _sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE) != 0:  # type: ignore[operator]
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)


OPS: FileOps = FileOps()


def use(ops: FileOps) -> FileOps:
    """Route file calls through ``ops`` from now on; returns the previous implementation."""
    global OPS
    previous, OPS = OPS, ops
    return previous
