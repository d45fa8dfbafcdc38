"""Loading a partition directory: crash recovery and the checkpoint files.

Layout of a partition directory::

    00000000000000000000.log        a segment's batches, sparse offset index and time index,
    00000000000000000000.index      named by its base offset (formats and per-segment invariants:
    00000000000000000000.timeindex  ``storage/segment.py``)
    log-start-offset.checkpoint     "0\\n<offset>\\n", written atomically (tmp, fsync, rename)
    recovery-point.checkpoint       offset below which everything is fsynced
    cleaner-offset.checkpoint       compacted topics: the log cleaner's first dirty offset
    high-watermark.checkpoint       the replica's high watermark (storage/log_replica.py)
    leader-epoch-checkpoint         the leader-epoch cache (storage/leader_epoch.py)
    *.cleaned, *.swap               a cleaned segment being swapped in (storage/segment_swap.py)
    .clean-shutdown                 written by close(); removed by load()

``load`` reads a directory and returns a ``LoadedLog``, the state ``PartitionLog``
(``storage/segment_log.py``) is built from; it sets no field of a live log. On the way it
finishes or drops an interrupted cleaned-segment swap, removes leftover temporary and orphan
index files, finishes segment deletions a crash interrupted, and, without a clean-shutdown
marker, checks every batch after the recovery point (header sanity, increasing offsets,
CRC-32C), truncating at the first bad one and deleting later segments. So the cost of a restart
after a crash follows the unflushed tail, not the log size.

Invariants of the result:
- ``segments`` is non-empty and sorted by base offset; the last one is active (descriptor and
  index files open for appends), the others are sealed.
- ``log_start_offset <= log_end_offset``; below ``recovery_point`` everything is fsynced.
- Offsets may have compaction gaps only where the cleaner could have made them: below the
  recovery point, or anywhere without one if the cleaner ever ran (``cleaner-offset.checkpoint``
  exists). A forward jump in the unflushed tail is cut off as a torn write.

Checkpoint files hold "<version>\\n<value>\\n"; an unreadable or malformed one is ignored with a
warning (the log falls back to scanning or to its first segment). Kafka classes this mirrors:
``LogLoader`` and ``CheckpointFile`` (behaviour only).
"""

from __future__ import annotations

import bisect
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from storage import fileops, segment_swap
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    LONG_MAX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    Segment,
    base_of,
    pwrite_all,
    track_loaded,
)

_log = logging.getLogger("shoal.log")

