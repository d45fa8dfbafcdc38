"""One Kafka partition on disk, live: the segment list and the partition-level logic.

A partition is a directory of segments and checkpoint files (layout, loading and crash recovery:
``storage/log_loader.py``). ``PartitionLog.open`` has the loader read the directory and builds
the log from the state it returns. This module holds what happens after: appends and rolling,
reads across segments, timestamp lookups, the flush policy and the recovery-point checkpoint,
retention and DeleteRecords (the log start offset checkpoint), the log cleaner's hooks (its
checkpoint and the cleaned-segment swap, ``storage/segment_swap.py``), the aborted-transaction
index (``storage/txn_index.py``: one ``.txnindex`` per segment that holds an ABORT marker, gone
with its segment) and the clean shutdown.
One segment (its files, in-memory index, appends, seal and the CRC check of its unflushed tail) is
``storage.segment.Segment``.

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
and is never held across an fsync. Reads hold it during their ``pread``s so a concurrent segment
deletion cannot close a descriptor under them.

Storage faults: a failed write, truncate or sync takes the log directory offline
(``storage.log_dir``): a partial append is truncated back to the last whole batch, the failure is
reported to the directory's ``LogDir`` (shared by every partition of a broker's data directory),
and from then on appends, reads and syncs raise ``LogDirOfflineError`` and ``close`` writes
nothing (no seal, flush or clean-shutdown marker). A failed sync is never retried. Other I/O
errors surface as ``OSError``. Kafka class this mirrors: ``UnifiedLog`` (behaviour only).
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storage import fileops, log_loader, segment_swap
from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    CorruptRecordError,
    RecordTooLargeError,
)
from storage.log import AppendResult, LogClosedError, LogError, OffsetOutOfRangeError, ReadResult
from storage.log_dir import LogDir, LogDirOfflineError
from storage.log_loader import (
    CLEAN_SHUTDOWN_MARKER,
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LoadedLog,
    fsync_dir,
    write_checkpoint,
)
from storage.segment import (
    INT32_MAX,
    LONG_MAX,
    Segment,
    batch_metas,
    header_at,
    track_loaded,
    walk,
)
from storage.txn_index import Entry as AbortedEntry
from storage.txn_index import TxnIndex, txn_index_path

_log = logging.getLogger("shoal.log")

GIB = 1 << 30
DAY_MS = 24 * 3600 * 1000
_INT16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-partition log settings (Kafka topic config names in the comments)."""

    segment_bytes: int = GIB  # segment.bytes / log.segment.bytes
    segment_ms: int = 7 * DAY_MS  # segment.ms / log.roll.ms
    retention_ms: int = 7 * DAY_MS  # retention.ms / log.retention.ms; -1 unlimited
    retention_bytes: int = -1  # retention.bytes / log.retention.bytes; -1 unlimited
    index_interval_bytes: int = 4096  # index.interval.bytes
    flush_interval_messages: int = LONG_MAX  # flush.messages; the default leaves it to the OS
    flush_interval_ms: int | None = None  # flush.ms; None leaves it to the OS
    # cleanup.policy: "delete" in it deletes old segments (retention above), "compact" has the
    # log cleaner keep the latest record per key (storage/cleaner.py).
    delete_policy: bool = True
    compact_policy: bool = False
    min_cleanable_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    delete_retention_ms: int = DAY_MS  # delete.retention.ms (tombstones)

    def __post_init__(self) -> None:
        if not 1 <= self.segment_bytes <= INT32_MAX:
            raise ValueError(f"segment_bytes must be in [1, {INT32_MAX}]: {self.segment_bytes}")
        if self.segment_ms < 1:
            raise ValueError(f"segment_ms must be positive: {self.segment_ms}")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise ValueError("retention_ms and retention_bytes must be >= -1")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0: {self.index_interval_bytes}")
        if self.flush_interval_messages < 1:
            raise ValueError("flush_interval_messages must be >= 1")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise ValueError(f"flush_interval_ms must be >= 0: {self.flush_interval_ms}")


