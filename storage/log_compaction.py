"""The log cleaner's hooks in a partition log: its checkpoint, what it may clean, the swap.

Part of ``PartitionLog`` (``storage/segment_log.py``; the shared state is
``storage/log_state.py``). The cleaner (``storage/cleaner.py``) runs in its own thread, reads
the sealed segments below the recovery point by file name and writes a cleaned copy;
``swap_cleaned`` installs it crash-safely (``storage/segment_swap.py``) unless retention or
DeleteRecords removed part of the group meanwhile.
"""

from __future__ import annotations

import bisect

from protocol.record_batch import NO_TIMESTAMP
from storage import segment_swap
from storage.log_loader import CLEANER_CHECKPOINT, write_checkpoint
from storage.log_state import LogState
from storage.segment import Segment
from storage.txn_index import Entry as AbortedEntry


class LogCompaction(LogState):
    """``cleaner_offset``, ``cleanable_segments`` and ``swap_cleaned``."""

    @property
    def cleaner_offset(self) -> int:
        """The cleaner's first dirty offset: offsets below it have been compacted."""
        return self._cleaner_offset

    def set_cleaner_offset(self, offset: int) -> None:
        """Checkpoint the cleaner's first dirty offset (atomically; a crash keeps the old one,
        which only means cleaning some records again).

        Raises:
            OSError: the checkpoint could not be written.
        """
        with self._retention_lock:
            if self._closed:
                return
            write_checkpoint(self.directory / CLEANER_CHECKPOINT, offset)
            self._cleaner_offset = offset

    def cleanable_segments(self, with_timestamps: bool) -> list[tuple[Segment, int, int]] | None:
        """The sealed segments the cleaner may rewrite, oldest first, as (segment, end offset =
        the next segment's base, largest timestamp or NO_TIMESTAMP unless ``with_timestamps``);
        None for a closed or offline log.

        Only segments wholly below the recovery point: they are fsynced, never appended to
        again, and recovery after a crash does not scan them. The cleaner reads their files by
        name (``Segment.log_path``) with its own descriptors, and never touches the ``Segment``
        objects but to hand them back to ``swap_cleaned``.
        """
        with self._lock:
            if self._closed or self.log_dir.offline:
                return None
            limit = min(self._recovery_point, self._segments[-1].base_offset)
            out: list[tuple[Segment, int, int]] = []
            for k in range(len(self._segments) - 1):
                seg, end = self._segments[k], self._bases[k + 1]
                if end > limit:
                    break
                ts = self._max_timestamp(seg) if with_timestamps else NO_TIMESTAMP
                out.append((seg, end, ts))
            return out

    def swap_cleaned(self, group: list[Segment], size: int, max_timestamp: int,
                     aborted: list[AbortedEntry] | None = None) -> bool:
        """Replace the adjacent segments ``group`` with the cleaned segment written to the
        ``.cleaned`` files of ``group[0]``'s base (``size`` bytes, largest timestamp
        ``max_timestamp``, aborted-transaction entries ``aborted``, written to its
        ``.txnindex.cleaned`` when not None), crash-safely (``storage/segment_swap.py``).
        Returns False (cleaned
        files discarded) when the group is no longer in the log: retention or DeleteRecords
        removed part of it, or the log was closed.

        Segment-list changes are serialised by ``_retention_lock`` (retention, DeleteRecords,
        close and delete take it too); only the renames and the list update hold ``_lock``, so
        appends and reads wait for a few renames at most.

        Raises:
            LogDirOfflineError: writing the swap marker or a rename failed.
        """
        directory = self.directory
        bases = [seg.base_offset for seg in group]
        fault = self.swap_fault or (lambda _stage: None)
        with self._retention_lock:
            with self._lock:
                k = self._index_of(group)
            if k < 0:
                segment_swap.discard(directory, bases[0])
                return False
            fault("cleaned")
            try:
                segment_swap.commit(directory, bases)
            except OSError as exc:
                segment_swap.discard(directory, bases[0])
                raise self.log_dir.fail(f"committing a cleaned segment of {self._tp()} in "
                                        f"{directory}", exc) from exc
            fault("committed")
            with self._lock:
                for seg in group:
                    seg.close()
                    self._loaded.pop(seg.base_offset, None)
                try:
                    segment_swap.install(directory, bases)
                except OSError as exc:
                    # The marker stands: the next start completes the swap.
                    raise self.log_dir.fail(f"installing a cleaned segment of {self._tp()} in "
                                            f"{directory}", exc) from exc
                new = Segment(directory, bases[0])
                new.size = size
                new.max_timestamp = max_timestamp
                new.max_known = True
                self._segments[k : k + len(group)] = [new]
                self._bases[k : k + len(group)] = [bases[0]]
                self._txn.replace(bases, aborted or [])
                self._size_bytes += size - sum(seg.size for seg in group)
            fault("installed")
            try:
                segment_swap.finish(directory, bases)
            except OSError as exc:
                raise self.log_dir.fail(f"syncing {directory} after a cleaned-segment swap",
                                        exc) from exc
        return True

    def _index_of(self, group: list[Segment]) -> int:
        """Where ``group`` sits, contiguous, in the segment list (sealed), or -1 (under
        ``_lock``)."""
        if self._closed or self.log_dir.offline:
            return -1
        k = bisect.bisect_left(self._bases, group[0].base_offset)
        if k + len(group) >= len(self._segments):
            return -1
        for j, seg in enumerate(group):
            if self._segments[k + j] is not seg:
                return -1
        return k
