"""Micro-benchmark of produce validation (issue 12 section 2): records/s through the validator.

    python -m bench.produce_validation [--seconds 1.0]

Batches of 1 KiB records (16 KiB, 256 KiB and 1 MiB) uncompressed and with each codec, timed
through ``protocol.log_validator.validate_produced`` (every record walked, CRC checked,
decompressed), next to the header-and-CRC-only check that preceded it
(``protocol.record_batch.validate_batches``) and, where aiokafka is installed, its C record parser
iterating the same batch (an alternative that was measured, not used).
"""

from __future__ import annotations

import argparse
import os
import struct
import time
from collections.abc import Callable

import cramjam
import crc32c

from protocol.log_validator import ValidationPolicy, validate_produced
from protocol.record_batch import validate_batches
from protocol.varint import encode_varint

RECORD = 1024
NOW = 1_700_000_000_000


def batch(n: int, codec: int) -> bytes:
    """``n`` records of 1 KiB (half random, half repeated: compressible about 2x)."""
    body = bytearray()
    for i in range(n):
        value = os.urandom(RECORD // 2) + bytes(RECORD // 2)
        # Timestamp deltas as a lingering producer writes them: up to ~100 ms apart.
        rec = b"\x00" + encode_varint(i // 8) + encode_varint(i) + encode_varint(-1) + encode_varint(len(value)) + value
        rec += encode_varint(0)
        body += encode_varint(len(rec)) + rec
    payload = bytes(body)
    if codec:
        payload = bytes({1: cramjam.gzip, 2: cramjam.snappy, 3: cramjam.lz4,
                         4: cramjam.zstd}[codec].compress(payload)) if codec != 2 else \
            bytes(cramjam.snappy.compress_raw(payload))
    after = struct.pack(">hiqqqhii", codec, n - 1, NOW, NOW + 2, -1, -1, -1, n) + payload
    head = struct.pack(">qiibI", 0, 9 + len(after), 0, 2, crc32c.crc32c(after))
    return head + after


def rate(fn: Callable[[], object], records: int, seconds: float) -> float:
    fn()
    done = 0
    t0 = time.perf_counter()
    while True:
        fn()
        done += records
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return done / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    policy = ValidationPolicy(max_batch_bytes=2 << 20)
    try:
        from aiokafka.record.default_records import DefaultRecordBatch  # type: ignore
    except ImportError:
        DefaultRecordBatch = None  # noqa: N806
    print(f"{'batch':>9} {'codec':>7} {'validator rec/s':>16} {'MiB/s':>8} "
          f"{'header+CRC only':>16} {'aiokafka C iter':>16}")
    for kib in (16, 256, 1024):
        n = kib * 1024 // (RECORD + 8)
        for codec, name in enumerate(("none", "gzip", "snappy", "lz4", "zstd")):
            data = batch(n, codec)
            res = validate_produced(data, policy, NOW)
            assert not hasattr(res, "error"), res
            r = rate(lambda d=data: validate_produced(d, policy, NOW), n, args.seconds)
            old = rate(lambda d=data: validate_batches(d, 2 << 20), n, args.seconds) \
                if codec == 0 else float("nan")
            c = float("nan")
            if DefaultRecordBatch is not None and codec != 2:
                def it(d: bytes = data) -> None:
                    b = DefaultRecordBatch(bytearray(d))
                    b.validate_crc()
                    for _ in b:
                        pass
                c = rate(it, n, args.seconds)
            print(f"{kib:>6}KiB {name:>7} {r:>16,.0f} {r * RECORD / 2**20:>8,.0f} "
                  f"{old:>16,.0f} {c:>16,.0f}")


if __name__ == "__main__":
    main()
