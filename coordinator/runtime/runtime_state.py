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
from dataclasses import dataclass, field
from typing import Any, Generic

from coordinator.runtime.partition import PartitionState, S
from coordinator.runtime.shard import RecordSerde


@dataclass(eq=False)
class RuntimeState(Generic[S]):
    """Settings, pools and the partition table of one runtime (see the module doc; the
    settings are ``CoordinatorRuntime``'s arguments)."""

    factory: Callable[[int], S]  # builds the empty shard of a partition
    serde: RecordSerde[Any]
    clock_ms: Callable[[], int]
    fsync: bool
    prune_interval_ms: int
    max_queued: int  # inbox slots per partition
    max_batch_records: int
    name: str
    io_pool: concurrent.futures.ThreadPoolExecutor  # fsyncs and prunes
    load_pool: concurrent.futures.ThreadPoolExecutor
    partitions: dict[int, PartitionState[S]] = field(default_factory=dict)
    closed: bool = False
