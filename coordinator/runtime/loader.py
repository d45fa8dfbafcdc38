"""Replaying a coordinator partition's log into a fresh shard.

Concept (Kafka ``CoordinatorLoaderImpl``): loading reads the partition from its log start offset
to its end offset, decodes every record with the shard's serde and replays it at its offset, then
commits the end offset (everything on disk counts as committed: the log's own recovery has already
cut any torn tail). Records below the log start offset (in the first batch after a prune that
moved the start into the middle of a batch) are skipped, as are unknown record types.

Transactional batches replay through ``TransactionalShard.replay_transactional(offset,
producer_id, producer_epoch, key, value)`` and end-transaction markers (control batches) through
``replay_end_transaction(offset, producer_id, producer_epoch, commit)`` (Kafka
``CoordinatorLoaderImpl`` replays both); other control records are skipped. A shard that is not
transactional meets a transactional batch only in a corrupt log (``CorruptRecordError``).

Synchronous and blocking (file reads): the runtime runs it in a worker thread while the partition
answers COORDINATOR_LOAD_IN_PROGRESS; nobody else touches the shard meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.runtime.records import LogBatch, decode_log_batches, parse_end_txn_marker
from coordinator.runtime.shard import RecordSerde, Shard
from protocol.record_batch import CorruptRecordError
from storage.log import PartitionLogLike

# Bytes per log read while loading.
LOAD_READ_BYTES = 4 << 20
# Records replayed between two commits while loading (see ``load_shard``).
LOAD_COMMIT_RECORDS = 1024


@dataclass(frozen=True, slots=True)
class LoadSummary:
    """What a load replayed: records, skipped unknown records, bytes read, and the offsets."""

    records: int
    skipped: int
    bytes_read: int
    start_offset: int
    end_offset: int


def load_shard(
    log: PartitionLogLike,
    shard: Shard,
    serde: RecordSerde[Any],
    *,
    read_bytes: int = LOAD_READ_BYTES,
    commit_every: int = LOAD_COMMIT_RECORDS,
) -> LoadSummary:
    """Replay ``log`` into ``shard`` and commit its end offset.

    Every ``commit_every`` records it also commits what it replayed so far (it is on disk), so a
    shard's undo log stays short during a long replay instead of holding every prior state until
    the end (memory, and garbage-collector passes over it).

    Raises:
        ValueError: ``commit_every`` is not positive, or the serde rejects a record's bytes
            (malformed, not an unknown type).
        CorruptRecordError: a batch read back does not parse or fails its CRC, or a
            transactional batch meets a shard without transactions.
        OSError: a read failed.
    """
    if commit_every < 1:
        raise ValueError("commit_every must be positive")
    start = log.log_start_offset
    end = log.log_end_offset
    offset = start
    records = skipped = read = 0
    replay = shard.replay
    decode = serde.decode
    while offset < end:
        chunk = log.read(offset, read_bytes)
        if chunk.next_offset <= offset:
            break  # nothing readable (cannot happen below the end offset; be safe)
        read += len(chunk.data)
        for batch in decode_log_batches(chunk.data):
            if batch.control and not batch.transactional:
                skipped += len(batch.records)  # e.g. Kafka's leader-change records
                continue
            if batch.transactional:
                n, s = _replay_transactional(shard, decode, batch, start)
                records += n
                skipped += s
                if n and not records % commit_every and batch.records:
                    shard.commit(batch.records[-1][0] + 1)
                continue
            for record_offset, key, value in batch.records:
                if record_offset < start:
                    continue
                decoded = decode(key, value)
                if decoded is None:
                    skipped += 1
                    continue
                replay(record_offset, decoded[0], decoded[1])
                records += 1
                if not records % commit_every:
                    shard.commit(record_offset + 1)
        offset = chunk.next_offset
    shard.commit(end)
    return LoadSummary(records, skipped, read, start, end)


def _replay_transactional(shard: Shard, decode: Any, batch: LogBatch,
                          start: int) -> tuple[int, int]:
    """Replay one transactional or control batch; (records replayed, records skipped)."""
    replay_txn = getattr(shard, "replay_transactional", None)
    replay_end = getattr(shard, "replay_end_transaction", None)
    if replay_txn is None or replay_end is None:
        raise CorruptRecordError(f"a transactional batch of producer {batch.producer_id} in the "
                                 "log of a coordinator without transactions")
    n = skipped = 0
    for record_offset, key, value in batch.records:
        if record_offset < start:
            continue
        if batch.control:
            marker = parse_end_txn_marker(key, value)
            if marker is None:
                skipped += 1
                continue
            replay_end(record_offset, batch.producer_id, batch.producer_epoch, marker.commit)
        else:
            decoded = decode(key, value)
            if decoded is None:
                skipped += 1
                continue
            replay_txn(record_offset, batch.producer_id, batch.producer_epoch, decoded[0],
                       decoded[1])
        n += 1
    return n, skipped
