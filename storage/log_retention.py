"""Retention and DeleteRecords of a partition log: deleting whole segments from its head.

Part of ``PartitionLog`` (``storage/segment_log.py``; the shared state is
``storage/log_state.py``). ``log_start_offset`` only moves forward. Its checkpoint is written
before the segment files are unlinked, so a crash between the two leaves segments below the
checkpoint, which the next open removes. Changes of the segment list hold ``_retention_lock``.
Moving the log start trims the leader-epoch cache from the start (``storage/leader_epoch.py``).
"""

from __future__ import annotations

import bisect
import os

from storage.log import OffsetOutOfRangeError
from storage.log_loader import LOG_START_CHECKPOINT, write_checkpoint
from storage.log_state import LogState
from storage.segment import Segment


class LogRetention(LogState):
    """``enforce_retention`` and ``delete_records_before``."""

    def enforce_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete whole non-active segments past ``retention_ms`` (by their largest timestamp) or
        while the log exceeds ``retention_bytes`` by at least that segment (only with the
        ``delete`` cleanup policy), plus segments wholly below the log start offset. Only
        segments whose successor starts at or below ``high_watermark`` (default the log end
        offset) go. Returns the number deleted.

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
            self._trim_epochs_start()
        for seg in victims:
            seg.unlink()
