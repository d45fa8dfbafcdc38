"""Build v2 record batches for tests (a small independent encoder; kio checks it in the tests)."""

from __future__ import annotations

import gzip
import struct

import crc32c

DEFAULT_TS = 1_700_000_000_000

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")


def _varint(value: int) -> bytes:
    """Zig-zag varint (Kafka's signed varint/varlong)."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _nullable(data: bytes | None) -> bytes:
    return _varint(-1) if data is None else _varint(len(data)) + data


def make_batch(
    records: list[tuple[bytes | None, bytes | None]],
    base_offset: int = 0,
    timestamp_ms: int = DEFAULT_TS,
    compression: int = 0,
    *,
    timestamps: list[int] | None = None,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = 0,
) -> bytes:
    """One batch of ``(key, value)`` records; per-record ``timestamps`` default to ``timestamp_ms``.

    ``compression`` 0 (none), 1 gzip, 2 snappy, 3 lz4 or 4 zstd (see ``compress``); ``attributes``
    bits are OR-ed into the attributes.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    stamps = timestamps if timestamps is not None else [timestamp_ms] * len(records)
    base_ts = stamps[0]
    body = bytearray()
    for delta, ((key, value), ts) in enumerate(zip(records, stamps, strict=True)):
        rec = b"\x00" + _varint(ts - base_ts) + _varint(delta)
        rec += _nullable(key) + _nullable(value) + _varint(0)  # no headers
        body += _varint(len(rec)) + rec
    payload = compress(compression, bytes(body))
    after_crc = _HEADER_AFTER_CRC.pack(
        attributes | compression,
        len(records) - 1,
        base_ts,
        max(stamps),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    ) + payload
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    head = struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc)
    return head + after_crc


def compress(codec: int, body: bytes) -> bytes:
    """Records as producers compress them: 1 gzip, 2 snappy (one raw block, as librdkafka),
    3 lz4 frame, 4 zstd frame; 0 leaves them as they are."""
    if codec == 0:
        return body
    if codec == 1:
        return gzip.compress(body, mtime=0)
    import cramjam

    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(body))
    if codec == 3:
        return bytes(cramjam.lz4.compress(body))
    if codec == 4:
        return bytes(cramjam.zstd.compress(body))
    raise ValueError(f"unsupported test compression {codec}")


def xerial_snappy(body: bytes, block: int = 32 * 1024) -> bytes:
    """Snappy in the xerial framing the Java producer writes (header, then sized raw blocks)."""
    import cramjam

    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(body), block):
        chunk = bytes(cramjam.snappy.compress_raw(body[i : i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def raw_batch(payload: bytes, count: int, *, attributes: int = 0, last_offset_delta: int | None = None,
              base_ts: int = DEFAULT_TS, max_ts: int | None = None, producer_id: int = -1,
              producer_epoch: int = -1, base_sequence: int = -1, magic: int = 2,
              crc: int | None = None) -> bytes:
    """A batch around an arbitrary records ``payload`` with any header fields (forgeries)."""
    after_crc = _HEADER_AFTER_CRC.pack(
        attributes, count - 1 if last_offset_delta is None else last_offset_delta, base_ts,
        base_ts if max_ts is None else max_ts, producer_id, producer_epoch, base_sequence, count,
    ) + payload
    batch_length = 4 + 1 + 4 + len(after_crc)
    head = struct.pack(">qiibI", 0, batch_length, 0, magic,
                       crc32c.crc32c(after_crc) if crc is None else crc)
    return head + after_crc


def encode_records(records: list[tuple[int, int, bytes | None, bytes | None]],
                   headers: list[tuple[bytes | None, bytes | None]] | None = None) -> bytes:
    """Records body from (timestamp delta, offset delta, key, value), any values allowed."""
    body = bytearray()
    for ts_delta, delta, key, value in records:
        rec = b"\x00" + _varint(ts_delta) + _varint(delta) + _nullable(key) + _nullable(value)
        hs = headers or []
        rec += _varint(len(hs))
        for hk, hv in hs:
            rec += _nullable(hk) + _nullable(hv)
        body += _varint(len(rec)) + rec
    return bytes(body)


def make_value_batch(
    n_records: int, value_size: int, timestamp_ms: int = DEFAULT_TS, tag: int = 0
) -> bytes:
    """``n_records`` records with distinct values of ``value_size`` bytes (``tag`` varies them)."""
    records = []
    for i in range(n_records):
        stem = f"{tag}:{i}:".encode()
        records.append((None, (stem * (value_size // len(stem) + 1))[:value_size]))
    return make_batch(records, timestamp_ms=timestamp_ms)
