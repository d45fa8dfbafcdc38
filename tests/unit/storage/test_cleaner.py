"""storage/cleaner.py and the segment swap (storage/segment_swap.py): log compaction of one
partition, with an injected clock.

Records are read back with an independent decoder (below) after decompression, so a rewritten
batch is checked byte by byte: CRC, offsets, timestamps, keys and values.
"""

from __future__ import annotations

from typing import Any

import errno
import itertools
import os
import shutil
import struct
import threading
from pathlib import Path

import crc32c
import pytest

from broker.log.cleaner_driver import LogCleaner
from storage import fileops
from storage import segment_swap as sw
from broker.config import BrokerConfig
from protocol.compression import decompress
from protocol.record_batch import HEADER_STRUCT, LOG_OVERHEAD
from storage.cleaner import DELETE_HORIZON_MASK, Cleanable, PassResult, clean, cleanable
from storage.log_dir import LogDirOfflineError
from storage.log_loader import CLEAN_SHUTDOWN_MARKER
from storage.segment_log import LogConfig, PartitionLog

from tests.unit.batches import make_batch

T0 = 1_700_000_000_000
DAY = 86_400_000
_dirs = itertools.count()

Rec = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


def config(**overrides: object) -> LogConfig:
    base: dict[str, object] = {"segment_bytes": 600, "index_interval_bytes": 100,
                               "compact_policy": True, "delete_policy": False,
                               "min_cleanable_ratio": 0.01, "delete_retention_ms": DAY}
    base.update(overrides)
    return LogConfig(**base)  # type: ignore[arg-type]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / f"t-{next(_dirs)}"


