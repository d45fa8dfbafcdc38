"""One Kafka partition on disk, live: ``PartitionLog``, the segment list and its logic.

A partition is a directory of segments and checkpoint files (layout, loading and crash recovery:
``storage/log_loader.py``). ``PartitionLog.open`` has the loader read the directory and builds
the log from the state it returns. What happens after is split by job: this module appends and
rolls, runs the flush policy and the recovery-point checkpoint, and closes (clean-shutdown
marker) or deletes the log; reads and timestamp lookups are ``storage/log_reads.py``, retention
and DeleteRecords (the log start offset checkpoint) ``storage/log_retention.py``, the log
cleaner's hooks (its checkpoint and the cleaned-segment swap, ``storage/segment_swap.py``)
``storage/log_compaction.py``, the aborted-transaction index (``storage/txn_index.py``: one
``.txnindex`` per segment that holds an ABORT marker, gone with its segment)
``storage/log_aborted_txns.py``, and the log as a replica (leader epochs, the high watermark,
truncation; ``storage/leader_epoch.py``) ``storage/log_replica.py``. They share the state in
``storage/log_state.py``; the settings are ``storage/log_config.py``. One segment (its files, in-memory index, appends, seal and the CRC
check of its unflushed tail) is ``storage.segment.Segment``.

Invariants:
- Offsets increase: batches of a segment start at or after its base offset (its file name) and
  each batch starts after the previous batch's last offset; appends keep them dense, the log
  cleaner leaves gaps (``storage/cleaner.py``). Segment *k+1* starts at or after the end offset
  of segment *k*; only the last segment (the active one) is appended to, and never cleaned.
- Everything below the recovery point is fsynced (data and index files). Startup after a crash
  validates only the batches after the last index entry below the recovery point, so its cost
  follows the unflushed tail, not the log size. Sealed segments load their index on first use
  and only a few stay loaded (``segment.MAX_LOADED_SEALED``), so memory does not grow with the
  log.
- ``log_start_offset`` only moves forward; whole segments below it are deleted.

Threads: every method is synchronous and thread-safe. The broker runs ``flush`` and
``enforce_retention`` in worker threads while the event loop appends and reads: one
``threading.Lock`` guards the segment list, the segments themselves, descriptors and counters
and is never held across an fsync (the leader-epoch checkpoint is written before an append that
starts a new epoch takes it). Reads hold it during their ``pread``s so a concurrent segment
deletion cannot close a descriptor under them.

Storage faults: a failed write, truncate or sync takes the log directory offline
(``storage.log_dir``): a partial append is truncated back to the last whole batch, the failure is
reported to the directory's ``LogDir`` (shared by every partition of a broker's data directory),
and from then on appends, reads and syncs raise ``LogDirOfflineError`` and ``close`` writes
nothing (no seal, flush or clean-shutdown marker). A failed sync is never retried. Other I/O
errors surface as ``OSError``. Kafka class this mirrors: ``UnifiedLog`` (behaviour only).
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
from pathlib import Path

from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    TIMESTAMP_TYPE_MASK,
    CorruptRecordError,
    RecordTooLargeError,
)
from storage import fileops, log_loader
from storage.log import AppendResult, UnexpectedOffsetError
from storage.log_aborted_txns import LogAbortedTxns
from storage.log_compaction import LogCompaction
from storage.log_config import LogConfig
from storage.log_dir import LogDir, LogDirOfflineError
from storage.log_loader import (
    CLEAN_SHUTDOWN_MARKER,
    HIGH_WATERMARK_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    fsync_dir,
    write_checkpoint,
)
from storage.log_reads import LogReads
from storage.log_replica import LogReplica
from storage.log_retention import LogRetention
from storage.segment import INT32_MAX, Segment, batch_metas

__all__ = ["LogConfig", "PartitionLog"]

_log = logging.getLogger("shoal.log")

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_PACK_INT32 = _INT32.pack_into
_INT64 = struct.Struct(">q")


class PartitionLog(LogReads, LogRetention, LogCompaction, LogAbortedTxns, LogReplica):
    """A partition stored as segment files in one directory. Create with ``PartitionLog.open``.

    ``config`` may be replaced at any time (dynamic topic configs); the next operation uses it.
    The parts it is built from are named in ``storage/log_state.py``.
    """

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, now_ms: int,
             log_dir: LogDir | None = None) -> PartitionLog:
        """Open the partition in ``directory``, creating it or recovering it after a crash
        (``storage.log_loader.load``).

        Raises:
            LogDirOfflineError: ``log_dir`` is offline.
            OSError: the directory or its files cannot be read or written.
        """
        directory = Path(directory)
        if log_dir is not None:
            log_dir.check()
        loaded = log_loader.load(directory, config.index_interval_bytes, now_ms)
        return cls(directory, config, loaded, log_dir)

    # -- append ------------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, now_ms: int,
               leader_epoch: int | None = None) -> AppendResult:
        """Append already-validated v2 batches at the log end offset, assigning their offsets.

        All batches go into one segment with one write to the page cache (never an fsync). A new
        segment is rolled first when the active one would grow past ``segment_bytes``, is older
        than ``segment_ms``, or would need a relative offset beyond int32.

        With ``leader_epoch >= 0`` (a replicated partition's leader) every batch is stamped with
        it (``partitionLeaderEpoch``, outside the CRC) and, when it is newer than the leader-epoch
        cache's latest, ``(leader_epoch, base offset)`` is checkpointed before the batches are
        written (``storage/leader_epoch.py``). Appends of one partition come from one thread at a
        time (the broker's event loop), so that entry starts exactly at these batches. ``None``
        (the default) means ``self.appending_epoch``: the epoch the broker leads this partition
        under, set when it becomes the leader of a replicated partition (-1 otherwise), so every
        writer of the log (producers, markers, coordinators) stamps it.

        Raises:
            CorruptRecordError: ``data`` is empty or is not a sequence of whole v2 batches.
            RecordTooLargeError: ``data`` is larger than a segment can address (2 GiB).
            LogClosedError: the log is closed.
            LogDirOfflineError: the write failed (what it wrote is truncated away and the log
                directory is now offline) or the directory was already offline.
        """
        buf = bytearray(data)
        n = len(buf)
        if n == 0:
            raise CorruptRecordError("nothing to append")
        if n > INT32_MAX:
            raise RecordTooLargeError(f"append of {n} bytes does not fit a segment")
        metas, offsets = batch_metas(buf)
        if leader_epoch is None:
            leader_epoch = self.appending_epoch
        if leader_epoch >= 0:
            for m in metas:
                _PACK_INT32(buf, m[0] + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
            if leader_epoch > self._epochs.latest_epoch:
                self._begin_epoch(leader_epoch)
        with self._lock:
            self._check_open()
            leo = self._leo
            seg, start, offset = self._write(buf, metas, leo, leo + offsets - 1, now_ms, False)
            lso = self._log_start_offset
        append_time = -1
        if _INT16.unpack_from(buf, ATTRIBUTES_OFFSET)[0] & TIMESTAMP_TYPE_MASK:
            append_time = metas[0][3]
        return AppendResult(leo, offset - 1, append_time, lso, seg.base_offset, start)

    def append_as_follower(self, data: bytes | bytearray | memoryview,
                           now_ms: int) -> AppendResult:
        """Append a leader's batches unchanged (offsets, epochs): a follower's append.

        The first batch must start at or after the log end offset (after it: a compaction gap
        of the leader's log) and each batch after the previous one's last offset. New leader
        epochs in the batch headers are checkpointed in the leader-epoch cache before the
        batches are written. The log end offset becomes the last batch's last offset + 1.

        A gap in offsets in the unflushed tail (a compacted leader's) is cut off by crash
        recovery like a torn write; the follower fetches it again.

        Raises:
            UnexpectedOffsetError: the offsets do not continue the log (truncate first).
            CorruptRecordError, RecordTooLargeError, LogClosedError, LogDirOfflineError: as
                ``append``.
        """
        # Written as they are (offsets kept): bytes need no mutable copy.
        buf = data if isinstance(data, bytes | bytearray) else bytes(data)
        n = len(buf)
        if n == 0:
            raise CorruptRecordError("nothing to append")
        if n > INT32_MAX:
            raise RecordTooLargeError(f"append of {n} bytes does not fit a segment")
        metas, _ = batch_metas(buf)
        unpack64, unpack32 = _INT64.unpack_from, _INT32.unpack_from
        first = expected = unpack64(buf, 0)[0]
        changes: list[tuple[int, int]] = []
        last_epoch = None
        for p, _, delta, _ in metas:
            base = unpack64(buf, p)[0]
            if base < expected:
                raise UnexpectedOffsetError(
                    f"{self._tp()}: batch at offset {base} does not follow offset "
                    f"{expected - 1}; the leader's batches must have increasing offsets")
            epoch = unpack32(buf, p + PARTITION_LEADER_EPOCH_OFFSET)[0]
            if epoch != last_epoch:
                if epoch >= 0:
                    changes.append((epoch, base))
                last_epoch = epoch
            expected = base + delta + 1
        leo = self._leo
        if first < leo:
            raise UnexpectedOffsetError(
                f"{self._tp()}: follower append starts at offset {first}, below the log end "
                f"offset {leo}; truncate the log to where it diverged first")
        if changes:
            self._learn_epochs(changes)
        with self._lock:
            self._check_open()
            if first < self._leo:
                raise UnexpectedOffsetError(f"{self._tp()}: follower append at offset {first} "
                                            f"raced an append up to {self._leo}")
            seg, start, offset = self._write(buf, metas, first, expected - 1, now_ms, True)
            lso = self._log_start_offset
        append_time = -1
        if _INT16.unpack_from(buf, ATTRIBUTES_OFFSET)[0] & TIMESTAMP_TYPE_MASK:
            append_time = metas[0][3]
        return AppendResult(first, offset - 1, append_time, lso, seg.base_offset, start)

    def _write(self, buf: bytes | bytearray, metas: list[tuple[int, int, int, int]], first: int,
               last: int, now_ms: int, keep_offsets: bool) -> tuple[Segment, int, int]:
        """Write the batches of an append holding offsets ``first..last`` (under ``_lock``,
        rolling first when due); returns the segment, the position written at, and the new log
        end offset."""
        cfg = self.config
        seg = self._segments[-1]
        n = len(buf)
        if seg.size > 0 and (
            seg.size + n > cfg.segment_bytes
            or last - seg.base_offset > INT32_MAX
            or now_ms - seg.created_ms > cfg.segment_ms
        ):
            try:
                seg = self._roll(now_ms, first)
            except OSError as exc:
                raise self.log_dir.fail(f"rolling a new segment in {self.directory}",
                                        exc) from exc
        elif last - seg.base_offset > INT32_MAX:
            raise UnexpectedOffsetError(f"{self._tp()}: offset {last} is too far past segment "
                                        f"{seg.base_offset}; truncate fully and start there")
        if seg.size == 0:
            seg.created_ms = now_ms
        start = seg.size
        leo = self._leo
        try:
            offset, entries = seg.append(buf, metas, first, cfg.index_interval_bytes,
                                         keep_offsets)
        except OSError as exc:
            raise self._append_failed(seg, start, exc) from exc
        self._leo = offset
        self._size_bytes += n
        self._appended += offset - leo
        if self._unflushed_since_ms is None:
            self._unflushed_since_ms = now_ms
        if self._since_snapshot_ms is None:
            self._since_snapshot_ms = now_ms
        if entries:
            # Index entries are hints and go at explicit positions: if this write fails, the
            # appended data stands and the next entries overwrite any partial one.
            try:
                seg.add_entries(entries)
            except OSError as exc:
                # The records are in the log (the append stands and is answered); the
                # directory still goes offline, as for any write error.
                self.log_dir.fail(f"writing the index of {seg.log_path}", exc)
        return seg, start, offset

    def _append_failed(self, seg: Segment, start: int, exc: OSError) -> LogDirOfflineError:
        """A write into ``seg`` at ``start`` failed: cut off whatever part of it reached the file
        (so no torn batch follows the last whole one, and a retry cannot find half of it) and take
        the directory offline. Returns the error to raise (under ``_lock``)."""
        try:
            fileops.OPS.ftruncate(seg.fd, start)
        except OSError:
            # Recovery cuts the torn tail on the next start: no clean-shutdown marker is written
            # for an offline directory, so the tail is CRC-checked.
            _log.warning("%s: could not truncate a failed append back to %d bytes; the next "
                         "start cuts it", seg.log_path, start)
        return self.log_dir.fail(f"appending {self._tp()} to {seg.log_path} at byte {start}", exc)

    def _roll(self, now_ms: int, base: int) -> Segment:
        """Seal the active segment and start one at ``base`` (the log end offset, or a
        follower's next batch after a compaction gap)."""
        old = self._segments[-1]
        old.seal()
        old.close_index_files()
        self._track(old)
        seg = Segment.create(self.directory, base, now_ms)
        self._segments.append(seg)
        self._dir_dirty = True
        seg.open_index_files()
        self._bases.append(seg.base_offset)
        self._rolled_unflushed = True
        if self.roll_listener is not None:
            self.roll_listener(seg.base_offset)
        return seg

    # -- durability --------------------------------------------------------------------------

    def needs_flush(self, now_ms: int) -> bool:
        """Whether the flush policy (``flush_interval_messages``/``flush_interval_ms``) is due.

        Stays True until a flush that covers the data completes, so a caller that waits for
        durability after checking it never answers early.
        """
        unflushed = self._appended - self._flushed
        if unflushed <= 0:
            return False
        cfg = self.config
        if unflushed >= cfg.flush_interval_messages:
            return True
        since = self._unflushed_since_ms
        if cfg.flush_interval_ms is None or since is None:
            return False
        return now_ms - since >= cfg.flush_interval_ms

    def needs_background_flush(self, now_ms: int) -> bool:
        """``needs_flush``, or a segment was rolled since the last flush.

        Kafka flushes a segment when it is rolled, which keeps the unflushed tail (and so the
        recovery time after a crash) to about one segment even when flushing is left to the OS.
        A background flusher should use this; producers should wait only for ``needs_flush``.
        """
        return self._rolled_unflushed or self.needs_flush(now_ms)

    def flush(self) -> None:
        """fsync the segments (data and index files) written since the last flush, then advance
        and checkpoint the recovery point. Blocking; safe to run in a worker thread while the
        owner appends. A no-op on a closed log.

        Raises:
            LogDirOfflineError: an fsync or the checkpoint write failed (never retried: the log
                directory is now offline), or the directory was already offline.
        """
        with self._flush_lock:
            if not self._closed:
                self.log_dir.check()
                self._flush_locked()

    def sync_data(self) -> None:
        """fdatasync the record data of every segment written since the last flush (and the
        directory once after a roll or a new log), nothing else. Blocking; thread-safe like
        ``flush``.

        The durability point of coordinator logs on the acknowledgement path: one data sync
        instead of ``flush``'s five (data, both indexes, the recovery-point checkpoint, the
        directory). Indexes are rebuilt and the tail past the recovery point is CRC-checked on
        recovery, so synced records survive power loss; a later ``flush`` syncs the rest and
        advances the recovery point.

        Raises:
            LogDirOfflineError: an fdatasync failed (never retried: the log directory is now
                offline), or the directory was already offline.
        """
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                self.log_dir.check()
                # Duplicated under the lock: a segment may be closed (and its descriptor number
                # reused) by the owner while we sync.
                fds = [os.dup(seg.fd) for seg in self._segments if seg.dirty and seg.fd >= 0]
                # Taken: once synced, the directory's entries are durable and later syncs need
                # not repeat it (coordinator logs are synced this way and rarely flushed, so
                # each write used to fsync their directory). A roll meanwhile marks it again.
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                for fd in fds:
                    fileops.OPS.fdatasync(fd)
                if dir_dirty:
                    fsync_dir(self.directory)
            except OSError as exc:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or dir_dirty
                raise self.log_dir.fail(f"syncing {self._tp()} in {self.directory}", exc) from exc
            finally:
                for fd in fds:
                    os.close(fd)

    def start_writeback(self) -> None:
        """Start writing the record data of the segments written since the last flush to the
        disk, without waiting (``FileOps.start_writeback``): the next ``sync_data``/``flush``
        finds less to write. Changes no durability promise (the data is durable only after a
        sync) and no flush bookkeeping. Blocking only for the submission; thread-safe like
        ``sync_data``; a no-op on a closed log. Errors are the caller's to ignore: a failing
        disk is reported by the sync that follows.

        Raises:
            OSError: the kernel refused the writeback.
        """
        with self._lock:
            if self._closed:
                return
            fds = [os.dup(seg.fd) for seg in self._segments if seg.dirty and seg.fd >= 0]
        try:
            for fd in fds:
                fileops.OPS.start_writeback(fd)
        finally:
            for fd in fds:
                os.close(fd)

    def _flush_locked(self) -> None:
        with self._lock:
            target = self._leo
            appended = self._appended
            dirty = [s for s in self._segments if s.dirty]
            for seg in dirty:
                seg.dirty = False
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            rolled, self._rolled_unflushed = self._rolled_unflushed, False
            self._since_snapshot_ms = None
            hw, hw_dirty, self._hw_dirty = self._hw, self._hw_dirty, False
        try:
            for seg in dirty:
                seg.fsync()
            if dir_dirty:
                fsync_dir(self.directory)
            if target > self._recovery_point:
                write_checkpoint(self.directory / RECOVERY_POINT_CHECKPOINT, target)
            if hw_dirty:
                write_checkpoint(self.directory / HIGH_WATERMARK_CHECKPOINT, hw)
        except OSError as exc:
            # Never retried (see storage.fileops): the directory goes offline instead.
            with self._lock:
                for seg in dirty:
                    seg.dirty = True
                self._dir_dirty = self._dir_dirty or dir_dirty
                self._rolled_unflushed = self._rolled_unflushed or rolled
                self._hw_dirty = self._hw_dirty or hw_dirty
            raise self.log_dir.fail(f"syncing {self._tp()} in {self.directory}", exc) from exc
        with self._lock:
            self._recovery_point = max(self._recovery_point, target)
            self._flushed = max(self._flushed, appended)
            more = self._appended > self._flushed
            self._unflushed_since_ms = self._since_snapshot_ms if more else None

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Seal the active segment, flush, write the clean-shutdown marker and close the files.

        With the log directory offline it only closes the files: nothing more is written or
        synced there, and without the marker the next open recovers by scanning.

        Raises:
            OSError: the final flush failed (files are closed anyway; no marker is written, so the
                next open recovers by scanning).
        """
        with self._flush_lock, self._retention_lock:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                if self.log_dir.offline:
                    for seg in self._segments:
                        seg.close()
                    return
                active = self._segments[-1]
                try:
                    active.seal()
                except OSError as exc:
                    self.log_dir.fail(f"sealing {active.log_path}", exc)
                    for seg in self._segments:
                        seg.close()
                    raise
            try:
                self._flush_locked()
                try:
                    write_checkpoint(self.directory / CLEAN_SHUTDOWN_MARKER, self._leo)
                except OSError as exc:
                    raise self.log_dir.fail(f"writing the clean-shutdown marker of {self._tp()}",
                                            exc) from exc
            finally:
                with self._lock:
                    for seg in self._segments:
                        seg.close()

    def delete(self, moved_to: Path | None = None) -> None:
        """Close without flushing and remove the partition directory (topic deletion), or
        ``moved_to`` when the directory was renamed there first (it is not looked for under its
        own name, which a new topic may have taken meanwhile).

        Raises:
            OSError: the directory could not be removed.
        """
        directory = self.directory if moved_to is None else moved_to
        with self._flush_lock, self._retention_lock:
            with self._lock:
                self._closed = True
                for seg in self._segments:
                    seg.close()
            try:
                shutil.rmtree(directory)
            except FileNotFoundError:
                pass
            fsync_dir(directory.parent)
