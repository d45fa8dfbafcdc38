"""``ShareCoordinatorService``: the share-state RPCs on top of the coordinator runtime.

Concept (reference section 6; Kafka ``ShareCoordinatorService``): one ``ShareStateShard`` per
``__share_group_state`` partition, driven by a ``CoordinatorRuntime`` that appends the shards'
records and answers after they are durable. The service takes a list of per-key params (one
state RPC, or one persister call), splits it by owning partition (``service.split_request``), runs
each partition's part as one runtime event (``write_many``: the keys' ops back to back, each
seeing the previous one's records), and puts the replies back in request order.

Batching (the acknowledgement hot path): the runtime drains every event queued for a partition
into one append, and appends made while an fsync is in flight share the next one. So N concurrent
writes for share-partitions that map to the same coordinator partition cost one append per drain
and far fewer than N fsyncs, without any timer-based delay.

Log size: a ShareSnapshot every N updates per key makes older records of that key redundant;
the runtime prunes below ``last_redundant_offset()``. A key that stops being written would pin
the log start forever, so a periodic op (``cold_snapshot_interval_ms``, Kafka
``share.coordinator.cold.partition.snapshot.interval.ms``) re-snapshots every key whose snapshot
is older than the previous tick, if anything was written since (Kafka ``snapshotColdPartitions``).

Restart time: a load replays every record from the log start, i.e. up to N updates per key after
a crash. On a clean shutdown ``close`` therefore snapshots every key (when the log holds more than
two records per key) and prunes, so the next start replays about one record per key.

Invariants:
- replies line up one to one with the params, whatever order partitions answer in;
- runtime failures (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE)
  become per-key error replies; nothing expected is raised;
- ``read_state_summary`` reads the committed state and appends nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from coordinator.runtime.loop import CoordinatorFailure, CoordinatorRuntime, Op
from coordinator.runtime.result import CoordinatorResult
from coordinator.share.records import (
    ShareKey,
    ShareRecord,
    ShareSnapshotKey,
    ShareValue,
    new_share_snapshot_record,
)
from coordinator.share.serde import (
    ShareRecordSerdeError,
    UnknownRecordTypeError,
    decode_key,
    decode_value,
    encode_record,
)
from coordinator.share.service import (
    DEFAULT_NUM_PARTITIONS,
    KeyedOp,
    StateOp,
    error_reply,
    gather_replies,
    split_request,
)
from coordinator.share.shard import ShareCoordinatorShard
from persister.api import (
    DeleteParams,
    InitializeParams,
    ReadParams,
    ReadResult,
    SummaryResult,
    WriteParams,
    WriteResult,
)
from storage.log import PartitionLogLike

# share.coordinator.cold.partition.snapshot.interval.ms default (Kafka: 5 minutes).
DEFAULT_COLD_SNAPSHOT_INTERVAL_MS = 300_000
_COLD_SNAPSHOT_TIMER = "cold-snapshot"
_MANY = 500  # keys in one state RPC past which its phases hand the event loop back
# Ops of one large state RPC queued per loop iteration (an op costs up to ~0.1 ms: its records
# are encoded, replayed and appended).
_OPS_PER_TURN = 256

P = TypeVar("P", InitializeParams, ReadParams, WriteParams, DeleteParams)


class ShareRecordSerde:
    """``RecordSerde`` of ``__share_group_state`` (``coordinator/share/serde.py``).

    Decoded keys are cached by their bytes: a key repeats in every update of its share-partition,
    and parsing it (string, uuid) is a fifth of a load's time. Keys are immutable, so sharing one
    object is safe; the cache is cleared when it reaches ``key_cache_size`` entries.
    """

    def __init__(self, key_cache_size: int = 100_000) -> None:
        self._keys: dict[bytes, ShareKey] = {}
        self._cap = key_cache_size

    def encode(self, record: ShareRecord) -> tuple[bytes, bytes | None]:
        return encode_record(record)

    def key_value(self, record: ShareRecord) -> tuple[ShareKey, ShareValue | None]:
        return record.key, record.value

    def decode(self, key: bytes, value: bytes | None) -> tuple[ShareKey, ShareValue | None] | None:
        """Raises:
        ShareRecordSerdeError: malformed bytes, or a null value for an update key.
        """
        decoded = self._keys.get(key)
        if decoded is None:
            try:
                decoded = decode_key(key)
            except UnknownRecordTypeError:
                return None
            if len(self._keys) >= self._cap:
                self._keys.clear()
            self._keys[key] = decoded
        if value is None and not isinstance(decoded, ShareSnapshotKey):
            raise ShareRecordSerdeError("a tombstone uses a ShareSnapshotKey")
        return decoded, decode_value(decoded, value)


class ShareStateShard(ShareCoordinatorShard):
    """The share coordinator shard with the runtime's lifecycle hooks (no soft state to drop)."""

    def on_loaded(self, now_ms: int) -> None:
        del now_ms

    def on_unloaded(self) -> None:
        pass