class PartitionLog:
    """A partition stored as segment files in one directory. Create with ``PartitionLog.open``.

    ``config`` may be replaced at any time (dynamic topic configs); the next operation uses it.
    """

    def __init__(self, directory: Path, config: LogConfig, loaded: LoadedLog,
                 log_dir: LogDir | None = None) -> None:
        """Take over the directory state ``loaded`` (from ``storage.log_loader.load``)."""
        self.directory = directory
        self.config = config
        # The health of the log directory this partition lives in (shared by the broker's
        # partitions); a standalone log gets its own.
        self.log_dir = log_dir if log_dir is not None else LogDir(directory.parent)
        self._segments: list[Segment] = loaded.segments
        self._bases: list[int] = [s.base_offset for s in loaded.segments]
        # Sealed segments whose index is in memory, least recently used first.
        self._loaded: OrderedDict[int, Segment] = loaded.loaded
        self._log_start_offset = loaded.log_start_offset
        self._leo = loaded.log_end_offset
        self._size_bytes = sum(s.size for s in loaded.segments)
        self._recovery_point = loaded.recovery_point
        self._closed = False
        self._dir_dirty = loaded.dir_dirty
        self._rolled_unflushed = False
        # Offsets appended / covered by a completed flush, for the flush.messages policy.
        self._appended = 0
        self._flushed = 0
        self._unflushed_since_ms: int | None = None
        self._since_snapshot_ms: int | None = None
        # The log cleaner's first dirty offset (CLEANER_CHECKPOINT).
        self._cleaner_offset = loaded.cleaner_offset
        # Where crash recovery started re-reading batches (None: clean shutdown).
        self.recovered_from = loaded.recovered_from
        # Aborted transactions per segment (storage/txn_index.py). Entries whose marker crash
        # recovery cut away go now; the producer-state replay rewrites the rest it re-reads.
        self._txn = TxnIndex.load(directory, self._bases)
        self._txn.truncate_from(self._leo)
        # The first offset the log cleaner must not touch besides its own limits: the last
        # stable offset, kept current by the broker (broker/log/txn_log.py). None: no limit.
        self.first_unstable_offset: int | None = None
        # Test seam: called with a stage name during a cleaned-segment swap ("cleaned",
        # "committed", "installed"); raising there stands for a crash at that point.
        self.swap_fault: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._retention_lock = threading.Lock()
        # Called with the new segment's base offset after each roll, under the lock and before
        # the batch that caused the roll is written (producer-state snapshots,
        # broker/log/producer_state_manager.py). It must not call back into this log.
        self.roll_listener: Callable[[int], None] | None = None

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

    def _use(self, seg: Segment) -> None:
        """Make a segment's index, largest timestamp and descriptor available (under ``_lock``).

        Sealed segments load lazily, and only the ``segment.MAX_LOADED_SEALED`` most recently
        used stay loaded, which bounds memory and descriptors per partition.
        """
        seg.load()
        if seg is not self._segments[-1]:
            self._track(seg)

    def _track(self, seg: Segment) -> None:
        """``segment.track_loaded`` on this log's loaded sealed segments (under ``_lock``)."""
        track_loaded(self._loaded, seg)

    def _max_timestamp(self, seg: Segment) -> int:
        if not seg.max_known:
            self._use(seg)
        return seg.max_timestamp

    # -- properties --------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._leo

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def recovery_point(self) -> int:
        """Every offset below this is fsynced."""
        return self._recovery_point

    @property
    def closed(self) -> bool:
        return self._closed

    # -- append ------------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, now_ms: int) -> AppendResult:
        """Append already-validated v2 batches at the log end offset, assigning their offsets.

        All batches go into one segment with one write to the page cache (never an fsync). A new
        segment is rolled first when the active one would grow past ``segment_bytes``, is older
        than ``segment_ms``, or would need a relative offset beyond int32.

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
        first_attributes = _INT16.unpack_from(buf, ATTRIBUTES_OFFSET)[0]
        with self._lock:
            self._check_open()
            cfg = self.config
            seg = self._segments[-1]
            leo = self._leo
            if seg.size > 0 and (
                seg.size + n > cfg.segment_bytes
                or leo + offsets - 1 - seg.base_offset > INT32_MAX
                or now_ms - seg.created_ms > cfg.segment_ms
            ):
                try:
                    seg = self._roll(now_ms)
                except OSError as exc:
                    raise self.log_dir.fail(f"rolling a new segment in {self.directory}",
                                            exc) from exc
            if seg.size == 0:
                seg.created_ms = now_ms
            start = seg.size
            seg_base = seg.base_offset
            try:
                offset, entries = seg.append(buf, metas, leo, cfg.index_interval_bytes)
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
            lso = self._log_start_offset
        append_time = -1
        if first_attributes & TIMESTAMP_TYPE_MASK:
            append_time = metas[0][3]
        return AppendResult(leo, offset - 1, append_time, lso, seg_base, start)

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

    def _tp(self) -> str:
        """The topic-partition this log holds, for operators (its directory's name)."""
        return f"partition {self.directory.name}"

    def _roll(self, now_ms: int) -> Segment:
        old = self._segments[-1]
        old.seal()
        old.close_index_files()
        self._track(old)
        seg = Segment.create(self.directory, self._leo, now_ms)
        self._segments.append(seg)
        self._dir_dirty = True
        seg.open_index_files()
        self._bases.append(seg.base_offset)
        self._rolled_unflushed = True
        if self.roll_listener is not None:
            self.roll_listener(seg.base_offset)
        return seg

    # -- reads -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> ReadResult:
        """Whole batches from the one containing ``offset``, up to ``max_bytes`` (at least one).

        Batches whose base offset is at or above ``upper_bound`` (high watermark or last stable
        offset; default the log end offset) are never returned. Continues into later segments.

        Raises:
            OffsetOutOfRangeError: ``offset`` is below the log start or above the log end offset.
            LogClosedError: the log is closed.
            LogError: the segment file does not parse where its index says.
            OSError: a read failed.
        """
        with self._lock:
            lso, leo = self._check_range(offset)
            bound = leo if upper_bound is None else min(upper_bound, leo)
            if offset >= bound:
                return ReadResult(b"", offset, offset, lso, leo)
            i = bisect.bisect_right(self._bases, offset) - 1
            seg = self._segments[i]
            pos, first = self._locate(seg, offset)
            while pos >= seg.size and i + 1 < len(self._segments):
                # ``offset`` falls in a compaction gap at the end of a segment: the next
                # records are in a later segment (Kafka's fetch reads on the same way).
                i += 1
                seg = self._segments[i]
                pos, first = self._locate(seg, seg.base_offset)
            if pos >= seg.size or first >= bound:
                return ReadResult(b"", offset, offset, lso, leo)
            start_offset = first
            parts: list[bytes] = []
            remaining = max(1, max_bytes)
            while True:
                seg_end = self._bases[i + 1] if i + 1 < len(self._bases) else leo
                avail = seg.size - pos
                if remaining >= avail and bound >= seg_end:
                    cut, next_offset = avail, seg_end
                else:
                    limit = pos + min(remaining, avail)
                    cut, next_offset = seg.cut(pos, limit, start_offset, bound)
                if cut == 0:
                    if not parts:
                        # KIP-74: the first batch goes out whole even if larger than max_bytes.
                        h = header_at(seg.fd, pos)
                        if h is None:
                            raise LogError(f"{seg.log_path}: no batch at position {pos}")
                        parts.append(os.pread(seg.fd, h[1] + LOG_OVERHEAD, pos))
                        next_offset = h[0] + h[6] + 1
                    break
                parts.append(os.pread(seg.fd, cut, pos))
                remaining -= cut
                if cut < avail or remaining <= 0 or next_offset >= bound:
                    break
                if i + 1 >= len(self._segments):
                    break
                i += 1
                seg = self._segments[i]
                self._use(seg)
                pos, start_offset = 0, seg.base_offset
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        return ReadResult(data, first, next_offset, lso, leo)

    def batch_headers(
        self, from_offset: int, to_offset: int | None = None, max_batches: int | None = None
    ) -> list[BatchHeader]:
        """Headers of the batches holding offsets ``[from_offset, to_offset)``, records unread.

        Starts with the batch containing ``from_offset``; stops before the first batch whose base
        offset is at or past ``to_offset`` (default the log end offset) or after ``max_batches``.

        Raises:
            OffsetOutOfRangeError: ``from_offset`` is outside the log's offsets (as for ``read``).
            LogClosedError: the log is closed.
            OSError: a read failed.
        """
        with self._lock:
            _, leo = self._check_range(from_offset)
            end = leo if to_offset is None else min(to_offset, leo)
            out: list[BatchHeader] = []
            if from_offset >= end or max_batches == 0:
                return out
            i = bisect.bisect_right(self._bases, from_offset) - 1
            seg = self._segments[i]
            pos, _ = self._locate(seg, from_offset)
            while True:
                for _, f in walk(seg.fd, pos, seg.size):
                    if f[0] >= end:
                        return out
                    out.append(BatchHeader(*f))
                    if max_batches is not None and len(out) >= max_batches:
                        return out
                i += 1
                if i >= len(self._segments):
                    return out
                seg = self._segments[i]
                self._use(seg)
                pos = 0

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` for ListOffsets by timestamp, or None if no batch is that late.

        Batch granularity: the base offset of the first batch (at or after the log start offset)
        whose max timestamp is ``>= timestamp_ms``, with that max timestamp. Kafka answers with
        the first such record; the records of that batch before it come along. A batch that
        straddles the log start offset answers with the log start offset.

        Raises:
            LogClosedError: the log is closed.
            LogError, OSError: a segment could not be read.
        """
        with self._lock:
            self._check_open()
            return self._first_batch_at_or_after(timestamp_ms)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` for ListOffsets MAX_TIMESTAMP (-3), or None for an empty log.

        Batch granularity, like ``offset_for_timestamp``: the first readable batch carrying the
        largest max timestamp.

        Raises:
            LogClosedError: the log is closed.
            LogError, OSError: a segment could not be read.
        """
        with self._lock:
            self._check_open()
            lso = self._log_start_offset
            if lso >= self._leo:
                return None
            i = bisect.bisect_right(self._bases, lso) - 1
            best = NO_TIMESTAMP
            for seg in self._segments[i + 1 :]:
                best = max(best, self._max_timestamp(seg))
            first = self._segments[i]
            if lso == first.base_offset:
                best = max(best, self._max_timestamp(first))
            else:
                # Batches below the start offset do not count: walk the readable part.
                start, _ = self._locate(first, lso)
                for _, f in walk(first.fd, start, first.size):
                    best = max(best, f[8])
            return self._first_batch_at_or_after(best)

    def _first_batch_at_or_after(self, target: int) -> tuple[int, int] | None:
        """The first readable batch with max timestamp ``>= target`` (needs ``_lock``).

        Segments whose largest timestamp is below the target are skipped; inside a segment the
        time index narrows the walk: ``ts`` is a running maximum, so every batch up to the entry
        before the first ``ts >= target`` is too early.
        """
        lso = self._log_start_offset
        if lso >= self._leo:
            return None
        i = bisect.bisect_right(self._bases, lso) - 1
        for k in range(i, len(self._segments)):
            seg = self._segments[k]
            if seg.size == 0 or self._max_timestamp(seg) < target:
                continue
            self._use(seg)
            j = bisect.bisect_left(seg.ts, target)
            start = seg.pos[j - 1] if j > 0 else 0
            if k == i:
                start = max(start, self._locate(seg, lso)[0])
            for _, f in walk(seg.fd, start, seg.size):
                if f[8] >= target and f[0] + f[6] >= lso:
                    return max(f[0], lso), f[8]
        return None

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.directory} is closed")
        self.log_dir.check()

    def _check_range(self, offset: int) -> tuple[int, int]:
        self._check_open()
        lso, leo = self._log_start_offset, self._leo
        if offset < lso or offset > leo:
            raise OffsetOutOfRangeError(f"offset {offset} outside [{lso}, {leo}]: {self.directory}")
        return lso, leo

    def _locate(self, seg: Segment, offset: int) -> tuple[int, int]:
        """Position and base offset of the batch holding ``offset`` in ``seg``, or of the next
        batch after a compaction gap; ``(seg.size, -1)`` if none (``Segment.locate``)."""
        self._use(seg)
        return seg.locate(offset)

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
        directory after a roll), nothing else. Blocking; thread-safe like ``flush``.

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
                dir_dirty = self._dir_dirty
            try:
                for fd in fds:
                    fileops.OPS.fdatasync(fd)
                if dir_dirty:
                    fsync_dir(self.directory)
            except OSError as exc:
                raise self.log_dir.fail(f"syncing {self._tp()} in {self.directory}", exc) from exc
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
        try:
            for seg in dirty:
                seg.fsync()
            if dir_dirty:
                fsync_dir(self.directory)
            if target > self._recovery_point:
                write_checkpoint(self.directory / RECOVERY_POINT_CHECKPOINT, target)
        except OSError as exc:
            # Never retried (see storage.fileops): the directory goes offline instead.
            with self._lock:
                for seg in dirty:
                    seg.dirty = True
                self._dir_dirty = self._dir_dirty or dir_dirty
                self._rolled_unflushed = self._rolled_unflushed or rolled
            raise self.log_dir.fail(f"syncing {self._tp()} in {self.directory}", exc) from exc
        with self._lock:
            self._recovery_point = max(self._recovery_point, target)
            self._flushed = max(self._flushed, appended)
            more = self._appended > self._flushed
            self._unflushed_since_ms = self._since_snapshot_ms if more else None

    # -- retention ---------------------------------------------------------------------------

    def enforce_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete whole non-active segments past ``retention_ms`` (by their largest timestamp) or
        while the log exceeds ``retention_bytes`` by at least that segment (only with the
        ``delete`` cleanup policy), plus segments wholly below the log start offset. Only segments whose successor starts at or below
        ``high_watermark`` (default the log end offset) go. Returns the number deleted.

        Segments without any timestamp fall back to the file's modification time (as Kafka does).
        A no-op on a closed log (a retention pass may race a topic deletion).

        Raises:
            OSError: reading an index, the checkpoint write or an unlink failed.
        """
        with self._retention_lock:
            with self._lock:
                if self._closed or self.log_dir.offline:
                    return 0
                cfg = self.config
                hw = self._leo if high_watermark is None else min(high_watermark, self._leo)
                excess = None
                if cfg.retention_bytes >= 0:
                    excess = self._size_bytes - cfg.retention_bytes
                count = 0
                for k in range(len(self._segments) - 1):
                    seg = self._segments[k]
                    next_base = self._segments[k + 1].base_offset
                    if next_base > hw:
                        break
                    below_start = next_base <= self._log_start_offset
                    too_big = excess is not None and excess >= seg.size
                    if not (below_start or (cfg.delete_policy and (
                            too_big or self._expired(seg, now_ms)))):
                        break
                    if excess is not None:
                        excess -= seg.size
                    count += 1
                victims = self._remove_head(count)
            self._finish_deletion(victims)
        return len(victims)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` and delete the segments wholly
        below it. Returns the (possibly unchanged) log start offset.

        Raises:
            OffsetOutOfRangeError: ``offset`` is negative or above the log end offset.
            LogClosedError: the log is closed.
            OSError: the checkpoint write or an unlink failed.
        """
        with self._retention_lock:
            with self._lock:
                self._check_open()
                if offset < 0 or offset > self._leo:
                    raise OffsetOutOfRangeError(f"offset {offset} is past the log end {self._leo}")
                if offset <= self._log_start_offset:
                    return self._log_start_offset
                self._log_start_offset = offset
                count = bisect.bisect_right(self._bases, offset) - 1
                victims = self._remove_head(count)
            self._finish_deletion(victims, force_checkpoint=True)
            return offset

    def _expired(self, seg: Segment, now_ms: int) -> bool:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return False
        largest = self._max_timestamp(seg)
        if largest < 0:
            largest = os.stat(seg.log_path).st_mtime_ns // 1_000_000
        return now_ms - largest > retention_ms

    def _remove_head(self, count: int) -> list[Segment]:
        """Drop the first ``count`` segments from the log (under ``_lock``)."""
        victims = self._segments[:count]
        if victims:
            del self._segments[:count], self._bases[:count]
            self._size_bytes -= sum(s.size for s in victims)
            self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
            for seg in victims:
                seg.close()
                self._loaded.pop(seg.base_offset, None)
            self._txn.drop_segments(seg.base_offset for seg in victims)
        return victims

    def _finish_deletion(self, victims: list[Segment], force_checkpoint: bool = False) -> None:
        # Checkpoint first: a crash before the unlinks leaves segments that open() removes.
        if victims or force_checkpoint:
            try:
                write_checkpoint(self.directory / LOG_START_CHECKPOINT, self._log_start_offset)
            except OSError as exc:
                raise self.log_dir.fail(f"writing the log start checkpoint of {self._tp()} in "
                                        f"{self.directory}", exc) from exc
        for seg in victims:
            seg.unlink()

    # -- log cleaner (storage/cleaner.py) --------------------------------------------------

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

    # -- aborted transactions (storage/txn_index.py) -------------------------------------

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

    def delete(self) -> None:
        """Close without flushing and remove the partition directory (topic deletion).

        Raises:
            OSError: the directory could not be removed.
        """
        with self._flush_lock, self._retention_lock:
            with self._lock:
                self._closed = True
                for seg in self._segments:
                    seg.close()
            try:
                shutil.rmtree(self.directory)
            except FileNotFoundError:
                pass
            fsync_dir(self.directory.parent)

