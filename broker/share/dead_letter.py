"""Dead-letter records of share groups (KIP-1191, Kafka 4.4's names and semantics): the pure part.

A share group with ``errors.deadletterqueue.topic.name`` set sends every record it gives up on,
one REJECTed by a consumer or one whose delivery count reached ``share.delivery.count.limit``, to
that topic before archiving it. The share-partition moves such a record ACQUIRED -> ARCHIVING
(``broker/share/record_state.py`` rule 5) and persists that; the shell (``DeadLetterWriter`` in
``broker/share/dead_letter_writer.py``) appends one dead-letter record per offset to the DLQ topic
and, once that append is durable, tells the share-partition, which moves the records
ARCHIVING -> ARCHIVED and persists that. A crash in between leaves ARCHIVING in the share state,
so the load sends the dead-letter record again: at least once, never lost.

What a dead-letter record holds (Kafka 4.4's ``ShareGroupDLQRecordHelper``):
- headers ``__dlq.errors.topic``, ``__dlq.errors.partition``, ``__dlq.errors.offset``,
  ``__dlq.errors.group``, ``__dlq.errors.delivery.count`` and ``__dlq.errors.message`` (why), all
  UTF-8 strings (numbers in decimal);
- the original key and value only with ``errors.deadletterqueue.copy.record.enable=true``, and
  only if the original is still in the log (retention or compaction may have removed it);
- the time of the dead-lettering as its timestamp (CreateTime), so the DLQ topic's retention
  counts from then.

Where it goes: partition ``source partition % DLQ partitions`` of the DLQ topic (Kafka 4.4).

Which topics may be a DLQ topic (KIP-1191 "security"): the name must start with the broker's
``errors.deadletterqueue.topic.name.prefix`` (default ``dlq.``; checked when the group config is
set) and not with ``__``; the topic must have ``errors.deadletterqueue.group.enable=true``. A
missing topic is created with that config when ``errors.deadletterqueue.auto.create.topics.enable``
is true. Otherwise the record is archived without a dead-letter record, and that is reported
(log line + ``shoal_share_dead_letter_skipped_records_total``).

Why the reason is inferred after a restart: the share state keeps the ARCHIVING state and the
delivery count, not the cause (as Kafka 4.4); a loaded ARCHIVING record with a delivery count at
or over the limit is reported as exhausted, any other as rejected.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import crc32c

from protocol.compression import DecompressionError, decompress
from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    CorruptRecordError,
    iter_batches,
)
from protocol.varint import encode_varint, read_varint

__all__ = [
    "HEADER_DELIVERY_COUNT",
    "HEADER_GROUP",
    "HEADER_MESSAGE",
    "HEADER_OFFSET",
    "HEADER_PARTITION",
    "HEADER_TOPIC",
    "REASON_DELIVERY_LIMIT",
    "REASON_REJECTED",
    "DeadLetterBook",
    "DeadLetterRun",
    "dlq_partition",
    "dlq_topic_name_problem",
    "encode_dead_letters",
    "source_records",
    "split_runs",
]

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"

REASON_REJECTED = "rejected"
REASON_DELIVERY_LIMIT = "delivery_limit"
# The ``__dlq.errors.message`` values: wire data, so Kafka 4.4's texts exactly (its ShareGroupDLQ
# causes CLIENT_REJECT and DELIVERY_COUNT_EXCEEDED), which tools match on.
_MESSAGES = {
    REASON_REJECTED: "Offset rejected by client.",
    REASON_DELIVERY_LIMIT: "Offset delivery count exceeded the threshold.",
}

# Most bytes one compressed source batch may expand to when it is read back for copying.
MAX_DECOMPRESSED = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DeadLetterRun:
    """Consecutive ARCHIVING offsets with one delivery count and reason, to dead-letter."""

    first_offset: int
    last_offset: int
    delivery_count: int
    reason: str  # REASON_REJECTED | REASON_DELIVERY_LIMIT

    @property
    def size(self) -> int:
        return self.last_offset - self.first_offset + 1


#: (first, last, delivery count) of the ARCHIVING records in an offset range, in order.
ArchivingRuns = Callable[[int, int], Iterable[tuple[int, int, int]]]


class DeadLetterBook:
    """A share-partition's dead letters to hand out: ARCHIVING ranges not handed out yet (with
    their reason, or None when loaded: inferred from the delivery count), and how many records
    were handed out and not yet completed or given back.

    Every record added is handed out by :meth:`take` once; :meth:`retry` makes it take-able
    again. The ranges are only hints: ``take`` hands out the records of a range that are still
    ARCHIVING (an admin reset may have dropped them meanwhile).
    """

    __slots__ = ("_out", "_todo")

    def __init__(self) -> None:
        self._todo: list[tuple[int, int, str | None]] = []
        self._out = 0

    def __bool__(self) -> bool:
        """Whether records wait to be handed out."""
        return bool(self._todo)

    @property
    def busy(self) -> bool:
        """Records wait, or were handed out and are not done."""
        return bool(self._todo) or self._out > 0

    def add(self, lo: int, hi: int, reason: str | None) -> None:
        todo = self._todo
        if todo and todo[-1][1] + 1 == lo and todo[-1][2] == reason:
            todo[-1] = (todo[-1][0], hi, reason)
        else:
            todo.append((lo, hi, reason))

    def take(self, archiving: ArchivingRuns, limit: int, max_records: int) -> list[DeadLetterRun]:
        """Up to ``max_records`` records to dead-letter, as runs; ``limit`` is the delivery
        count limit (the reason of loaded records)."""
        out: list[DeadLetterRun] = []
        left = max_records
        todo = self._todo
        while todo and left > 0:
            lo, hi, reason = todo[0]
            cut = min(hi, lo + left - 1)
            if cut < hi:
                todo[0] = (cut + 1, hi, reason)
            else:
                todo.pop(0)
            for r_lo, r_hi, count in archiving(lo, cut):
                why = reason or (REASON_DELIVERY_LIMIT if count >= limit else REASON_REJECTED)
                prev = out[-1] if out else None
                if (prev is not None and prev.last_offset + 1 == r_lo
                        and prev.delivery_count == count and prev.reason == why):
                    out[-1] = DeadLetterRun(prev.first_offset, r_hi, count, why)
                else:
                    out.append(DeadLetterRun(r_lo, r_hi, count, why))
            left -= cut - lo + 1
        self._out += sum(r.size for r in out)
        return out

    def done(self, runs: Sequence[DeadLetterRun]) -> None:
        """``runs`` (handed out, possibly split since) are finished."""
        self._out = max(0, self._out - sum(r.size for r in runs))

    def retry(self, runs: Sequence[DeadLetterRun]) -> None:
        """``runs`` could not be written: hand them out again."""
        self.done(runs)
        again = [(r.first_offset, r.last_offset, r.reason) for r in runs]
        self._todo = sorted(again + self._todo, key=lambda t: (t[0], t[1]))


def dlq_partition(source_partition: int, dlq_partitions: int) -> int:
    """The DLQ topic partition a source partition's dead-letter records go to (Kafka 4.4)."""
    return source_partition % dlq_partitions


