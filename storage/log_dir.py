"""A log directory's health: online until the first write or sync error, then offline for good.

Kafka behaviour (``LogDirFailureChannel``, ``LogManager.handleLogDirFailure``; behaviour only):
an ``IOException`` while writing or syncing any file of a log directory takes the whole directory
offline. Its partitions stop serving (KAFKA_STORAGE_ERROR), nothing more is written or synced
there, and a broker whose every log directory is offline shuts down. Shoal has one log directory,
so the sequence is:

1. A ``PartitionLog`` write, truncate or sync raises ``OSError``. The log undoes what it can
   without syncing (a partial append is truncated back to the last whole batch) and calls
   ``LogDir.fail``. Syncs are never retried: after a failed ``fsync`` the kernel may have dropped
   the dirty pages and a second ``fsync`` can report success for data that is gone.
2. ``fail`` marks the directory offline (the first failure only; later ones are logged at debug)
   and logs, for the operator, what failed (file, errno) and what to do. From then on every
   ``PartitionLog`` of the directory refuses appends, reads and syncs with
   ``LogDirOfflineError`` (an ``OSError``; handlers answer KAFKA_STORAGE_ERROR per partition) and
   its ``close`` writes nothing: no seal, no flush, no clean-shutdown marker, so the next start
   recovers every partition by scanning its tail.
3. ``fail`` calls the listeners (the broker: begin a clean shutdown with a non-zero exit status).
   They run on the thread that saw the error (a flush worker or the event loop) and must hand off
   to the event loop themselves.

Thread-safe: flushes run in worker threads while the event loop appends.
"""

from __future__ import annotations

import errno as errno_mod
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from storage.log import LogError

_log = logging.getLogger("shoal.log")


class LogDirOfflineError(LogError, OSError):
    """The log directory is offline after a storage error (Kafka KAFKA_STORAGE_ERROR).

    An ``OSError`` too, so code that already treats I/O errors as storage errors keeps doing so.
    """


def describe(exc: BaseException) -> str:
    """``[Errno 28 ENOSPC] No space left on device`` style text for an OS error."""
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno_mod.errorcode.get(exc.errno, str(exc.errno))
        return f"[Errno {exc.errno} {name}] {exc.strerror or os.strerror(exc.errno)}"
    return str(exc)


def advice(exc: BaseException) -> str:
    """What an operator should do about a storage error."""
    if isinstance(exc, OSError) and exc.errno in (errno_mod.ENOSPC, errno_mod.EDQUOT):
        return ("free disk space (or grow the volume) under the data directory, then restart "
                "the broker; acknowledged records are kept and the unsynced tail is recovered")
    return ("check the disk and the kernel log (dmesg) for I/O errors, fix or replace the device, "
            "then restart the broker; it recovers each partition from its last valid batch")


class LogDir:
    """Health of one log directory (see the module doc for the failure sequence)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._offline = False
        self._cause: str | None = None
        self._listeners: list[Callable[[LogDir], None]] = []

    @property
    def offline(self) -> bool:
        return self._offline

    @property
    def cause(self) -> str | None:
        """What took the directory offline (file, operation, errno), or None while online."""
        return self._cause

    def add_listener(self, cb: Callable[[LogDir], None]) -> None:
        """Call ``cb(self)`` once, when the directory goes offline (from the failing thread)."""
        self._listeners.append(cb)

    def check(self) -> None:
        """Raises:
            LogDirOfflineError: the directory is offline.
        """
        if self._offline:
            raise LogDirOfflineError(errno_mod.EIO, f"log directory {self.path} is offline after "
                                     f"a storage error ({self._cause}); restart the broker once "
                                     "the disk is fixed")

    def fail(self, what: str, exc: BaseException) -> LogDirOfflineError:
        """Take the directory offline because ``what`` (names the file and operation) failed with
        ``exc``. Returns the error to raise to the caller (chain it: ``raise ... from exc``)."""
        cause = f"{what}: {describe(exc)}"
        with self._lock:
            first = not self._offline
            if first:
                self._offline = True
                self._cause = cause
        if first:
            _log.critical("storage error in log directory %s: %s. The directory is now offline: "
                          "its partitions answer KAFKA_STORAGE_ERROR, nothing more is written or "
                          "synced there, and the broker shuts down. To recover: %s.",
                          self.path, cause, advice(exc))
            for cb in list(self._listeners):
                try:
                    cb(self)
                except Exception:
                    _log.exception("log directory failure listener failed")
        else:
            _log.debug("further storage error in offline log directory %s: %s", self.path, cause)
        return LogDirOfflineError(getattr(exc, "errno", None) or errno_mod.EIO,
                                  f"storage error, log directory {self.path} is offline: {cause}")
