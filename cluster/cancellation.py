"""Cancellations that a library swallowed, caught before a retry loop runs on."""

from __future__ import annotations

import asyncio

__all__ = ["raise_if_cancelling"]


def raise_if_cancelling() -> None:
    """Raise ``CancelledError`` when the current task was asked to stop.

    aetcd can swallow a cancellation: a watch stream whose task is cancelled may simply end, and
    a call may fail with an ordinary error instead. A retry loop that catches that error would
    run on after ``close`` (or a shutdown) cancelled it, and whoever awaits the task waits for
    ever. ``Task.cancelling()`` still counts the request, so the loops check it before retrying.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
