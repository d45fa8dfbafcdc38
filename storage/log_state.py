"""``LogState``: the state of one partition log that its parts share, and their lookups.

``PartitionLog`` (``storage/segment_log.py``) is assembled from parts that each own one job over
this state: reads (``storage/log_reads.py``), retention and DeleteRecords
(``storage/log_retention.py``), the log cleaner's hooks (``storage/log_compaction.py``), the
aborted-transaction index (``storage/log_aborted_txns.py``), and appends, durability and the
lifecycle in ``segment_log.py`` itself. This class holds the fields they share (the segment list,
offsets, counters, the three locks) and the lookups several of them use.

Locks: ``_lock`` guards the segment list, the segments, descriptors and counters and is never
held across an fsync; ``_flush_lock`` serialises flushes; ``_retention_lock`` serialises changes
of the segment list (retention, DeleteRecords, the cleaned-segment swap, truncation, close,
delete); ``_epoch_lock`` serialises changes of the leader-epoch cache (``storage/leader_epoch.py``),
whose checkpoint is written before the change is visible and never under ``_lock``. A method
named as needing ``_lock`` is called with it held.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from storage.log import LogClosedError, OffsetOutOfRangeError
from storage.log_config import LogConfig
from storage.log_dir import LogDir
from storage import leader_epoch
from storage.log_loader import HIGH_WATERMARK_CHECKPOINT, LoadedLog, read_checkpoint
from storage.segment import Segment, track_loaded
from storage.txn_index import TxnIndex


class LogState:
    """The fields and lookups the parts of ``PartitionLog`` share (module doc)."""

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
        self._epoch_lock = threading.Lock()
        # The leader epoch ``append`` stamps by default (-1: none), see ``PartitionLog.append``.
        self.appending_epoch = -1
        # The leader-epoch cache, trimmed to the offsets the directory holds (a crash may have
        # cut the log after the checkpoint was written; Kafka's LogLoader trims it the same way).
        self._epochs = leader_epoch.LeaderEpochCache.load(directory)
        self._epochs.replace(leader_epoch.truncate_from_start(
            leader_epoch.truncate_from_end(self._epochs.entries, self._leo),
            self._log_start_offset))
        # The high watermark (replication, storage/log_replica.py): checkpointed by flush and
        # close when it changed; without a checkpoint (a log from before replication) the log
        # end offset.
        hw = read_checkpoint(directory / HIGH_WATERMARK_CHECKPOINT)
        self._hw = self._leo if hw is None else max(self._log_start_offset, min(hw, self._leo))
        self._hw_dirty = False
        # Called with the new segment's base offset after each roll, under the lock and before
        # the batch that caused the roll is written (producer-state snapshots,
        # broker/log/producer_state_manager.py). It must not call back into this log.
        self.roll_listener: Callable[[int], None] | None = None

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

    # -- lookups -----------------------------------------------------------------------------

    def _tp(self) -> str:
        """The topic-partition this log holds, for operators (its directory's name)."""
        return f"partition {self.directory.name}"

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

    def _write_epochs(self, entries: leader_epoch.Entries) -> None:
        """Checkpoint and install new leader-epoch entries (under ``_epoch_lock``, not ``_lock``).

        Raises:
            LogDirOfflineError: the checkpoint write failed (the directory is now offline).
        """
        try:
            self._epochs.replace(entries)
        except OSError as exc:
            raise self.log_dir.fail(f"writing the leader-epoch checkpoint of {self._tp()} in "
                                    f"{self.directory}", exc) from exc

    def _trim_epochs_start(self) -> None:
        """The log start offset moved: trim the leader-epoch cache to it (Kafka
        ``truncateFromStart``)."""
        with self._epoch_lock:
            entries = self._epochs.entries
            trimmed = leader_epoch.truncate_from_start(entries, self._log_start_offset)
            if trimmed is not entries:
                self._write_epochs(trimmed)

    def _max_timestamp(self, seg: Segment) -> int:
        if not seg.max_known:
            self._use(seg)
        return seg.max_timestamp
