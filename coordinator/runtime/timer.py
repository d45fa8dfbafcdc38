"""A keyed, sans-IO deadline timer for coordinator shards.

Concept: a shard asks for "wake me at ``deadline_ms`` for ``key``"; the asyncio shell arms one
``loop.call_at`` for ``next_deadline()`` and, when it fires, calls the shard's
``on_timer(now_ms)``, which calls ``poll(now_ms)`` here to learn which keys expired (STYLE.md 1.2,
after Kafka's ``CoordinatorTimer`` and aioquic's ``get_timer``/``handle_timer``).

Invariants:
- At most one pending deadline per key: ``schedule`` on a pending key replaces its deadline.
- ``poll(now_ms)`` returns every key whose deadline is ``<= now_ms`` exactly once, ordered by
  (deadline, order of the ``schedule`` call that set it); the keys are removed before returning.
  That order is deterministic, so replaying the same calls gives the same expirations.
- Nothing here reads a clock; time only enters as ``now_ms`` / ``deadline_ms``.

Timers are soft state: they are not written as records. After a reload the shard re-arms them
(Kafka does the same: session timers are rescheduled when a group coordinator shard loads).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Timer(Generic[K]):
    """Pending deadlines by key.

    Implementation note: a heap of (deadline, seq, key) entries with lazy deletion; ``_live``
    maps each pending key to the (deadline, seq) of its current entry, so stale heap entries
    (cancelled or replaced) are skipped when they surface.
    """

    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, K]] = []
        self._live: dict[K, tuple[int, int]] = {}
        self._seq = 0

    def schedule(self, key: K, deadline_ms: int) -> None:
        """Arm (or re-arm) ``key`` to expire at ``deadline_ms``."""
        self._seq += 1
        entry = (deadline_ms, self._seq)
        self._live[key] = entry
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))

    def cancel(self, key: K) -> bool:
        """Disarm ``key``. Returns whether it was pending."""
        return self._live.pop(key, None) is not None

    def deadline(self, key: K) -> int | None:
        """The pending deadline of ``key``, or None."""
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def next_deadline(self) -> int | None:
        """The earliest pending deadline, or None when nothing is armed."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def poll(self, now_ms: int) -> list[K]:
        """Remove and return the keys due at ``now_ms`` (deadline <= now), earliest first."""
        expired: list[K] = []
        while True:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now_ms:
                return expired
            _, _, key = heapq.heappop(self._heap)
            del self._live[key]
            expired.append(key)

    def keys(self) -> list[K]:
        """Pending keys in expiry order (for tests and diagnostics)."""
        return [k for k, _ in sorted(self._live.items(), key=lambda item: item[1])]

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def __len__(self) -> int:
        return len(self._live)

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            if self._live.get(key) == (deadline, seq):
                return
            heapq.heappop(heap)
