"""A partition log as a replica: leader epochs, the high watermark, and truncation.

Part of ``PartitionLog`` (``storage/segment_log.py``; the shared state is
``storage/log_state.py``). The appends themselves (the leader's stamping its epoch, the
follower's keeping the leader's offsets and epochs) are in ``segment_log.py``; this part holds
what replication reads and changes besides:

- the leader-epoch cache (``storage/leader_epoch.py``): ``latest_epoch``,
  ``end_offset_for_epoch``, ``epoch_entries``; appends add to it, truncation trims its end,
  retention and DeleteRecords its start;
- the high watermark: ``high_watermark`` / ``set_high_watermark``, clamped to
  ``[log start, log end]``, checkpointed (``high-watermark.checkpoint``) by ``flush``,
  ``close`` and ``checkpoint_high_watermark`` when it changed, loaded on open (no checkpoint:
  the log end offset);
- ``truncate_to`` and ``truncate_fully_and_start_at`` (Kafka ``UnifiedLog.truncateTo`` /
  ``truncateFullyAndStartAt``, behaviour only).

Truncation is blocking (fsyncs) and durable before it returns; nothing may append to the
partition meanwhile (a follower's only appender is its fetcher, which truncates). It holds ``_flush_lock`` and
``_retention_lock`` throughout (no flush can checkpoint a recovery point past the new end, no
retention pass or cleaned-segment swap can race the segment list) and ``_lock`` only while the
in-memory state changes. Crash safety, step by step: the recovery-point checkpoint is lowered
first (so records appended after the truncation are CRC-checked by the next recovery); then the
segment files are cut and synced; then the epoch cache is trimmed (a crash before that leaves
entries past the log end, which the next open trims). ``truncate_fully_and_start_at`` clears the
epoch cache first instead: a crash then leaves old records without epochs, so the replica
truncates further later, never less.
"""

from __future__ import annotations

import bisect
import os

from storage import leader_epoch
from storage.leader_epoch import EpochEntry
from storage.log_loader import (
    CLEANER_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    fsync_dir,
    write_checkpoint,
)
from storage.log_state import LogState
from storage.segment import LONG_MAX, Segment


