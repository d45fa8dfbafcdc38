"""``ShareCoordinatorShard``: the share-state machine of one ``__share_group_state`` partition.

Concept (KIP-932; reference section 6; Kafka ``ShareCoordinatorShard``): for every share-partition
key (group, topic id, partition) that hashes to this partition, the shard holds a
``ShareGroupOffset`` plus the bookkeeping needed to choose records and to prune the log. It is
sans-IO: operations take typed params (and ``now_ms`` where a timestamp is written) and return
``CoordinatorResult(records, response)``; the runtime appends the records, calls ``replay`` for
each, and releases the response once they are committed (STYLE.md 1.3/1.4).

Rule 1, records are the only mutator: ``initialize_state``, ``write_state``, ``delete_state`` and
``read_state`` never change the shard. ``replay(offset, key, value)`` is the only method that does
(besides ``commit``/``revert``, which move the committed boundary of what was replayed).

Rule 2, which record (Kafka ``generateShareStateRecord``):
- initialize writes a ShareSnapshot (snapshot epoch 0 for a new key, else previous + 1; no batches);
- write (and a read that raises the leader epoch) writes a ShareUpdate with the same snapshot
  epoch, unless the key already had ``snapshot_update_records_per_snapshot`` (N, default 500)
  updates since its snapshot: then the merged full state goes out as a new ShareSnapshot. So with
  N = 500 the 501st write after a snapshot is a snapshot; with N = 0 every write is;
- delete writes a tombstone (ShareSnapshot key, null value) when the key exists, nothing otherwise.

Rule 3, fencing and errors (error codes are data, never raised; Kafka ``maybeGet*Error`` order):
- a negative partition, malformed batches or out-of-range offsets/epochs -> INVALID_REQUEST;
- write or read of a key that was never initialized -> INVALID_REQUEST (reference section 6);
- write/read with leader epoch != -1 below the stored one -> FENCED_LEADER_EPOCH;
- write with state epoch != -1 below the stored one, or initialize with a lower state epoch ->
  FENCED_STATE_EPOCH;
- ``partition_exists(topic_id, partition)`` false -> UNKNOWN_TOPIC_OR_PARTITION;
- read summary of a missing key is not an error: start offset -1 (uninitialized).

Rule 4, epochs only tighten: the stored leader and state epochs never go down. A read with a newer
leader epoch appends a record carrying it, so the old leader is fenced from then on (Kafka
``readStateAndMaybeUpdateLeaderEpoch``). Every snapshot we emit carries the current epochs (a
re-initialize keeps the stored leader epoch), so a log pruned below it still fences.

Rule 5, reads: ``read_state`` is a write-style operation evaluated on the replayed state (it may
emit the leader-epoch record); like Kafka's write operations its response must be released only
after everything appended before it is committed. ``read_state_summary`` is a pure read of the
*committed* view (records below the high watermark passed to ``commit``) and can answer at once.

Rule 6, pruning: each live key needs its latest snapshot and the updates after it.
``last_redundant_offset()`` is the lowest committed snapshot offset over live keys (or the
committed offset when no key is live): every record below it is redundant, and replaying the log
from there gives the same state (property-tested). An update whose key has no state (possible only
in a pruned log, before that key's newer snapshot) is ignored.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from coordinator.runtime.result import CoordinatorResult
from coordinator.share.batch_combiner import combine_state_batches
from coordinator.share.records import (
    UNKNOWN_DELIVERY_COMPLETE_COUNT,
    ShareKey,
    ShareRecord,
    ShareSnapshotValue,
    ShareUpdateValue,
    ShareValue,
    StateBatch,
    new_share_snapshot_record,
    new_share_tombstone_record,
    new_share_update_record,
)
from coordinator.share.state import NO_LEADER_EPOCH, ShareGroupOffset
from persister.api import (
    UNINITIALIZED_START_OFFSET,
    DeleteParams,
    InitializeParams,
    ReadParams,
    ReadResult,
    SharePartitionKey,
    SummaryResult,
    WriteParams,
    WriteResult,
)

# share.coordinator.snapshot.update.records.per.snapshot: default and validator range [0, 500].
DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT = 500
MAX_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT = 500

# "Not supplied" for a request's leader or state epoch: skips that fence (Kafka 4.3).
NO_EPOCH = -1

_INT8_RANGE = range(-(2**7), 2**7)
_INT16_RANGE = range(0, 2**15)
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

_NEGATIVE_PARTITION = "The partition id cannot be a negative number."
_WRITE_UNINITIALIZED = "Write state for an uninitialized share partition."
_READ_UNINITIALIZED = "Read state for an uninitialized share partition."

WriteOpResult = CoordinatorResult[ShareRecord, WriteResult]
ReadOpResult = CoordinatorResult[ShareRecord, ReadResult]


@dataclass(frozen=True, slots=True)
class KeyState:
    """What the shard knows about one live key, all of it derived from replayed records.

    ``updates_since_snapshot`` counts the ShareUpdates replayed after the key's latest snapshot,
    which sits at log offset ``snapshot_offset``.
    """

    state: ShareGroupOffset
    updates_since_snapshot: int
    snapshot_offset: int


class ShareCoordinatorShard:
    """Share state for the keys of one ``__share_group_state`` partition (see module doc)."""

    def __init__(
        self,
        *,
        snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
        partition_exists: Callable[[uuid.UUID, int], bool] | None = None,
    ) -> None:
        """Create an empty shard.

        ``partition_exists`` answers whether a topic partition is known to the cluster metadata;
        ``None`` accepts every partition (no metadata wired in yet).

        Raises:
            ValueError: ``snapshot_update_records_per_snapshot`` is outside [0, 500].
        """
        if not 0 <= snapshot_update_records_per_snapshot <= MAX_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT:
            raise ValueError("snapshot_update_records_per_snapshot must be within [0, 500]")
        self._updates_per_snapshot = snapshot_update_records_per_snapshot
        self._partition_exists = partition_exists
        self._entries: dict[SharePartitionKey, KeyState] = {}
        # Undo log of uncommitted replays: (offset, key, entry before that record).
        self._undo: deque[tuple[int, SharePartitionKey, KeyState | None]] = deque()
        self._end_offset = 0  # one past the last replayed offset
        self._committed_offset = 0  # records below this offset are committed

    # ------------------------------------------------------------------------------------------
    # Introspection

    @property
    def snapshot_update_records_per_snapshot(self) -> int:
        return self._updates_per_snapshot

    @property
    def states(self) -> Mapping[SharePartitionKey, KeyState]:
        """Read-only view of every live key's state, as replayed (committed or not)."""
        return MappingProxyType(self._entries)

    @property
    def end_offset(self) -> int:
        """One past the last replayed offset."""
        return self._end_offset

    @property
    def committed_offset(self) -> int:
        """Records at offsets below this are committed."""
        return self._committed_offset

    def get(self, key: SharePartitionKey) -> KeyState | None:
        """The replayed (possibly uncommitted) state of ``key``."""
        return self._entries.get(key)

    def committed(self, key: SharePartitionKey) -> KeyState | None:
        """The state of ``key`` as of the committed offset."""
        for _offset, undo_key, prior in self._undo:
            if undo_key == key:
                return prior  # the entry before its oldest uncommitted change
        return self._entries.get(key)

    # ------------------------------------------------------------------------------------------
    # Write operations: validate, return records + response, never mutate

    def initialize_state(self, params: InitializeParams, *, now_ms: int) -> WriteOpResult:
        """InitializeShareGroupState for one key: a new ShareSnapshot with no batches.

        Re-initializing an existing key (AlterShareGroupOffsets) is allowed with a state epoch not
        lower than the stored one and bumps the snapshot epoch.
        """
        key = params.key
        if key.partition < 0:
            return _write_error(ErrorCode.invalid_request, _NEGATIVE_PARTITION)
        if not 0 <= params.state_epoch <= _INT32_MAX:
            return _write_error(ErrorCode.invalid_request, "The state epoch must be a non-negative int32.")
        if not UNINITIALIZED_START_OFFSET <= params.start_offset <= _INT64_MAX:
            return _write_error(ErrorCode.invalid_request, "The start offset must be -1 or non-negative.")
        current = self._entries.get(key)
        if current is not None and current.state.state_epoch > params.state_epoch:
            return _write_error(ErrorCode.fenced_state_epoch)
        if not self._known_partition(key):
            return _write_error(ErrorCode.unknown_topic_or_partition)

        value = ShareSnapshotValue(
            snapshot_epoch=0 if current is None else current.state.snapshot_epoch + 1,
            state_epoch=params.state_epoch,
            # Kafka writes -1 here; we carry the stored leader epoch so that the snapshot alone
            # (after pruning) still fences older leaders.
            leader_epoch=NO_LEADER_EPOCH if current is None else current.state.leader_epoch,
            start_offset=params.start_offset,
            # KIP-1226: nothing is complete yet at a known start offset; unknown until then.
            delivery_complete_count=(
                UNKNOWN_DELIVERY_COMPLETE_COUNT if params.start_offset == UNINITIALIZED_START_OFFSET else 0
            ),
            create_timestamp=now_ms,
            write_timestamp=now_ms,
        )
        return CoordinatorResult(
            records=(new_share_snapshot_record(key, value),), response=WriteResult(ErrorCode.none)
        )

    def write_state(self, params: WriteParams, *, now_ms: int) -> WriteOpResult:
        """WriteShareGroupState for one key: a ShareUpdate, or a ShareSnapshot every N+1 writes.

        A start offset of -1 leaves it unchanged and the start offset never moves back on a write
        (only initialize can reset it). The delivery complete count is the request's.
        """
        key = params.key
        if key.partition < 0:
            return _write_error(ErrorCode.invalid_request, _NEGATIVE_PARTITION)
        problem = _batch_problem(params.state_batches)
        if problem is not None:
            return _write_error(ErrorCode.invalid_request, problem)
        if not UNINITIALIZED_START_OFFSET <= params.start_offset <= _INT64_MAX:
            return _write_error(ErrorCode.invalid_request, "The start offset must be -1 or non-negative.")
        if not -(2**31) <= params.delivery_complete_count <= _INT32_MAX:
            return _write_error(ErrorCode.invalid_request, "The delivery complete count must be an int32.")
        current = self._entries.get(key)
        if current is None:
            return _write_error(ErrorCode.invalid_request, _WRITE_UNINITIALIZED)
        stored = current.state
        if params.leader_epoch != NO_EPOCH and stored.leader_epoch > params.leader_epoch:
            return _write_error(ErrorCode.fenced_leader_epoch)
        if params.state_epoch != NO_EPOCH and stored.state_epoch > params.state_epoch:
            return _write_error(ErrorCode.fenced_state_epoch)
        if not self._known_partition(key):
            return _write_error(ErrorCode.unknown_topic_or_partition)

        record = self._state_record(
            key,
            current,
            leader_epoch=max(stored.leader_epoch, params.leader_epoch),
            start_offset=max(stored.start_offset, params.start_offset),
            delivery_complete_count=params.delivery_complete_count,
            batches=params.state_batches,
            now_ms=now_ms,
        )
        return CoordinatorResult(records=(record,), response=WriteResult(ErrorCode.none))

    def read_state(self, params: ReadParams, *, now_ms: int) -> ReadOpResult:
        """ReadShareGroupState for one key; a newer leader epoch is recorded (one state record).

        The response is the replayed state; release it after all earlier records commit.
        """
        key = params.key
        if key.partition < 0:
            return CoordinatorResult(response=_read_error(ErrorCode.invalid_request, _NEGATIVE_PARTITION))
        current = self._entries.get(key)
        if current is None:
            return CoordinatorResult(response=_read_error(ErrorCode.invalid_request, _READ_UNINITIALIZED))
        stored = current.state
        if params.leader_epoch != NO_EPOCH and stored.leader_epoch > params.leader_epoch:
            return CoordinatorResult(response=_read_error(ErrorCode.fenced_leader_epoch))
        if not self._known_partition(key):
            return CoordinatorResult(response=_read_error(ErrorCode.unknown_topic_or_partition))

        response = ReadResult(
            ErrorCode.none,
            state_epoch=stored.state_epoch,
            start_offset=stored.start_offset,
            state_batches=stored.state_batches,
        )
        if params.leader_epoch == NO_EPOCH or params.leader_epoch == stored.leader_epoch:
            return CoordinatorResult(response=response)
        # A new leader is reading: persist its epoch so writes from the old leader are fenced.
        record = self._state_record(
            key,
            current,
            leader_epoch=params.leader_epoch,
            start_offset=stored.start_offset,
            delivery_complete_count=stored.delivery_complete_count,
            batches=(),
            now_ms=now_ms,
        )
        return CoordinatorResult(records=(record,), response=response)

    def read_state_summary(self, params: ReadParams) -> SummaryResult:
        """ReadShareGroupStateSummary for one key, from the committed state (no record, no fence).

        A key with no state answers start offset -1 (uninitialized), not an error.
        """
        key = params.key
        if key.partition < 0:
            return SummaryResult(ErrorCode.invalid_request, error_message=_NEGATIVE_PARTITION)
        if not self._known_partition(key):
            return SummaryResult(
                ErrorCode.unknown_topic_or_partition,
                error_message=ErrorCode.unknown_topic_or_partition.name,
            )
        entry = self.committed(key)
        if entry is None:
            return SummaryResult(ErrorCode.none)
        s = entry.state
        return SummaryResult(
            ErrorCode.none,
            state_epoch=s.state_epoch,
            leader_epoch=s.leader_epoch,
            start_offset=s.start_offset,
            delivery_complete_count=s.delivery_complete_count,
        )

    def delete_state(self, params: DeleteParams) -> WriteOpResult:
        """DeleteShareGroupState for one key: a tombstone, or nothing if the key has no state.

        State of a topic that no longer exists is deleted too (the group coordinator cleans up
        after DeleteTopics this way); a key without state of an unknown topic or partition
        answers UNKNOWN_TOPIC_OR_PARTITION.
        """
        key = params.key
        if key.partition < 0:
            return _write_error(ErrorCode.invalid_request, _NEGATIVE_PARTITION)
        if key in self._entries:
            return CoordinatorResult(
                records=(new_share_tombstone_record(key),), response=WriteResult(ErrorCode.none)
            )
        if not self._known_partition(key):
            return _write_error(ErrorCode.unknown_topic_or_partition)
        return CoordinatorResult(response=WriteResult(ErrorCode.none))

    def delete_topics_state(
        self, topic_ids: Callable[[uuid.UUID], bool]
    ) -> CoordinatorResult[ShareRecord, int]:
        """A tombstone for every key whose topic ``topic_ids`` selects (deleted topics, after
        DeleteTopics and at load); the response is how many keys that is."""
        gone = [key for key in self._entries if topic_ids(key.topic_id)]
        return CoordinatorResult(records=tuple(new_share_tombstone_record(k) for k in gone),
                                 response=len(gone))

    # ------------------------------------------------------------------------------------------
    # Replay, commit, revert

    def replay(self, offset: int, key: ShareKey, value: ShareValue | None) -> None:
        """Apply one record at log ``offset``: the only way the shard's state changes.

        A snapshot replaces the key's state (epochs never go down), an update is merged into it
        and counted, a null value deletes the key.

        Raises:
            ValueError: ``offset`` is not beyond the last replayed offset (a runtime bug).
        """
        if offset < self._end_offset:
            raise ValueError(f"replay at offset {offset} after offset {self._end_offset - 1}")
        share_key = key.share_partition_key()
        prior = self._entries.get(share_key)
        entry = _apply(prior, offset, value)
        self._end_offset = offset + 1
        if entry is prior:
            return
        self._undo.append((offset, share_key, prior))
        if entry is None:
            del self._entries[share_key]
        else:
            self._entries[share_key] = entry

    def replay_record(self, offset: int, record: ShareRecord) -> None:
        """``replay(offset, record.key, record.value)``."""
        self.replay(offset, record.key, record.value)

    def commit(self, high_watermark: int) -> None:
        """Mark every record below ``high_watermark`` committed (it can no longer be reverted)."""
        if high_watermark <= self._committed_offset:
            return
        self._committed_offset = high_watermark
        while self._undo and self._undo[0][0] < high_watermark:
            self._undo.popleft()

    def revert(self, to_offset: int) -> None:
        """Undo every replayed record at offset >= ``to_offset`` (a failed append).

        Raises:
            ValueError: ``to_offset`` is below the committed offset.
        """
        if to_offset < self._committed_offset:
            raise ValueError(f"cannot revert to {to_offset}: committed up to {self._committed_offset}")
        while self._undo and self._undo[-1][0] >= to_offset:
            _offset, key, prior = self._undo.pop()
            if prior is None:
                self._entries.pop(key, None)
            else:
                self._entries[key] = prior
        self._end_offset = min(self._end_offset, to_offset)

    # ------------------------------------------------------------------------------------------
    # Pruning

    def last_redundant_offset(self) -> int | None:
        """The lowest offset any live key still needs, from the committed state.

        Every record below it may be deleted (DeleteRecords up to it) without changing what a
        replay rebuilds. ``None`` when nothing has been committed yet.
        """
        committed: dict[SharePartitionKey, KeyState | None] = dict(self._entries)
        for _offset, key, prior in reversed(self._undo):
            committed[key] = prior  # oldest uncommitted change wins, being applied last
        needed = [entry.snapshot_offset for entry in committed.values() if entry is not None]
        if needed:
            return min(needed)
        return self._committed_offset if self._committed_offset > 0 else None

    # ------------------------------------------------------------------------------------------
    # Helpers

    def _known_partition(self, key: SharePartitionKey) -> bool:
        return self._partition_exists is None or self._partition_exists(key.topic_id, key.partition)

    def _state_record(
        self,
        key: SharePartitionKey,
        current: KeyState,
        *,
        leader_epoch: int,
        start_offset: int,
        delivery_complete_count: int,
        batches: Iterable[StateBatch],
        now_ms: int,
    ) -> ShareRecord:
        """The ShareUpdate for this change, or the merged ShareSnapshot once N updates are out."""
        stored = current.state
        if current.updates_since_snapshot >= self._updates_per_snapshot:
            snapshot = replace(
                stored,
                snapshot_epoch=stored.snapshot_epoch + 1,
                leader_epoch=leader_epoch,
                start_offset=start_offset,
                delivery_complete_count=delivery_complete_count,
                state_batches=combine_state_batches((*stored.state_batches, *batches), start_offset),
                write_timestamp=now_ms,
            )
            return new_share_snapshot_record(key, snapshot.to_snapshot_value())
        update = ShareUpdateValue(
            snapshot_epoch=stored.snapshot_epoch,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            delivery_complete_count=delivery_complete_count,
            state_batches=combine_state_batches(batches, start_offset),
        )
        return new_share_update_record(key, update)


