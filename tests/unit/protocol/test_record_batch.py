"""protocol/record_batch.py: header parsing, CRC checks, produce validation, offset rewriting."""

from __future__ import annotations

import datetime
import io
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    MAGIC_OFFSET,
    BatchHeader,
    CorruptRecordError,
    RecordTooLargeError,
    crc_ok,
    iter_batches,
    parse_header,
    validate_batches,
    with_base_offset,
    with_partition_leader_epoch,
)

from tests.unit.batches import DEFAULT_TS, make_batch

RECORDS = [(b"k0", b"value-0"), (None, b"value-1"), (b"k2", None)]


def flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x01
    return bytes(out)


def test_helper_matches_kio_writer() -> None:
    ts = TZAwareMicros.parse(datetime.datetime.fromtimestamp(DEFAULT_TS // 1000, datetime.UTC))
    new = NewRecordBatch(
        producer_id=i64(-1),
        producer_epoch=i16(-1),
        base_sequence=i32(-1),
        attributes=i16(0),
        records=tuple(
            Record(attributes=i8(0), timestamp=ts, offset=i64(i), key=k, value=v, headers=())
            for i, (k, v) in enumerate(RECORDS)
        ),
    )
    out = io.BytesIO()
    write_new_batch(out, new)
    assert out.getvalue() == make_batch(RECORDS)


def test_parse_header_matches_kio_reader() -> None:
    data = make_batch(RECORDS, base_offset=7, producer_id=42, producer_epoch=3, base_sequence=9)
    batch, size = read_batch(data, 0)
    h = parse_header(data)
    assert (h.base_offset, h.batch_length, h.crc) == (7, batch.batch_length, batch.crc)
    assert h.attributes == 0
    assert (h.last_offset_delta, h.base_timestamp, h.max_timestamp) == (2, DEFAULT_TS, DEFAULT_TS)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (42, 3, 9, 3)
    assert h.magic == 2 and h.total_size == size == len(data) and h.last_offset == 9


def test_parse_header_at_position() -> None:
    first = make_batch(RECORDS)
    second = make_batch([(None, b"x")], base_offset=3)
    assert parse_header(first + second, len(first)).base_offset == 3


@pytest.mark.parametrize(
    ("attributes", "compression", "timestamp_type", "transactional", "control"),
    [
        (0x00, 0, 0, False, False),
        (0x01, 1, 0, False, False),
        (0x04, 4, 0, False, False),
        (0x08, 0, 1, False, False),
        (0x10, 0, 0, True, False),
        (0x30, 0, 0, True, True),
        (0x3B, 3, 1, True, True),
    ],
    ids=["plain", "gzip", "zstd", "log-append-time", "transactional", "control", "all"],
)
def test_attribute_properties(
    attributes: int, compression: int, timestamp_type: int, transactional: bool, control: bool
) -> None:
    h = parse_header(make_batch(RECORDS, attributes=attributes))
    assert (h.compression, h.timestamp_type, h.is_transactional, h.is_control) == (
        compression,
        timestamp_type,
        transactional,
        control,
    )


def _with_magic(data: bytes, magic: int) -> bytes:
    out = bytearray(data)
    out[MAGIC_OFFSET] = magic
    return bytes(out)


def _with_length(data: bytes, length: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(">i", out, 8, length)
    return bytes(out)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        make_batch(RECORDS)[:BATCH_HEADER_SIZE - 1],
        _with_magic(make_batch(RECORDS), 1),
        _with_magic(make_batch(RECORDS), 3),
        _with_length(make_batch(RECORDS), 48),
        _with_length(make_batch(RECORDS), -1),
    ],
    ids=["empty", "short-header", "magic-1", "magic-3", "length-48", "length-negative"],
)
def test_parse_header_rejects(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        parse_header(data)


def test_crc_ok_detects_every_covered_byte_and_ignores_uncovered() -> None:
    data = make_batch(RECORDS)
    h = parse_header(data)
    assert crc_ok(data, 0, h)
    for at in range(ATTRIBUTES_OFFSET, len(data)):
        assert not crc_ok(flip(data, at), 0, h), at
    for at in range(0, 8):  # base offset
        assert crc_ok(flip(data, at), 0, h)
    for at in range(12, 16):  # partition leader epoch
        assert crc_ok(flip(data, at), 0, h)
    assert not crc_ok(data[:-1], 0, h)


def test_crc_ok_flipped_crc_field() -> None:
    data = flip(make_batch(RECORDS), CRC_OFFSET + 2)
    assert not crc_ok(data, 0, parse_header(data))


def test_iter_batches_positions() -> None:
    batches = [
        make_batch(RECORDS),
        make_batch([(None, b"a" * 300)]),
        make_batch([(b"k", b"v")] * 5),
    ]
    buf = b"".join(batches)
    got = list(iter_batches(buf))
    positions = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    assert [p for p, _ in got] == positions
    assert [h.record_count for _, h in got] == [3, 1, 5]
    assert list(iter_batches(b"")) == []


def test_iter_batches_partial_tail() -> None:
    buf = make_batch(RECORDS) + make_batch(RECORDS)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(buf[:-1]))


def test_validate_batches_accepts_and_returns_headers() -> None:
    batches = [make_batch(RECORDS), make_batch([(None, b"z")], compression=1), make_batch(RECORDS)]
    headers = validate_batches(b"".join(batches), 10_000)
    assert [h.total_size for h in headers] == [len(b) for b in batches]
    assert headers[1].compression == 1
    assert validate_batches(b"", 100) == []


def test_validate_batches_size_limit_is_inclusive() -> None:
    data = make_batch(RECORDS)
    assert validate_batches(data, len(data))
    with pytest.raises(RecordTooLargeError):
        validate_batches(data, len(data) - 1)
    with pytest.raises(RecordTooLargeError):
        validate_batches(make_batch(RECORDS) + make_batch([(None, b"x" * 500)]), len(data) + 10)


def test_validate_batches_crc_mismatch_in_any_batch() -> None:
    good = make_batch(RECORDS)
    for bad in (flip(good, len(good) - 1) + good, good + flip(good, ATTRIBUTES_OFFSET + 30)):
        with pytest.raises(CorruptRecordError, match="CRC"):
            validate_batches(bad, 10_000)


def test_validate_batches_rejects_every_trailing_partial() -> None:
    good = make_batch(RECORDS)
    for cut in range(1, len(good)):
        with pytest.raises(CorruptRecordError):
            validate_batches(good + good[:cut], 10_000)


def test_validate_batches_rejects_unknown_codec_and_count_mismatch() -> None:
    with pytest.raises(CorruptRecordError, match="compression"):
        validate_batches(make_batch(RECORDS, attributes=0x05), 10_000)
    data = bytearray(make_batch(RECORDS))
    struct.pack_into(">i", data, 57, 4)  # record_count is inside the CRC: fix the CRC up
    struct.pack_into(">I", data, CRC_OFFSET, crc32c.crc32c(bytes(data[ATTRIBUTES_OFFSET:])))
    with pytest.raises(CorruptRecordError, match="records"):
        validate_batches(bytes(data), 10_000)


def test_with_base_offset_keeps_crc_valid() -> None:
    first, second = make_batch(RECORDS), make_batch([(None, b"x")])
    buf = bytearray(first + second)
    with_base_offset(buf, 0, 1_000_000)
    with_base_offset(buf, len(first), 1_000_003)
    with_partition_leader_epoch(buf, len(first), 17)
    assert [h.base_offset for h in validate_batches(buf, 10_000)] == [1_000_000, 1_000_003]
    batch, size = read_batch(bytes(buf), 0)
    assert [r.offset for r in batch.records] == [1_000_000, 1_000_001, 1_000_002]
    assert [r.value for r in batch.records] == [v for _, v in RECORDS]
    batch2, _ = read_batch(bytes(buf), size)
    assert batch2.base_offset == 1_000_003 and batch2.partition_leader_epoch == 17


def test_batch_header_is_frozen() -> None:
    h = parse_header(make_batch(RECORDS))
    assert isinstance(h, BatchHeader)
    with pytest.raises(AttributeError):
        h.base_offset = 3  # type: ignore[misc]


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=500))
def test_validate_batches_fuzz(data: bytes, limit: int) -> None:
    try:
        headers = validate_batches(data, limit)
    except (CorruptRecordError, RecordTooLargeError):
        return
    assert sum(h.total_size for h in headers) == len(data)


@settings(max_examples=100, derandomize=True, database=None, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=200))
def test_validate_batches_fuzz_mutations(noise: bytes, at: int) -> None:
    """Mutating a valid produce payload never escapes the two validation errors."""
    good = make_batch(RECORDS) + make_batch([(None, b"y" * 40)])
    data = good[:at] + noise + good[at + len(noise) :]
    try:
        validate_batches(data, 10_000)
    except (CorruptRecordError, RecordTooLargeError):
        pass
