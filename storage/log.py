"""A partition log: the narrow interface every log backend offers (STYLE.md 1.10).

A partition log is an append-only sequence of Kafka v2 record batches. The log assigns offsets:
batch offsets are dense as appended (each appended batch starts at the previous end offset) and
never reused; the log cleaner of compacted topics (``storage/cleaner.py``) removes records and
leaves gaps, keeping every surviving record's offset.

Invariants every implementation keeps:
- ``log_start_offset <= log_end_offset``; offsets below the start were removed by retention or
  DeleteRecords and reading them raises ``OffsetOutOfRangeError``.
- ``read`` returns whole batches byte-for-byte as appended (base offset rewritten), starting
  with the batch that contains the requested offset (after a compaction gap: the next batch),
  and at least one batch if any is readable.
- ``flush`` makes everything appended before it durable; ``needs_flush`` says when the policy
  calls for it. Appends land in the page cache immediately, so a process crash loses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from protocol.record_batch import BatchHeader


class LogError(Exception):
    """A log operation failed (I/O error, closed log, inconsistent files)."""


class OffsetOutOfRangeError(LogError):
    """An offset outside ``[log_start_offset, log_end_offset]`` (Kafka OFFSET_OUT_OF_RANGE)."""


class LogClosedError(LogError):
    """The log was closed or deleted."""


class UnexpectedOffsetError(LogError, ValueError):
    """A follower append whose batches do not start at or after the log end offset, or whose
    offsets do not increase (Kafka UnexpectedAppendOffsetException): truncate first."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed.

    ``log_append_time_ms`` is -1 for CreateTime batches (Kafka's ProduceResponse convention) and the
    first batch's max timestamp for LogAppendTime ones. ``position`` is the file position of the
    first batch inside segment ``segment_base_offset``.
    """

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    segment_base_offset: int
    position: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches from a read.

    ``first_offset`` is the base offset of the first returned batch and ``next_offset`` the offset
    after the last one; with no data both equal the requested offset.
    """

    data: bytes
    first_offset: int
    next_offset: int
    log_start_offset: int
    log_end_offset: int


class PartitionLogLike(Protocol):
    """What brokers and coordinators use of a partition log (file-backed: ``segment_log``)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def segment_count(self) -> int: ...

    @property
    def recovery_point(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def append(self, data: bytes | bytearray | memoryview, now_ms: int,
               leader_epoch: int | None = None) -> AppendResult: ...

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> ReadResult: ...

    def batch_headers(
        self, from_offset: int, to_offset: int | None = None, max_batches: int | None = None
    ) -> list[BatchHeader]: ...

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None: ...

    def max_timestamp_offset(self) -> tuple[int, int] | None: ...

    def needs_flush(self, now_ms: int) -> bool: ...

    def needs_background_flush(self, now_ms: int) -> bool: ...

    def flush(self) -> None: ...

    def sync_data(self) -> None: ...

    def enforce_retention(self, now_ms: int, high_watermark: int | None = None) -> int: ...

    def delete_records_before(self, offset: int) -> int: ...

    def close(self) -> None: ...

    def delete(self, moved_to: Path | None = None) -> None: ...