class LogReplica(LogState):
    """Leader epochs, the high watermark, ``truncate_to`` and ``truncate_fully_and_start_at``."""

    # -- leader epochs -----------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch of the log's records, -1 when none is known."""
        return self._epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(largest known epoch <= epoch, the offset where it ends)``;
        for the latest epoch the log end offset; ``(-1, -1)`` for -1 or an epoch above every
        known one (Kafka ``LeaderEpochFileCache.endOffsetFor``, ``storage/leader_epoch.py``)."""
        return self._epochs.end_offset_for(epoch, self._leo)

    def epoch_entries(self) -> list[EpochEntry]:
        """The leader-epoch cache: ``(epoch, start offset)`` pairs, oldest first."""
        return list(self._epochs.entries)

    def _begin_epoch(self, epoch: int) -> None:
        """A leader append stamped with ``epoch``, newer than the cache's latest: record that
        it starts at the log end offset, durably, before the append writes anything.

        Raises:
            LogClosedError: the log is closed.
            LogDirOfflineError: the checkpoint write failed or the directory is offline.
        """
        with self._epoch_lock:
            with self._lock:
                self._check_open()
                start = self._leo
            entries = self._epochs.entries
            if entries and epoch <= entries[-1].epoch:
                return
            self._write_epochs(leader_epoch.assign(entries, epoch, start))

    def _learn_epochs(self, changes: list[tuple[int, int]]) -> None:
        """A follower append: checkpoint the ``(epoch, base offset)`` where the batches' epoch
        changes, before the batches are written (Kafka ``assign`` for each)."""
        with self._epoch_lock:
            with self._lock:
                self._check_open()
            entries = self._epochs.entries
            for epoch, base in changes:
                entries = leader_epoch.assign(entries, epoch, base)
            if entries is not self._epochs.entries:
                self._write_epochs(entries)

    # -- high watermark ----------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """The offset below which every record is on every in-sync replica (consumers read up
        to it), never below the log start offset. Opens as the checkpointed value, or the log
        end offset without one."""
        hw, lso = self._hw, self._log_start_offset
        return hw if hw >= lso else lso

    def set_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to ``[log start, log end]``; returns the value set.
        Checkpointed by the next ``flush`` or ``close``."""
        with self._lock:
            hw = max(self._log_start_offset, min(offset, self._leo))
            if hw != self._hw:
                self._hw = hw
                self._hw_dirty = True
            return hw

    def checkpoint_high_watermark(self) -> None:
        """Write the high-watermark checkpoint now if it changed since the last one (Kafka does
        every ``replica.high.watermark.checkpoint.interval.ms``); ``flush`` and ``close`` do it
        too. Blocking; a no-op on a closed log.

        Raises:
            LogDirOfflineError: the write failed (the directory is now offline) or the directory
                was already offline.
        """
        with self._flush_lock:
            with self._lock:
                if self._closed or not self._hw_dirty:
                    return
                self.log_dir.check()
                hw, self._hw_dirty = self._hw, False
            try:
                write_checkpoint(self.directory / HIGH_WATERMARK_CHECKPOINT, hw)
            except OSError as exc:
                with self._lock:
                    self._hw_dirty = True
                raise self.log_dir.fail(f"writing the high-watermark checkpoint of {self._tp()} "
                                        f"in {self.directory}", exc) from exc

    # -- truncation --------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every record at or after ``offset`` (a follower's divergent tail); a no-op at
        or after the log end offset. Returns the new log end offset: ``offset``, or the base
        offset of the batch that holds ``offset`` when it falls inside one (the whole batch
        goes, as in Kafka). Below the first segment or the log start offset the log is emptied
        and starts at ``offset`` (``truncate_fully_and_start_at``).

        Later segments are deleted, the one holding ``offset`` cut (its indexes and
        ``.txnindex`` with it); the epoch cache loses the entries starting at or after the new
        end; the recovery point, high watermark and cleaner offset are lowered to it. Durable
        before it returns (module doc); blocking.

        Raises:
            ValueError: ``offset`` is negative.
            LogClosedError: the log is closed.
            LogDirOfflineError: a write, truncate or sync failed (the directory is now offline)
                or the directory was already offline.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate {self._tp()} to negative offset {offset}")
        with self._flush_lock, self._retention_lock:
            with self._lock:
                self._check_open()
                if offset >= self._leo:
                    return self._leo
                full = offset < self._segments[0].base_offset or offset < self._log_start_offset
            if full:
                self._start_at(offset)
                return offset
            try:
                return self._truncate_tail(offset)
            except OSError as exc:
                if self.log_dir.offline:
                    raise
                raise self.log_dir.fail(f"truncating {self._tp()} to offset {offset} in "
                                        f"{self.directory}", exc) from exc

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every record and start the (empty) log at ``offset``: log start, log end,
        recovery point and high watermark all become ``offset``, the epoch cache empties, the
        aborted-transaction index goes with the segments. Durable before it returns; blocking.

        Raises:
            ValueError: ``offset`` is negative.
            LogClosedError: the log is closed.
            LogDirOfflineError: a write or sync failed (the directory is now offline) or the
                directory was already offline.
        """
        if offset < 0:
            raise ValueError(f"cannot start {self._tp()} at negative offset {offset}")
        with self._flush_lock, self._retention_lock:
            with self._lock:
                self._check_open()
            self._start_at(offset)

    def _truncate_tail(self, offset: int) -> int:
        """``truncate_to`` with the segment holding ``offset`` in the log (under
        ``_flush_lock`` and ``_retention_lock``)."""
        directory = self.directory
        with self._lock:
            k = bisect.bisect_right(self._bases, offset) - 1
            first = self._locate(self._segments[k], offset)[1]
        new_leo = first if 0 <= first < offset else offset
        if self._recovery_point > new_leo:
            write_checkpoint(directory / RECOVERY_POINT_CHECKPOINT, new_leo)
        with self._lock:
            self._recovery_point = min(self._recovery_point, new_leo)
            victims = self._segments[k + 1:]
            if victims:
                del self._segments[k + 1:], self._bases[k + 1:]
                for v in victims:
                    v.close()
                    self._loaded.pop(v.base_offset, None)
                self._txn.drop_segments(v.base_offset for v in victims)
                self._size_bytes -= sum(v.size for v in victims)
            seg = self._segments[-1]
            if victims:
                # A sealed segment becomes the active one: writable descriptors, index in
                # memory, no longer subject to unloading.
                self._loaded.pop(seg.base_offset, None)
                seg.close()
                seg.fd = os.open(seg.log_path, os.O_RDWR)
                seg.loaded = False
            seg.load()
            pos = seg.locate(offset)[0]
            before = seg.size
            if pos < seg.size:
                seg.truncate(pos)
            seg.last_batch_pos = seg.last_batch_rel = -1
            # Rebuild the append state (last batch, running max timestamp, index spacing) from
            # the last index entry on; gaps are fine here, the records were checked before.
            end, _ = seg.recover(self.config.index_interval_bytes, LONG_MAX)
            if end < seg.size:
                seg.truncate(end)
            seg.open_index_files()
            seg.dirty = True
            self._dir_dirty = True
            self._size_bytes -= before - seg.size
            self._leo = new_leo
            self._txn.truncate_from(new_leo)
            hw_lowered = self._hw > new_leo
            self._hw = min(self._hw, new_leo)
            cleaner_lowered = self._cleaner_offset > new_leo
            if cleaner_lowered:
                self._cleaner_offset = new_leo
            if self.first_unstable_offset is not None and self.first_unstable_offset >= new_leo:
                self.first_unstable_offset = None
        # Last segments first, so a crash in between leaves a prefix of the log.
        for v in reversed(victims):
            v.unlink()
        seg.fsync()
        fsync_dir(directory)
        with self._epoch_lock:
            entries = self._epochs.entries
            trimmed = leader_epoch.truncate_from_end(entries, new_leo)
            if trimmed is not entries:
                self._write_epochs(trimmed)
        if hw_lowered:
            write_checkpoint(directory / HIGH_WATERMARK_CHECKPOINT, new_leo)
        if cleaner_lowered:
            write_checkpoint(directory / CLEANER_CHECKPOINT, new_leo)
        return new_leo

    def _start_at(self, offset: int) -> None:
        """``truncate_fully_and_start_at`` (under ``_flush_lock`` and ``_retention_lock``)."""
        directory = self.directory
        with self._epoch_lock:
            self._write_epochs(())
        try:
            write_checkpoint(directory / RECOVERY_POINT_CHECKPOINT, offset)
            write_checkpoint(directory / LOG_START_CHECKPOINT, offset)
            with self._lock:
                self._check_open()
                victims = self._segments
                for v in victims:
                    v.close()
                # Last segments first, so a crash in between leaves a prefix of the log; and
                # before creating the new segment, whose files may have a victim's name.
                for v in reversed(victims):
                    v.unlink()
                self._txn.drop_segments([v.base_offset for v in victims])
                self._loaded.clear()
                seg = Segment.create(directory, offset, 0)
                seg.open_index_files()
                self._segments = [seg]
                self._bases = [offset]
                self._size_bytes = 0
                self._log_start_offset = self._leo = self._recovery_point = offset
                self._hw = offset
                self._hw_dirty = False
                self.first_unstable_offset = None
                # No segment recovery re-read is left (the producer-state load needs no replay).
                self.recovered_from = None
                cleaner_lowered = self._cleaner_offset > offset
                if cleaner_lowered:
                    self._cleaner_offset = offset
            fsync_dir(directory)
            write_checkpoint(directory / HIGH_WATERMARK_CHECKPOINT, offset)
            if cleaner_lowered:
                write_checkpoint(directory / CLEANER_CHECKPOINT, offset)
        except OSError as exc:
            if self.log_dir.offline:
                raise
            raise self.log_dir.fail(f"emptying {self._tp()} to start at offset {offset} in "
                                    f"{directory}", exc) from exc
