"""Keeping one large request or response off the event loop (issue 12, section 1).

The event loop serves every connection, so no single request may hold it for long:

- A request frame above ``DECODE_OFF_LOOP_BYTES`` (64 KiB; 1 MiB for Produce, whose few large
  elements are cheap to decode, unless it lists more than ``PRODUCE_INLINE_PARTITIONS``
  partitions: ``protocol/produce_shape.py`` counts up to that) is walked and decoded by kio in a
  worker thread
  (``loop.run_in_executor``); smaller frames, which is every ordinary ShareFetch, Fetch and
  Produce, are decoded inline as before, at no extra cost. The lower bound for other APIs is
  because a frame of tiny elements (a Metadata v0 topic name is 2 bytes) holds half a million
  of them per MiB. While a large frame is being decoded its connection reads nothing more, so
  one client cannot queue many of them.
- A handler whose response may be large (a Fetch over many partitions) returns it wrapped in
  ``EncodeOffLoop``; the connection encodes it in a worker thread.
- Handlers that walk many partitions, groups or keys yield to the loop every ``YIELD_EVERY`` of
  them (``in_slices``, ``breathe``, ``denied_in_slices``; or written once as ``Steps``, a
  generator run straight through for an ordinary request and with the loop served at each step
  for a large one, ``paced``); ``tests/integration/wire/test_element_counts.py`` checks every
  API, the hostile bench step ``element_counts`` the control latency meanwhile.
- Handler modules may declare ``request_limit(config) -> (array path, most)`` and
  ``refuse_over_limit(ctx, count, most) -> response``: a request listing more elements is refused
  with that response before kio builds an object per element (``protocol.guard`` counts them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Generator, Iterable
from typing import Any, TypeVar

from protocol.produce_shape import lists_more_than

T = TypeVar("T")
R = TypeVar("R")

DECODE_OFF_LOOP_BYTES = 64 * 1024
PRODUCE_OFF_LOOP_BYTES = 1 << 20
PRODUCE = 0


# A Produce frame between DECODE_OFF_LOOP_BYTES and PRODUCE_OFF_LOOP_BYTES listing more topics
# and partitions than this is decoded off the loop too (about 1.5 us of kio objects apiece).
PRODUCE_INLINE_PARTITIONS = 256


def decode_off_loop(api_key: int, frame: bytes) -> bool:
    """Whether a request frame is decoded in a worker thread rather than on the loop."""
    size = len(frame)
    if api_key != PRODUCE:
        return size > DECODE_OFF_LOOP_BYTES
    if size > PRODUCE_OFF_LOOP_BYTES:
        return True
    return size > DECODE_OFF_LOOP_BYTES and lists_more_than(frame, PRODUCE_INLINE_PARTITIONS)

# Elements a handler walks between two checks of its slice of the loop, and the size above
# which a request counts as large (walked in slices, answered by an off-loop encode). Slices of
# 500 elements held the loop 20-30 ms of CPU at the 40-60 us an element of a group, ACL or
# share-state RPC costs, and a control round trip waits behind three or four of them (the
# request, the append's completion, the fetch's wake-up), several times longer on a busy machine.
YIELD_EVERY = 128

# Wall-clock time a sliced handler may hold the loop before it hands it back: cheap elements
# are not handed back after every YIELD_EVERY (each hand-back costs a loop turn), costly ones
# are handed back within about this time (issue 25: control p99 <= 100 ms on a loaded machine).
SLICE_S = 0.003
_CHECK_EVERY = 16  # breathe/in_slices look at the clock every this many elements
_clock = time.perf_counter
_resumed = [_clock()]  # when the last hand-back returned: the current slice's start


def slice_spent() -> bool:
    """Whether the current slice has held the loop for ``SLICE_S`` (a task resumed by something
    else than ``hand_back`` starts from an older mark and hands back at its first check)."""
    return _clock() - _resumed[0] >= SLICE_S


async def hand_back() -> None:
    """Let the event loop serve everything else once; the next slice starts on return."""
    await asyncio.sleep(0)
    _resumed[0] = _clock()


async def breathe(i: int) -> None:
    """Hand the event loop back in a long loop (``i`` its step) once the slice is spent."""
    if i and i % _CHECK_EVERY == 0 and slice_spent():
        await hand_back()


async def breathe_now() -> None:
    """Hand the event loop back if the slice is spent (a check after a costly step)."""
    if slice_spent():
        await hand_back()


async def in_slices(items: Iterable[T], fn: Callable[[T], R]) -> list[R]:
    """``[fn(item) for item in items]``, handing the event loop back whenever a slice is spent,
    so a request of tens of thousands of elements (issue 25) does not hold the loop."""
    out: list[R] = []
    for i, item in enumerate(items):
        if i and i % _CHECK_EVERY == 0 and slice_spent():
            await hand_back()
        out.append(fn(item))
    return out


# A computation written once as a generator that ``yield``s (None) where it may hand the loop
# back, every ``YIELD_EVERY`` elements, and returns its result: ``run_steps`` runs it through on
# the small path (no await at all), ``run_steps_async`` serves the loop at each yield.
Steps = Generator[None, None, T]


def run_steps(steps: Steps[T]) -> T:
    """Run ``steps`` to the end without handing the loop back; its result."""
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_steps_async(steps: Steps[T]) -> T:
    """Run ``steps`` to the end, handing the event loop back at those of its yields where the
    slice is spent."""
    try:
        while True:
            next(steps)
            if slice_spent():
                await hand_back()
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def paced(steps: Steps[T], large: bool) -> T | Coroutine[Any, Any, T]:
    """A handler's answer from ``steps``: computed at once, or (``large``, i.e. more than
    ``YIELD_EVERY`` elements) as a coroutine that serves the loop at each step."""
    return run_steps_async(steps) if large else run_steps(steps)


def denied_steps(ctx: Any, operation: Any, resource_type: Any, names: Iterable[str],
                 *, audit: bool = True) -> Steps[frozenset[str]]:
    """``ctx.denied(...)`` (``broker/context.py``) asked ``YIELD_EVERY`` distinct names at a
    time, yielding between slices."""
    distinct = list(dict.fromkeys(names))
    if len(distinct) <= YIELD_EVERY:
        return frozenset(ctx.denied(operation, resource_type, distinct, audit=audit))
    out: set[str] = set()
    for i in range(0, len(distinct), YIELD_EVERY):
        if i:
            yield
        out |= ctx.denied(operation, resource_type, distinct[i:i + YIELD_EVERY], audit=audit)
    return frozenset(out)


async def denied_in_slices(ctx: Any, operation: Any, resource_type: Any, names: Iterable[str],
                           *, audit: bool = True) -> frozenset[str]:
    """``ctx.denied(...)`` asked ``YIELD_EVERY`` names at a time, the event loop served in
    between; no suspension when there are fewer names."""
    return await run_steps_async(denied_steps(ctx, operation, resource_type, names, audit=audit))


class EncodeOffLoop:
    """A response body the connection should encode in a worker thread."""

    __slots__ = ("body",)

    def __init__(self, body: Any) -> None:
        self.body = body
