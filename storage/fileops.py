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

import os


class FileOps:
    """The real OS calls. Subclass and install with ``use`` to inject faults."""

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        return os.pwrite(fd, data, pos)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)


OPS: FileOps = FileOps()


def use(ops: FileOps) -> FileOps:
    """Route file calls through ``ops`` from now on; returns the previous implementation."""
    global OPS
    previous, OPS = OPS, ops
    return previous