LOG_START_CHECKPOINT = "log-start-offset.checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point.checkpoint"
# The log cleaner's first dirty offset: everything below it has been compacted.
CLEANER_CHECKPOINT = "cleaner-offset.checkpoint"
# The replica's high watermark (``storage/log_replica.py``), written by flush and close.
HIGH_WATERMARK_CHECKPOINT = "high-watermark.checkpoint"
CLEAN_SHUTDOWN_MARKER = ".clean-shutdown"
_TMP_SUFFIX = ".tmp"
_CHECKPOINT_VERSION = 0


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """A partition directory as ``load`` left it; the new ``PartitionLog`` owns its segments."""

    segments: list[Segment]  # oldest first; the last is active
    # Sealed segments whose index recovery loaded, least recently used first.
    loaded: OrderedDict[int, Segment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    cleaner_offset: int  # CLEANER_CHECKPOINT, or 0
    # The directory changed (segment created, files truncated) and needs an fsync.
    dir_dirty: bool
    # Without a clean shutdown: the offset from which batches were re-read and checked (the
    # producer-state replay starts at or below it, rebuilding the aborted-transaction index
    # there); None after a clean shutdown.
    recovered_from: int | None = None


def load(directory: Path, index_interval_bytes: int, now_ms: int) -> LoadedLog:
    """Open the partition in ``directory``, creating it or recovering it after a crash.

    Without a clean-shutdown marker, batches after the recovery point are checked (header
    sanity, increasing offsets, CRC-32C); the segment is truncated at the first bad batch and any
    later segments are deleted. Their index entries are rebuilt (one every
    ``index_interval_bytes``).

    Raises:
        OSError: the directory or its files cannot be read or written.
    """
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(directory.parent)
    # A crash during a cleaned-segment swap: finish it or drop it before listing segments.
    segment_swap.complete_swaps(directory)
    cleaner_offset = read_checkpoint(directory / CLEANER_CHECKPOINT) or 0
    bases = _segment_bases(directory)
    clean_leo = _take_clean_shutdown_marker(directory)
    lso = read_checkpoint(directory / LOG_START_CHECKPOINT)
    rp = read_checkpoint(directory / RECOVERY_POINT_CHECKPOINT)

    segments = []
    for base in bases:
        seg = Segment(directory, base)
        seg.size = os.stat(seg.log_path).st_size
        segments.append(seg)
    if lso is not None:
        # Finish deletions interrupted by a crash: whole segments below the start offset.
        while len(segments) > 1 and segments[1].base_offset <= lso:
            segments.pop(0).unlink()
    loaded: OrderedDict[int, Segment] = OrderedDict()
    dir_dirty = False
    recovered_from: int | None = None
    if not segments:
        leo = 0 if lso is None else lso
        segments.append(Segment.create(directory, leo, now_ms))
        dir_dirty = True
    elif clean_leo is not None and _restore_clean(directory, segments[-1], clean_leo):
        leo = clean_leo
        rp = leo
    else:
        # Offsets may have compaction gaps only in flushed segments (the cleaner rewrites
        # nothing else); without a recovery point, anywhere if the cleaner ever ran.
        cleaned = (directory / CLEANER_CHECKPOINT).exists()
        dense_from = rp if rp is not None else (LONG_MAX if cleaned else 0)
        recovered_from = segments[0].base_offset if rp is None else rp
        leo = _recover_tail(directory, segments, loaded, recovered_from, dense_from,
                            index_interval_bytes)
        # The scan marks every segment it visited dirty, and it always visits one.
        dir_dirty = True
        rp = min(rp if rp is not None else 0, leo)
    first_base = segments[0].base_offset
    log_start_offset = max(first_base, lso if lso is not None else first_base)
    if log_start_offset > leo:
        # The start offset checkpoint is ahead of what survived: start over there (Kafka does
        # the same rather than reuse offsets below a start offset it already advertised).
        segments = _start_over(directory, segments, loaded, log_start_offset, now_ms)
        leo = log_start_offset
        dir_dirty = True
    active = segments[-1]
    if active.fd < 0:
        active.fd = os.open(active.log_path, os.O_RDWR)
    active.open_index_files()
    active.created_ms = now_ms
    return LoadedLog(
        segments=segments,
        loaded=loaded,
        log_start_offset=log_start_offset,
        log_end_offset=leo,
        recovery_point=max(segments[0].base_offset, rp or 0),
        cleaner_offset=cleaner_offset,
        dir_dirty=dir_dirty,
        recovered_from=recovered_from,
    )


def _segment_bases(directory: Path) -> list[int]:
    """The base offsets of the directory's segments, in order, after removing leftover
    temporary files and index files whose segment is gone."""
    names = os.listdir(directory)
    for name in names:
        if name.endswith(_TMP_SUFFIX):
            os.unlink(directory / name)
    bases = sorted(base_of(n) for n in names if n.endswith(LOG_SUFFIX) and base_of(n) >= 0)
    base_set = set(bases)
    for name in names:
        if name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
            stem = name.rsplit(".", 1)[0]
            if not (len(stem) == 20 and stem.isdigit() and int(stem) in base_set):
                os.unlink(directory / name)
    return bases


def _take_clean_shutdown_marker(directory: Path) -> int | None:
    """The log end offset the clean-shutdown marker records (None: no marker, or unreadable),
    removing the marker (durably) so that a crash from here on is recovered by scanning."""
    marker = directory / CLEAN_SHUTDOWN_MARKER
    clean_leo = read_checkpoint(marker)
    if marker.exists():
        os.unlink(marker)
        fsync_dir(directory)
    return clean_leo


def _start_over(directory: Path, segments: list[Segment], loaded: OrderedDict[int, Segment],
                offset: int, now_ms: int) -> list[Segment]:
    """Delete every segment and create an empty one at ``offset``; the new segment list."""
    for seg in segments:
        seg.close()
        seg.unlink()
    loaded.clear()
    return [Segment.create(directory, offset, now_ms)]


def _restore_clean(directory: Path, active: Segment, marker_leo: int) -> bool:
    """After a clean shutdown, take the active segment's state from its seal entry.

    Returns False (scan instead) if the files do not match the marker
    (``Segment.restore_sealed``).
    """
    if not active.restore_sealed(marker_leo):
        _log.warning("%s: clean-shutdown marker does not match the files", directory)
        return False
    return True


def _recover_tail(directory: Path, segments: list[Segment], loaded: OrderedDict[int, Segment],
                  recovery_point: int, dense_from: int, index_interval_bytes: int) -> int:
    """Validate every batch from the recovery point on; truncate at the first bad one (and drop
    the segments after it from ``segments``). Returns the log end offset."""
    k = max(0, bisect.bisect_right([s.base_offset for s in segments], recovery_point) - 1)
    expected = segments[k].base_offset
    for j in range(k, len(segments)):
        seg = segments[j]
        # A cleaned segment may end before the next one starts (a compaction gap).
        if seg.base_offset < expected or (seg.base_offset != expected
                                           and expected >= dense_from):
            _log.warning("%s: segment %d does not follow offset %d; deleting it and later ones",
                         directory, seg.base_offset, expected)
            _drop_segments_from(segments, j)
            break
        seg.read_index()
        # Keep only entries for batches that start below the recovery point: those batches
        # and entries were fsynced by the flush that wrote it.
        keep = bisect.bisect_left(seg.rel, recovery_point - seg.base_offset) if j == k else 0
        seg.truncate_index(keep)
        end, expected = seg.recover(index_interval_bytes, dense_from)
        seg.dirty = True
        # An empty segment followed by others lost its data in a crash, unless it is below
        # the recovery point: the cleaner may have emptied a flushed segment.
        empty = seg.size == 0 and j < len(segments) - 1 and seg.base_offset >= dense_from
        if end < seg.size or empty:
            _log.warning("%s: torn or corrupt batch: truncating segment %d at %d of %d bytes",
                         directory, seg.base_offset, end, seg.size)
            seg.truncate(end)
            _drop_segments_from(segments, j + 1)
            break
    for seg in segments[k:-1]:
        seg.seal()
        track_loaded(loaded, seg)
    return expected


def _drop_segments_from(segments: list[Segment], j: int) -> None:
    for seg in segments[j:]:
        seg.close()
        seg.unlink()
    del segments[j:]


# -- checkpoint files ------------------------------------------------------------------------


def fsync_dir(path: Path) -> None:
    """fsync a directory (after creating, renaming or removing files in it).

    Raises:
        OSError: the directory could not be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        fileops.OPS.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(path: Path, value: int) -> None:
    """Replace ``path`` atomically with ``value`` (tmp file, fsync, rename, fsync directory).

    Raises:
        OSError: a write, sync or the rename failed (the old checkpoint stands).
    """
    tmp = path.with_name(path.name + _TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, f"{_CHECKPOINT_VERSION}\n{value}\n".encode(), 0)
        fileops.OPS.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_checkpoint(path: Path) -> int | None:
    """The value in checkpoint ``path``, or None if it is missing, unreadable or malformed (the
    last two logged)."""
    try:
        text = path.read_text("ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        _log.warning("%s is unreadable; ignoring it", path)
        return None
    version, value, *rest = text.split("\n") + [""]
    if version == str(_CHECKPOINT_VERSION) and value.isdigit() and rest == ["", ""]:
        return int(value)
    _log.warning("%s is malformed; ignoring it", path)
    return None
