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

    ``compression`` 0 (none) or 1 (gzip); ``attributes`` bits are OR-ed into the attributes.
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
    if compression == 1:
        payload = gzip.compress(bytes(body), mtime=0)
    elif compression == 0:
        payload = bytes(body)
    else:
        raise ValueError(f"unsupported test compression {compression}")
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


def make_value_batch(
    n_records: int, value_size: int, timestamp_ms: int = DEFAULT_TS, tag: int = 0
) -> bytes:
    """``n_records`` records with distinct values of ``value_size`` bytes (``tag`` varies them)."""
    records = []
    for i in range(n_records):
        stem = f"{tag}:{i}:".encode()
        records.append((None, (stem * (value_size // len(stem) + 1))[:value_size]))
    return make_batch(records, timestamp_ms=timestamp_ms)