def _varint(b: bytes, q: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        x = b[q]
        q += 1
        value |= (x & 0x7F) << shift
        if x < 0x80:
            return (value >> 1) ^ -(value & 1), q
        shift += 7


def decode(data: bytes) -> list[Rec]:
    """Every record of a run of batches, CRC checked."""
    out: list[Rec] = []
    pos = 0
    while pos < len(data):
        f = HEADER_STRUCT.unpack_from(data, pos)
        end = pos + f[1] + LOG_OVERHEAD
        assert crc32c.crc32c(data[pos + 21 : end]) == f[4], "CRC"
        body = data[pos + 61 : end]
        if f[5] & 7:
            body = bytes(decompress(f[5] & 7, body, 1 << 26))
        q = 0
        for _ in range(f[12]):
            length, q = _varint(body, q)
            rec_end = q + length
            ts, p = _varint(body, q + 1)
            delta, p = _varint(body, p)
            assert delta <= f[6]
            klen, p = _varint(body, p)
            key = body[p : p + klen] if klen >= 0 else None
            p += max(klen, 0)
            vlen, p = _varint(body, p)
            value = body[p : p + vlen] if vlen >= 0 else None
            out.append((f[0] + delta, key, value, f[7] + ts))
            q = rec_end
        pos = end
    return out


def read_all(log: PartitionLog, start: int | None = None) -> list[Rec]:
    offset = log.log_start_offset if start is None else start
    out: list[Rec] = []
    while offset < log.log_end_offset:
        r = log.read(offset, 1 << 20)
        if not r.data:
            break
        out += [x for x in decode(r.data) if x[0] >= offset]
        offset = r.next_offset
    return out


def write(log: PartitionLog, records: list[tuple[bytes | None, bytes | None]], per_batch: int = 1,
          ts: int = T0, compression: int = 0) -> None:
    for i in range(0, len(records), per_batch):
        log.append(make_batch(records[i : i + per_batch], timestamp_ms=ts + i,
                              compression=compression), ts + i)


def roll_and_flush(log: PartitionLog, now: int = T0) -> None:
    """Seal the active segment (a record goes into a fresh one) and fsync, so everything before
    is cleanable."""
    log.append(make_batch([(b"~", b"x" * 700)], timestamp_ms=now), now)
    log.append(make_batch([(b"~end", b"x")], timestamp_ms=now), now)
    log.flush()


def run(log: PartitionLog, now: int, max_entries: int = 1 << 20) -> PassResult:
    c = cleanable(log, now)
    assert c is not None
    return clean(c, now, max_entries)


def latest_by_key(records: list[tuple[bytes | None, bytes | None]]) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for i, (k, _v) in enumerate(records):
        assert k is not None
        out[k] = i
    return out


def history(n_keys: int, versions: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(b"key-%d" % k, b"v%d-%d" % (k, v) * 5) for v in range(versions) for k in range(n_keys)]


@pytest.mark.parametrize("codec", [0, 1, 3, 4], ids=["none", "gzip", "lz4", "zstd"])
def test_keeps_the_latest_record_per_key_at_its_original_offset(log_dir: Path, codec: int) -> None:
    recs = history(7, 6)
    log = PartitionLog.open(log_dir, config(), T0)
    write(log, recs, per_batch=3, compression=codec)
    roll_and_flush(log)
    before = read_all(log)
    assert log.segment_count > 4
    result = run(log, T0 + 1000)
    assert result.end_offset is not None and result.stats.swaps >= 1
    after = read_all(log)
    want = {i for i in latest_by_key(recs).values()}
    assert [r[0] for r in after if r[0] < len(recs)] == sorted(want)
    # Offsets, keys, values and timestamps of survivors are the originals.
    originals = {r[0]: r for r in before}
    assert all(originals[r[0]] == r for r in after)
    # Fetch from a cleaned-away offset returns the next record; ListOffsets bounds unchanged.
    gap = next(o for o in range(len(recs)) if o not in want)
    nxt = min(o for o in want | {len(recs)} if o > gap)
    assert read_all(log, gap)[0][0] == nxt
    assert log.log_start_offset == 0 and log.log_end_offset == before[-1][0] + 1
    # By timestamp: the first surviving batch at or after it (record i was written at T0 + i).
    found = log.offset_for_timestamp(originals[gap][3])
    assert found is not None and gap < found[0] <= nxt
    log.close()
    # Reopened (clean and after a crash) the log reads the same.
    log = PartitionLog.open(log_dir, config(), T0)
    assert read_all(log) == after
    log.close()
    os.unlink(log_dir / CLEAN_SHUTDOWN_MARKER)  # recovered by scanning from the recovery point
    log = PartitionLog.open(log_dir, config(), T0)
    assert read_all(log) == after
    log.close()


def test_tombstones_stay_for_delete_retention_then_go(log_dir: Path) -> None:
    log = PartitionLog.open(log_dir, config(delete_retention_ms=5_000), T0)
    write(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None), (b"c", b"1"), (b"b", b"2")])
    roll_and_flush(log)
    first = run(log, T0 + 1_000)
    after = [(o, k, v) for o, k, v, _ in read_all(log) if k in (b"a", b"b", b"c")]
    # The tombstone stays (a consumer that read a=1 must see the delete), the old a=1 goes.
    assert after == [(2, b"a", None), (3, b"c", b"1"), (4, b"b", b"2")]
    assert first.next_horizon_ms == T0 + 1_000 + 5_000
    raw = log.read(2, 1 << 20).data
    f = HEADER_STRUCT.unpack_from(raw, 0)
    assert f[5] & DELETE_HORIZON_MASK and f[7] == T0 + 6_000
    # Before the horizon a pass keeps it; at the horizon it goes.
    run(log, T0 + 5_999)
    assert (2, b"a", None) in [(o, k, v) for o, k, v, _ in read_all(log)]
    run(log, T0 + 6_000)
    keys = [(o, k, v) for o, k, v, _ in read_all(log) if k in (b"a", b"b", b"c")]
    assert keys == [(3, b"c", b"1"), (4, b"b", b"2")]
    # The record timestamps survived the horizon rewrite.
    assert all(ts == T0 + o for o, k, _v, ts in read_all(log) if k in (b"b", b"c"))
    log.close()


