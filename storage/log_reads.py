"""Reads of a partition log: record batches, batch headers and timestamp lookups.

Part of ``PartitionLog`` (``storage/segment_log.py``; the shared state is
``storage/log_state.py``). Every read holds the log's ``_lock`` during its ``pread``s, so a
concurrent segment deletion cannot close a descriptor under it. A read starts at the batch that
holds the requested offset, or after a compaction gap at the next batch, possibly in a later
segment (Kafka's fetch reads on the same way).
"""

from __future__ import annotations

import bisect
import os

from protocol.record_batch import LOG_OVERHEAD, NO_TIMESTAMP, BatchHeader
from storage.log import LogError, ReadResult
from storage.log_state import LogState
from storage.segment import header_at, walk


class LogReads(LogState):
    """``read``, ``batch_headers``, ``offset_for_timestamp``, ``max_timestamp_offset``."""

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
