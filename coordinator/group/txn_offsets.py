"""Pending transactional offsets of one ``__consumer_offsets`` partition (TxnOffsetCommit).

Concept (after Kafka's ``OffsetMetadataManager.pendingTransactionalOffsets`` and
``replayEndTransactionMarker``): an OffsetCommit record appended in a transactional batch of
producer P does not change the group's committed offsets. It waits here, per producer id, until
P's end-transaction marker is replayed: a COMMIT moves P's pending offsets into the committed
offsets (``offsets.DurableStore``), an ABORT drops them. Meanwhile:

- OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition with a
  pending offset (consumers in read_committed mode retry), a plain OffsetFetch the committed
  offset;
- a later TxnOffsetCommit of P adds to (or overwrites within) P's pending offsets;
- a tombstone of a partition (OffsetDelete, DeleteGroups, expiry) also drops every producer's
  pending offset of that partition;
- a COMMIT materializes an offset only if it was written after the partition's committed offset
  (record offsets compared, as Kafka orders a mix of transactional and plain commits: a plain
  commit appended after the transactional one wins);
- a group holding pending offsets exists (an empty "simple" group) and is not empty: DeleteGroups
  answers NON_EMPTY_GROUP and retention neither expires those partitions nor forgets the group.

State (the fold of the records, like every coordinator store, STYLE.md 1.3): ``txns`` maps a
producer id to an immutable ``OpenTxn`` (its epoch and pending offsets by key); every change
replaces the producer's whole ``OpenTxn`` and journals the one it replaced, so ``revert`` restores
by producer id (``coordinator/runtime/undo.py``). ``by_group`` is derived: which producers hold
pending offsets of a group.

Invariants:
- ``by_group[g]`` is exactly the set of producers whose pending offsets include group ``g``;
- the undo log holds the entries of records replayed at or above the committed offset while
  ``journaling`` is on (off while loading);
- an ``OpenTxn`` never holds an empty offsets map (a producer whose last pending offset was
  tombstoned is dropped; its epoch is forgotten with it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from coordinator.group.classic import records as cr
from coordinator.runtime.undo import UndoLog


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """An offset waiting for its transaction's marker, and the log offset of its record."""

    value: cr.OffsetCommitValue
    record_offset: int


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """A producer's ongoing transaction on this partition (immutable; replaced on change)."""

    producer_epoch: int
    offsets: Mapping[cr.OffsetCommitKey, PendingOffset]


@dataclass(frozen=True, slots=True)
class _Undo:
    offset: int
    producer_id: int
    before: OpenTxn | None

    @property
    def ident(self) -> int:
        return self.producer_id


class PendingOffsets:
    """Pending transactional offsets by producer id (see the module docstring)."""

    def __init__(self) -> None:
        self.txns: dict[int, OpenTxn] = {}
        self.by_group: dict[str, set[int]] = {}
        self.undo: UndoLog[_Undo] = UndoLog()
        self.journaling = True

    # -------------------------------------------------------------- reads

    def epoch(self, producer_id: int) -> int | None:
        """The epoch of the producer's ongoing transaction here, or None."""
        txn = self.txns.get(producer_id)
        return None if txn is None else txn.producer_epoch

    def has_group(self, group_id: str) -> bool:
        return group_id in self.by_group

    def has(self, key: cr.OffsetCommitKey) -> bool:
        """Whether some producer has a pending offset for this group/topic/partition."""
        pids = self.by_group.get(key.group_id)
        if not pids:
            return False
        return any(key in self.txns[pid].offsets for pid in pids)

    def keys(self, group_id: str) -> set[cr.OffsetCommitKey]:
        """Every partition of the group with a pending offset."""
        out: set[cr.OffsetCommitKey] = set()
        for pid in self.by_group.get(group_id, ()):
            out.update(k for k in self.txns[pid].offsets if k.group_id == group_id)
        return out

    def unstable_keys(self, group_id: str) -> set[cr.OffsetCommitKey]:
        """Partitions of the group that OffsetFetch with RequireStable must call unstable: those
        pending now, and those pending as of the committed offset (a marker replayed but not yet
        durable has not made its offsets committed yet)."""
        out = self.keys(group_id)
        seen: set[int] = set()
        for e in self.undo.oldest_first():  # the first entry of a producer: its committed value
            if e.producer_id in seen:
                continue
            seen.add(e.producer_id)
            if e.before is not None:
                out.update(k for k in e.before.offsets if k.group_id == group_id)
        return out

    def groups(self) -> set[str]:
        return set(self.by_group)

    def lowest_offset(self) -> int | None:
        """The lowest log offset a reload needs for the pending offsets (committed or not)."""
        found: list[int] = []
        for txn in self._all_txns():
            found.extend(p.record_offset for p in txn.offsets.values())
        return min(found) if found else None

    def _all_txns(self) -> Iterator[OpenTxn]:
        yield from self.txns.values()
        for e in self.undo.newest_first():
            if e.before is not None:
                yield e.before

    # -------------------------------------------------------------- replay (the mutators)

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: cr.OffsetCommitKey, value: cr.OffsetCommitValue) -> None:
        """A transactional OffsetCommit record of ``producer_id`` at log ``offset``."""
        before = self.txns.get(producer_id)
        offsets = dict(before.offsets) if before is not None else {}
        offsets[key] = PendingOffset(value, offset)
        epoch = producer_epoch if before is None else max(before.producer_epoch, producer_epoch)
        self._put(offset, producer_id, OpenTxn(epoch, offsets))

    def tombstone(self, offset: int, key: cr.OffsetCommitKey) -> None:
        """The partition's offsets were deleted: drop every producer's pending offset of it."""
        for pid in sorted(self.by_group.get(key.group_id, ())):
            txn = self.txns[pid]
            if key not in txn.offsets:
                continue
            offsets = {k: v for k, v in txn.offsets.items() if k != key}
            self._put(offset, pid, OpenTxn(txn.producer_epoch, offsets) if offsets else None)

    def end(self, offset: int, producer_id: int) -> OpenTxn | None:
        """The producer's end-transaction marker at ``offset``: its transaction is over here.
        Returns what was pending (None if nothing was)."""
        before = self.txns.get(producer_id)
        if before is not None:
            self._put(offset, producer_id, None)
        return before

    def _put(self, offset: int, producer_id: int, txn: OpenTxn | None) -> None:
        if self.journaling:
            self.undo.append(_Undo(offset, producer_id, self.txns.get(producer_id)))
        self._set(producer_id, txn)

    def _set(self, producer_id: int, txn: OpenTxn | None) -> None:
        old = self.txns.pop(producer_id, None)
        if old is not None:
            for gid in {k.group_id for k in old.offsets}:
                pids = self.by_group[gid]
                pids.discard(producer_id)
                if not pids:
                    del self.by_group[gid]
        if txn is not None:
            self.txns[producer_id] = txn
            for gid in {k.group_id for k in txn.offsets}:
                self.by_group.setdefault(gid, set()).add(producer_id)

    # -------------------------------------------------------------- commit / revert

    def commit(self, offset: int) -> None:
        self.undo.commit(offset)

    def revert(self, offset: int) -> None:
        self.undo.revert(offset, lambda e: self._set(e.producer_id, e.before))

    def clear(self) -> None:
        self.txns.clear()
        self.by_group.clear()
        self.undo.clear()
