"""The state of one coordinator-runtime partition and the values the runtime passes around
(``coordinator/runtime/loop.py`` documents the runtime): the partition status, failures as data,
counters, queued write events, end-transaction markers, batches being built and writes waiting
for their fsync.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kio.schema.errors import ErrorCode

from coordinator.runtime.loader import LoadSummary
from coordinator.runtime.records import encode_batch
from coordinator.runtime.result import CoordinatorResult
from coordinator.runtime.shard import Shard
from coordinator.runtime.timer import Timer
from storage.log import PartitionLogLike

log = logging.getLogger("shoal.coordinator.runtime")

S = TypeVar("S", bound=Shard)
R = TypeVar("R")

Op = Callable[[S, int], CoordinatorResult[Any, Any]]

DEFAULT_MAX_QUEUED_WRITES = 10_000
DEFAULT_MAX_BATCH_RECORDS = 4_000
DEFAULT_PRUNE_INTERVAL_MS = 10_000
DEFAULT_IO_THREADS = 4
# Loading is CPU-bound Python (decode + replay): one thread avoids GIL contention between loads.
DEFAULT_LOAD_THREADS = 1


class PartitionStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class CoordinatorFailure:
    """Why an operation did not run or did not commit (returned as data, never raised)."""

    error: ErrorCode
    message: str


@dataclass(slots=True)
class PartitionStats:
    """Counters of one partition (for tests, benchmarks and logs)."""

    writes: int = 0  # write events (one ``write``/``write_many`` call each) that were run
    appends: int = 0
    records: int = 0
    flushes: int = 0
    flushed_writes: int = 0  # write events released by an fsync
    max_writes_per_flush: int = 0
    prunes: int = 0
    load_ms: float = 0.0
    load: LoadSummary | None = None


@dataclass(frozen=True, slots=True)
class TxnMarker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


@dataclass(slots=True)
class WriteEvent:
    ops: Sequence[Op[Any]]
    future: asyncio.Future[list[Any]] | None  # None: internal (timer) event
    admitted: bool  # holds a slot of the bounded inbox
    shard_timer: bool = False
    txn: tuple[int, int] | None = None  # (producer id, epoch): a transactional write
    marker: TxnMarker | None = None  # an end-transaction marker (ops: none)


@dataclass(slots=True)
class Batches:
    """What one drain appends: finished batches, then the open non-transactional one."""

    plain: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    done: list[bytes] = field(default_factory=list)

    def close_plain(self, now: int) -> None:
        if self.plain:
            self.done.append(encode_batch(self.plain, now))
            self.plain = []

    def data(self, now: int) -> bytes:
        if not self.done:
            return encode_batch(self.plain, now)
        self.close_plain(now)
        return b"".join(self.done)


@dataclass(slots=True)
class Waiting:
    end_offset: int
    future: asyncio.Future[list[Any]] | None
    responses: list[Any]


@dataclass(eq=False)
class PartitionState(Generic[S]):
    number: int
    log: PartitionLogLike
    shard: S
    slots: asyncio.Semaphore
    status: PartitionStatus = PartitionStatus.LOADING
    committed: int = 0
    inbox: deque[WriteEvent] = field(default_factory=deque)
    pending: deque[Waiting] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    flush_task: asyncio.Task[None] | None = None
    prune_task: asyncio.Task[None] | None = None
    load_task: asyncio.Task[None] | None = None
    timers: Timer[Hashable] = field(default_factory=Timer)
    timer_ops: dict[Hashable, tuple[Op[Any], int | None]] = field(default_factory=dict)
    timer_handle: asyncio.TimerHandle | None = None
    timer_deadline: int | None = None
    shard_timer_queued: bool = False
    last_prune_ms: int | None = None
    stats: PartitionStats = field(default_factory=PartitionStats)

    def release(self) -> int:
        """Answer the waiting writes whose records are below the committed offset, in order;
        returns how many."""
        released = 0
        pending = self.pending
        while pending and pending[0].end_offset <= self.committed:
            waiting = pending.popleft()
            finish(waiting.future, waiting.responses)
            released += 1
        return released

    def fail_pending(self, failure: CoordinatorFailure) -> None:
        """Answer every appended write still waiting for its commit with ``failure``."""
        while self.pending:
            waiting = self.pending.popleft()
            finish(waiting.future, [failure] * len(waiting.responses))

    def fail_inbox(self, failure: CoordinatorFailure) -> None:
        """Answer every queued (not yet run) event with ``failure``, freeing its inbox slot."""
        while self.inbox:
            event = self.inbox.popleft()
            if event.admitted:
                self.slots.release()
            if event.shard_timer:
                self.shard_timer_queued = False
            finish(event.future, [failure] * max(1, len(event.ops)))


def unavailable(ctx: PartitionState[Any] | None) -> CoordinatorFailure | None:
    """Why a partition (None: not held) takes no operation now, or None if it does."""
    if ctx is None or ctx.status in (PartitionStatus.CLOSED, PartitionStatus.FAILED):
        return CoordinatorFailure(ErrorCode.not_coordinator, "this broker does not serve the partition")
    if ctx.status is PartitionStatus.LOADING:
        return CoordinatorFailure(ErrorCode.coordinator_load_in_progress, "the partition is loading")
    return None


def finish(future: asyncio.Future[list[Any]] | None, responses: list[Any]) -> None:
    if future is not None and not future.done():
        future.set_result(responses)


def log_failures(name: str, partition: int, responses: list[Any]) -> None:
    for response in responses:
        if isinstance(response, CoordinatorFailure):
            log.warning("%s partition %d: timer operation failed: %s", name, partition, response.message)
