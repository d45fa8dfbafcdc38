"""What the coordinator runtime needs from a shard, and from the serde of its records.

Concept (STYLE.md 1.3-1.5; Kafka ``CoordinatorShard`` + ``CoordinatorLoader`` + ``Serializer``):
a shard is the in-memory state machine of one internal-topic partition. The runtime owns the
partition's log and drives the shard:

- write operations are plain functions ``op(shard, now_ms) -> CoordinatorResult`` that read the
  shard and return records plus a response; they never mutate the shard;
- ``replay(offset, key, value)`` applies one record at its log offset; it is the only mutator and
  serves both the write path (right after an op, before its append is durable) and loading;
- ``commit(offset)`` says every record below ``offset`` is durable (it can no longer be undone);
- ``revert(offset)`` undoes every replayed record at ``offset`` or later (a failed append/flush);
- ``on_loaded(now_ms)`` / ``on_unloaded()`` bracket the time the runtime serves the partition;
- ``last_redundant_offset()`` is the lowest offset a replay still needs (None: nothing committed);
  the runtime moves the log start offset up to it so old segments are deleted.

Records travel as ``(key, value)`` pairs of the shard's own types; a ``RecordSerde`` turns a
record into Kafka-style key/value bytes (int16 record type prefix, so the log is self-describing)
and back. ``value is None`` is a tombstone.

A shard that takes transactional writes (the group coordinator's TxnOffsetCommit) also
implements ``TransactionalShard``: the records of a transactional batch replay through
``replay_transactional`` with the batch's producer id and epoch, and an end-transaction marker
through ``replay_end_transaction`` (Kafka ``CoordinatorShard.replay`` with a producer id, and
``replayEndTransactionMarker``). Both are mutators like ``replay``: undone by ``revert``.

A shard with deadlines (session expiry, periodic snapshots) also implements ``TimedShard``: the
runtime arms a timer for ``next_deadline()`` and runs ``on_timer(now_ms)`` as a write operation.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from coordinator.runtime.result import CoordinatorResult

Rec = TypeVar("Rec", contravariant=True)


class Shard(Protocol):
    """A replayable state machine of one internal-topic partition (see module doc)."""

    def replay(self, offset: int, key: Any, value: Any | None) -> None:
        """Apply the record at log ``offset`` (offsets only increase between reverts)."""
        ...

    def commit(self, offset: int) -> None:
        """Every record below ``offset`` is durable."""
        ...

    def revert(self, offset: int) -> None:
        """Undo every replayed record at ``offset`` or later (never below the committed offset)."""
        ...

    def on_loaded(self, now_ms: int) -> None:
        """The log has been replayed and committed; the runtime starts serving requests."""
        ...

    def on_unloaded(self) -> None:
        """The runtime stopped serving this partition; drop soft state."""
        ...

    def last_redundant_offset(self) -> int | None:
        """Records below this offset are not needed to rebuild the committed state."""
        ...


class TimedShard(Shard, Protocol):
    """A shard with its own deadlines (STYLE.md 1.2)."""

    def next_deadline(self) -> int | None:
        """The earliest pending deadline in ms, or None."""
        ...

    def on_timer(self, now_ms: int) -> CoordinatorResult[Any, Any]:
        """Handle every deadline due at ``now_ms``; run by the runtime as a write operation."""
        ...


class TransactionalShard(Shard, Protocol):
    """A shard whose records may belong to a producer's transaction (see module doc)."""

    def replay_transactional(self, offset: int, producer_id: int, producer_epoch: int, key: Any,
                             value: Any | None) -> None:
        """Apply a record of ``producer_id``'s ongoing transaction at log ``offset``."""
        ...

    def replay_end_transaction(self, offset: int, producer_id: int, producer_epoch: int,
                               commit: bool) -> None:
        """Apply the end-transaction marker at log ``offset``: the producer's transactional
        records take effect (``commit``) or are dropped."""
        ...

    def end_transaction_error(self, producer_id: int, producer_epoch: int) -> Any | None:
        """Why a marker for ``producer_id`` at ``producer_epoch`` may not be written now (an
        error code, e.g. a fenced epoch), or None."""
        ...


class RecordSerde(Protocol[Rec]):
    """Bytes of a coordinator record, as appended to the internal topic, and back."""

    def encode(self, record: Rec) -> tuple[bytes, bytes | None]:
        """``(key bytes, value bytes or None for a tombstone)``.

        Raises:
            ValueError: a field does not fit its wire type (a bug in the op that built it).
        """
        ...

    def key_value(self, record: Rec) -> tuple[Any, Any | None]:
        """The ``(key, value)`` pair ``Shard.replay`` takes for this record."""
        ...

    def decode(self, key: bytes, value: bytes | None) -> tuple[Any, Any | None] | None:
        """The ``(key, value)`` pair of a record read from the log; None for an unknown record type
        (skipped on load, as Kafka does, so newer record types do not stop an older broker).

        Raises:
            ValueError: the bytes are malformed.
        """
        ...