def snapshot_keys_before(
    shard: ShareCoordinatorShard, now_ms: int, before_offset: int
) -> CoordinatorResult[ShareRecord, None]:
    """A write op: a fresh ShareSnapshot (same state, next snapshot epoch) for every key whose
    latest snapshot sits below ``before_offset``, so the records before it become redundant."""
    records = []
    for key, entry in shard.states.items():
        if entry.snapshot_offset >= before_offset:
            continue
        state = replace(entry.state, snapshot_epoch=entry.state.snapshot_epoch + 1, write_timestamp=now_ms)
        records.append(new_share_snapshot_record(key, state.to_snapshot_value()))
    return CoordinatorResult(records=tuple(records))


def _compact_on_shutdown(shard: ShareCoordinatorShard, now_ms: int) -> CoordinatorResult[ShareRecord, None]:
    """Snapshot every key if the records a load would replay exceed two per live key."""
    redundant = shard.last_redundant_offset()
    replayed = shard.end_offset - (redundant if redundant is not None else 0)
    if replayed <= 2 * len(shard.states):
        return CoordinatorResult()
    return snapshot_keys_before(shard, now_ms, shard.end_offset)


class _ColdSnapshotTick:
    """The periodic op: re-snapshot keys not snapshotted since the previous tick, if the log grew."""

    __slots__ = ("mark",)

    def __init__(self) -> None:
        self.mark: int | None = None

    def __call__(self, shard: ShareCoordinatorShard, now_ms: int) -> CoordinatorResult[ShareRecord, None]:
        end = shard.end_offset
        mark, self.mark = self.mark, end
        if mark is None or end <= mark:
            return CoordinatorResult()
        result = snapshot_keys_before(shard, now_ms, mark)
        self.mark = end + len(result.records)  # our own snapshots do not count as growth
        return result


