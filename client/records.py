"""Records handed to the application, and turning a ShareFetch partition into them.

A ShareFetch partition response carries raw v2 record batches plus ``AcquiredRecords`` ranges
(first offset, last offset, delivery count). The broker may send whole log batches that reach past
the acquired ranges, so only offsets inside a range are delivered, each with its range's delivery
count. Control batches (transaction markers) are never delivered (reference 8 item 12).

Acquired offsets that have no record in the batches (compacted away, or control records) are
returned as *gaps*: the consumer acknowledges them with type GAP so the broker does not redeliver
them after the lock times out.

Batch parsing and decompression (gzip, snappy, lz4, zstd) use aiokafka's record parser
(``aiokafka.record.memory_records.MemoryRecords``, a C extension), which is fast and complete;
kio's record reader has no decompression and truncates timestamps to seconds.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from aiokafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]

__all__ = ["AcknowledgeType", "RawPartition", "ShareRecord", "TopicPartition", "decode_partition"]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class AcknowledgeType(enum.IntEnum):
    """How a record is acknowledged; the values are the wire's AcknowledgeTypes (KIP-932)."""

    GAP = 0  # internal: an acquired offset with no record
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # keep the acquisition lock (ShareFetch/ShareAcknowledge v2, KIP-1222)


@dataclass(eq=False, slots=True)
class ShareRecord:
    """One delivered record. Identity matters: ``acknowledge`` takes the object it was given."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    delivery_count: int = 1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __repr__(self) -> str:
        return (f"ShareRecord({self.topic}-{self.partition}@{self.offset}, "
                f"delivery_count={self.delivery_count})")


@dataclass(frozen=True, slots=True)
class RawPartition:
    """One partition's acquired records as the broker sent them, not decoded (``raw`` mode).

    ``data`` holds the v2 record batches of the ShareFetch response (they may reach past the
    acquired ranges, and may hold control batches); ``acquired`` the (first offset, last offset,
    delivery count) ranges the member holds. Acquired offsets without a record in ``data``
    (gaps) are part of the ranges: acknowledging the ranges acknowledges them too, which the
    broker treats like GAP (both end the offset's delivery).
    """

    topic: str
    partition: int
    data: bytes
    acquired: tuple[tuple[int, int, int], ...]

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def count(self) -> int:
        """Acquired offsets (records plus gaps)."""
        return sum(last - first + 1 for first, last, _ in self.acquired)


@dataclass(frozen=True, slots=True)
class DecodedPartition:
    records: list[ShareRecord]
    gaps: list[int]


def decode_partition(topic: str, partition: int, data: bytes | None,
                     acquired: Sequence[tuple[int, int, int]]) -> DecodedPartition:
    """Records of ``data`` inside the ``acquired`` (first, last, delivery count) ranges.

    Raises:
        aiokafka.errors.CorruptRecordException: a batch does not parse or fails its CRC.
    """
    ranges = sorted(acquired)
    if not ranges:
        return DecodedPartition([], [])
    firsts = [r[0] for r in ranges]
    lo, hi = ranges[0][0], max(r[1] for r in ranges)
    out: list[ShareRecord] = []
    seen: set[int] = set()
    if data:
        batches = MemoryRecords(bytes(data))
        while batches.has_next():
            batch = batches.next_batch()
            if batch is None:
                break
            if batch.next_offset <= lo or batch.base_offset > hi:
                continue
            if getattr(batch, "is_control_batch", False):
                continue
            ts_type = batch.timestamp_type
            # Fast path: the whole batch lies in one acquired range (the usual case).
            i = bisect.bisect_right(firsts, batch.base_offset) - 1
            if i >= 0 and batch.next_offset - 1 <= ranges[i][1]:
                count = ranges[i][2]
                for rec in batch:
                    h = rec.headers
                    out.append(ShareRecord(topic, partition, rec.offset, rec.timestamp, ts_type,
                                           rec.key, rec.value, list(h) if h else [], count))
                continue
            for rec in batch:
                off = rec.offset
                if off < lo or off > hi:
                    continue
                i = bisect.bisect_right(firsts, off) - 1
                if i < 0 or off > ranges[i][1]:
                    continue
                seen.add(off)
                out.append(ShareRecord(topic, partition, off, rec.timestamp, ts_type, rec.key,
                                       rec.value, list(rec.headers), ranges[i][2]))
    if len(out) == sum(last - first + 1 for first, last, _ in ranges):
        return DecodedPartition(out, [])  # every acquired offset has its record
    seen.update(r.offset for r in out)
    gaps = [o for f, last, _ in ranges for o in range(f, last + 1) if o not in seen]
    return DecodedPartition(out, gaps)
