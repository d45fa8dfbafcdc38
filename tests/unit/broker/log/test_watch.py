"""broker/log/watch.py: long-poll wake-ups, all of a key's waiters or the oldest few."""

from __future__ import annotations

import asyncio

from broker.log.watch import Watch, wait_for_any


def test_notify_wakes_every_waiter_and_most_wakes_the_oldest_first() -> None:
    async def main() -> None:
        w = Watch()
        first, second, third = (w.watch([("t", 0)]) for _ in range(3))
        other = w.watch([("t", 1)])
        assert w.notify(("t", 0), 1) == 1
        assert first.done() and not second.done() and not third.done()
        # A waiter already woken is not counted again: the next one-wake-up goes to the second.
        assert w.notify(("t", 0), 1) == 1
        assert second.done() and not third.done()
        assert w.notify(("t", 0)) == 1 and third.done()
        assert not other.done()
        await asyncio.sleep(0)  # the done callbacks forget the woken futures
        assert not w.waiting(("t", 0)) and w.waiting(("t", 1))
        assert w.notify(("t", 0), 1) == 0

    asyncio.run(main())


def test_a_waiter_that_timed_out_is_forgotten_and_not_woken() -> None:
    async def main() -> None:
        w = Watch()
        late = w.watch([("t", 0)])
        assert not await wait_for_any(late, 0.01)
        await asyncio.sleep(0)
        assert not w.waiting(("t", 0))
        waiting = w.watch([("t", 0)])
        assert w.notify(("t", 0), 1) == 1
        assert await wait_for_any(waiting, 1.0)

    asyncio.run(main())
