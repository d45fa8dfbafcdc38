"""Produce validation (protocol/log_validator.py): every record is read, as Kafka's LogValidator does."""

from __future__ import annotations

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from protocol.compression import DecompressionError, decompress
from protocol.log_validator import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Rejected,
    Validated,
    ValidationPolicy,
    validate_produced,
)
from protocol.record_batch import ATTRIBUTES_OFFSET, TIMESTAMP_TYPE_MASK, parse_header
from tests.unit.batches import (
    DEFAULT_TS,
    compress,
    encode_records,
    make_batch,
    raw_batch,
    xerial_snappy,
)

NOW = DEFAULT_TS + 1_000
POLICY = ValidationPolicy(max_batch_bytes=1 << 20)
RECORDS = [(b"k%d" % i, b"value-%d" % i * 20) for i in range(50)]


def ok(data: bytes, policy: ValidationPolicy = POLICY, now: int = NOW) -> Validated:
    res = validate_produced(data, policy, now)
    assert isinstance(res, Validated), res
    return res


def refused(data: bytes, policy: ValidationPolicy = POLICY, now: int = NOW) -> Rejected:
    res = validate_produced(data, policy, now)
    assert isinstance(res, Rejected), res
    return res


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_well_formed_batches_pass_unchanged(codec: int) -> None:
    data = make_batch(RECORDS, compression=codec)
    res = ok(data)
    assert res.data is data  # appended byte for byte
    assert res.header.record_count == 50 and res.log_append_time_ms == -1


def test_xerial_framed_snappy_from_the_java_client_passes() -> None:
    body = encode_records([(0, i, None, b"x" * 3000) for i in range(40)])
    ok(raw_batch(xerial_snappy(body, block=16 * 1024), 40, attributes=2))


def test_records_with_headers_pass() -> None:
    body = encode_records([(0, i, b"k", b"v") for i in range(3)], headers=[(b"h", b"1"), (b"n", None)])
    ok(raw_batch(body, 3))


def _one_record(delta: int = 0) -> bytes:
    return encode_records([(0, delta, None, b"v")])


FORGED = [
    # (id, data, error, message fragment)
    ("huge-count-in-a-tiny-frame", raw_batch(_one_record(), 2**31 - 1),
     ErrorCode.invalid_record, "declares 2147483647 records"),
    ("count-above-records", raw_batch(encode_records([(0, i, None, b"v") for i in range(3)]), 5),
     ErrorCode.invalid_record, "declares 5 records"),
    ("count-below-records", raw_batch(encode_records([(0, i, None, b"v") for i in range(3)]), 2),
     ErrorCode.invalid_record, "follow the last"),
    ("count-vs-last-offset-delta", raw_batch(_one_record(), 1, last_offset_delta=7),
     ErrorCode.invalid_record, "last offset delta 7"),
    ("zero-records", raw_batch(b"", 0), ErrorCode.invalid_record, "declares 0 records"),
    ("offset-deltas-not-consecutive",
     raw_batch(encode_records([(0, 0, None, b"a"), (0, 2, None, b"b"), (0, 1, None, b"c")]), 3),
     ErrorCode.invalid_record, "offset delta 2"),
    ("offset-deltas-not-from-zero", raw_batch(_one_record(delta=5), 1),
     ErrorCode.invalid_record, "offset delta 5"),
    ("bad-crc", raw_batch(_one_record(), 1, crc=12345), ErrorCode.corrupt_message, "CRC"),
    ("magic-1", raw_batch(_one_record(), 1, magic=1), ErrorCode.invalid_record, "magic 1"),
    ("magic-0", raw_batch(_one_record(), 1, magic=0), ErrorCode.invalid_record, "magic 0"),
    ("two-batches", make_batch(RECORDS[:2]) + make_batch(RECORDS[:2]),
     ErrorCode.invalid_record, "exactly one record batch"),
    ("truncated", make_batch(RECORDS)[:-3], ErrorCode.corrupt_message, "batch length"),
    ("header-only", make_batch(RECORDS)[:40], ErrorCode.corrupt_message, "not a record batch"),
    ("unknown-codec", raw_batch(_one_record(), 1, attributes=6), ErrorCode.corrupt_message,
     "unknown compression"),
    ("control-batch", raw_batch(_one_record(), 1, attributes=0x20), ErrorCode.invalid_record,
     "control"),
    ("idempotent-without-sequence", raw_batch(_one_record(), 1, producer_id=7, producer_epoch=0),
     ErrorCode.invalid_record, "base sequence"),
    ("gzip-garbage", raw_batch(b"\x1f\x8b" + b"\x00" * 30, 1, attributes=1),
     ErrorCode.corrupt_message, "gzip"),
    ("zstd-garbage", raw_batch(b"nonsense" * 4, 1, attributes=4), ErrorCode.corrupt_message,
     "zstd"),
    ("compressed-huge-count", raw_batch(compress(4, _one_record()), 2**31 - 1, attributes=4),
     ErrorCode.invalid_record, "declares 2147483647 records"),
    ("record-length-too-long",
     raw_batch(bytes([0x20]) + _one_record()[1:] + b"\x00" * 4, 1),
     ErrorCode.invalid_record, "record 0"),
    ("negative-key-length", raw_batch(bytes([0x0C, 0, 0, 0, 0x05, 0x02, ord("v"), 0]), 1),
     ErrorCode.invalid_record, "key length -3"),
    ("null-header-key", raw_batch(encode_records([(0, 0, None, b"v")], headers=[(None, b"x")]), 1),
     ErrorCode.invalid_record, "null header key"),
    ("overlong-varint",
     raw_batch(bytes([0x14, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01,
                      0, 1, 1, 0, 0, 0, 0, 0]), 1),
     ErrorCode.invalid_record, "varint"),
]