def dlq_topic_name_problem(name: str, prefix: str) -> str | None:
    """Why ``name`` may not be a group's DLQ topic (empty = off is fine), or None."""
    if not name:
        return None
    if name.startswith("__"):
        return f"DLQ topic {name!r} must not start with '__' (internal topics)"
    if prefix and not name.startswith(prefix):
        return (f"DLQ topic {name!r} must start with {prefix!r} (the broker's "
                "errors.deadletterqueue.topic.name.prefix); use a name like "
                f"'{prefix}{name}'")
    return None


# --------------------------------------------------------------------------- reading the source


def source_records(data: bytes | bytearray | memoryview, lo: int, hi: int,
                   limit: int = MAX_DECOMPRESSED) -> dict[int, tuple[bytes | None, bytes | None]]:
    """offset -> (key, value) of the records in ``[lo, hi]`` found in the log bytes ``data``.

    Control batches, unreadable batches (CRC is not checked here; the log did on append) and
    batches that would expand past ``limit`` are skipped: their records are copied without
    payload.
    """
    out: dict[int, tuple[bytes | None, bytes | None]] = {}
    view = memoryview(data)
    for pos, h in iter_batches(data):
        if h.is_control or h.last_offset < lo or h.base_offset > hi:
            continue
        body: bytes | bytearray | memoryview = view[pos + BATCH_HEADER_SIZE: pos + h.total_size]
        try:
            if h.compression:
                body = decompress(h.compression, body, limit)
            _scan(bytes(body), h.record_count, h.base_offset, lo, hi, out)
        except (CorruptRecordError, DecompressionError, IndexError, ValueError):
            continue
    return out