def test_min_compaction_lag_keeps_young_segments_dirty(log_dir: Path) -> None:
    cfg = config(min_compaction_lag_ms=10_000)
    log = PartitionLog.open(log_dir, cfg, T0)
    write(log, history(3, 4), per_batch=3, ts=T0)            # old
    roll_and_flush(log, T0)
    write(log, history(3, 4), per_batch=3, ts=T0 + 50_000)   # young at T0 + 55 s
    roll_and_flush(log, T0 + 50_000)
    c = cleanable(log, T0 + 55_000)
    assert c is not None
    young_start = 12 + 2
    assert c.first_uncleanable <= young_start
    clean(c, T0 + 55_000, 1 << 20)
    young = [r for r in read_all(log) if young_start <= r[0] < young_start + 12]
    assert len(young) == 12  # untouched
    # Later, everything old enough is compacted.
    run(log, T0 + 100_000)
    young = [r for r in read_all(log) if young_start <= r[0] < young_start + 12]
    assert [r[0] for r in young] == list(range(young_start + 9, young_start + 12))
    log.close()


def test_a_bounded_key_map_cleans_in_passes(log_dir: Path) -> None:
    recs = history(20, 5)
    log = PartitionLog.open(log_dir, config(segment_bytes=2000), T0)
    write(log, recs, per_batch=4)
    roll_and_flush(log)
    passes = 0
    while True:
        c = cleanable(log, T0 + 1)
        assert c is not None
        if c.first_dirty >= c.first_uncleanable:
            break
        result = clean(c, T0 + 1, max_entries=8)
        assert result.end_offset is not None and result.end_offset > c.first_dirty
        passes += 1
    assert passes > 3
    want = sorted(latest_by_key(recs).values())
    assert [r[0] for r in read_all(log) if r[0] < len(recs)] == want
    log.close()


@pytest.mark.parametrize("stage", ["cleaned", "committed", "installed"])
def test_a_crash_during_the_swap_recovers(log_dir: Path, stage: str) -> None:
    recs = history(5, 4)
    log = PartitionLog.open(log_dir, config(), T0)
    write(log, recs, per_batch=2)
    roll_and_flush(log)
    before = read_all(log)
    want = sorted(latest_by_key(recs).values())

    class Crash(Exception):
        pass

    def fault(s: str) -> None:
        if s == stage:
            raise Crash(s)

    log.swap_fault = fault
    with pytest.raises(Crash):
        run(log, T0 + 1)
    # What kill -9 leaves: the directory as it is now.
    crashed = log_dir.parent / f"{log_dir.name}-crash"
    shutil.copytree(log_dir, crashed)
    names = os.listdir(crashed)
    if stage == "cleaned":
        assert any(n.endswith(".cleaned") for n in names)
    else:
        assert any(n.endswith(".swap") for n in names)
    reopened = PartitionLog.open(crashed, config(), T0 + 2)
    names = os.listdir(crashed)
    assert not any(n.endswith((".cleaned", ".swap")) for n in names)
    got = read_all(reopened)
    if stage == "cleaned":
        assert got == before  # never committed: the old segments stay
    else:
        # Committed: the first group is swapped in; the rest of the pass is redone later.
        assert [r[0] for r in got if r[0] < len(recs)] != [r[0] for r in before][: len(recs)]
        assert {r[1]: r for r in got}.keys() >= {r[1] for r in before}
    run(reopened, T0 + 3)
    assert [r[0] for r in read_all(reopened) if r[0] < len(recs)] == want
    reopened.close()


def test_a_group_removed_by_retention_meanwhile_is_not_swapped_in(log_dir: Path) -> None:
    log = PartitionLog.open(log_dir, config(), T0)
    write(log, history(5, 4), per_batch=2)
    roll_and_flush(log)
    c = cleanable(log, T0 + 1)
    assert c is not None
    log.delete_records_before(c.segments[1][0].base_offset)
    result = clean(c, T0 + 1, 1 << 20)
    assert result.end_offset is None and result.stats.swaps == 0
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(log_dir))
    log.close()