@pytest.mark.parametrize(("data", "error", "fragment"), [c[1:] for c in FORGED],
                         ids=[c[0] for c in FORGED])
def test_forged_batches_are_refused(data: bytes, error: ErrorCode, fragment: str) -> None:
    res = refused(data)
    assert res.error == error
    assert fragment in res.message


def test_batch_over_max_message_bytes_is_message_too_large() -> None:
    data = make_batch([(None, b"x" * 2000)])
    ok(data, ValidationPolicy(max_batch_bytes=len(data)))
    res = refused(data, ValidationPolicy(max_batch_bytes=len(data) - 1))
    assert res.error == ErrorCode.message_too_large and "max.message.bytes" in res.message


def test_zstd_needs_produce_v7() -> None:
    data = make_batch(RECORDS, compression=4)
    ok(data, ValidationPolicy(max_batch_bytes=1 << 20, api_version=7))
    res = refused(data, ValidationPolicy(max_batch_bytes=1 << 20, api_version=6))
    assert res.error == ErrorCode.unsupported_compression_type


def test_decompression_bomb_is_refused_within_its_limit() -> None:
    # 80 MiB of zeros compress to a few KiB; the limit is 64 x max.message.bytes, at least 64 MiB.
    data = raw_batch(compress(4, bytes(80 << 20)), 1, attributes=4)
    assert len(data) < 64 * 1024
    policy = ValidationPolicy(max_batch_bytes=len(data))
    assert policy.max_decompressed_bytes == 64 << 20
    res = refused(data, policy)
    assert res.error == ErrorCode.invalid_record and "more than 67108864 bytes" in res.message
    with pytest.raises(DecompressionError):
        decompress(4, data[61:], 1024)


TIMESTAMP_CASES = [
    # (id, record timestamps relative to NOW, before_max_ms, after_max_ms, accepted)
    ("inside", [-500, 0, 500], 1000, 1000, True),
    ("at-the-bounds", [-1000, 1000], 1000, 1000, True),
    ("too-old", [-1001, 0], 1000, 1000, False),
    ("too-new", [0, 1001], 1000, 1000, False),
    ("one-record-out-of-many", [0] * 10 + [-5000] + [0] * 5, 1000, 1000, False),
    ("defaults-accept-old-data", [-(10**11)], 2**63 - 1, 3_600_000, True),
    ("default-after-bound-is-one-hour", [3_600_001], 2**63 - 1, 3_600_000, False),
]


@pytest.mark.parametrize(("stamps", "before", "after", "accepted"), [c[1:] for c in TIMESTAMP_CASES],
                         ids=[c[0] for c in TIMESTAMP_CASES])
def test_create_time_bounds(stamps: list[int], before: int, after: int, accepted: bool) -> None:
    records = [(None, b"v")] * len(stamps)
    data = make_batch(records, timestamps=[NOW + s for s in stamps])
    policy = ValidationPolicy(max_batch_bytes=1 << 20, before_max_ms=before, after_max_ms=after)
    res = validate_produced(data, policy, NOW)
    assert isinstance(res, Validated) == accepted, res
    if not accepted:
        assert isinstance(res, Rejected) and res.error == ErrorCode.invalid_timestamp
        bad = [i for i, s in enumerate(stamps) if not -before <= s <= after]
        assert [i for i, _ in res.record_errors] == bad
        assert "message.timestamp" in res.message


@pytest.mark.parametrize("codec", [0, 3])
def test_log_append_time_stamps_the_header_and_keeps_the_crc_valid(codec: int) -> None:
    data = make_batch(RECORDS, compression=codec, timestamp_ms=NOW - 10**9)
    policy = ValidationPolicy(max_batch_bytes=1 << 20, timestamp_type=LOG_APPEND_TIME,
                              after_max_ms=0, before_max_ms=0)  # bounds do not apply
    res = ok(data, policy, NOW)
    h = parse_header(res.data)
    assert h.timestamp_type == 1 and h.max_timestamp == NOW and res.log_append_time_ms == NOW
    assert crc32c.crc32c(bytes(res.data[ATTRIBUTES_OFFSET:])) == h.crc
    # Everything but attributes, max timestamp and CRC is as produced.
    assert res.data[61:] == data[61:] and h.record_count == 50 and h.compression == codec


