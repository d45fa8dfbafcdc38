"""Reading the log for a ShareFetch, and the bytes of its response (sans-IO over a log object).

- :func:`read_limit`: how many bytes of log are worth reading for a record budget, walking batch
  headers a few at a time (:func:`batch_headers`); batches that will not be delivered
  (transaction markers, aborted transactions in read_committed) do not use the budget.
- :func:`keys_of`: record keys of offset ranges, read back from the log (loaded records delivered
  before a restart hold their keys under ``share.ordering=key``).
- :class:`ReadReuse`: with key ordering, consecutive fetches mostly read the same big log batch
  again (records wait for their keys); the bytes of the last read are reused while the log still
  holds the same batches there (checked on their headers: base offset, size, CRC).
- The response holds whole log batches covering the acquired ranges, in one of three shapes:
  :func:`spanning_batches` (one slice, the common case), :func:`covering_batches` (leaving out
  batches that hold no acquired offset: markers, aborted batches) and :func:`keyed_response`
  (with key ordering, an uncompressed batch acquired only in part is cut to its acquired span).

``lg`` is the partition's log (``batch_headers``, ``read``, ``log_start_offset``,
``log_end_offset``); ``headers`` are ``(position, header)`` pairs of ``protocol.record_batch``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from broker.share.acquisition import AcquiredRecords
from broker.share.txn_filter import CONTROL, TRANSACTIONAL, is_aborted
from storage.log import OffsetOutOfRangeError
from protocol.record_batch import iter_batches
from protocol.record_keys import record_key_hashes, trim_batch

__all__ = [
    "KEYS_DECOMPRESSED_MAX",
    "ReadReuse",
    "batch_headers",
    "covering_batches",
    "keyed_response",
    "keys_of",
    "read_limit",
    "spanning_batches",
]

# Most bytes one compressed batch may expand to when its record keys are read (share.ordering=key).
KEYS_DECOMPRESSED_MAX = 64 * 1024 * 1024
_TXN_OR_CONTROL = TRANSACTIONAL | CONTROL


class ReadReuse:
    """The last log read of a share-partition, handed out again for a read that would return
    the same bytes: ``lg.read(offset, limit, end)`` starting in the same first batch with the
    same ``limit``, and an ``end`` that either is the same or did not cut the last read. Before
    reuse the log's headers there are compared (base offset, size, CRC), so a log truncated,
    compacted or deleted under it is read afresh."""

    __slots__ = ("_data", "_end", "_first", "_headers", "_last", "_limit")

    def __init__(self) -> None:
        self._data = b""
        self._headers: list[tuple[int, int, int]] = []  # (base offset, size, crc) per batch
        self._first = (0, -1)  # offsets of the first batch
        self._last = -1
        self._limit = -1
        self._end = -1

    def read(self, lg: Any, offset: int, limit: int, end: int) -> bytes:
        """``lg.read(offset, limit, end).data``, or the same bytes as last time."""
        first_lo, first_hi = self._first
        if (first_lo <= offset <= first_hi and limit == self._limit
                and (end == self._end or self._cut_before_end(end))):
            # From ``offset`` (in the first batch, and not below the log start as its base may
            # be after DeleteRecords): the headers of the same batches.
            now = lg.batch_headers(offset, None, max_batches=len(self._headers))
            if [(h.base_offset, h.total_size, h.crc) for h in now] == self._headers:
                return self._data
        data = lg.read(offset, limit, end).data
        headers = [h for _pos, h in iter_batches(data)] if data else []
        if headers:
            self._data = data
            self._headers = [(h.base_offset, h.total_size, h.crc) for h in headers]
            self._first = (headers[0].base_offset, headers[0].last_offset)
            self._last = headers[-1].last_offset
            self._limit, self._end = limit, end
        else:
            self._first = (0, -1)
        return data

    def _cut_before_end(self, end: int) -> bool:
        """Whether the last read stopped at its byte limit well below its end (so a later end
        reads the same bytes)."""
        return end > self._end and self._last + 1 < self._end


def batch_headers(lg: Any, offset: int, most: int) -> Iterator[Any]:
    """The headers of up to ``most`` batches from the one holding ``offset``, read a few at a
    time (4, then 16, ...): a caller that stops after the first batches does not pay for a
    walk over the rest (each header is one ``pread``)."""
    step = 4
    while most > 0:
        n = min(step, most)
        headers = lg.batch_headers(offset, None, max_batches=n)
        yield from headers
        if len(headers) < n:
            return
        most -= n
        offset = headers[-1].last_offset + 1
        step *= 4


def covering_batches(data: Any, headers: list[Any],
                      acquired: list[AcquiredRecords]) -> bytes:
    """The log batches holding an acquired offset, leaving out those between them that hold
    none (transaction markers, aborted batches: broker/share/txn_filter.py), so consumers
    neither receive nor decode records they would drop."""
    runs: list[tuple[int, int]] = []  # byte ranges of consecutive covering batches
    k = 0
    for pos, h in headers:
        while k < len(acquired) and acquired[k].last_offset < h.base_offset:
            k += 1
        if k == len(acquired):
            break
        if acquired[k].first_offset > h.last_offset:
            continue
        if runs and runs[-1][1] == pos:
            runs[-1] = (runs[-1][0], pos + h.total_size)
        else:
            runs.append((pos, pos + h.total_size))
    if len(runs) == 1:
        return bytes(data[runs[0][0]:runs[0][1]])
    with memoryview(data) as view:  # one copy, into the joined result
        return b"".join([view[a:b] for a, b in runs])

def keyed_response(data: Any, headers: list[Any], acquired: list[AcquiredRecords],
                   layouts: dict[int, tuple[list[int], list[int]]]) -> bytes:
    """The log batches holding the acquired records. With key ordering a big log batch is
    often acquired only in part: an uncompressed one is cut down to its acquired span (a
    valid batch, as compaction leaves them), so consumers do not decode the rest."""
    parts: list[bytes] = []
    k = 0
    for pos, h in headers:
        while k < len(acquired) and acquired[k].last_offset < h.base_offset:
            k += 1
        if k == len(acquired):
            break
        if acquired[k].first_offset > h.last_offset:
            continue
        lo = max(acquired[k].first_offset, h.base_offset)
        j = k
        while j + 1 < len(acquired) and acquired[j + 1].first_offset <= h.last_offset:
            j += 1
        hi = min(acquired[j].last_offset, h.last_offset)
        layout = layouts.get(h.base_offset)
        cut = trim_batch(data, pos, h, lo, hi, layout) if layout is not None else None
        parts.append(cut if cut is not None else bytes(data[pos:pos + h.total_size]))
    return b"".join(parts)

def keys_of(lg: Any, ranges: list[tuple[int, int]]) -> dict[int, int | None]:
    """Record keys (hashes) of the offsets in ``ranges``, read from the log (the loaded
    records delivered before a restart, broker/share/key_order.py)."""
    out: dict[int, int | None] = {}
    for lo, hi in ranges:
        pos = max(lo, lg.log_start_offset)
        while pos <= hi and pos < lg.log_end_offset:
            try:
                data = lg.read(pos, 1 << 20, lg.log_end_offset).data
            except (OffsetOutOfRangeError, OSError):
                break
            if not data:
                break
            last = pos - 1
            for _pos, h in iter_batches(data):
                last = max(last, h.last_offset)
            out.update(record_key_hashes(data, pos, KEYS_DECOMPRESSED_MAX))
            if last < pos:
                break
            pos = last + 1
    return out

def read_limit(lg: Any, offset: int, max_records: int, max_bytes: int,
               aborted: dict[int, list[tuple[int, int]]] | None = None) -> int:
    """Bytes of log worth reading for a record budget.

    Walking batch headers is cheap; reading the whole MaxBytes (50 MiB from librdkafka by
    default) for a few hundred records was the top cost of a share fetch (bench profile).
    Batches never delivered (markers; with read_committed the ``aborted`` transactions, by
    producer) are read but do not use the budget, so a fetch is not left half full.
    """
    need = records = 0
    for h in batch_headers(lg, offset, max(1, min(max_records, 1000))):
        need += h.total_size
        attrs = h.attributes
        if attrs & _TXN_OR_CONTROL and (attrs & CONTROL or (aborted is not None and is_aborted(
                aborted, h.producer_id, attrs, h.base_offset))):
            if need >= max_bytes:
                break
            continue
        records += h.last_offset - max(h.base_offset, offset) + 1
        if records >= max_records or need >= max_bytes:
            break
    return max(1, min(max_bytes, need))


def spanning_batches(data: Any, headers: list[Any], acquired: list[AcquiredRecords]) -> bytes:
    """The log batches from the one holding the first acquired offset to the one holding the
    last, as read (one slice: the common case, nothing between them to leave out)."""
    first, last = acquired[0].first_offset, acquired[-1].last_offset
    start = end = None
    for pos, h in headers:
        if h.last_offset >= first and start is None:
            start = pos
        if h.base_offset <= last:
            end = pos + h.total_size
    return bytes(data[start:end])
