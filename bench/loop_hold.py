"""``shoal broker`` with its event-loop hold time measured per API (bench instrument, issue 25).

``python -m bench.loop_hold broker --listen ... --data-dir ...`` takes the same arguments as
``shoal`` and runs the broker unchanged, except that ``broker.connection.Connection`` is
wrapped so that every stretch of time the event loop spends on one request is attributed to
its API:

- ``frame``: a frame read until it is dispatched (peek, inline decode, the handler's
  synchronous part, and the encoding of a response answered at once);
- ``step``: each step of a handler's coroutine (from one ``await`` that suspends to the next);
- ``encode``: encoding a response on the loop once its coroutine finished.

Each hold is measured in wall-clock time and in the loop thread's CPU time (``thread_time``);
the CPU figure does not count time the process was not scheduled, so it compares runs on a
busy machine.

Garbage-collector pauses are timed per generation (``gc.callbacks``), and a ticker task
measures the loop's lag (how late a 5 ms sleep wakes up), which is what any client sees.
When the broker exits, and on SIGUSR2, the figures are written as JSON to
``$SHOAL_BENCH_LOOP_HOLD``: per API (``key name``) the count, total and largest hold per kind;
per GC generation the count, total and largest pause; the lag's percentiles. SIGUSR1 resets
them (so a bench can measure one step). The broker's own code is not modified.
``SHOAL_BENCH_SWITCH_INTERVAL`` (seconds) sets the GIL switch interval, an experiment knob.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Generator
from typing import Any

_perf = time.perf_counter
_cpu = time.thread_time
# (api key, kind) -> [count, total, max, total CPU, max CPU]
_holds: dict[tuple[int, str], list[float]] = {}
_gc: dict[int, list[float]] = {}  # generation -> [count, total, max]
_gc_start = [0.0]
_lags: list[float] = []
_big: list[tuple[float, str, float]] = []  # (time, what, seconds) of every hold over _BIG_S
_BIG_S = 0.04
_t0 = [_perf()]
_where: list[tuple[float, int, str, str]] = []  # steps over _BIG_S / 2 of CPU: between where
_CONTROL_APIS = frozenset({0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 18})  # the control pair's APIs
_in_frame = [False]  # inside a frame's own timing
_current = [-1]  # the last other API a frame arrived for: what a GC pause is charged to
_TICK_S = 0.005


def _record(key: int, kind: str, dt: float, cpu: float) -> None:
    if dt > _BIG_S:
        _big.append((_perf() - _t0[0], f"{key} {kind} cpu {cpu * 1000:.1f}", dt))
    h = _holds.get((key, kind))
    if h is None:
        _holds[(key, kind)] = [1, dt, dt, cpu, cpu]
    else:
        h[0] += 1
        h[1] += dt
        h[3] += cpu
        if dt > h[2]:
            h[2] = dt
        if cpu > h[4]:
            h[4] = cpu


class _Timed:
    """An awaitable running ``inner`` and timing each of its steps on the loop."""

    __slots__ = ("inner", "key")

    def __init__(self, inner: Awaitable[Any], key: int) -> None:
        self.inner = inner
        self.key = key

    def _step(self, t0: float, c0: float, since: str, until: str | None) -> str:
        """Record one step; returns where the coroutine is suspended now (for the next)."""
        dt, cpu = _perf() - t0, _cpu() - c0
        _record(self.key, "step", dt, cpu)
        here = until if until is not None else _suspended_at(self.inner)
        if cpu > _BIG_S / 2:  # where the loop was held: between these two suspension points
            _where.append((round(cpu * 1000, 1), self.key, since, here))
        return here

    def __await__(self) -> Generator[Any, Any, Any]:
        it = self.inner.__await__()
        value: Any = None
        error: BaseException | None = None
        where = "start"
        while True:
            t0, c0 = _perf(), _cpu()
            try:
                out = it.send(value) if error is None else it.throw(error)
            except StopIteration as done:
                self._step(t0, c0, where, "end")
                return done.value
            except BaseException:
                self._step(t0, c0, where, "raised")
                raise
            where = self._step(t0, c0, where, None)
            try:
                value, error = (yield out), None
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task; handed on
                value, error = None, exc


def _suspended_at(coro: Any) -> str:
    """``module:function:line`` of the innermost coroutine (outside asyncio) ``coro`` is
    suspended in."""
    where = "?"
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        if "/asyncio/" not in frame.f_code.co_filename:
            where = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}:" \
                    f"{frame.f_lineno}"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return where


def _api_names() -> dict[int, str]:
    from broker.dispatch import default_dispatcher

    d = default_dispatcher()
    return {k: d.known(k).name for k, _lo, _hi in d.ranges()}  # type: ignore[union-attr]


def _install() -> None:
    from broker import connection
    from protocol.codec import peek

    cls = connection.Connection
    on_frame, call, complete = cls._on_frame, cls._call, cls._complete

    def timed_on_frame(self: Any, frame: bytes) -> None:
        t0, c0 = _perf(), _cpu()
        _in_frame[0] = True
        try:
            on_frame(self, frame)
        finally:
            _in_frame[0] = False
            dt, cpu = _perf() - t0, _cpu() - c0
            try:
                key = peek(frame).api_key
            except Exception:  # noqa: BLE001 - a malformed frame: counted under -1
                key = -1
            _record(key, "frame", dt, cpu)
            if key not in _CONTROL_APIS:
                _current[0] = key

    def timed_call(self: Any, route: Any, req: Any) -> Any:
        result = call(self, route, req)
        if inspect.isawaitable(result):
            return _Timed(result, req.api_key)
        return result

    def timed_complete(self: Any, slot: Any, result: Any) -> None:
        t0, c0 = _perf(), _cpu()
        complete(self, slot, result)
        if not _in_frame[0]:  # a synchronous answer is part of its frame's hold
            _record(slot.api_key, "encode", _perf() - t0, _cpu() - c0)

    cls._on_frame = timed_on_frame  # type: ignore[method-assign]
    cls._call = timed_call  # type: ignore[method-assign]
    cls._complete = timed_complete  # type: ignore[method-assign]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _gc_start[0] = _perf()
            return
        dt = _perf() - _gc_start[0]  # the GIL is held throughout: every thread waits
        if dt > _BIG_S:
            where = "loop" if threading.current_thread() is threading.main_thread() else "worker"
            _big.append((_perf() - _t0[0], f"gc{info.get('generation')} {where} during {_current[0]}", dt))
        g = _gc.setdefault(int(info.get("generation", -1)), [0, 0.0, 0.0])
        g[0] += 1
        g[1] += dt
        g[2] = max(g[2], dt)

    gc.callbacks.append(on_gc)

    from broker import main as broker_main

    run_broker = broker_main.run_broker

    async def ticker() -> None:
        while True:
            t0 = _perf()
            await asyncio.sleep(_TICK_S)
            _lags.append(_perf() - t0 - _TICK_S)

    async def run_with_ticker(*args: Any, **kwargs: Any) -> Any:
        tick = asyncio.get_running_loop().create_task(ticker())
        try:
            return await run_broker(*args, **kwargs)
        finally:
            tick.cancel()

    broker_main.run_broker = run_with_ticker  # type: ignore[assignment]


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 2)


def figures() -> dict[str, Any]:
    names = _api_names()
    apis: dict[str, dict[str, Any]] = {}
    for (key, kind), (count, total, most, cpu, most_cpu) in _holds.items():
        a = apis.setdefault(f"{key} {names.get(key, '?')}", {})
        a[kind] = {"n": int(count), "total_ms": round(total * 1000, 1),
                   "max_ms": round(most * 1000, 2), "cpu_total_ms": round(cpu * 1000, 1),
                   "cpu_max_ms": round(most_cpu * 1000, 2)}
    # Worst first by CPU: the wall-clock figures include the time the process was not
    # scheduled, which on a shared machine is noise.
    worst = sorted(apis.items(), key=lambda kv: -max(v["cpu_max_ms"] for v in kv[1].values()))
    return {"apis": dict(worst),
            "gc": {str(g): {"n": int(c), "total_ms": round(t * 1000, 1),
                            "max_ms": round(m * 1000, 2)} for g, (c, t, m) in sorted(_gc.items())},
            "loop_lag": {"ticks": len(_lags), "p50_ms": _pct(_lags, 0.5),
                         "p99_ms": _pct(_lags, 0.99), "max_ms": _pct(_lags, 1.0)},
            "cpu_steps_over_20ms": sorted(_where, reverse=True)[:40],
            "holds_over_40ms": [(round(t, 2), what, round(dt * 1000, 1)) for t, what, dt in _big]}


def _dump(*_args: Any) -> None:
    out = os.environ.get("SHOAL_BENCH_LOOP_HOLD")
    if out:
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(figures(), f, indent=1)
        os.replace(tmp, out)


def _reset(*_args: Any) -> None:
    _holds.clear()
    _gc.clear()
    _lags.clear()
    _big.clear()
    _where.clear()
    _t0[0] = _perf()


def main() -> int:
    # An experiment knob: the GIL switch interval (seconds) for the whole broker, to see how
    # much of the loop's wall-clock holds is waiting for the GIL behind worker threads.
    switch = os.environ.get("SHOAL_BENCH_SWITCH_INTERVAL")
    if switch:
        sys.setswitchinterval(float(switch))
    _install()
    signal.signal(signal.SIGUSR1, _reset)
    signal.signal(signal.SIGUSR2, _dump)
    from broker.main import main as shoal_main

    try:
        return shoal_main(sys.argv[1:])
    finally:
        _dump()


if __name__ == "__main__":
    sys.exit(main())
