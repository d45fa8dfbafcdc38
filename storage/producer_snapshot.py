"""Producer-state snapshot files of a partition: ``<offset>.snapshot`` beside its segments.

A snapshot named by offset *s* (20 digits, like the segment files) holds the idempotent-producer
state after every batch below *s* was appended: per producer id its epoch, the time of its last
append and the sequence/offset ranges of its last five batches. Loading a partition takes the
newest readable snapshot at or below the log end offset and replays the batch headers from there
(``broker/log/producer_state_manager.py``), as Kafka's ``ProducerStateManager`` does.

File format (big-endian), version 1::

    version int16 = 1
    crc     uint32          CRC-32C of every byte after this field
    count   int32           producer entries
    entry:  producer_id int64, producer_epoch int16, last_append_ms int64,
            txn_first_offset int64    first offset of the producer's ongoing transaction, -1 if
                                      none (KIP-98; the replay after the snapshot ends or starts
                                      transactions from there)
            coordinator_epoch int32   of the last end-transaction marker written for it, -1
            batches int8 (0..5), then per batch, oldest first:
                first_seq int32, last_seq int32, base_offset int64, last_offset int64

Invariants and failure handling:
- files are written whole to ``.tmp`` and renamed, so a reader sees an old snapshot or a new one;
- a snapshot that fails its CRC or does not parse is skipped (logged) and an older one is used:
  snapshots only save reading the log, they are never the only copy of the log's information
  (except for batches already deleted by retention, as in Kafka);
- ``fsync=True`` (clean shutdown) also syncs the file and the directory; snapshots written at a
  segment roll are not synced, since losing one to a power failure only lengthens the replay.

Raises ``OSError`` for I/O errors; malformed files are never raised, only skipped.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

__all__ = [
    "SNAPSHOT_SUFFIX",
    "ProducerSnapshotEntry",
    "decode",
    "delete_snapshots",
    "encode",
    "list_snapshots",
    "read_latest",
    "write_snapshot",
]

_log = logging.getLogger("shoal.log")

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
MAX_BATCHES = 5
_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhqqib")
_BATCH = struct.Struct(">iiqq")


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer's state in a snapshot. ``batches``: (first seq, last seq, base offset, last
    offset), oldest first, at most five."""

    producer_id: int
    producer_epoch: int
    last_append_ms: int
    batches: tuple[tuple[int, int, int, int], ...] = field(default=())
    txn_first_offset: int = -1  # first offset of its ongoing transaction, -1: none
    coordinator_epoch: int = -1  # of its last end-transaction marker


def encode(entries: list[ProducerSnapshotEntry]) -> bytes:
    body = bytearray(struct.pack(">i", len(entries)))
    for e in entries:
        batches = e.batches[-MAX_BATCHES:]
        body += _ENTRY.pack(e.producer_id, e.producer_epoch, e.last_append_ms,
                            e.txn_first_offset, e.coordinator_epoch, len(batches))
        for b in batches:
            body += _BATCH.pack(*b)
    return struct.pack(">hI", VERSION, crc32c.crc32c(body)) + bytes(body)


def decode(data: bytes) -> list[ProducerSnapshotEntry]:
    """Parse a snapshot file's bytes.

    Raises:
        ValueError: wrong version, CRC mismatch or a malformed body.
    """
    if len(data) < _HEAD.size:
        raise ValueError(f"{len(data)} bytes are too short for a snapshot")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        raise ValueError(f"unknown snapshot version {version}")
    if crc32c.crc32c(memoryview(data)[6:]) != crc:
        raise ValueError("snapshot CRC mismatch")
    pos = _HEAD.size
    out: list[ProducerSnapshotEntry] = []
    try:
        for _ in range(count):
            pid, epoch, last_ms, txn, coord, n = _ENTRY.unpack_from(data, pos)
            pos += _ENTRY.size
            if not 0 <= n <= MAX_BATCHES:
                raise ValueError(f"producer {pid} has {n} batches")
            batches = []
            for _ in range(n):
                batches.append(_BATCH.unpack_from(data, pos))
                pos += _BATCH.size
            out.append(ProducerSnapshotEntry(pid, epoch, last_ms, tuple(batches), txn, coord))
    except struct.error:
        raise ValueError("snapshot is truncated") from None
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} unexpected bytes after the snapshot entries")
    return out


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending.

    Raises:
        OSError: the directory cannot be listed.
    """
    out = []
    for name in os.listdir(directory):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def write_snapshot(directory: Path, offset: int, entries: list[ProducerSnapshotEntry],
                   fsync: bool = False) -> None:
    """Write ``<offset>.snapshot`` atomically (tmp file, rename).

    Raises:
        OSError: the file could not be written (a partial tmp file is removed).
    """
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    data = encode(entries)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_latest(directory: Path, at_most: int) -> tuple[int, list[ProducerSnapshotEntry]] | None:
    """The newest readable snapshot at or below offset ``at_most``: (offset, entries), or None.

    Unreadable or malformed snapshots are logged and skipped.

    Raises:
        OSError: the directory cannot be listed.
    """
    for offset in reversed(list_snapshots(directory)):
        if offset > at_most:
            continue
        path = snapshot_path(directory, offset)
        try:
            return offset, decode(path.read_bytes())
        except (OSError, ValueError) as exc:
            _log.warning("%s: producer-state snapshot is unusable (%s); using an older one and "
                         "rebuilding the rest from the log", path, exc)
    return None


def delete_snapshots(directory: Path, offsets: list[int]) -> None:
    """Remove the given snapshots (missing ones are fine).

    Raises:
        OSError: an unlink failed for another reason.
    """
    for offset in offsets:
        try:
            os.unlink(snapshot_path(directory, offset))
        except FileNotFoundError:
            pass