def _apply(prior: KeyState | None, offset: int, value: ShareValue | None) -> KeyState | None:
    """The entry after replaying ``value`` at ``offset`` onto ``prior`` (same object if no-op)."""
    if value is None:
        return None
    if isinstance(value, ShareSnapshotValue):
        state = ShareGroupOffset.from_snapshot(value)
        if prior is not None:
            state = replace(
                state,
                leader_epoch=max(prior.state.leader_epoch, state.leader_epoch),
                state_epoch=max(prior.state.state_epoch, state.state_epoch),
            )
        return KeyState(state, updates_since_snapshot=0, snapshot_offset=offset)
    if prior is None:
        # Only in a log pruned below this key's older snapshot; its newer snapshot follows.
        return None
    return KeyState(
        prior.state.apply_update(value),
        updates_since_snapshot=prior.updates_since_snapshot + 1,
        snapshot_offset=prior.snapshot_offset,
    )


def _batch_problem(batches: Iterable[StateBatch]) -> str | None:
    for b in batches:
        if not 0 <= b.first_offset <= b.last_offset <= _INT64_MAX:
            return f"Invalid state batch offsets {b.first_offset}..{b.last_offset}."
        if b.delivery_state not in _INT8_RANGE:
            return f"Invalid delivery state {b.delivery_state}."
        if b.delivery_count not in _INT16_RANGE:
            return f"Invalid delivery count {b.delivery_count}."
    return None


def _write_error(code: ErrorCode, message: str | None = None) -> WriteOpResult:
    return CoordinatorResult(response=WriteResult(code, message if message is not None else code.name))


def _read_error(code: ErrorCode, message: str | None = None) -> ReadResult:
    return ReadResult(code, error_message=message if message is not None else code.name)