def _scan(b: bytes, count: int, base: int, lo: int, hi: int,
          out: dict[int, tuple[bytes | None, bytes | None]]) -> None:
    pos = 0
    for _ in range(count):
        length, q = read_varint(b, pos)
        end = q + length
        q += 1  # attributes
        _ts, q = read_varint(b, q)
        delta, q = read_varint(b, q)
        offset = base + delta
        if lo <= offset <= hi:
            key_len, q = read_varint(b, q)
            key = None if key_len < 0 else b[q:q + key_len]
            q += max(key_len, 0)
            value_len, q = read_varint(b, q)
            value = None if value_len < 0 else b[q:q + value_len]
            if end > len(b) or q + max(value_len, 0) > end:
                raise CorruptRecordError("record runs past its batch")
            out[offset] = (key, value)
        pos = end


# --------------------------------------------------------------------------- writing


def _bytes(data: bytes | None, out: bytearray) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        out += encode_varint(len(data))
        out += data


_CRC = struct.Struct(">I")
_CRC_OFFSET = 17


def encode_dead_letters(
    group_id: str,
    topic: str,
    partition: int,
    runs: Iterable[DeadLetterRun],
    now_ms: int,
    payloads: Mapping[int, tuple[bytes | None, bytes | None]] | None = None,
    max_records: int | None = None,
) -> tuple[bytes, int]:
    """One uncompressed v2 batch with a dead-letter record per offset of ``runs`` (in order),
    and how many records it holds. ``payloads`` (copy mode) gives the original key and value of
    offsets still in the log; other records have null key and value. Base offset 0 (the log
    assigns it), producer id -1 (not idempotent: a retry after a crash may duplicate, which
    KIP-1191 allows), timestamp ``now_ms``.

    Raises:
        ValueError: ``runs`` holds no offset.
    """
    body = bytearray()
    rec = bytearray()
    common: list[tuple[bytes, bytes]] = [
        (HEADER_TOPIC.encode(), topic.encode()),
        (HEADER_PARTITION.encode(), str(partition).encode()),
    ]
    group = (HEADER_GROUP.encode(), group_id.encode())
    n = 0
    for run in runs:
        tail = [(HEADER_DELIVERY_COUNT.encode(), str(run.delivery_count).encode()),
                (HEADER_MESSAGE.encode(), _MESSAGES[run.reason].encode())]
        for offset in range(run.first_offset, run.last_offset + 1):
            if max_records is not None and n >= max_records:
                break
            key, value = (payloads or {}).get(offset, (None, None))
            headers: Sequence[tuple[bytes, bytes]] = [
                *common, (HEADER_OFFSET.encode(), str(offset).encode()), group, *tail]
            rec.clear()
            rec.append(0)  # attributes
            rec.append(0)  # timestamp delta
            rec += encode_varint(n)  # offset delta
            _bytes(key, rec)
            _bytes(value, rec)
            rec += encode_varint(len(headers))
            for hk, hv in headers:
                rec += encode_varint(len(hk))
                rec += hk
                rec += encode_varint(len(hv))
                rec += hv
            body += encode_varint(len(rec))
            body += rec
            n += 1
    if n == 0:
        raise ValueError("no dead-letter record to encode")
    header = bytearray(HEADER_STRUCT.pack(
        0, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body), 0, MAGIC_V2, 0, 0, n - 1,
        now_ms, now_ms, -1, -1, -1, n))
    crc = crc32c.crc32c(body, crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _CRC.pack_into(header, _CRC_OFFSET, crc)
    return bytes(header + body), n


def split_runs(runs: Sequence[DeadLetterRun], n: int
               ) -> tuple[list[DeadLetterRun], list[DeadLetterRun]]:
    """(the first ``n`` offsets of ``runs``, the rest), as runs."""
    head: list[DeadLetterRun] = []
    tail: list[DeadLetterRun] = []
    left = n
    for run in runs:
        if left >= run.size:
            head.append(run)
            left -= run.size
        elif left > 0:
            cut = run.first_offset + left
            head.append(DeadLetterRun(run.first_offset, cut - 1, run.delivery_count, run.reason))
            tail.append(DeadLetterRun(cut, run.last_offset, run.delivery_count, run.reason))
            left = 0
        else:
            tail.append(run)
    return head, tail
