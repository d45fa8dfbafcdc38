"""Keeping the garbage collector's pauses of the event loop short (issue 25, section 2).

CPython's full (generation 2) collection walks every tracked object that is not frozen, with
the GIL held, so it stops the event loop for as long as the broker's whole live state takes to
walk: 100-250 ms once tens of thousands of groups, users or share-state keys are held, and
while such state grows the collector runs one every few seconds. ``GcPolicy`` keeps those
pauses proportional to what was allocated since the previous one instead:

- after every full collection (the collector's own pacing decides when) the survivors are
  frozen (``gc.freeze``): the next full collection walks only what came later;
- frozen objects are still freed by reference counting; only garbage in reference cycles that
  became garbage after being frozen waits. ``reclaim_if_due`` (called every second on the
  loop) unfreezes and runs one complete collection when the process's peak resident memory
  has grown by ``GROWTH`` times what it was after the previous complete one (and by at least
  ``MIN_GROWTH_BYTES``), so such garbage is bounded by that share of the broker's memory, and
  complete collections (which walk everything, 100-200 ms for a broker holding tens of
  thousands of groups) become rarer as the state grows. (The peak RSS is read from ``getrusage``, which costs nothing; counting the
  frozen objects would walk them all.)

- full collections are considered after ``THRESHOLDS[2]`` (100) collections of generation 1
  instead of CPython's 10: with the survivors frozen, CPython's other condition (the objects
  promoted since are a quarter of the last full collection's survivors) is met after a few
  thousand promotions, so a broker answering requests of tens of thousands of elements ran a
  full collection every half second (124 in the 78 s of the hostile bench's element_counts
  step, up to 35 ms each: a control round trip had a few percent chance of meeting one).
  Each full collection walks what is alive and not frozen (the requests in flight, what came
  since the last one), so spaced out they are fewer and somewhat longer: in the same step 13
  full collections, 318 ms in all, the longest 65 ms (were 124, 757-973 ms, the longest 25-35
  ms), and the control p99 fell. Garbage in cycles waits for one a little longer.

The policy only moves objects between the collector's generations and spaces out full
collections; it never disables the collector.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
import sys
import time
from typing import Any

log = logging.getLogger("shoal.gc")

GROWTH = 1.0  # a complete collection once the peak RSS grew by this share since the last one
MIN_GROWTH_BYTES = 64 << 20  # ... and by at least this much
CHECK_EVERY_S = 1.0
# gc.set_threshold while the policy runs: CPython's first two, a tenth as many full collections.
THRESHOLDS = (700, 10, 100)


class GcPolicy:
    """Freeze the survivors of each full collection; reclaim frozen cycles now and then."""

    def __init__(self, growth: float = GROWTH) -> None:
        self.growth = growth
        self.baseline = 0  # peak RSS (bytes) after the last complete collection
        self.reclaims = 0
        self._installed = False
        self._thresholds = gc.get_threshold()  # restored by stop()

    def start(self) -> None:
        """Collect and freeze what exists now (start-up objects), then freeze the survivors of
        every full collection from here on."""
        self._complete()
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._thresholds = gc.get_threshold()
            gc.set_threshold(*THRESHOLDS)
            self._installed = True

    def stop(self) -> None:
        """Stop freezing and restore the collector's thresholds; what is frozen stays frozen (the
        broker is exiting)."""
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            gc.set_threshold(*self._thresholds)
            self._installed = False

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        # Right after a full collection the younger generations are empty: everything tracked
        # and not frozen survived it.
        if phase == "stop" and info.get("generation") == 2:
            gc.freeze()

    def reclaim_due(self) -> bool:
        return _peak_rss() > self.baseline + max(self.baseline * self.growth, MIN_GROWTH_BYTES)

    def reclaim_if_due(self) -> bool:
        """One complete collection (frozen objects included) if the frozen set outgrew its
        bound; True if it ran."""
        if not self.reclaim_due():
            return False
        t0 = time.monotonic()
        self._complete()
        self.reclaims += 1
        log.debug("complete garbage collection (peak RSS grew by more than %.0f%%): %.0f ms",
                  self.growth * 100, (time.monotonic() - t0) * 1000)
        return True

    def _complete(self) -> None:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.baseline = _peak_rss()

    async def run(self, every_s: float = CHECK_EVERY_S) -> None:
        """``reclaim_if_due`` every ``every_s`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            self.reclaim_if_due()


def _peak_rss() -> int:
    """The process's peak resident memory in bytes (``ru_maxrss`` is in KiB on Linux)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
