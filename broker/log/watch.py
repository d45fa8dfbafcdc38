"""Wake-ups for long polls: a Fetch or ShareFetch waits on keys, producers and acks notify them.

``watch(keys)`` returns one future that resolves the first time any of the keys is notified; the
waiter removes it with ``unwatch`` when it stops waiting (timeout or cancellation). Notifying a key
resolves every future watching it, or with ``most`` only that many of them, oldest first (a
share-partition that freed room for one acquisition wakes one parked ShareFetch, not all of
them: broker/share/partition_manager.py). Nothing here reads the clock: deadlines are the
caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


class Watch:
    def __init__(self) -> None:
        # key -> its waiting futures in the order they started waiting (a dict as ordered set).
        self._waiters: dict[Hashable, dict[asyncio.Future[None], None]] = {}

    def watch(self, keys: Iterable[Hashable]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = tuple(keys)
        for k in keys:
            self._waiters.setdefault(k, {})[fut] = None
        fut.add_done_callback(lambda f: self._forget(f, keys))
        return fut

    def _forget(self, fut: asyncio.Future[None], keys: tuple[Hashable, ...]) -> None:
        for k in keys:
            s = self._waiters.get(k)
            if s is not None:
                s.pop(fut, None)
                if not s:
                    del self._waiters[k]

    def notify(self, key: Hashable, most: int | None = None) -> int:
        """Resolve the futures watching ``key`` (at most ``most``, oldest first); returns how
        many were resolved."""
        s = self._waiters.get(key)
        if not s:
            return 0
        woken = 0
        for fut in list(s):
            if not fut.done():
                fut.set_result(None)
                woken += 1
                if most is not None and woken >= most:
                    break
        return woken

    def waiting(self, key: Hashable) -> bool:
        """Whether some future is watching ``key``."""
        return bool(self._waiters.get(key))

    def __len__(self) -> int:
        return sum(len(s) for s in self._waiters.values())


async def wait_for_any(fut: asyncio.Future[None], timeout_s: float) -> bool:
    """Wait for a watch future up to ``timeout_s``; True if it was notified."""
    if timeout_s <= 0:
        fut.cancel()
        return False
    try:
        await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        if not fut.done():
            fut.cancel()
