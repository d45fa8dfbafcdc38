"""Bounds on connections: how many, from where, how long idle, how long a frame may take.

Kafka's ``ConnectionQuotas`` and ``Selector`` idle expiry, in one small object the listener owns:

- ``max.connections`` (broker-wide) and ``max.connections.per.ip`` with
  ``max.connections.per.ip.overrides`` (``host:count,host:count``; a host may be a name, resolved
  once at start). A connection over a limit is closed as soon as it is accepted, with a log line
  naming the address and the limit (Kafka closes per-IP excess at once as well; for the broker-wide
  limit it delays accepting instead, which asyncio's listener cannot do cheaply).
- ``connections.max.idle.ms``: a connection that has neither sent nor been sent anything for this
  long, and has no request in progress, is closed (Kafka's idle-connection expiry).
- ``socket.request.partial.timeout.ms`` (Shoal extension): a connection that has sent the start of
  a request frame but not its end within this long is closed. Kafka has no such bound and relies
  on idle expiry, which a client trickling one byte a minute never reaches; without it, a few
  hundred half-sent frames could hold their buffers forever.

- ``connections.authentication.timeout.ms`` (Shoal extension): a connection on a TLS or SASL
  listener that has not finished its TLS handshake and SASL authentication this long after it
  was accepted is closed (the server bounds the TLS handshake itself with the same value).

- ``queued.max.request.bytes`` (Kafka's name; Kafka's default -1 is unbounded, Shoal's is 256 MiB):
  a frame that is not received in one read reserves its declared size from one broker-wide
  ``RequestMemory`` once more than its first 64 KiB have arrived; if that does not fit, the
  connection stops being read (Kafka mutes it) until other frames complete or their connections
  close. So 200 clients that each send half of a 50 MB frame hold a few frames' worth of memory,
  not 5 GB; and clients that only announce a large frame (and send a few bytes of it) reserve
  nothing, so they cannot keep an honest large request waiting.

Counting and timing are pure (``now_ms`` is an argument); the server runs ``sweep`` on a timer.
Log lines about refused connections are rate-limited so a flood does not flood the log.
"""

from __future__ import annotations

import logging
import socket
from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol

log = logging.getLogger("shoal.connection")


class RateLimitedLog:
    """At most one line per ``interval_ms``; the next one says how many were left out."""

    def __init__(self, interval_ms: int = 10_000) -> None:
        self.interval_ms = interval_ms
        self._last: int | None = None
        self._suppressed = 0

    def admit(self, now_ms: int) -> int | None:
        """None: do not log now; else how many lines were left out since the last one."""
        if self._last is not None and now_ms - self._last < self.interval_ms:
            self._suppressed += 1
            return None
        suppressed, self._suppressed, self._last = self._suppressed, 0, now_ms
        return suppressed

INT_MAX = 2**31 - 1
REFUSAL_LOG_INTERVAL_MS = 10_000


class Limited(Protocol):
    """What ``sweep`` needs to know about a connection."""

    peer: str

    def idle_since_ms(self) -> int | None: ...          # None while a request is in progress
    def partial_frame_since_ms(self) -> int | None: ...  # None without a half-read frame
    def unauthenticated_since_ms(self) -> int | None: ...  # None once authenticated
    def close_for(self, reason: str, level: int = logging.WARNING) -> None: ...


def parse_overrides(value: str) -> dict[str, int]:
    """``host:count,host:count`` to {host: count}.

    Raises:
        ValueError: an entry is not ``host:count`` with a count >= 0.
    """
    out: dict[str, int] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip():
            raise ValueError(f"entry {item!r} is not host:count")
        try:
            n = int(count)
        except ValueError:
            raise ValueError(f"entry {item!r}: {count!r} is not a number") from None
        if n < 0:
            raise ValueError(f"entry {item!r}: the count must be at least 0")
        out[host.strip().strip("[]")] = n
    return out


def overrides_problem(value: str) -> str | None:
    """Validator for ``max.connections.per.ip.overrides``."""
    try:
        parse_overrides(value)
    except ValueError as exc:
        return str(exc)
    return None


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        log.warning("max.connections.per.ip.overrides: cannot resolve %r; the override applies "
                    "only to connections whose address is literally %r", host, host)
        return host


class MemoryWaiter(Protocol):
    def memory_granted(self) -> None: ...


