"""Validating a produced record batch before it is appended (Kafka's ``LogValidator``, behaviour only).

A Produce request (v3+) carries one v2 batch per partition. Before the broker appends it, every
record is read (after decompression when the batch is compressed), because the header alone can
lie: a 69-byte batch may claim 2^31-1 records and move the log end offset by as much. The checks,
and the error each gives (the partition is answered with it and nothing of it is appended):

=====================================================================  =========================
exactly one whole batch, magic 2                                        INVALID_RECORD
batch no larger than ``max.message.bytes``                              MESSAGE_TOO_LARGE
header sane and CRC-32C matches                                         CORRUPT_MESSAGE
compression codec known (zstd needs Produce v7+)                        CORRUPT_MESSAGE /
                                                                        UNSUPPORTED_COMPRESSION_TYPE
not a control batch; idempotent batches have a base sequence           INVALID_RECORD
``record_count == last_offset_delta + 1 > 0``                           INVALID_RECORD
records: varints well formed, each record's length matches its fields,  INVALID_RECORD
offset deltas 0..n-1 in order, exactly ``record_count`` records,
no trailing bytes, no null header key
a key on every record when ``cleanup.policy`` includes compact           INVALID_RECORD
CreateTime: every record's timestamp within ``now - before_max_ms`` ..  INVALID_TIMESTAMP
``now + after_max_ms`` (``message.timestamp.before/after.max.ms``)
=====================================================================  =========================

The batch header's max timestamp is then made to agree with the topic: for LogAppendTime the
broker's clock and the timestamp-type attribute bit; for CreateTime the largest record timestamp
(a producer may not pin retention with a header that lies). Either rewrite recomputes the CRC; a
batch that needs neither is appended byte for byte.

Pure: bytes, a policy and ``now_ms`` in; a :class:`Validated` or :class:`Rejected` out.
"""

from __future__ import annotations

from dataclasses import dataclass

import crc32c
from kio.schema.errors import ErrorCode

from protocol.compression import CODEC_NAMES, DecompressionError, decompress
from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MAX_COMPRESSION_CODEC,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
)

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "MIN_RECORD_BYTES",
    "Rejected",
    "Validated",
    "ValidationPolicy",
    "walk_records",
    "validate_produced",
]

CREATE_TIME = 0
LOG_APPEND_TIME = 1
ZSTD = 4
# Produce v7 is the first version a zstd batch may arrive in (KIP-110).
MIN_PRODUCE_VERSION_FOR_ZSTD = 7
# length, attributes, timestamp delta, offset delta, key length, value length, header count:
# one byte each at least.
MIN_RECORD_BYTES = 7
# Records of a compressed batch may expand to this many times max.message.bytes (at least
# DECOMPRESSED_FLOOR): enough for any real producer, and a bound on the memory a forged batch costs.
DECOMPRESSION_RATIO_LIMIT = 64
DECOMPRESSED_FLOOR = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ValidationPolicy:
    """What a topic allows (Kafka topic config names in the comments)."""

    max_batch_bytes: int  # max.message.bytes
    timestamp_type: int = CREATE_TIME  # message.timestamp.type
    before_max_ms: int = 2**63 - 1  # message.timestamp.before.max.ms
    after_max_ms: int = 2**63 - 1  # message.timestamp.after.max.ms
    api_version: int = 12  # of the Produce request
    require_keys: bool = False  # cleanup.policy includes compact: every record needs a key

    @property
    def max_decompressed_bytes(self) -> int:
        return max(DECOMPRESSED_FLOOR, DECOMPRESSION_RATIO_LIMIT * self.max_batch_bytes)


@dataclass(frozen=True, slots=True)
class Validated:
    """A batch fit to append: ``data`` (the producer's bytes, or a rewritten copy) and its header."""

    data: bytes | bytearray
    header: BatchHeader
    log_append_time_ms: int = -1  # the broker's clock for LogAppendTime topics, else -1


@dataclass(frozen=True, slots=True)
class Rejected:
    """Why a partition's records were refused; ``record_errors`` lists (index of the record in
    the batch, why) for the records Kafka names individually (timestamps out of bounds)."""

    error: ErrorCode
    message: str
    record_errors: tuple[tuple[int, str], ...] = ()


