"""The bound on a broker's shutdown (``shutdown.force.timeout.ms``).

A graceful shutdown has steps that wait on others: the controller moving leaderships away, the
in-flight requests, the coordinators' last writes, threads closing the logs. Each has its own
bound, but a step can still wait on something that never comes (a write the in-sync replicas
cannot confirm because etcd and the followers are gone, a disk that stopped answering). A
process that ignores SIGTERM for ever is worse for an operator than one that stops: systemd,
Docker and Kubernetes kill it anyway, without a word about why.

``ShutdownDeadline`` is armed when the signal arrives. If the process is still stopping when it
fires, it logs which step was still running, flushes the log handlers and ends the process at
once with status 1 (``os._exit``). That is as safe as a ``kill -9``: Shoal makes every change
durable before it answers it, so nothing acknowledged is lost; what was not yet acknowledged is
retried by its client elsewhere. It runs on its own thread, so a blocked event loop cannot hold
it back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Callable
from types import CoroutineType
from typing import Any

log = logging.getLogger("shoal")

#: The exit status of a shutdown that had to be cut short.
FORCED_EXIT_STATUS = 1
#: At most this many of the event loop's tasks are named in the forced exit's log.
TASKS_LOGGED = 20


class ShutdownDeadline:
    """Ends the process ``limit_s`` seconds after ``arm()`` unless ``disarm()`` came first.

    ``where()`` says what the shutdown is doing ("closing the coordinators"); the forced exit's
    log line names it. ``exit`` is ``os._exit`` in a broker; tests pass their own.
    """

    def __init__(self, limit_s: float, where: Callable[[], str] = lambda: "stopping",
                 exit: Callable[[int], object] = os._exit) -> None:
        self.limit_s = limit_s
        self.where = where
        # The broker's event loop (set by arm): its unfinished tasks are logged on a forced exit.
        self.loop: asyncio.AbstractEventLoop | None = None
        self._exit = exit
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self.fired = False

    def arm(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start counting (once; a second call keeps the first deadline). ``loop``'s unfinished
        tasks are named in the log line if the deadline fires."""
        with self._lock:
            self.loop = loop
            if self._timer is not None:
                return
            self._timer = threading.Timer(self.limit_s, self._fire)
            self._timer.name = "shoal-shutdown-deadline"
            self._timer.daemon = True
            self._timer.start()

    def disarm(self) -> None:
        """The shutdown finished: the deadline will not fire."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def _fire(self) -> None:
        self.fired = True
        log.critical("shutdown did not finish within %.0f s (shutdown.force.timeout.ms); it was "
                     "still %s. Exiting now with status %d: what was acknowledged is already on "
                     "disk, and clients retry the rest on other brokers. If this repeats, look "
                     "at the warnings above for what the step waited on.",
                     self.limit_s, _safe(self.where), FORCED_EXIT_STATUS)
        for line in _awaiting(self.loop):
            log.critical("  still waiting: %s", line)
        for handler in logging.getLogger().handlers + log.handlers:
            try:
                handler.flush()
            except Exception:  # noqa: BLE001 - exiting anyway; a broken handler must not stop it
                pass
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - as above
            pass
        self._exit(FORCED_EXIT_STATUS)


def _safe(where: Callable[[], str]) -> str:
    try:
        return where()
    except Exception:  # noqa: BLE001 - the exit must happen whatever the description does
        return "stopping"


def _awaiting(loop: asyncio.AbstractEventLoop | None) -> list[str]:
    """Each unfinished task of ``loop`` as ``name: f (file:line) <- g (file:line)``, innermost
    await last; read from another thread, so a set that changed meanwhile is read again."""
    if loop is None:
        return []
    for _ in range(3):
        try:
            tasks = list(asyncio.all_tasks(loop))
            break
        except RuntimeError:  # the set changed while it was copied
            continue
    else:
        return []
    lines = []
    for task in tasks[:TASKS_LOGGED]:
        chain = []
        coro: Any = task.get_coro()
        while isinstance(coro, CoroutineType) and len(chain) < 12:
            frame = coro.cr_frame
            if frame is not None:
                code = frame.f_code
                chain.append(f"{code.co_qualname} ({code.co_filename.rsplit('/', 2)[-1]}:"
                             f"{frame.f_lineno})")
            coro = coro.cr_await
        lines.append(f"{task.get_name()}: {' -> '.join(chain) or repr(task)}")
    if len(tasks) > TASKS_LOGGED:
        lines.append(f"... and {len(tasks) - TASKS_LOGGED} more task(s)")
    return lines