def test_appends_and_reads_go_on_while_a_thread_cleans(log_dir: Path) -> None:
    log = PartitionLog.open(log_dir, config(), T0)
    recs: list[tuple[bytes | None, bytes | None]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def cleaner() -> None:
        try:
            while not stop.is_set():
                c = cleanable(log, T0 + 10**6)
                if c is not None and c.first_dirty < c.first_uncleanable:
                    clean(c, T0 + 10**6, 1 << 20)
                else:
                    stop.wait(0.001)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    t = threading.Thread(target=cleaner)
    t.start()
    try:
        for round_ in range(30):
            batch = [(b"k%d" % (i % 13), b"r%d-%d" % (round_, i)) for i in range(10)]
            write(log, batch, per_batch=5)
            recs += batch
            log.flush()
            seen = read_all(log)
            offsets = [r[0] for r in seen]
            assert offsets == sorted(set(offsets))
    finally:
        stop.set()
        t.join()
    assert errors == []
    roll_and_flush(log)
    run(log, T0 + 10**6)
    final = {r[1]: r[2] for r in read_all(log) if r[1] and r[1].startswith(b"k")}
    assert final == {k: v for k, v in recs}
    log.close()


def test_cleanable_reports_the_dirty_ratio(log_dir: Path) -> None:
    log = PartitionLog.open(log_dir, config(), T0)
    assert cleanable(log, T0) is None  # nothing sealed
    write(log, history(4, 4), per_batch=2)
    roll_and_flush(log)
    c = cleanable(log, T0)
    assert isinstance(c, Cleanable)
    assert c.first_dirty == 0 and c.clean_bytes == 0 and c.dirty_ratio == 1.0
    run(log, T0)
    c = cleanable(log, T0)
    assert c is not None and c.dirty_bytes == 0 and c.first_dirty == c.first_uncleanable
    log.close()


def test_a_write_error_while_cleaning_takes_the_directory_offline(log_dir: Path) -> None:
    class FailingSync(fileops.FileOps):
        def fsync(self, fd: int) -> None:
            raise OSError(errno.EIO, "injected")

    log = PartitionLog.open(log_dir, config(), T0)
    write(log, history(5, 4), per_batch=2)
    roll_and_flush(log)
    before = read_all(log)
    c = cleanable(log, T0 + 1)
    assert c is not None
    previous = fileops.use(FailingSync())
    try:
        with pytest.raises(LogDirOfflineError):
            clean(c, T0 + 1, 1 << 20)
    finally:
        fileops.use(previous)
    assert log.log_dir.offline
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(log_dir))
    log.close()
    reopened = PartitionLog.open(log_dir, config(), T0 + 2)
    assert read_all(reopened) == before
    reopened.close()


@pytest.mark.parametrize("done", range(5))
def test_an_interrupted_install_is_completed_whatever_step_it_reached(tmp_path: Path,
                                                                      done: int) -> None:
    """Step 3 of the swap is renames; a crash after any number of them is redone on open."""
    suffixes = (".log", ".index", ".timeindex")
    for base in (0, 10):
        for suffix in suffixes:
            (tmp_path / f"{base:020d}{suffix}").write_bytes(b"old-%d%s" % (base, suffix.encode()))
    for path, suffix in zip(sw.cleaned_paths(tmp_path, 0), suffixes, strict=True):
        Path(path).write_bytes(b"new" + suffix.encode())
    sw.commit(tmp_path, [0, 10])
    # The renames install does, in order; ``done`` of them happened before the crash.
    steps = []
    for path, suffix in zip(sw.cleaned_paths(tmp_path, 0), suffixes, strict=True):
        final = tmp_path / f"{0:020d}{suffix}"
        steps.append((final, Path(str(final) + ".deleted")))
        steps.append((Path(path), final))
    for src, dst in steps[:done]:
        os.replace(src, dst)
    assert sw.complete_swaps(tmp_path) == 1
    assert sw.complete_swaps(tmp_path) == 0
    assert sorted(os.listdir(tmp_path)) == [f"{0:020d}{s}" for s in (".index", ".log",
                                                                       ".timeindex")]
    for suffix in suffixes:
        assert (tmp_path / f"{0:020d}{suffix}").read_bytes() == b"new" + suffix.encode()


class _Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now