def test_create_time_corrects_a_lying_max_timestamp() -> None:
    data = make_batch(RECORDS[:3], timestamps=[NOW - 5, NOW - 3, NOW - 4])
    assert parse_header(data).max_timestamp == NOW - 3
    assert ok(data).data is data
    # A header claiming a max timestamp far in the future would pin retention: it is rewritten.
    forged = raw_batch(encode_records([(0, 0, None, b"a"), (2, 1, None, b"b")]), 2,
                       base_ts=NOW - 5, max_ts=NOW + 10**12)
    res = ok(forged)
    h = parse_header(res.data)
    assert h.max_timestamp == NOW - 3 and h.timestamp_type == 0
    assert crc32c.crc32c(bytes(res.data[ATTRIBUTES_OFFSET:])) == h.crc
    # A producer setting the LogAppendTime bit on a CreateTime topic gets it cleared.
    flagged = raw_batch(_one_record(), 1, attributes=TIMESTAMP_TYPE_MASK, base_ts=NOW)
    assert parse_header(ok(flagged).data).timestamp_type == 0


def test_policy_defaults_are_create_time() -> None:
    assert POLICY.timestamp_type == CREATE_TIME


def test_every_truncation_of_a_batch_is_refused_not_raised() -> None:
    body = encode_records([(i, i, b"key", b"v" * 200) for i in range(4)],
                          headers=[(b"h", b"v")])
    good = raw_batch(body, 4)
    ok(good)
    for cut in range(61, len(body) + 61):
        # Keep the header's length consistent so the record walk itself meets the damage.
        payload = body[: cut - 61]
        res = validate_produced(raw_batch(payload, 4), POLICY, NOW)
        assert isinstance(res, Rejected), cut
    # Flip each byte of the records once: either refused or (rarely) still a valid batch.
    for i in range(len(body)):
        damaged = bytearray(body)
        damaged[i] ^= 0x55
        res = validate_produced(raw_batch(bytes(damaged), 4), POLICY, NOW)
        assert isinstance(res, Validated | Rejected)


def test_offset_delta_in_a_longer_encoding_than_needed_is_still_read() -> None:
    # attributes, timestamp delta 0, offset delta 0 as two bytes (0x80 0x00), null key, value "v",
    # no headers: unusual but valid varints.
    rec = bytes([0, 0, 0x80, 0x00, 0x01, 0x02, ord("v"), 0])
    ok(raw_batch(bytes([len(rec) << 1]) + rec, 1, base_ts=NOW))


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=200), count=st.integers(-5, 2**31 - 1),
       codec=st.integers(0, 7), attributes=st.integers(0, 0x3F))
def test_arbitrary_records_are_validated_or_refused_never_raised(payload: bytes, count: int,
                                                                 codec: int,
                                                                 attributes: int) -> None:
    data = raw_batch(payload, count, attributes=(attributes & ~7) | codec, base_ts=NOW)
    res = validate_produced(data, POLICY, NOW)
    assert isinstance(res, Validated | Rejected)


@pytest.mark.parametrize("codec", [0, 2, 4])
def test_invalid_timestamp_names_each_record_out_of_bounds(codec: int) -> None:
    stamps = [NOW] * 300
    for i in (3, 150, 299):
        stamps[i] = NOW + 10_000 + i
    data = make_batch([(None, b"v")] * 300, timestamps=stamps, compression=codec)
    res = refused(data, ValidationPolicy(max_batch_bytes=1 << 20, after_max_ms=5_000))
    assert res.error == ErrorCode.invalid_timestamp
    assert [i for i, _ in res.record_errors] == [3, 150, 299]
    assert res.message.startswith("3 of 300 record(s) out of bounds")
    assert f"timestamp {NOW + 10_003}" in res.record_errors[0][1]


@pytest.mark.parametrize("codec", [0, 1, 4], ids=["none", "gzip", "zstd"])
def test_compacted_topic_refuses_a_record_without_key(codec: int) -> None:
    """Kafka's LogValidator: "Compacted topic cannot accept message without key", INVALID_RECORD
    naming the record; keyed records (an empty key is a key) pass, tombstones too."""
    compacted = ValidationPolicy(max_batch_bytes=1 << 20, require_keys=True)
    ok(make_batch([(b"k", b"v"), (b"", b"v"), (b"k", None)], compression=codec), compacted)
    res = refused(make_batch([(b"k", b"v"), (None, b"v")], compression=codec), compacted)
    assert res.error == ErrorCode.invalid_record
    assert "Compacted topic cannot accept message without key" in res.message
    assert [i for i, _ in res.record_errors] == [1]
    ok(make_batch([(None, b"v")], compression=codec))  # not compacted: fine
