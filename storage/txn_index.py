"""The aborted-transaction index of a partition: one ``<base>.txnindex`` file per segment.

Kafka's ``TransactionIndex`` (behaviour only): when an ABORT marker is appended, an entry goes
into the index file of the segment the marker landed in::

    version int16 = 0, producer_id int64, first_offset int64, last_offset int64,
    last_stable_offset int64                                          (34 bytes, big-endian)

``first_offset`` is the first offset of the aborted transaction's data, ``last_offset`` the
marker's offset, ``last_stable_offset`` the partition's LSO right after the marker. A
read_committed Fetch lists the aborted transactions that intersect the range it returns, from
here, without reading the log.

Invariants and failure handling:
- entries of one file are in marker-offset order (appends happen in log order); a file is read
  up to its first malformed or partial entry (a torn write after a crash), the rest is ignored;
- entries whose marker is at or past the log end offset are dropped when the log opens (crash
  recovery truncated their marker away), and the producer-state replay after a crash rewrites
  the entries of every marker it re-reads (``broker/log/producer_state_manager.py``);
- a file goes with its segment (retention, DeleteRecords, recovery truncation: ``Segment.unlink``;
  compaction: the cleaned segment gets a ``.txnindex.cleaned`` with the entries it keeps).

Every entry of the partition is kept in memory (32 bytes of ints each, per segment): aborted
transactions are rare next to records. Not thread-safe: ``PartitionLog`` calls it under its lock.
I/O errors surface as ``OSError``.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from storage import fileops

_log = logging.getLogger("shoal.log")

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
VERSION = 0

# (producer id, first offset, last offset = the ABORT marker's offset, last stable offset)
Entry = tuple[int, int, int, int]


def txn_index_path(directory: Path | str, base: int) -> str:
    return os.path.join(directory, f"{base:020d}{TXN_INDEX_SUFFIX}")


def encode(entries: Iterable[Entry]) -> bytes:
    return b"".join(ENTRY.pack(VERSION, *e) for e in entries)


def decode(data: bytes) -> list[Entry]:
    """The whole, well-formed entries at the start of ``data`` (a torn or bad tail is dropped)."""
    out: list[Entry] = []
    prev_last = -1
    for k in range(len(data) // ENTRY.size):
        version, pid, first, last, lso = ENTRY.unpack_from(data, k * ENTRY.size)
        if version != VERSION or first < 0 or last < first or last <= prev_last:
            break
        out.append((pid, first, last, lso))
        prev_last = last
    return out


def read_file(path: str) -> list[Entry]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    entries = decode(data)
    if len(entries) * ENTRY.size != len(data):
        _log.warning("%s: ignoring %d byte(s) after its last whole entry", path,
                     len(data) - len(entries) * ENTRY.size)
    return entries


def write_file(path: str, entries: list[Entry]) -> None:
    """Replace ``path`` with exactly ``entries`` (written in place, then cut to length).

    Raises:
        OSError: the write failed.
    """
    data = encode(entries)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            pos += fileops.OPS.pwrite(fd, view[pos:], pos)
        fileops.OPS.ftruncate(fd, len(data))
    finally:
        os.close(fd)


class TxnIndex:
    """The aborted transactions of one partition, per segment base offset, mirrored on disk."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._bases: list[int] = []  # segments with at least one entry, ascending
        self._entries: dict[int, list[Entry]] = {}
        self._min_first: dict[int, int] = {}

    @classmethod
    def load(cls, directory: Path, segment_bases: list[int]) -> TxnIndex:
        """Read the index files of the given segments (those without one have no entry).

        Raises:
            OSError: the directory cannot be listed or a file read.
        """
        index = cls(directory)
        wanted = set(segment_bases)
        for name in os.listdir(directory):
            stem = name[: -len(TXN_INDEX_SUFFIX)]
            if name.endswith(TXN_INDEX_SUFFIX) and len(stem) == 20 and stem.isdigit() \
                    and int(stem) in wanted:
                entries = read_file(os.path.join(directory, name))
                if entries:
                    index._set(int(stem), entries)
        return index

    def _set(self, base: int, entries: list[Entry]) -> None:
        if not entries:
            self._drop(base)
            return
        if base not in self._entries:
            bisect.insort(self._bases, base)
        self._entries[base] = entries
        self._min_first[base] = min(e[1] for e in entries)

    def _drop(self, base: int) -> None:
        if self._entries.pop(base, None) is not None:
            del self._min_first[base]
            self._bases.remove(base)

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def entries(self, base: int) -> list[Entry]:
        return list(self._entries.get(base, ()))

    def add(self, base: int, entry: Entry) -> None:
        """Append ``entry`` to segment ``base``'s file and to memory.

        Raises:
            OSError: the write failed (memory is left unchanged).
        """
        current = self._entries.get(base, [])
        fd = os.open(txn_index_path(self.directory, base), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            data = memoryview(encode([entry]))
            pos = 0
            at = len(current) * ENTRY.size
            while pos < len(data):
                pos += fileops.OPS.pwrite(fd, data[pos:], at + pos)
        finally:
            os.close(fd)
        self._set(base, [*current, entry])

    def collect(self, start: int, end: int) -> list[Entry]:
        """Entries whose ``[first_offset, last_offset]`` intersects ``[start, end)``, by first
        offset. A marker at or past ``start`` lives in the segment holding ``start`` or a later
        one, so earlier segments are skipped; a later segment is read only if one of its
        transactions began before ``end``."""
        if start >= end or not self._bases:
            return []
        # The segment holding ``start`` has the greatest base <= start.
        k = max(0, bisect.bisect_right(self._bases, start) - 1)
        out: list[Entry] = []
        for base in self._bases[k:]:
            if self._min_first[base] >= end:
                continue
            for e in self._entries[base]:
                if e[2] >= start and e[1] < end:
                    out.append(e)
        out.sort(key=lambda e: (e[1], e[2]))
        return out

    def drop_segments(self, bases: Iterable[int]) -> None:
        """Forget deleted segments (their files went with them)."""
        for base in bases:
            self._drop(base)

    def truncate_from(self, offset: int) -> int:
        """Remove every entry whose marker is at or past ``offset`` (memory and files); return
        how many.

        Raises:
            OSError: a file could not be rewritten.
        """
        removed = 0
        for base in list(self._bases):
            entries = self._entries[base]
            keep = [e for e in entries if e[2] < offset]
            if len(keep) == len(entries):
                continue
            removed += len(entries) - len(keep)
            write_file(txn_index_path(self.directory, base), keep)
            self._set(base, keep)
        return removed

    def replace(self, bases: list[int], entries: list[Entry]) -> None:
        """A cleaned segment named ``bases[0]`` replaced ``bases`` and kept ``entries`` (its
        ``.txnindex`` is already in place)."""
        for base in bases:
            self._drop(base)
        self._set(bases[0], entries)
