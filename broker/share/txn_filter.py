"""Which log batches a share-partition never delivers: transaction markers, and under
``share.isolation.level=read_committed`` the data of aborted transactions (pure functions).

What Kafka does (reference section 3, "read_committed"; test items 12, 23 and 53): its
SharePartition acquires control batches like any other offsets and leaves them to the client.
The Java ShareConsumer skips the marker and acknowledges its offset as GAP (it had to learn to
send that GAP even when a response held nothing but a marker, apache/kafka#19295). With
read_committed the read stops at the LSO, aborted transactional batches are acquired and then
archived and cut out of the acquired ranges (KAFKA-16729). librdkafka 2.16's ShareConsumer
passes no aborted list to its batch reader, drops a control message found in an acquired range
and leaves that offset typed GAP, which it sends with its next acknowledgement; it drops every
message outside the acquired ranges. So with Kafka's behaviour a marker offset sits ACQUIRED
until the client's next acknowledgement (or its lock times out, if a client never sends it),
counts toward the record-lock limit and holds the SPSO back meanwhile.

Shoal archives both kinds on the broker instead, *before* acquisition, in either isolation level:

- a marker offset is never acquired, so it never sits in flight waiting for a GAP
  acknowledgement, never counts toward the record-lock limit, never holds the SPSO back, and a
  client that forgets the GAP (or one that only ever sees markers in a response) cannot leave it
  stuck until its lock expires;
- clients ignore offsets outside the AcquiredRecords list (librdkafka 2.16 drops every message,
  control or not, outside an acquired range; Kafka's ShareCompletedFetch skips them), and the
  shell leaves batches holding no acquired offset out of the response anyway
  (``SharePartitionManager._covering_batches``), so no application ever sees a marker; a client
  that acknowledges such an offset as GAP gets INVALID_RECORD_STATE for it, as for any offset it
  does not hold.

The decision is per log batch, from its header: a control batch (attributes bit 5) is skipped; a
transactional data batch (bit 4) of producer P at base offset B is aborted when the log's
aborted-transaction list has an entry for P with ``first_offset <= B <= last_offset`` (the last
offset is that transaction's ABORT marker, so P's later transactions are not caught). A skipped
batch takes the offsets up to the next batch with it (compaction holes), as a log span does in
:func:`broker.share.acquisition.log_spans`.

Above the last stable offset (LSO) nothing is acquired with read_committed: an open transaction
holds the share-partition at its first offset until it commits or aborts.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import NamedTuple, Protocol

__all__ = ["AbortedRange", "TxnBatch", "aborted_by_producer", "is_aborted", "skip_ranges"]

# Kafka v2 batch attributes (protocol/record_batch.py has the same masks).
TRANSACTIONAL = 0x10
CONTROL = 0x20


class AbortedRange(Protocol):
    """One aborted transaction of a partition (``broker.log.txn_log.AbortedTxn`` has this shape)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...


class TxnBatch(NamedTuple):
    """A log batch whose attributes have the transactional or control bit set (the shell passes
    only these; plain batches can be neither a marker nor aborted)."""

    base_offset: int
    last_offset: int
    producer_id: int
    attributes: int

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)


def aborted_by_producer(aborted: Sequence[AbortedRange]) -> dict[int, list[tuple[int, int]]]:
    """Producer id -> (first offset, marker offset) of its aborted transactions."""
    by_pid: dict[int, list[tuple[int, int]]] = {}
    for a in aborted:
        by_pid.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
    return by_pid


def is_aborted(by_pid: dict[int, list[tuple[int, int]]], producer_id: int, attributes: int,
               base_offset: int) -> bool:
    """Whether a data batch belongs to one of the aborted transactions in ``by_pid``."""
    if attributes & (TRANSACTIONAL | CONTROL) != TRANSACTIONAL:
        return False
    spans = by_pid.get(producer_id)
    return spans is not None and any(lo <= base_offset <= hi for lo, hi in spans)


def skip_ranges(
    log_batches: Sequence[tuple[int, int]],
    txn_batches: Sequence[TxnBatch],
    aborted: Sequence[AbortedRange] | None,
) -> list[tuple[int, int]]:
    """Ascending, disjoint offset ranges of ``log_batches`` never to deliver.

    ``aborted`` is None under read_uncommitted (only markers are skipped), else the partition's
    aborted transactions overlapping the read. Each range runs from a skipped batch's base
    offset to the offset before the next read batch (or to its own last offset at the end).
    """
    if not txn_batches:
        return []
    by_pid = aborted_by_producer(aborted or ())
    bases = [b for b, _l in log_batches]
    out: list[tuple[int, int]] = []
    for tb in txn_batches:
        if not tb.attributes & CONTROL and not is_aborted(
            by_pid, tb.producer_id, tb.attributes, tb.base_offset
        ):
            continue
        i = bisect_right(bases, tb.base_offset)
        end = bases[i] - 1 if i < len(bases) else tb.last_offset
        if out and out[-1][1] + 1 >= tb.base_offset:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((tb.base_offset, end))
    return out
