"""Helpers for coordinator runtime tests: a tiny key/value shard, its serde, and log wrappers
that count, fail or hold fsyncs, appends and reads."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.runtime.loop import CoordinatorRuntime
from coordinator.runtime.result import CoordinatorResult
from storage.segment_log import LogConfig, PartitionLog

T0 = 1_700_000_000_000

KV = tuple[str, str | None]


class KVShard:
    """Every record is the full value of one key (or a tombstone); undo log for revert."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.where: dict[str, int] = {}  # offset of each live key's latest record
        self.undo: deque[tuple[int, str, tuple[str, int] | None]] = deque()
        self.end = 0
        self.committed_offset = 0
        self.loaded_at: int | None = None
        self.unloaded = False
        self.ttl: dict[str, int] = {}  # key -> deadline (soft state, for the TimedShard tests)

    # Shard
    def replay(self, offset: int, key: str, value: str | None) -> None:
        assert offset >= self.end, (offset, self.end)
        prior = (self.data[key], self.where[key]) if key in self.data else None
        self.undo.append((offset, key, prior))
        if value is None:
            self.data.pop(key, None)
            self.where.pop(key, None)
        else:
            self.data[key] = value
            self.where[key] = offset
        self.end = offset + 1

    def commit(self, offset: int) -> None:
        self.committed_offset = max(self.committed_offset, offset)
        while self.undo and self.undo[0][0] < offset:
            self.undo.popleft()

    def revert(self, offset: int) -> None:
        assert offset >= self.committed_offset
        while self.undo and self.undo[-1][0] >= offset:
            _, key, prior = self.undo.pop()
            if prior is None:
                self.data.pop(key, None)
                self.where.pop(key, None)
            else:
                self.data[key], self.where[key] = prior
        self.end = min(self.end, offset)

    def on_loaded(self, now_ms: int) -> None:
        self.loaded_at = now_ms

    def on_unloaded(self) -> None:
        self.unloaded = True

    def last_redundant_offset(self) -> int | None:
        committed = dict(self.where)
        for _, key, prior in reversed(self.undo):
            if prior is None:
                committed.pop(key, None)
            else:
                committed[key] = prior[1]
        if committed:
            return min(committed.values())
        return self.committed_offset or None

    def committed_view(self) -> dict[str, str]:
        view = dict(self.data)
        for _, key, prior in reversed(self.undo):
            if prior is None:
                view.pop(key, None)
            else:
                view[key] = prior[0]
        return view


class TimedKVShard(KVShard):
    """A KV shard whose keys may expire: ``next_deadline`` / ``on_timer`` (TimedShard)."""

    def next_deadline(self) -> int | None:
        return min(self.ttl.values()) if self.ttl else None

    def on_timer(self, now_ms: int) -> CoordinatorResult[KV, None]:
        due = sorted(k for k, d in self.ttl.items() if d <= now_ms)
        for k in due:
            del self.ttl[k]  # soft state
        return CoordinatorResult(records=tuple((k, None) for k in due if k in self.data))


class KVSerde:
    def encode(self, record: KV) -> tuple[bytes, bytes | None]:
        key, value = record
        if key.startswith("!"):
            raise ValueError("unencodable key")
        return key.encode(), None if value is None else value.encode()

    def key_value(self, record: KV) -> KV:
        return record

    def decode(self, key: bytes, value: bytes | None) -> KV | None:
        if key.startswith(b"?"):
            return None  # an "unknown record type"
        return key.decode(), None if value is None else value.decode()


KVOp = Callable[[KVShard, int], CoordinatorResult[KV, Any]]


def put(key: str, value: str | None, response: Any = "ok") -> KVOp:
    return lambda shard, now: CoordinatorResult(records=((key, value),), response=response)


def get(key: str) -> KVOp:
    """A write op with no records whose response reads the latest (uncommitted) state."""
    return lambda shard, now: CoordinatorResult(response=shard.data.get(key))


class LogProxy:
    """Delegates to a PartitionLog; counts flushes and appends, can fail or hold them."""

    def __init__(self, inner: PartitionLog) -> None:
        self.inner = inner
        self.flushes = 0
        self.appends = 0
        self.fail_append: Exception | None = None
        self.fail_flush: Exception | None = None
        self.flush_gate: threading.Event | None = None
        self.read_gate: threading.Event | None = None
        self.flush_started: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def log_end_offset(self) -> int:
        return self.inner.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.inner.log_start_offset

    @property
    def segment_count(self) -> int:
        return self.inner.segment_count

    @property
    def recovery_point(self) -> int:
        return self.inner.recovery_point

    def hold_flushes(self) -> None:
        """The next flushes block until ``release_flushes``; ``flush_started`` is set when one does."""
        self._loop = asyncio.get_running_loop()
        self.flush_gate = threading.Event()
        self.flush_started = asyncio.Event()

    def release_flushes(self) -> None:
        assert self.flush_gate is not None
        self.flush_gate.set()

    def append(self, data: Any, now_ms: int) -> Any:
        if self.fail_append is not None:
            raise self.fail_append
        self.appends += 1
        return self.inner.append(data, now_ms)

    def flush(self) -> None:
        self._gated(self.inner.flush)

    def sync_data(self) -> None:
        """The runtime's durability point; counted, held and failed like ``flush``."""
        self._gated(self.inner.sync_data)

    def _gated(self, sync: Any) -> None:
        if self.flush_started is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self.flush_started.set)
        if self.flush_gate is not None:
            assert self.flush_gate.wait(10), "flush gate never released"
        if self.fail_flush is not None:
            exc, self.fail_flush = self.fail_flush, None
            raise exc
        self.flushes += 1
        sync()

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> Any:
        if self.read_gate is not None:
            assert self.read_gate.wait(10), "read gate never released"
        return self.inner.read(offset, max_bytes, upper_bound)


def open_log(directory: Path, **config: int) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(**config), T0)


def kv_runtime(shard: type[KVShard] = KVShard, clock: Callable[[], int] = lambda: T0,
               **kw: Any) -> CoordinatorRuntime[Any]:
    return CoordinatorRuntime(lambda _p: shard(), KVSerde(), clock_ms=clock, **kw)
