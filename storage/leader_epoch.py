"""The leader-epoch cache of a partition: which leader epoch wrote which offsets.

Each entry ``(epoch, start_offset)`` says that the first batch stamped with ``epoch`` (the
``partitionLeaderEpoch`` header field, ``protocol/record_batch.py``) starts at ``start_offset``;
the epoch's records end where the next entry starts, or at the log end offset for the latest
epoch. A follower compares its cache with the leader's (OffsetForLeaderEpoch, DivergingEpoch in
Fetch) to find where its log diverged, and truncates there (Kafka KIP-101/KIP-279).

The checkpoint file ``leader-epoch-checkpoint`` in the partition directory has Kafka's text
format::

    0                     version
    2                     number of entries
    3 0                   <epoch> <start offset>, oldest first
    5 1200

It is replaced atomically (tmp file, fsync, rename, fsync directory) before a change becomes
visible in memory, so what a reader sees is always on disk.

Invariants: epochs and start offsets both strictly increase along the entries; epochs are >= 0.
``assign`` keeps them by dropping the entries a new one contradicts, as Kafka's
``LeaderEpochFileCache.assign`` does. A malformed checkpoint is ignored with a warning (the
cache starts empty: the follower then falls back to truncating further, never less).

Not thread-safe on its own: ``PartitionLog`` serialises changes under its ``_epoch_lock``;
``entries`` is an immutable tuple replaced as a whole, so reads need no lock. Kafka class this
mirrors: ``LeaderEpochFileCache`` and ``LeaderEpochCheckpointFile`` (behaviour only).
"""

from __future__ import annotations

import bisect
import logging
import os
from pathlib import Path
from typing import NamedTuple

from storage import fileops
from storage.segment import pwrite_all

_log = logging.getLogger("shoal.log")

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
_VERSION = 0
# Every entry in a checkpoint is bounded: a longer file is malformed.
_MAX_ENTRIES = 1 << 20
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


Entries = tuple[EpochEntry, ...]


def assign(entries: Entries, epoch: int, start_offset: int) -> Entries:
    """``entries`` with ``(epoch, start_offset)`` recorded: unchanged when the latest entry is
    that epoch at or below that offset; otherwise the entries whose epoch is at or above
    ``epoch`` or whose start is at or after ``start_offset`` are dropped from the end and the new
    entry appended (Kafka ``assign``).

    Raises:
        ValueError: ``epoch`` or ``start_offset`` is negative.
    """
    if epoch < 0 or start_offset < 0:
        raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
    if entries:
        last = entries[-1]
        if last.epoch == epoch and last.start_offset <= start_offset:
            return entries
    keep = len(entries)
    while keep and (entries[keep - 1].epoch >= epoch or entries[keep - 1].start_offset
                    >= start_offset):
        keep -= 1
    if keep < len(entries) - 1 or (keep == len(entries) - 1
                                   and entries[keep].start_offset != start_offset):
        _log.warning("leader epoch entry (%d, %d) replaces conflicting entries %s", epoch,
                     start_offset, list(entries[keep:]))
    return (*entries[:keep], EpochEntry(epoch, start_offset))


def truncate_from_end(entries: Entries, end_offset: int) -> Entries:
    """``entries`` without those starting at or after ``end_offset`` (a log truncated there)."""
    keep = len(entries)
    while keep and entries[keep - 1].start_offset >= end_offset:
        keep -= 1
    return entries if keep == len(entries) else entries[:keep]


def truncate_from_start(entries: Entries, start_offset: int) -> Entries:
    """``entries`` for a log that now starts at ``start_offset``: the entries starting at or
    below it collapse into the last of them, moved to ``start_offset`` (so the epoch that holds
    the new first record still starts there); later ones stay (Kafka ``truncateFromStart``)."""
    k = 0
    while k < len(entries) and entries[k].start_offset <= start_offset:
        k += 1
    if k == 0 or (k == 1 and entries[0].start_offset == start_offset):
        return entries
    return (EpochEntry(entries[k - 1].epoch, start_offset), *entries[k:])


