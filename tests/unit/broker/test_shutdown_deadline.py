"""broker/shutdown_deadline.py: a shutdown that runs past its bound ends the process, naming
the step and the tasks it waited on; one that finishes first is left alone."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from broker.shutdown_deadline import FORCED_EXIT_STATUS, ShutdownDeadline


async def test_a_late_shutdown_exits_naming_its_step_and_tasks(
        caplog: pytest.LogCaptureFixture) -> None:
    exited = threading.Event()
    codes: list[int] = []

    def exit(code: int) -> None:
        codes.append(code)
        exited.set()

    async def waits_on_the_replicas() -> None:
        await asyncio.Event().wait()

    stuck = asyncio.create_task(waits_on_the_replicas(), name="last-write")
    deadline = ShutdownDeadline(0.05, lambda: "closing the coordinators", exit=exit)
    with caplog.at_level(logging.CRITICAL, logger="shoal"):
        deadline.arm(asyncio.get_running_loop())
        assert await asyncio.to_thread(exited.wait, 10)
    assert codes == [FORCED_EXIT_STATUS] and deadline.fired
    text = caplog.text
    assert "shutdown did not finish within 0 s" in text
    assert "it was still closing the coordinators" in text
    assert "still waiting: last-write: " in text and "waits_on_the_replicas" in text
    stuck.cancel()


def test_a_shutdown_that_finishes_first_is_left_alone() -> None:
    codes: list[int] = []
    deadline = ShutdownDeadline(0.2, exit=codes.append)
    deadline.arm()
    deadline.arm()  # a second signal keeps the first deadline
    deadline.disarm()
    threading.Event().wait(0.4)
    assert codes == [] and not deadline.fired