class _Invalid(Exception):
    """Internal: one check failed (never leaves this module)."""

    def __init__(self, error: ErrorCode, message: str,
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
        self.record_errors = record_errors


def validate_produced(data: bytes | bytearray, policy: ValidationPolicy,
                      now_ms: int) -> Validated | Rejected:
    """Check one partition's produced records; see the module docstring for the rules."""
    try:
        return _validate(data, policy, now_ms)
    except _Invalid as exc:
        return Rejected(exc.error, exc.message, exc.record_errors)


def _validate(data: bytes | bytearray, policy: ValidationPolicy, now_ms: int) -> Validated:
    size = len(data)
    if size < BATCH_HEADER_SIZE:
        raise _Invalid(ErrorCode.corrupt_message,
                       f"{size} bytes are not a record batch (a v2 header alone is 61 bytes)")
    magic = data[MAGIC_OFFSET]
    if magic != MAGIC_V2:
        # Produce v3+ carries only magic 2 (Kafka answers INVALID_RECORD for older formats too).
        raise _Invalid(ErrorCode.invalid_record,
                       f"record batch magic {magic} is not supported; Produce v3+ requires "
                       "magic 2 (upgrade the client)")
    h = BatchHeader(*HEADER_STRUCT.unpack_from(data, 0))
    total = h.batch_length + LOG_OVERHEAD
    if h.batch_length < MIN_BATCH_LENGTH or total > size:
        raise _Invalid(ErrorCode.corrupt_message,
                       f"batch length {h.batch_length} does not match the {size} bytes sent")
    if total > policy.max_batch_bytes:
        raise _Invalid(ErrorCode.message_too_large,
                       f"batch of {total} bytes exceeds max.message.bytes={policy.max_batch_bytes}")
    if total < size:
        raise _Invalid(ErrorCode.invalid_record,
                       "Produce v3+ allows exactly one record batch per partition; "
                       f"{size - total} bytes follow the first batch")
    with memoryview(data) as view:
        if crc32c.crc32c(view[ATTRIBUTES_OFFSET:total]) != h.crc:
            raise _Invalid(ErrorCode.corrupt_message, "CRC-32C of the record batch does not match")
    codec = h.attributes & COMPRESSION_MASK
    if codec > MAX_COMPRESSION_CODEC:
        raise _Invalid(ErrorCode.corrupt_message, f"unknown compression codec {codec}")
    if codec == ZSTD and policy.api_version < MIN_PRODUCE_VERSION_FOR_ZSTD:
        raise _Invalid(ErrorCode.unsupported_compression_type,
                       f"zstd batches need Produce v{MIN_PRODUCE_VERSION_FOR_ZSTD}+, "
                       f"got v{policy.api_version}")
    if h.attributes & CONTROL_MASK:
        raise _Invalid(ErrorCode.invalid_record, "clients may not produce control batches")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise _Invalid(ErrorCode.invalid_record,
                       f"idempotent batch of producer {h.producer_id} has no base sequence")
    count = h.record_count
    if count <= 0 or h.last_offset_delta != count - 1:
        raise _Invalid(ErrorCode.invalid_record,
                       f"batch declares {count} records but last offset delta "
                       f"{h.last_offset_delta}")
    if codec == 0:
        if count > (total - BATCH_HEADER_SIZE) // MIN_RECORD_BYTES:
            raise _Invalid(ErrorCode.invalid_record,
                           f"batch declares {count} records in {total - BATCH_HEADER_SIZE} bytes")
        lo, hi = walk_records(data, BATCH_HEADER_SIZE, total, count, policy.require_keys)
        records: tuple[bytes | bytearray, int, int] = (data, BATCH_HEADER_SIZE, total)
    else:
        try:
            body = decompress(codec, memoryview(data)[BATCH_HEADER_SIZE:total],
                              policy.max_decompressed_bytes)
        except DecompressionError as exc:
            raise _Invalid(ErrorCode.invalid_record if exc.too_large else ErrorCode.corrupt_message,
                           str(exc)) from None
        if count > len(body) // MIN_RECORD_BYTES:
            raise _Invalid(ErrorCode.invalid_record,
                           f"batch declares {count} records in {len(body)} bytes "
                           f"({CODEC_NAMES[codec]}-decompressed)")
        buf = body.obj
        if len(buf) != len(body):  # type: ignore[arg-type]
            buf = bytes(body)  # the walk relies on the buffer ending with the records
        lo, hi = walk_records(buf, 0, len(body), count,  # type: ignore[arg-type]
                              policy.require_keys)
        records = (buf, 0, len(body))  # type: ignore[assignment]
    return _timestamps(data, h, lo, hi, policy, now_ms, records)


def _timestamps(data: bytes | bytearray, h: BatchHeader, lo: int, hi: int,
                policy: ValidationPolicy, now_ms: int,
                records: tuple[bytes | bytearray, int, int]) -> Validated:
    if policy.timestamp_type == LOG_APPEND_TIME:
        want_type, want_max, append_time = TIMESTAMP_TYPE_MASK, now_ms, now_ms
    else:
        first, last = h.base_timestamp + lo, h.base_timestamp + hi
        earliest, latest = now_ms - policy.before_max_ms, now_ms + policy.after_max_ms
        if first < earliest or last > latest:
            raise _timestamp_error(h, records, earliest, latest, policy, now_ms)
        want_type, want_max, append_time = 0, last, -1
    if (h.attributes & TIMESTAMP_TYPE_MASK) == want_type and h.max_timestamp == want_max:
        return Validated(data, h, append_time)
    out = bytearray(data)
    attributes = (h.attributes & ~TIMESTAMP_TYPE_MASK) | want_type
    out[ATTRIBUTES_OFFSET : ATTRIBUTES_OFFSET + 2] = attributes.to_bytes(2, "big", signed=True)
    out[MAX_TIMESTAMP_OFFSET : MAX_TIMESTAMP_OFFSET + 8] = want_max.to_bytes(8, "big", signed=True)
    crc = crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:])
    out[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    header = BatchHeader(*HEADER_STRUCT.unpack_from(out, 0))
    return Validated(out, header, append_time)


# At most this many per-record entries in an INVALID_TIMESTAMP answer (the message counts them all).
MAX_RECORD_ERRORS = 100


def _timestamp_error(h: BatchHeader, records: tuple[bytes | bytearray, int, int], earliest: int,
                     latest: int, policy: ValidationPolicy, now_ms: int) -> _Invalid:
    """INVALID_TIMESTAMP naming the records out of bounds (their index in the batch), as Kafka
    does in ``record_errors``. Only reached on failure: reads the (valid) records again."""
    b, pos, end = records
    bad: list[tuple[int, str]] = []
    n_bad = 0
    for i in range(h.record_count):
        length, pos = _varint(b, pos, 5)
        ts = h.base_timestamp + _varint(b, pos + 1, 10)[0]
        pos += length
        if earliest <= ts <= latest:
            continue
        n_bad += 1
        if len(bad) < MAX_RECORD_ERRORS:
            if ts < earliest:
                why = (f"timestamp {ts} is more than message.timestamp.before.max.ms="
                       f"{policy.before_max_ms} before the broker's time {now_ms}")
            else:
                why = (f"timestamp {ts} is more than message.timestamp.after.max.ms="
                       f"{policy.after_max_ms} after the broker's time {now_ms}")
            bad.append((i, f"record {i}: {why}"))
    message = f"{n_bad} of {h.record_count} record(s) out of bounds; first, {bad[0][1]}"
    return _Invalid(ErrorCode.invalid_timestamp, message, tuple(bad))


def walk_records(b: bytes | bytearray, pos: int, end: int, count: int,
                 require_keys: bool = False) -> tuple[int, int]:
    """Read ``count`` records from ``b[pos:end]`` (no more, no less); return the smallest and
    largest timestamp delta. With ``require_keys`` (a compacted topic) a record without a key is
    refused, as Kafka's ``LogValidator`` does: compaction keeps the latest record per key.

    The hot loop of produce validation: each field is a zig-zag varint whose one-byte form is
    decoded inline (the common case); longer ones go through :func:`_varint`. A record's fields
    must end exactly where its length says.

    Raises:
        _Invalid: a malformed varint, a length that disagrees with the fields, an offset delta
            out of order, a null header key, too few records or bytes left over.
    """
    lo = 2**63
    hi = -(2**63)
    i = 0
    try:
        # ``b`` ends at ``end`` (callers pass exactly the records), so running out of records
        # is an IndexError; a length that disagrees with the fields is caught at the record's end.
        for i in range(count):  # noqa: B007 (i is reported on IndexError)
            x = b[pos]
            if x < 0x80:
                length = (x >> 1) ^ -(x & 1)
                pos += 1
            elif (y := b[pos + 1]) < 0x80:  # two bytes: records of 64 B .. 8 KiB
                length = _ZIGZAG14[(x & 0x7F) | (y << 7)]
                pos += 2
            else:
                length, pos = _varint(b, pos, 5)
            rec_end = pos + length
            # pos: record attributes (unused in v2), then the timestamp delta.
            x = b[pos + 1]
            if x < 0x80:
                ts = (x >> 1) ^ -(x & 1)
                q = pos + 2
            elif (y := b[pos + 2]) < 0x80:  # deltas of 64 ms .. 8 s: a producer lingering
                ts = _ZIGZAG14[(x & 0x7F) | (y << 7)]
                q = pos + 3
            else:
                ts, q = _varint(b, pos + 1, 10)
            # The offset delta must be i: compare with its shortest encoding (zig-zag 2i).
            if i < 64:
                if b[q] == i << 1:
                    q += 1
                else:
                    q = _delta(b, q, i, count)
            elif i < 8192 and b[q] | (b[q + 1] << 8) == _DELTA2[i]:
                q += 2
            else:
                q = _delta(b, q, i, count)
            x = b[q]
            if x == 1:  # null key, the common case
                if require_keys:
                    why = f"record {i}: Compacted topic cannot accept message without key"
                    raise _Invalid(ErrorCode.invalid_record,
                                   "Compacted topic cannot accept message without key "
                                   "(cleanup.policy includes compact; give every record a key)",
                                   ((i, why),))
                q += 1
            else:
                if x < 0x80:
                    n = (x >> 1) ^ -(x & 1)
                    q += 1
                else:
                    n, q = _varint(b, q, 5)
                if n > 0:
                    q += n
                elif n < -1:
                    raise _Invalid(ErrorCode.invalid_record, f"record {i} has key length {n}")
            x = b[q]
            if x < 0x80:
                n = (x >> 1) ^ -(x & 1)
                q += 1
            elif (y := b[q + 1]) < 0x80:
                n = _ZIGZAG14[(x & 0x7F) | (y << 7)]
                q += 2
            else:
                n, q = _varint(b, q, 5)
            if n > 0:
                q += n
            elif n < -1:
                raise _Invalid(ErrorCode.invalid_record, f"record {i} has value length {n}")
            # No headers and the record ends here: the common case, one test for both.
            if q + 1 != rec_end or b[q]:
                q = _headers(b, q, rec_end, i) if b[q] else q + 1
                if q != rec_end:
                    raise _Invalid(ErrorCode.invalid_record,
                                   f"record {i} declares {length} bytes but its fields take "
                                   f"{q - pos}")
            if ts < lo:
                lo = ts
            if ts > hi:
                hi = ts
            pos = rec_end
    except IndexError:
        if pos >= end:
            raise _Invalid(ErrorCode.invalid_record,
                           f"batch declares {count} records but holds {i}") from None
        raise _Invalid(ErrorCode.invalid_record, f"record {i} runs past the end of the batch") from None
    if pos != end:
        raise _Invalid(ErrorCode.invalid_record,
                       f"{end - pos} bytes follow the last of the {count} declared records")
    return lo, hi


# Zig-zag values of every 14-bit payload of a two-byte varint, and the two bytes (little-endian)
# of the shortest encoding of offset deltas 64..8191: table lookups instead of arithmetic in the
# hot loop.
_ZIGZAG14 = tuple((v >> 1) ^ -(v & 1) for v in range(1 << 14))
_DELTA2 = tuple((((i << 1) & 0x7F) | 0x80) | ((i >> 6) << 8) for i in range(8192))


def _delta(b: bytes | bytearray, q: int, i: int, count: int) -> int:
    """Check an offset delta not in its shortest encoding (or wrong); return the position after."""
    delta, q = _varint(b, q, 5)
    if delta != i:
        raise _Invalid(ErrorCode.invalid_record,
                       f"record {i} has offset delta {delta}; deltas must run 0..{count - 1}")
    return q


def _headers(b: bytes | bytearray, q: int, rec_end: int, i: int) -> int:
    n, q = _varint(b, q, 5)
    if n < 0 or n > (rec_end - q) // 2:
        raise _Invalid(ErrorCode.invalid_record, f"record {i} declares {n} headers")
    for _ in range(n):
        klen, q = _varint(b, q, 5)
        if klen < 0:
            raise _Invalid(ErrorCode.invalid_record, f"record {i} has a null header key")
        q += klen
        vlen, q = _varint(b, q, 5)
        if vlen > 0:
            q += vlen
        elif vlen < -1:
            raise _Invalid(ErrorCode.invalid_record, f"record {i} has header value length {vlen}")
        if q > rec_end:
            break  # the caller reports the length mismatch
    return q


def _varint(b: bytes | bytearray, q: int, max_bytes: int) -> tuple[int, int]:
    """Zig-zag varint at ``q``: (value, position after it). At most ``max_bytes`` bytes (5 for an
    int32, 10 for an int64)."""
    value = 0
    shift = 0
    for k in range(max_bytes):
        x = b[q + k]
        value |= (x & 0x7F) << shift
        if x < 0x80:
            return (value >> 1) ^ -(value & 1), q + k + 1
        shift += 7
    raise _Invalid(ErrorCode.invalid_record, f"varint at byte {q} is longer than {max_bytes} bytes")
