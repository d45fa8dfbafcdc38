"""Age and drain figures of a share-partition (Shoal extension, SHARE_GROUPS.md section 3).

Concept: an operator (or an autoscaler) asks of a share-partition "how old is the oldest record
nobody has finished with, and how long until the backlog is gone?". Three pure pieces answer it:

- **Oldest unacknowledged record**: the first offset at/after the share-partition start offset
  (SPSO) that is not ACKNOWLEDGED/ARCHIVED: ACQUIRED, AVAILABLE (released, timed out, waiting in
  redelivery backoff) or never delivered. Its *age* is measured from the append timestamp of the
  log batch holding it (:func:`batch_append_ms`), so a redelivery never resets it and records
  below the SPSO never count. The loaded share-partition finds the offset in its in-flight window
  (``SharePartition.oldest_unacked_offset``); a share-partition not loaded on this broker finds it
  in its persisted state (:func:`first_unacked_offset`).
- **Drain rate** (:class:`DecayingRate`): records completed (acknowledged ACCEPT/REJECT/GAP, or
  archived at the delivery limit) per second, exponentially weighted with a time constant of one
  minute. It is updated once per committed acknowledgement (not per record) and decayed lazily
  when read, so the hot path pays one ``exp``. Early on, the weight of the time not yet observed
  is discounted (bias correction), so a steady rate reads right from the first seconds.
- **Seconds since progress** (:func:`since_progress_s`): how long a share-partition with lag has
  gone without completing a record (0 without lag; ``+inf`` when none completed since it was
  loaded on this broker, or it is not loaded here). This is the figure that says "stuck, for X
  seconds" directly, without waiting for an average to decay.
- **Drain ETA** (:func:`drain_eta_s`) = lag / drain rate: 0 when there is no lag, ``+inf`` when
  there is lag and no record completed for :data:`STALL_AFTER_MS` (one minute; also when the
  rate is below :data:`MIN_RATE`): "never, at this rate". The decaying rate alone would take
  about ten minutes to fall below any threshold after the last completion; the stall interval
  makes the ETA turn ``+inf`` one minute after progress stops. Exported as ``+Inf`` rather than
  left out, so ``eta > 600`` alerts fire on a stuck partition and an absent series still means
  "no such share-partition".

Nothing here reads a clock: every function takes ``now_ms``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from broker.share.record_state import RecordState
from persister.api import PersisterStateBatch

__all__ = [
    "DRAIN_RATE_TAU_MS",
    "DecayingRate",
    "age_s",
    "batch_append_ms",
    "STALL_AFTER_MS",
    "drain_eta_s",
    "first_unacked_offset",
    "since_progress_s",
]

#: Time constant of the drain-rate average: a completion weighs 1/e after one minute.
DRAIN_RATE_TAU_MS = 60_000
#: Rates below this (records/s) count as "nothing completes": about one record a day.
MIN_RATE = 1e-5
#: No record completed for this long while records wait: the drain ETA is +inf ("stalled").
#: One time constant of the rate: a partition completing less than once a minute is reported as
#: stalled rather than with an ETA extrapolated from completions that stopped.
STALL_AFTER_MS = 60_000

_TIMESTAMP_TYPE_MASK = 0x08  # record batch attributes: 1 = LogAppendTime
_TERMINAL = frozenset({int(RecordState.ACKNOWLEDGED), int(RecordState.ARCHIVED)})


class DecayingRate:
    """An exponentially weighted event rate (events per second) over a time constant ``tau``.

    ``record(n, now_ms)`` adds ``n`` events; ``rate(now_ms)`` is the decayed event sum divided by
    the decayed length of the time observed (``tau * (1 - exp(-elapsed / tau))``), which equals
    the true rate when events come at a constant rate, from the first event on. Time going
    backwards is treated as no time passing.
    """

    __slots__ = ("_last_ms", "_since_ms", "_sum", "_tau_ms")

    def __init__(self, tau_ms: int = DRAIN_RATE_TAU_MS) -> None:
        if tau_ms <= 0:
            raise ValueError("tau_ms must be positive")
        self._tau_ms = float(tau_ms)
        self._sum = 0.0
        self._last_ms: int | None = None
        self._since_ms: int | None = None  # first event: the start of the observed time

    def record(self, n: int, now_ms: int) -> None:
        if n <= 0:
            return
        if self._last_ms is None or self._since_ms is None:
            self._since_ms = self._last_ms = now_ms
            self._sum = float(n)
            return
        self._sum = self._decayed(now_ms) + n
        self._last_ms = max(self._last_ms, now_ms)

    def _decayed(self, now_ms: int) -> float:
        assert self._last_ms is not None
        dt = now_ms - self._last_ms
        return self._sum if dt <= 0 else self._sum * math.exp(-dt / self._tau_ms)

    @property
    def last_event_ms(self) -> int | None:
        """Time of the latest event recorded (None before the first)."""
        return self._last_ms

    def rate(self, now_ms: int) -> float:
        """Events per second at ``now_ms`` (0.0 before the first event)."""
        if self._last_ms is None or self._since_ms is None:
            return 0.0
        # At least one second observed: a single burst right now is not an infinite rate.
        elapsed = max(1000.0, float(now_ms - self._since_ms))
        window_ms = self._tau_ms * -math.expm1(-elapsed / self._tau_ms)
        return self._decayed(now_ms) / (window_ms / 1000.0)


def since_progress_s(lag: int, now_ms: int, last_progress_ms: int | None) -> float:
    """Seconds a share-partition with ``lag`` records waiting has gone without completing one:
    0.0 when nothing waits (lag 0, or unknown), ``inf`` when no completion is known
    (``last_progress_ms`` None: none since it was loaded here, or it is not loaded here)."""
    if lag <= 0:
        return 0.0
    if last_progress_ms is None:
        return math.inf
    return max(0.0, (now_ms - last_progress_ms) / 1000.0)


def drain_eta_s(lag: int, rate: float, since_progress: float = 0.0) -> float:
    """Seconds until ``lag`` records are done at ``rate`` per second: 0.0 without lag, ``inf``
    when nothing completed for :data:`STALL_AFTER_MS` (``since_progress``, seconds, from
    :func:`since_progress_s`) or the rate is (nearly) zero, -1.0 when the lag is unknown
    (negative)."""
    if lag < 0:
        return -1.0
    if lag == 0:
        return 0.0
    if rate < MIN_RATE or since_progress * 1000.0 >= STALL_AFTER_MS:
        return math.inf
    return lag / rate


def age_s(now_ms: int, appended_ms: int | None) -> float:
    """Seconds since ``appended_ms`` (0.0 when there is no such record; never negative, as a
    producer's CreateTime may be ahead of the broker's clock)."""
    if appended_ms is None:
        return 0.0
    return max(0.0, (now_ms - appended_ms) / 1000.0)


def batch_append_ms(attributes: int, base_timestamp: int, max_timestamp: int) -> int:
    """The append timestamp of a log batch: the broker's time for a LogAppendTime topic, else
    the batch's first (producer CreateTime) timestamp."""
    if attributes & _TIMESTAMP_TYPE_MASK:
        return max_timestamp
    return base_timestamp


def first_unacked_offset(start_offset: int, batches: Iterable[PersisterStateBatch]) -> int:
    """The first offset at/after ``start_offset`` that persisted state does not mark done
    (ACKNOWLEDGED/ARCHIVED): an AVAILABLE record or one never delivered (a hole, or past the
    last batch). ``batches`` need not be sorted."""
    pos = start_offset
    for b in sorted(batches, key=lambda b: b.first_offset):
        if b.last_offset < pos:
            continue
        if b.first_offset > pos or b.delivery_state not in _TERMINAL:
            return pos
        pos = b.last_offset + 1
    return pos
