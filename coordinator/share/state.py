"""``ShareGroupOffset``: the durable state of one share-partition as the share coordinator holds it.

Concept (KIP-932; reference section 6; Kafka ``ShareGroupOffset``): the value a ShareSnapshot
carries in full and a ShareUpdate changes. The share coordinator shard keeps one per key, built only
by replaying records:

- a ShareSnapshot *replaces* the state (``from_snapshot``);
- a ShareUpdate is *merged* into it (``apply_update``): start offset -1 means "unchanged", the leader
  epoch never goes down, the delivery complete count is the update's, and the batches are combined
  by ``combine_state_batches`` and pruned below the (new) start offset. The snapshot epoch and state
  epoch are the snapshot's (an update carries no state epoch).

Invariants:
- ``state_batches`` is always in the canonical combined form (sorted, disjoint, coalesced, nothing
  below ``start_offset`` when it is >= 0): ``from_snapshot`` normalizes, ``apply_update`` keeps it,
  and ``apply_update`` relies on it to recombine only what an update touches.
- Values are immutable; every change makes a new object.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.share.batch_combiner import combine_state_batches, merge_state_batches
from coordinator.share.records import (
    UNKNOWN_DELIVERY_COMPLETE_COUNT,
    ShareSnapshotValue,
    ShareUpdateValue,
    StateBatch,
)
from persister.api import UNINITIALIZED_START_OFFSET

# Leader epoch of a state nobody has led yet (Kafka writes -1 into the initialize snapshot).
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupOffset:
    """Start offset, epochs, delivery complete count and state batches of one share-partition."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int = UNINITIALIZED_START_OFFSET
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT
    state_batches: tuple[StateBatch, ...] = ()
    create_timestamp: int = 0
    write_timestamp: int = 0

    @classmethod
    def from_snapshot(cls, value: ShareSnapshotValue) -> ShareGroupOffset:
        """The state a ShareSnapshot describes (batches normalized, in case another writer did not)."""
        return cls(
            snapshot_epoch=value.snapshot_epoch,
            state_epoch=value.state_epoch,
            leader_epoch=value.leader_epoch,
            start_offset=value.start_offset,
            delivery_complete_count=value.delivery_complete_count,
            state_batches=combine_state_batches(value.state_batches, value.start_offset),
            create_timestamp=value.create_timestamp,
            write_timestamp=value.write_timestamp,
        )

    def to_snapshot_value(self) -> ShareSnapshotValue:
        """This state as a complete ShareSnapshot value."""
        return ShareSnapshotValue(
            snapshot_epoch=self.snapshot_epoch,
            state_epoch=self.state_epoch,
            leader_epoch=self.leader_epoch,
            start_offset=self.start_offset,
            delivery_complete_count=self.delivery_complete_count,
            create_timestamp=self.create_timestamp,
            write_timestamp=self.write_timestamp,
            state_batches=self.state_batches,
        )

    def apply_update(self, update: ShareUpdateValue) -> ShareGroupOffset:
        """Merge a ShareUpdate into this state (Kafka ``ShareCoordinatorShard.merge``).

        Relies on ``state_batches`` being canonical (see module doc): only the part of it the
        update's batches touch is recombined (``merge_state_batches``). Replaying updates is the
        hot loop of a load after a crash, hence the direct constructor rather than ``replace``.
        """
        start_offset = (
            self.start_offset if update.start_offset == UNINITIALIZED_START_OFFSET else update.start_offset
        )
        return ShareGroupOffset(
            snapshot_epoch=self.snapshot_epoch,
            state_epoch=self.state_epoch,
            # Epoch fencing only ever tightens: -1 ("not supplied") or an older epoch keeps ours.
            leader_epoch=max(self.leader_epoch, update.leader_epoch),
            start_offset=start_offset,
            delivery_complete_count=update.delivery_complete_count,
            state_batches=merge_state_batches(self.state_batches, update.state_batches, start_offset),
            create_timestamp=self.create_timestamp,
            write_timestamp=self.write_timestamp,
        )