def end_offset_for(entries: Entries, epoch: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka ``endOffsetFor``: ``(largest known epoch <= epoch, the start offset of the first
    epoch after it)``; for the latest epoch ``(epoch, log_end_offset)``; for an epoch below every
    known one ``(epoch, first start offset)``; ``(-1, -1)`` for an undefined epoch (-1) or one
    above every known epoch."""
    if epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if entries[-1].epoch == epoch:
        return epoch, log_end_offset
    epochs = [e.epoch for e in entries]
    higher = bisect.bisect_right(epochs, epoch)
    if higher == len(entries):
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if higher == 0:
        return epoch, entries[0].start_offset
    return entries[higher - 1].epoch, entries[higher].start_offset


# -- the checkpoint file ---------------------------------------------------------------------


def checkpoint_path(directory: Path) -> Path:
    return directory / LEADER_EPOCH_CHECKPOINT


def encode(entries: Entries) -> bytes:
    lines = [str(_VERSION), str(len(entries)), *(f"{e.epoch} {e.start_offset}" for e in entries)]
    return ("\n".join(lines) + "\n").encode("ascii")


def decode(text: str) -> Entries:
    """The entries of a checkpoint's text.

    Raises:
        ValueError: the text is not a well-formed version-0 checkpoint with increasing entries.
    """
    lines = text.split("\n")
    if len(lines) < 3 or lines[0] != str(_VERSION) or not lines[1].isdigit():
        raise ValueError("bad version or count line")
    count = int(lines[1])
    if count > _MAX_ENTRIES or len(lines) != count + 3 or lines[-1] != "":
        raise ValueError(f"expected {count} entries")
    out: list[EpochEntry] = []
    for line in lines[2:-1]:
        parts = line.split(" ")
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
            raise ValueError(f"bad entry line {line!r}")
        entry = EpochEntry(int(parts[0]), int(parts[1]))
        if out and (entry.epoch <= out[-1].epoch or entry.start_offset <= out[-1].start_offset):
            raise ValueError(f"entry {line!r} does not follow {out[-1]}")
        out.append(entry)
    return tuple(out)


def read(directory: Path) -> Entries:
    """The checkpointed entries; none when the file is missing, unreadable or malformed (the
    last two logged)."""
    path = checkpoint_path(directory)
    try:
        return decode(path.read_text("ascii"))
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        _log.warning("%s is unusable (%s); starting with an empty leader-epoch cache (the "
                     "replica truncates to what the leader confirms)", path, exc)
        return ()


def write(directory: Path, entries: Entries) -> None:
    """Replace the checkpoint atomically and durably (tmp file, fsync, rename, fsync dir).

    Raises:
        OSError: a write, sync or the rename failed (the old checkpoint stands).
    """
    path = checkpoint_path(directory)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, encode(entries), 0)
        fileops.OPS.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        fileops.OPS.fsync(dfd)
    finally:
        os.close(dfd)


class LeaderEpochCache:
    """The entries of one partition and their checkpoint (module doc). Every change is written
    before ``entries`` shows it."""

    def __init__(self, directory: Path, entries: Entries = ()) -> None:
        self.directory = directory
        self.entries: Entries = entries
        # The newest epoch, -1 when none (read on every leader append).
        self.latest_epoch = entries[-1].epoch if entries else UNDEFINED_EPOCH

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache:
        return cls(directory, read(directory))

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        return end_offset_for(self.entries, epoch, log_end_offset)

    def replace(self, entries: Entries) -> bool:
        """Checkpoint ``entries`` and make them current; False (nothing written) when they are
        the current ones.

        Raises:
            OSError: the checkpoint could not be written (memory is unchanged).
        """
        if entries == self.entries:
            return False
        write(self.directory, entries)
        self.entries = entries
        self.latest_epoch = entries[-1].epoch if entries else UNDEFINED_EPOCH
        return True
