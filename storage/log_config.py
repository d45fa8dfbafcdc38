"""``LogConfig``: the settings of one partition log (Kafka's topic configs of a log).

A frozen value, validated on construction; ``PartitionLog.config`` may be replaced with a new one
at any time (dynamic topic configs) and the log's next operation uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.segment import INT32_MAX, LONG_MAX

GIB = 1 << 30
DAY_MS = 24 * 3600 * 1000


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
