"""Log cleaner throughput (issue 15): MB/s of log compacted, standalone (no broker, no clients).

Writes one partition of 500 MB x ``--scale`` into a temporary directory through
``PartitionLog.append`` (batches of 100 records, keys drawn uniformly from a key space of 10% of
the record count, 100-byte values, 128 MiB segments unless ``--segment-mb``), flushes it, then
times ``storage.cleaner.clean`` passes in this thread until nothing is dirty, with the key map
bounded by ``log.cleaner.dedupe.buffer.size`` (``--buffer-mb``, Kafka's default 128). Throughput is
the log size before cleaning divided by the cleaning time (Kafka's cleaner reports read MB/s the
same way).

    .venv/bin/python -m bench.log_cleaner --scale 0.2
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import struct
import tempfile
import time
from pathlib import Path

import crc32c

from protocol.varint import encode_varint
from storage.cleaner import MAP_ENTRY_BYTES, clean, cleanable
from storage.segment_log import LogConfig, PartitionLog

T0 = 1_700_000_000_000
RECORDS_PER_BATCH = 100
VALUE_BYTES = 100
ROLL_MS = 30 * 86_400_000


def batch(keys: list[bytes], value: bytes, ts: int) -> bytes:
    body = bytearray()
    vpart = encode_varint(len(value)) + value + b"\x00"
    for delta, key in enumerate(keys):
        rec = b"\x00\x00" + encode_varint(delta) + encode_varint(len(key)) + key + vpart
        body += encode_varint(len(rec)) + rec
    after_crc = struct.pack(">hiqqqhii", 0, len(keys) - 1, ts, ts, -1, -1, -1, len(keys)) + body
    return struct.pack(">qiibI", 0, len(after_crc) + 9, 0, 2, crc32c.crc32c(after_crc)) + after_crc


def build(directory: Path, total_bytes: int, segment_bytes: int, seed: int) -> tuple[PartitionLog, int]:
    cfg = LogConfig(segment_bytes=segment_bytes, segment_ms=ROLL_MS, compact_policy=True,
                    delete_policy=False, min_cleanable_ratio=0.0)
    log = PartitionLog.open(directory, cfg, T0)
    rng = random.Random(seed)
    per_record = len(batch([b"key-0000000"], b"x" * VALUE_BYTES, T0)) - 61
    n_records = total_bytes // per_record
    n_keys = max(1, n_records // 10)
    value = bytes(rng.getrandbits(8) for _ in range(VALUE_BYTES))
    written = 0
    while written < n_records:
        keys = [b"key-%07d" % rng.randrange(n_keys) for _ in range(RECORDS_PER_BATCH)]
        log.append(batch(keys, value, T0 + written), T0 + written)
        written += len(keys)
    # Seal the data out of the active segment (never cleaned, segment.ms rolls it) and flush.
    log.append(batch([b"~roll"], b"x", T0 + 2 * ROLL_MS), T0 + 2 * ROLL_MS)
    log.flush()
    return log, n_keys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--segment-mb", type=int, default=128)
    ap.add_argument("--buffer-mb", type=int, default=128)
    ap.add_argument("--dir", type=Path, default=None, help="parent of the temporary partition")
    args = ap.parse_args()
    parent = Path(tempfile.mkdtemp(prefix="shoal-cleaner-bench-", dir=args.dir))
    try:
        t = time.monotonic()
        log, n_keys = build(parent / "bench-0", int(500e6 * args.scale),
                            args.segment_mb << 20, seed=15)
        build_s = time.monotonic() - t
        size_before = log.size_bytes
        entries = max(1, (args.buffer_mb << 20) // MAP_ENTRY_BYTES)
        passes = 0
        t = time.monotonic()
        while True:
            c = cleanable(log, T0 + 10**9)
            if c is None or c.first_dirty >= c.first_uncleanable:
                break
            result = clean(c, T0 + 10**9, entries)
            assert result.end_offset is not None
            passes += 1
        secs = time.monotonic() - t
        out = {
            "scale": args.scale, "log_mb": round(size_before / 1e6, 1), "keys": n_keys,
            "passes": passes, "seconds": round(secs, 2),
            "mb_per_s": round(size_before / 1e6 / secs, 1),
            "size_after_mb": round(log.size_bytes / 1e6, 1), "build_seconds": round(build_s, 1),
        }
        log.close()
        print(json.dumps(out))
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
