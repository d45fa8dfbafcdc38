"""A retry loop around a call that swallows its task's cancellation (as aetcd's watch can:
the stream just ends, or the call fails with an ordinary error) still stops when cancelled."""

from __future__ import annotations

import asyncio

import pytest

from cluster.cancellation import raise_if_cancelling


def retry_loop(call, attempts: list[int]):
    async def run() -> None:
        while True:
            try:
                attempts.append(1)
                await call()
            except ConnectionError:
                raise_if_cancelling()
                await asyncio.sleep(0.01)
    return run()


async def test_a_swallowed_cancellation_stops_the_retry_loop() -> None:
    async def swallowing() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise ConnectionError("the watch stream ended") from None

    attempts: list[int] = []
    task = asyncio.create_task(retry_loop(swallowing, attempts))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert len(attempts) == 1


async def test_ordinary_failures_are_still_retried() -> None:
    async def failing() -> None:
        raise ConnectionError("etcd is down")

    attempts: list[int] = []
    task = asyncio.create_task(retry_loop(failing, attempts))
    await asyncio.sleep(0.1)
    assert len(attempts) > 3 and not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
