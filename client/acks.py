"""Acknowledgement bookkeeping for the records of the current batch (sans-IO).

``InFlight`` holds the records the last ``getmany`` returned, per partition, and the type each one
has been acknowledged with but not yet sent. Rules (Kafka's KafkaShareConsumer contract,
reference 8 items 5, 9, 10):

- Only a record object from the current batch can be acknowledged; anything else is an
  ``IllegalStateError``.
- A final acknowledgement (ACCEPT, RELEASE, REJECT) not sent yet cannot be changed: another
  type, RENEW included, is an ``IllegalStateError`` (the same type again changes nothing), so a
  RENEW cannot silently turn a REJECT into a redelivery. Kafka's client refuses to acknowledge a
  record it no longer holds ("The record cannot be acknowledged."); this is the same rule for a
  record whose fate is already decided. RENEW is not final: it may be repeated and is followed by
  a final acknowledgement.
- After sending, a record may be acknowledged again: the new type is sent and the broker judges
  it (a second acknowledgement of a REJECTed record gets INVALID_RECORD_STATE in the commit
  result, reference section 8 item 10).
- ``take_pending`` hands out the unsent acknowledgements as wire batches and marks them sent.
- In explicit mode every record must have had a final (non-RENEW) acknowledgement before the next
  ``getmany``: ``unacknowledged`` lists the ones that have not.

``to_wire_batches`` turns ``{offset: type}`` into AcknowledgementBatches: contiguous offsets form
one batch; a batch whose offsets share a type carries it once, else one type per offset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from client.errors import IllegalStateError
from client.records import AcknowledgeType, RawPartition, ShareRecord, TopicPartition

WireBatch = tuple[int, int, tuple[int, ...]]

__all__ = ["InFlight", "WireBatch", "to_wire_batches"]


def to_wire_batches(acks: Mapping[int, int]) -> list[WireBatch]:
    """Coalesce ``{offset: ack type}`` into (first, last, types) batches in offset order."""
    if acks:  # the usual case, one contiguous run of one type: no per-offset work
        lo, hi = min(acks), max(acks)
        if hi - lo + 1 == len(acks):
            types = set(acks.values())
            if len(types) == 1:
                return [(lo, hi, (int(types.pop()),))]
    out: list[WireBatch] = []
    run: list[tuple[int, int]] = []
    for off in sorted(acks):
        if run and off != run[-1][0] + 1:
            out.append(_batch(run))
            run = []
        run.append((off, int(acks[off])))
    if run:
        out.append(_batch(run))
    return out


def _batch(run: list[tuple[int, int]]) -> WireBatch:
    types = {t for _, t in run}
    if len(types) == 1:
        return run[0][0], run[-1][0], (run[0][1],)
    return run[0][0], run[-1][0], tuple(t for _, t in run)


@dataclass(slots=True)
class _PartitionAcks:
    # offset -> the record handed out; None for an offset of a raw (undecoded) batch.
    records: dict[int, ShareRecord | None] = field(default_factory=dict)
    pending: dict[int, AcknowledgeType] = field(default_factory=dict)
    final: set[int] = field(default_factory=set)  # offsets with a non-RENEW ack (sent or not)


class InFlight:
    """The current batch's records and their acknowledgements."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _PartitionAcks] = {}

    def __len__(self) -> int:
        return sum(len(p.records) for p in self._parts.values())

    def replace(self, records: Iterable[ShareRecord]) -> None:
        """Start a new current batch (the previous one must have been settled by the caller)."""
        parts: dict[TopicPartition, _PartitionAcks] = {}
        self._parts = parts
        last: tuple[str, int] | None = None
        current: dict[int, ShareRecord] = {}
        for r in records:  # records come grouped by partition: build each key once
            if (r.topic, r.partition) != last:
                last = (r.topic, r.partition)
                tp = TopicPartition(*last)
                part = parts.get(tp)
                if part is None:
                    part = parts[tp] = _PartitionAcks()
                current = part.records
            current[r.offset] = r

    def replace_raw(self, parts: Iterable[RawPartition]) -> None:
        """Start a new current batch of undecoded partitions: every acquired offset is held
        (records and gaps alike); only ``acknowledge_all`` can acknowledge them."""
        self._parts = {}
        for p in parts:
            part = self._parts.setdefault(TopicPartition(p.topic, p.partition), _PartitionAcks())
            for first, last, _ in p.acquired:
                part.records.update(dict.fromkeys(range(first, last + 1)))

    def add_gaps(self, tp: TopicPartition, offsets: Iterable[int]) -> None:
        """Acquired offsets without records: acknowledged as GAP with the next send."""
        part = self._parts.setdefault(tp, _PartitionAcks())
        for off in offsets:
            part.pending[off] = AcknowledgeType.GAP
            part.final.add(off)

    def acknowledge(self, record: ShareRecord, kind: AcknowledgeType) -> None:
        """Record an acknowledgement for a record of the current batch.

        Raises:
            IllegalStateError: the record is not (this object) from the current batch, or it
                has an unsent final acknowledgement of another type.
        """
        part = self._parts.get(record.topic_partition)
        if part is None or part.records.get(record.offset) is not record:
            raise IllegalStateError(
                f"{record!r} is not part of the current batch and cannot be acknowledged")
        pending = part.pending.get(record.offset)
        if pending is not None and pending != AcknowledgeType.RENEW:
            if pending != kind:
                raise IllegalStateError(
                    f"{record!r} is already acknowledged as {pending.name}, not sent yet; it "
                    f"cannot be acknowledged as {kind.name} as well")
            return
        part.pending[record.offset] = kind
        if kind != AcknowledgeType.RENEW:
            part.final.add(record.offset)

    def acknowledge_all(self, kind: AcknowledgeType, *, only_unacknowledged: bool = True) -> None:
        """Acknowledge every record (by default only those without a final acknowledgement)."""
        for part in self._parts.values():
            if not part.final or not only_unacknowledged:  # all of them, at C speed
                part.pending.update(dict.fromkeys(part.records, kind))
                if kind != AcknowledgeType.RENEW:
                    part.final.update(part.records)
                continue
            for off in part.records:
                if off in part.final:
                    continue
                part.pending[off] = kind
                if kind != AcknowledgeType.RENEW:
                    part.final.add(off)

    def unacknowledged(self) -> list[ShareRecord]:
        """Records that have no final (non-RENEW) acknowledgement yet (decoded batches)."""
        return [r for p in self._parts.values() for off, r in p.records.items()
                if off not in p.final and r is not None]

    def unacknowledged_offsets(self) -> dict[TopicPartition, list[int]]:
        """Offsets without a final acknowledgement, by partition (raw batches included)."""
        out = {}
        for tp, p in self._parts.items():
            offsets = [off for off in p.records if off not in p.final] if p.final \
                else list(p.records)
            if offsets:
                out[tp] = offsets
        return out

    def has_pending(self, renew: bool | None = None) -> bool:
        """Whether unsent acknowledgements exist (``renew``: only RENEW ones / only others)."""
        for p in self._parts.values():
            for kind in p.pending.values():
                if renew is None or (kind == AcknowledgeType.RENEW) == renew:
                    return True
        return False

    def take_pending(self, partitions: Iterable[TopicPartition] | None = None
                     ) -> dict[TopicPartition, dict[int, AcknowledgeType]]:
        """Remove and return the unsent acknowledgements (of ``partitions``, or all)."""
        wanted = None if partitions is None else set(partitions)
        out: dict[TopicPartition, dict[int, AcknowledgeType]] = {}
        for tp, part in self._parts.items():
            if part.pending and (wanted is None or tp in wanted):
                out[tp] = part.pending
                part.pending = {}
        return out
