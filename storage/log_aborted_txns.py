"""The aborted-transaction index of a partition log (``storage/txn_index.py``) behind its lock.

Part of ``PartitionLog`` (``storage/segment_log.py``; the shared state is
``storage/log_state.py``). One ``.txnindex`` per segment that holds an ABORT marker, gone with
its segment; read_committed fetches list the aborted transactions of the range they return.
"""

from __future__ import annotations

import bisect

from storage.log import OffsetOutOfRangeError
from storage.log_state import LogState
from storage.txn_index import Entry as AbortedEntry
from storage.txn_index import txn_index_path


class LogAbortedTxns(LogState):
    """``add_aborted_txn``, ``aborted_txns``, ``segment_aborted_txns`` and
    ``truncate_aborted_txns``."""

    def add_aborted_txn(self, entry: AbortedEntry) -> None:
        """Index an aborted transaction in the segment holding its ABORT marker
        (``entry[2]``), which must be in the log.

        Raises:
            LogClosedError: the log is closed.
            LogDirOfflineError: the index write failed (the directory is now offline) or the
                directory was already offline.
        """
        with self._lock:
            self._check_open()
            if not self._log_start_offset <= entry[2] < self._leo:
                raise OffsetOutOfRangeError(f"marker offset {entry[2]} is not in the log")
            base = self._bases[bisect.bisect_right(self._bases, entry[2]) - 1]
            try:
                self._txn.add(base, entry)
            except OSError as exc:
                raise self.log_dir.fail(f"writing {txn_index_path(self.directory, base)}",
                                        exc) from exc

    def aborted_txns(self, start: int, end: int) -> list[AbortedEntry]:
        """The aborted transactions whose offsets intersect ``[start, end)``, oldest first
        (from the index, no log read)."""
        with self._lock:
            return self._txn.collect(start, end)

    def segment_aborted_txns(self, base: int) -> list[AbortedEntry]:
        """The index entries of the segment at ``base`` (the log cleaner's copy)."""
        with self._lock:
            return self._txn.entries(base)

    def truncate_aborted_txns(self, offset: int) -> int:
        """Drop the entries whose marker is at or past ``offset`` (before the producer-state
        replay re-adds them); returns how many.

        Raises:
            LogDirOfflineError: an index file could not be rewritten.
        """
        with self._lock:
            try:
                return self._txn.truncate_from(offset)
            except OSError as exc:
                raise self.log_dir.fail(f"truncating the transaction index of {self._tp()}",
                                        exc) from exc
