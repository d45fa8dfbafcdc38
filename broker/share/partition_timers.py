"""The timers of the share-partition manager (broker/share/partition_manager.py), and the key
its parked ShareFetches wait on.

Two kinds of ``loop.call_later`` handle, at most one of each per share-partition:

- the partition's deadline (``SharePartition.next_deadline``: a lock expiry or the end of a
  redelivery backoff). A handle due at or before the new deadline is kept: it fires early, the
  manager's ``on_deadline`` finds nothing due (``SharePartition.on_timer`` acts only on what is
  due) and arms the deadline of that moment. So the common move, the earliest lock acknowledged
  and the deadline moving later, costs no cancel and no new handle per request; only an earlier
  deadline (or None) replaces the handle;
- a deferred start-offset write: an acknowledgement moved the start offset past what its
  write said, and the write follows within ``START_WRITE_DELAY_S`` unless a later
  acknowledgement's write has told it by then.

A handle is forgotten before its callback runs, so a callback may arm the next one. This module
only keeps the handles; what a timer does is the manager's (``on_deadline``, ``on_start_write``).
Parked ShareFetches wait on the watch key ``share_watch_key``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from persister.api import SharePartitionKey

# Longest wait of a start offset an acknowledgement moved for the next state write to carry it.
START_WRITE_DELAY_S = 0.1


def share_watch_key(group_id: str, topic: str, partition: int) -> tuple[str, str, str, int]:
    """The ``LogWatch`` key a ShareFetch parked on a share-partition waits on."""
    return ("share", group_id, topic, partition)


class PartitionTimers:
    """Deadline timers and deferred start-offset writes, keyed by share-partition."""

    def __init__(self, now_ms: Callable[[], int],
                 on_deadline: Callable[[SharePartitionKey], None],
                 on_start_write: Callable[[SharePartitionKey], None]) -> None:
        self._now_ms = now_ms
        self._on_deadline = on_deadline
        self._on_start_write = on_start_write
        self._deadlines: dict[SharePartitionKey, tuple[int, asyncio.TimerHandle]] = {}
        self._start_writes: dict[SharePartitionKey, asyncio.TimerHandle] = {}

    def arm(self, key: SharePartitionKey, deadline: int | None) -> None:
        """Fire ``on_deadline(key)`` at ``deadline`` (ms) or earlier (a handle armed for an
        earlier deadline is kept; see the module docstring); None cancels the partition's
        timer."""
        current = self._deadlines.get(key)
        if deadline is None:
            if current is not None:
                current[1].cancel()
                del self._deadlines[key]
            return
        if current is not None and current[0] <= deadline:
            return
        if current is not None:
            current[1].cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline - self._now_ms()) / 1000)
        self._deadlines[key] = (deadline, loop.call_later(delay, self._deadline_due, key))

    def _deadline_due(self, key: SharePartitionKey) -> None:
        self._deadlines.pop(key, None)
        self._on_deadline(key)

    def defer_start_write(self, key: SharePartitionKey) -> None:
        """Call ``on_start_write(key)`` within START_WRITE_DELAY_S, once however often asked."""
        if key in self._start_writes:
            return
        loop = asyncio.get_running_loop()
        self._start_writes[key] = loop.call_later(START_WRITE_DELAY_S, self._start_write_due, key)

    def _start_write_due(self, key: SharePartitionKey) -> None:
        self._start_writes.pop(key, None)
        self._on_start_write(key)

    def cancel(self, key: SharePartitionKey) -> None:
        """Drop both timers of a share-partition (it is being unloaded)."""
        t = self._deadlines.pop(key, None)
        if t is not None:
            t[1].cancel()
        st = self._start_writes.pop(key, None)
        if st is not None:
            st.cancel()

    def stop(self) -> list[SharePartitionKey]:
        """Cancel every timer; returns the share-partitions whose start write was still due
        (the caller writes them now)."""
        for _deadline, handle in self._deadlines.values():
            handle.cancel()
        self._deadlines.clear()
        due = list(self._start_writes)
        for handle in self._start_writes.values():
            handle.cancel()
        self._start_writes.clear()
        return due

    def deadline_count(self) -> int:
        """Deadline timers armed (one per share-partition with a deadline)."""
        return len(self._deadlines)