class RequestMemory:
    """The broker-wide budget for partly received request frames (``queued.max.request.bytes``).

    ``reserve`` grants a frame's size if it fits, or if nothing is reserved at all (so a frame
    larger than the whole budget can still be received, alone). Waiters are served in order as
    memory frees; a waiter whose frame still does not fit keeps its place.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity if capacity > 0 else None
        self.used = 0
        self._waiting: dict[MemoryWaiter, int] = {}  # insertion order = arrival order

    def reserve(self, size: int) -> bool:
        if self.capacity is None or self.used == 0 or self.used + size <= self.capacity:
            self.used += size
            return True
        return False

    def wait(self, who: MemoryWaiter, size: int) -> None:
        self._waiting[who] = size

    def forget(self, who: MemoryWaiter) -> None:
        self._waiting.pop(who, None)

    def release(self, size: int) -> None:
        self.used -= size
        for who, need in list(self._waiting.items()):
            if not self.reserve(need):
                break
            del self._waiting[who]
            who.memory_granted()

    @property
    def waiting(self) -> int:
        return len(self._waiting)


class ConnectionLimits:
    def __init__(self, get: Any) -> None:
        self.max_connections = int(get("max.connections"))
        self.max_per_ip = int(get("max.connections.per.ip"))
        self.overrides = {_resolve(h): n for h, n in
                          parse_overrides(get("max.connections.per.ip.overrides")).items()}
        self.idle_ms = int(get("connections.max.idle.ms"))
        self.partial_ms = int(get("socket.request.partial.timeout.ms"))
        self.auth_ms = int(get("connections.authentication.timeout.ms"))
        # Rate limits of the warnings about failed TLS handshakes and SASL authentications.
        self.tls_log = RateLimitedLog(REFUSAL_LOG_INTERVAL_MS)
        self.sasl_log = RateLimitedLog(REFUSAL_LOG_INTERVAL_MS)
        self.memory = RequestMemory(int(get("queued.max.request.bytes")))
        self.total = 0
        self.per_host: Counter[str] = Counter()
        self._refused = 0
        self._last_refusal_log = -REFUSAL_LOG_INTERVAL_MS

    def limit_for(self, host: str) -> int:
        return self.overrides.get(host, self.max_per_ip)

    def admit(self, host: str, peer: str, now_ms: int) -> bool:
        """Count a new connection from ``host``; False (and a log line) if it is over a limit."""
        if self.total >= self.max_connections:
            self._refuse(now_ms, f"connection from {peer} refused: the broker already has "
                         f"{self.total} connections (max.connections={self.max_connections})")
            return False
        limit = self.limit_for(host)
        if self.per_host[host] >= limit:
            self._refuse(now_ms, f"connection from {peer} refused: {host} already has "
                         f"{self.per_host[host]} connections (max.connections.per.ip={limit}"
                         f"{' from max.connections.per.ip.overrides' if host in self.overrides else ''}"
                         "); close idle clients or raise the limit")
            return False
        self.total += 1
        self.per_host[host] += 1
        return True

    def release(self, host: str) -> None:
        self.total -= 1
        self.per_host[host] -= 1
        if self.per_host[host] <= 0:
            del self.per_host[host]

    def _refuse(self, now_ms: int, message: str) -> None:
        self._refused += 1
        if now_ms - self._last_refusal_log >= REFUSAL_LOG_INTERVAL_MS:
            more = f" ({self._refused - 1} more refused since the last report)" \
                if self._refused > 1 else ""
            log.warning("%s%s", message, more)
            self._last_refusal_log = now_ms
            self._refused = 0

    def sweep(self, connections: Iterable[Limited], now_ms: int) -> int:
        """Close connections idle or holding a partial frame too long; returns how many."""
        closed = 0
        for c in list(connections):
            accepted = c.unauthenticated_since_ms()
            if accepted is not None and now_ms - accepted > self.auth_ms:
                c.close_for(f"it did not finish its TLS handshake and SASL authentication "
                            f"within {self.auth_ms} ms (connections.authentication.timeout.ms)")
                closed += 1
                continue
            partial = c.partial_frame_since_ms()
            if partial is not None and now_ms - partial > self.partial_ms:
                c.close_for(f"it sent part of a request and not the rest within "
                            f"{self.partial_ms} ms (socket.request.partial.timeout.ms)")
                closed += 1
                continue
            idle = c.idle_since_ms()
            if idle is not None and now_ms - idle > self.idle_ms:
                c.close_for(f"it was idle for more than {self.idle_ms} ms "
                            "(connections.max.idle.ms)", logging.INFO)
                closed += 1
        return closed

    def sweep_interval_ms(self) -> int:
        return max(10, min(1000, self.partial_ms // 4, self.idle_ms // 4, self.auth_ms // 4))
