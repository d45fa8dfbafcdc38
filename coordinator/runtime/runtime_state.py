"""``RuntimeState``: what every collaborator of ``CoordinatorRuntime`` shares (``loop.py``
documents the whole; the collaborators are ``PartitionLoader`` in ``load.py``, ``Executor`` in
``append.py``, ``Committer`` in ``commit.py``, ``Pruner`` in ``prune.py`` and ``Scheduler`` in
``scheduling.py``): the settings, the worker-thread pools and the table of held partitions.

Ownership: only the loader adds partitions to the table, removes them and closes the pools; the
others look partitions up and work on the ``PartitionState`` they find (``partition.py``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any, Generic

from coordinator.runtime.partition import (
    DEFAULT_IO_THREADS,
    DEFAULT_LOAD_THREADS,
    DEFAULT_MAX_BATCH_RECORDS,
    DEFAULT_MAX_QUEUED_WRITES,
    DEFAULT_PRUNE_INTERVAL_MS,
    PartitionState,
    S,
)
from coordinator.runtime.shard import RecordSerde


class RuntimeState(Generic[S]):
    """Settings, pools and the partition table of one runtime (see the module doc)."""

    def __init__(
        self,
        shard_factory: Callable[[int], S],
        serde: RecordSerde[Any],
        *,
        clock_ms: Callable[[], int],
        fsync: bool = True,
        prune_interval_ms: int = DEFAULT_PRUNE_INTERVAL_MS,
        max_queued_writes: int = DEFAULT_MAX_QUEUED_WRITES,
        max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
        io_threads: int = DEFAULT_IO_THREADS,
        load_threads: int = DEFAULT_LOAD_THREADS,
        name: str = "coordinator",
    ) -> None:
        """``shard_factory(partition)`` builds an empty shard; ``clock_ms`` gives record
        timestamps and timer time. fsyncs and prunes run on ``io_threads`` worker threads, loads
        on ``load_threads``.

        Raises:
            ValueError: a limit is not positive.
        """
        if min(max_queued_writes, max_batch_records, io_threads, load_threads) < 1 or prune_interval_ms < 0:
            raise ValueError("runtime limits must be positive")
        self.factory = shard_factory
        self.serde = serde
        self.clock_ms = clock_ms
        self.fsync = fsync
        self.prune_interval_ms = prune_interval_ms
        self.max_queued = max_queued_writes
        self.max_batch_records = max_batch_records
        self.name = name
        self.io_pool = concurrent.futures.ThreadPoolExecutor(io_threads, thread_name_prefix=f"{name}-io")
        self.load_pool = concurrent.futures.ThreadPoolExecutor(
            load_threads, thread_name_prefix=f"{name}-load"
        )
        self.partitions: dict[int, PartitionState[S]] = {}
        self.closed = False
