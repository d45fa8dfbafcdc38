"""Replacing segments with their cleaned copy, crash-safely (Kafka's ``.cleaned``/``.swap`` steps).

The log cleaner (``storage/cleaner.py``) rewrites a group of adjacent sealed segments
``b0 < b1 < ... < bn`` into one new segment named ``b0``. The files go through these names::

    1. 000..b0.log.cleaned  000..b0.index.cleaned  000..b0.timeindex.cleaned   written, fsynced
       (and 000..b0.txnindex.cleaned when a replaced segment has aborted transactions)
    2. 000..b0.swap         "0\\n<b0>,<b1>,...,<bn>\\n" (tmp, fsync, rename, fsync the directory)
    3. for each of b0's files with a .cleaned version: the old one renamed to *.deleted, the
       .cleaned one to the final name; then the files of b1..bn renamed to *.deleted
    4. the *.deleted files unlinked, then the .swap marker removed

Step 2 is the commit point. ``complete_swaps``, run when a partition is opened, finishes what a
crash interrupted: with a marker it redoes steps 3-4 (each is idempotent: a file already renamed
is simply absent, and b0's file is moved aside only while its ``.cleaned`` version exists, so a
redo never moves an installed file away); ``.cleaned`` files without a marker belong to a swap that
never committed and are deleted, leaving the old segments in place. Kafka renames ``.cleaned`` to
``.swap`` and derives the replaced segments from the offsets the swap file covers; the marker
names them instead, because a cleaned segment may end (after compaction) before the last
segment it replaces would have started.

Pure file operations: no lock, no in-memory state. The caller (``PartitionLog``) does step 3
under its lock, so readers never see a segment list and files that disagree.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from storage import fileops
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    pwrite_all,
)

_log = logging.getLogger("shoal.log")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
# Every file a segment may have: the aborted-transaction index exists only for segments with an
# ABORT marker, and its cleaned version only when a replaced segment had one.
_ALL_SUFFIXES = (*_SUFFIXES, TXN_INDEX_SUFFIX)


def stem(directory: Path, base: int) -> str:
    return os.path.join(directory, f"{base:020d}")


def cleaned_paths(directory: Path, base: int) -> tuple[str, str, str]:
    """The ``.cleaned`` log, index and time index paths of a new segment at ``base``."""
    s = stem(directory, base)
    return (s + LOG_SUFFIX + CLEANED_SUFFIX, s + INDEX_SUFFIX + CLEANED_SUFFIX,
            s + TIME_INDEX_SUFFIX + CLEANED_SUFFIX)


def cleaned_txn_path(directory: Path, base: int) -> str:
    """The ``.cleaned`` aborted-transaction index path of a new segment at ``base``."""
    return stem(directory, base) + TXN_INDEX_SUFFIX + CLEANED_SUFFIX


def marker_path(directory: Path, base: int) -> str:
    return stem(directory, base) + SWAP_SUFFIX


def commit(directory: Path, bases: Sequence[int]) -> None:
    """Step 2: write the swap marker naming the replaced segments (``bases[0]`` is the new one's
    name) atomically. After this returns, a crash completes the swap on the next open.

    Raises:
        OSError: the marker could not be written (the swap did not commit).
    """
    path = marker_path(directory, bases[0])
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, ("0\n" + ",".join(str(b) for b in bases) + "\n").encode(), 0)
        fileops.OPS.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def install(directory: Path, bases: Sequence[int]) -> None:
    """Step 3: move the replaced segments' files aside (``.deleted``) and rename the cleaned
    files to ``bases[0]``'s names (idempotent). Renames only, no fsync and no unlink, so the
    caller's lock is held briefly; ``finish`` deletes the old files. A crash redoes it (the
    marker stands)."""
    cleaned_files = (*cleaned_paths(directory, bases[0]), cleaned_txn_path(directory, bases[0]))
    for cleaned, suffix in zip(cleaned_files, _ALL_SUFFIXES, strict=True):
        final = stem(directory, bases[0]) + suffix
        if not os.path.exists(cleaned):
            continue  # installed before a crash: ``final`` is the new file already
        _move_aside(final)
        os.replace(cleaned, final)
    for base in bases[1:]:
        for suffix in _ALL_SUFFIXES:
            _move_aside(stem(directory, base) + suffix)


def _move_aside(path: str) -> None:
    try:
        os.replace(path, path + DELETED_SUFFIX)
    except FileNotFoundError:
        pass  # moved before a crash


def finish(directory: Path, bases: Sequence[int]) -> None:
    """Step 4: make step 3 durable, delete the old files, then drop the marker."""
    fsync_dir(directory)
    for base in bases:
        for suffix in _ALL_SUFFIXES:
            try:
                os.unlink(stem(directory, base) + suffix + DELETED_SUFFIX)
            except FileNotFoundError:
                pass
    try:
        os.unlink(marker_path(directory, bases[0]))
    except FileNotFoundError:
        pass
    fsync_dir(directory)


def discard(directory: Path, base: int) -> None:
    """Remove the ``.cleaned`` files of a swap that will not commit."""
    for path in (*cleaned_paths(directory, base), cleaned_txn_path(directory, base)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def complete_swaps(directory: Path) -> int:
    """Finish committed swaps and discard uncommitted ones (run before a partition is loaded).
    Returns the number of swaps completed.

    Raises:
        OSError: a rename, unlink or directory sync failed.
    """
    names = os.listdir(directory)
    done = 0
    for name in names:
        if not name.endswith(SWAP_SUFFIX):
            continue
        bases = _read_marker(Path(directory) / name)
        if bases is None:
            _log.warning("%s/%s is unreadable; leaving the segments as they are", directory, name)
            os.unlink(Path(directory) / name)
            continue
        _log.info("%s: completing the swap of cleaned segment %d interrupted by a crash",
                  directory, bases[0])
        install(directory, bases)
        finish(directory, bases)
        done += 1
    for name in os.listdir(directory):
        if name.endswith((CLEANED_SUFFIX, DELETED_SUFFIX)):
            os.unlink(Path(directory) / name)
    return done


def _read_marker(path: Path) -> list[int] | None:
    try:
        version, line, *rest = path.read_text("ascii").split("\n")
        bases = [int(x) for x in line.split(",")]
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if version != "0" or not bases or rest != [""]:
        return None
    return bases


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fileops.OPS.fsync(fd)
    finally:
        os.close(fd)
