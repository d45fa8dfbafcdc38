"""storage/log_loader.py: ``load`` reads a partition directory and returns the state a
``PartitionLog`` is built from, without a live log. End-to-end recovery cases (every torn byte,
compaction gaps, interrupted swaps) are in test_segment_log.py and test_log_cleaner.py."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from storage.log_loader import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_CHECKPOINT,
    LoadedLog,
    load,
    read_checkpoint,
    write_checkpoint,
)
from storage.segment_log import LogConfig, PartitionLog

from tests.unit.batches import make_value_batch

T0 = 1_700_000_000_000
CFG = LogConfig(segment_bytes=1024, index_interval_bytes=128)


def fill(directory: Path, n: int) -> PartitionLog:
    log = PartitionLog.open(directory, CFG, T0)
    for i in range(n):
        log.append(make_value_batch(2, 60, timestamp_ms=T0 + i, tag=i), T0)
    return log


def adopt(directory: Path, loaded: LoadedLog) -> PartitionLog:
    """Hand the loaded state to a log (which closes its descriptors on close)."""
    return PartitionLog(directory, CFG, loaded)


def test_load_creates_directory_with_one_empty_active_segment(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    loaded = load(directory, CFG.index_interval_bytes, T0)
    assert directory.is_dir()
    assert [s.base_offset for s in loaded.segments] == [0]
    assert (loaded.log_start_offset, loaded.log_end_offset, loaded.recovery_point) == (0, 0, 0)
    assert loaded.dir_dirty and loaded.segments[-1].fd >= 0
    adopt(directory, loaded).close()


def test_load_after_clean_close_takes_the_marker_and_scans_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = fill(directory, 30)
    leo, segments = log.log_end_offset, log.segment_count
    log.close()
    loaded = load(directory, CFG.index_interval_bytes, T0)
    assert not (directory / CLEAN_SHUTDOWN_MARKER).exists()
    assert (loaded.log_end_offset, loaded.recovery_point) == (leo, leo)
    assert len(loaded.segments) == segments > 1
    assert not loaded.dir_dirty and not loaded.loaded
    assert not any(seg.dirty for seg in loaded.segments)
    adopt(directory, loaded).close()


def test_load_after_crash_cuts_torn_tail_and_keeps_recovery_point(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "t-0"
    log = fill(directory, 20)
    log.flush()
    flushed = log.log_end_offset
    log.append(make_value_batch(2, 60, tag=99), T0)
    crashed = tmp_path / "crashed"
    shutil.copytree(directory, crashed)  # what kill -9 leaves: no marker
    log.close()
    active = sorted(crashed.glob("*.log"))[-1]
    os.truncate(active, active.stat().st_size - 1)
    with caplog.at_level(logging.WARNING, logger="shoal.log"):
        loaded = load(crashed, CFG.index_interval_bytes, T0)
    assert loaded.log_end_offset == flushed
    assert loaded.recovery_point == flushed
    assert loaded.dir_dirty
    assert any("torn or corrupt batch" in r.getMessage() for r in caplog.records)
    adopt(crashed, loaded).close()


def test_load_restarts_at_a_start_offset_past_the_surviving_data(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = fill(directory, 5)
    leo = log.log_end_offset
    log.close()
    (directory / CLEAN_SHUTDOWN_MARKER).unlink()
    write_checkpoint(directory / LOG_START_CHECKPOINT, leo + 100)
    loaded = load(directory, CFG.index_interval_bytes, T0)
    assert [s.base_offset for s in loaded.segments] == [leo + 100]
    assert loaded.log_start_offset == loaded.log_end_offset == leo + 100
    assert [p.name for p in directory.glob("*.log")] == [f"{leo + 100:020d}.log"]
    adopt(directory, loaded).close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0\n42\n", 42), ("0\n42", None), ("1\n42\n", None), ("0\n-1\n", None), ("", None)],
    ids=["ok", "no-newline", "unknown-version", "negative", "empty"],
)
def test_read_checkpoint_ignores_malformed_files(tmp_path: Path, text: str,
                                                 expected: int | None) -> None:
    path = tmp_path / "recovery-point.checkpoint"
    path.write_text(text, "ascii")
    assert read_checkpoint(path) == expected
    assert read_checkpoint(tmp_path / "missing") is None