class ShareCoordinatorService:
    """Share state of every key, on ``num_partitions`` runtime partitions (see module doc)."""

    def __init__(
        self,
        runtime: CoordinatorRuntime[ShareStateShard],
        *,
        num_partitions: int = DEFAULT_NUM_PARTITIONS,
        clock_ms: Callable[[], int],
        cold_snapshot_interval_ms: int | None = DEFAULT_COLD_SNAPSHOT_INTERVAL_MS,
    ) -> None:
        """``cold_snapshot_interval_ms`` None disables cold-key snapshots.

        Raises:
            ValueError: ``num_partitions`` is not positive.
        """
        if num_partitions <= 0:
            raise ValueError("num_partitions must be positive")
        self.runtime = runtime
        self.num_partitions = num_partitions
        self._clock_ms = clock_ms
        self._cold_interval = cold_snapshot_interval_ms
        self.load_ms: float | None = None

    @staticmethod
    def shard_factory(
        *, snapshot_update_records_per_snapshot: int, partition_exists: Callable[[Any, int], bool] | None
    ) -> Callable[[int], ShareStateShard]:
        """A runtime ``shard_factory`` building ``ShareStateShard``s with these settings."""

        def build(_partition: int) -> ShareStateShard:
            return ShareStateShard(
                snapshot_update_records_per_snapshot=snapshot_update_records_per_snapshot,
                partition_exists=partition_exists,
            )

        return build

    # ------------------------------------------------------------------------------------------
    # Lifecycle

    async def load_all(self, log_for: Callable[[int], PartitionLogLike],
                       partitions: Iterable[int] | None = None) -> float:
        """Load every partition, or those of ``partitions`` (a cluster member loads the ones it
        leads), in parallel, and arm their cold-snapshot timers; returns the ms taken.

        Partitions that fail to load answer NOT_COORDINATOR (logged by the runtime); those not
        loaded answer NOT_COORDINATOR too.
        """
        chosen = list(range(self.num_partitions) if partitions is None else partitions)
        self.load_ms = await self.runtime.load_many({p: log_for(p) for p in chosen})
        if self._cold_interval is not None and self._cold_interval > 0:
            first = self._clock_ms() + self._cold_interval
            for p in chosen:
                self.runtime.schedule(p, _COLD_SNAPSHOT_TIMER, first, _ColdSnapshotTick(),
                                      repeat_ms=self._cold_interval)
        return self.load_ms

    async def close(self) -> None:
        """Snapshot and prune every partition whose log holds much more than one record per key
        (so the next start replays about one record per key), then stop the runtime."""
        await self.runtime.write_each({p: (_compact_on_shutdown,) for p in self.runtime.partitions()})
        await self.runtime.prune_all()
        await self.runtime.close()

    async def delete_topics_state(self, topic_ids: Callable[[uuid.UUID], bool]) -> int:
        """Delete the state of every key, of any group, whose topic ``topic_ids`` selects (topics
        that were deleted); returns how many keys were deleted. Partitions that are not served
        are skipped (their keys are swept when they load next)."""
        op: Op[ShareStateShard] = lambda shard, _now: shard.delete_topics_state(topic_ids)
        outs = await self.runtime.write_each({p: (op,) for p in self.runtime.partitions()})
        return sum(out for (out,) in outs.values() if isinstance(out, int))

    # ------------------------------------------------------------------------------------------
    # The five state RPCs, per list of keys

    async def initialize_state(self, params: Sequence[InitializeParams]) -> list[WriteResult]:
        return await self._write(StateOp.INITIALIZE, params, _initialize_op)

    async def read_state(self, params: Sequence[ReadParams]) -> list[ReadResult]:
        return await self._write(StateOp.READ, params, _read_op)

    async def write_state(self, params: Sequence[WriteParams]) -> list[WriteResult]:
        return await self._write(StateOp.WRITE, params, _write_op)

    async def delete_state(self, params: Sequence[DeleteParams]) -> list[WriteResult]:
        return await self._write(StateOp.DELETE, params, _delete_op)

    async def read_state_summary(self, params: Sequence[ReadParams]) -> list[SummaryResult]:
        """From the committed state of each owning partition; appends nothing."""
        pairs: list[tuple[int, SummaryResult]] = []
        many = len(params) > _MANY
        for partition, keyed in (await self._split(params)).items():
            if many:
                await asyncio.sleep(0)  # reads do not suspend: serve the loop between partitions

            def summaries(shard: ShareStateShard, keyed: list[Any] = keyed) -> list[SummaryResult]:
                return [shard.read_state_summary(k.params) for k in keyed]

            out = await self.runtime.read(partition, summaries)
            if isinstance(out, CoordinatorFailure):
                failed = error_reply(StateOp.READ_SUMMARY, out.error, out.message)
                pairs.extend((k.index, failed) for k in keyed)  # type: ignore[misc]
            else:
                pairs.extend((k.index, reply) for k, reply in zip(keyed, out, strict=True))
        return gather_replies(len(params), pairs)

    # ------------------------------------------------------------------------------------------

    async def _split(self, params: Sequence[P]) -> dict[int, list[KeyedOp[P]]]:
        """``split_request`` of ``params``; past ``_MANY`` keys a slice at a time, the event
        loop served in between."""
        if len(params) <= _MANY:
            return split_request(_items(params), self.num_partitions)
        split: dict[int, list[KeyedOp[P]]] = {}
        for start in range(0, len(params), _MANY):
            await asyncio.sleep(0)
            split_request(_items(params[start:start + _MANY]), self.num_partitions, start, split)
        return split

    async def _write(
        self, kind: StateOp, params: Sequence[P], make_op: Callable[[P], Op[ShareStateShard]]
    ) -> list[Any]:
        split = await self._split(params)
        if len(params) <= _MANY:
            done = await self.runtime.write_each(
                {partition: [make_op(k.params) for k in keyed] for partition, keyed in split.items()}
            )
            return gather_replies(len(params), [
                (k.index, _reply(kind, out))
                for partition, keyed in split.items()
                for k, out in zip(keyed, done[partition], strict=True)
            ])
        # Tens of thousands of keys: every phase serves the event loop every _MANY keys, and
        # the ops are queued in waves of about _OPS_PER_TURN (one wave per loop iteration, a
        # partition's ops split across waves in order), so the partitions' executors, which run
        # in the iteration after their ops arrive, never run many ops in one iteration.
        writes: list[asyncio.Future[dict[int, list[Any]]]] = []
        wave: dict[int, list[Op[ShareStateShard]]] = {}
        size = 0
        for partition, keyed in split.items():
            for i in range(0, len(keyed), _OPS_PER_TURN):
                piece = [make_op(k.params) for k in keyed[i:i + _OPS_PER_TURN]]
                wave.setdefault(partition, []).extend(piece)
                size += len(piece)
                if size >= _OPS_PER_TURN:
                    writes.append(asyncio.ensure_future(self.runtime.write_each(wave)))
                    wave, size = {}, 0
                    await asyncio.sleep(0)
        if wave:
            writes.append(asyncio.ensure_future(self.runtime.write_each(wave)))
        outs: dict[int, list[Any]] = {}
        for done in await asyncio.gather(*writes):
            for partition, replies in done.items():
                outs.setdefault(partition, []).extend(replies)
        pairs: list[tuple[int, Any]] = []
        for partition, keyed in split.items():
            if len(pairs) // _MANY != (len(pairs) + len(keyed)) // _MANY:
                await asyncio.sleep(0)
            pairs.extend((k.index, _reply(kind, out))
                         for k, out in zip(keyed, outs[partition], strict=True))
        await asyncio.sleep(0)
        return gather_replies(len(params), pairs)


def _reply(kind: StateOp, out: Any) -> Any:
    """The op's response, or the per-key error reply for a runtime failure."""
    if isinstance(out, CoordinatorFailure):
        return error_reply(kind, out.error, out.message)
    return out


def _items(params: Iterable[P]) -> list[tuple[str, Any, int, P]]:
    return [(p.key.group_id, p.key.topic_id, p.key.partition, p) for p in params]


def _initialize_op(params: InitializeParams) -> Op[ShareStateShard]:
    return lambda shard, now_ms: shard.initialize_state(params, now_ms=now_ms)


def _read_op(params: ReadParams) -> Op[ShareStateShard]:
    return lambda shard, now_ms: shard.read_state(params, now_ms=now_ms)


def _write_op(params: WriteParams) -> Op[ShareStateShard]:
    return lambda shard, now_ms: shard.write_state(params, now_ms=now_ms)


def _delete_op(params: DeleteParams) -> Op[ShareStateShard]:
    return lambda shard, now_ms: shard.delete_state(params)