class _Logs:
    """What LogCleaner needs of the LogManager: the logs and their directory's health."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.log_dir = log.log_dir
        self.high_watermark_of: Any = None  # a replicated partition's bound (cluster mode)

    def items(self) -> list[tuple[tuple[str, int], PartitionLog]]:
        return [(("t", 0), self.log)]


def test_the_cleaner_picks_by_ratio_then_max_lag_then_tombstone_horizon(log_dir: Path) -> None:
    cfg = config(min_cleanable_ratio=0.9, max_compaction_lag_ms=60_000, delete_retention_ms=5_000)
    log = PartitionLog.open(log_dir, cfg, T0)
    clock = _Clock(T0)
    cleaner = LogCleaner(_Logs(log), BrokerConfig(), clock)  # type: ignore[arg-type]
    write(log, history(6, 3), per_batch=3)
    roll_and_flush(log)
    assert cleaner.clean_filthiest()  # all dirty: ratio 1.0
    assert not cleaner.clean_filthiest()  # nothing dirty
    write(log, history(6, 1) + [(b"key-0", None)], per_batch=7, ts=T0 + 10)
    roll_and_flush(log, T0 + 10)
    c = cleanable(log, clock.now)
    assert c is not None and 0 < c.dirty_ratio < 0.9
    assert not cleaner.clean_filthiest()  # under min.cleanable.dirty.ratio
    clock.now = T0 + 10 + 60_001
    assert cleaner.clean_filthiest()  # max.compaction.lag.ms passed
    assert any(k == b"key-0" and v is None for _, k, v, _ in read_all(log))
    assert not cleaner.clean_filthiest()
    clock.now += 5_000
    assert cleaner.clean_filthiest()  # the tombstone's delete horizon passed
    assert not any(k == b"key-0" for _, k, _, _ in read_all(log))
    assert cleaner.stats.passes == 3
    log.close()


def test_a_replica_cleans_only_below_its_high_watermark(log_dir: Path) -> None:
    """Records the in-sync replicas do not all have yet are not compacted."""
    log = PartitionLog.open(log_dir, config(), T0)
    logs = _Logs(log)
    cleaner = LogCleaner(logs, BrokerConfig(), _Clock(T0))  # type: ignore[arg-type]
    write(log, history(6, 3), per_batch=3)
    roll_and_flush(log)
    before = read_all(log)
    logs.high_watermark_of = lambda _t, _p, _lg: 0
    assert not cleaner.clean_filthiest()
    assert read_all(log) == before
    logs.high_watermark_of = lambda _t, _p, lg: lg.log_end_offset
    assert cleaner.clean_filthiest()
    assert len(read_all(log)) < len(before)  # compacted once the replicas have it all
    log.close()


def test_gaps_are_accepted_below_the_recovery_point_only(log_dir: Path) -> None:
    """After a crash, a cleaned (flushed) segment may have gaps; in the unflushed tail a batch
    whose base offset jumps ahead (the field is outside the CRC) is still cut off."""
    log = PartitionLog.open(log_dir, config(), T0)
    write(log, history(5, 4), per_batch=2)
    roll_and_flush(log)
    run(log, T0 + 1)
    cleaned = read_all(log)
    leo = log.log_end_offset
    write(log, [(b"tail-%d" % i, b"t") for i in range(3)])  # unflushed, in the active segment
    active = sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[-1]
    crashed = log_dir.parent / f"{log_dir.name}-crash"
    shutil.copytree(log_dir, crashed)
    data = bytearray((crashed / active).read_bytes())
    pos = 0
    while struct.unpack_from(">q", data, pos)[0] != leo + 1:
        pos += struct.unpack_from(">i", data, pos + 8)[0] + LOG_OVERHEAD
    struct.pack_into(">q", data, pos, leo + 7)  # the second tail batch claims offset leo + 7
    (crashed / active).write_bytes(bytes(data))
    reopened = PartitionLog.open(crashed, config(), T0 + 2)
    assert reopened.log_end_offset == leo + 1  # cut at the gap in the unflushed tail
    assert read_all(reopened) == cleaned + [r for r in read_all(log) if r[0] == leo]
    reopened.close()
    log.close()
