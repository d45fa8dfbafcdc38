"""Prometheus metrics: counters, gauges and histograms, their text exposition, and ``/metrics``.

Concept: two kinds of metric live in a ``Registry``.

- *Instruments* are incremented on hot paths: ``Counter`` (one number), ``LabelledCounter`` (one
  number per label-value key, a plain dict) and ``Histogram`` (fixed buckets). An increment is an
  attribute or dict update; nothing is formatted or allocated per record, and labels are only
  turned into text at scrape time.
- *Collectors* are callables run at scrape time that read live state and return ``Family``
  values (gauges such as lag, and counters kept elsewhere, e.g. by each SharePartition).

``Registry.render()`` writes Prometheus text format 0.0.4: ``# HELP``/``# TYPE`` once per family,
counters named ``*_total``, histograms as cumulative ``_bucket{le=...}`` plus ``_sum`` and
``_count``, label values escaped (backslash, double quote, newline).

``MetricsServer`` serves ``GET /metrics`` over HTTP/1.0-style request/response (one request per
connection, then close). It is an ``asyncio.Protocol`` with no tasks of its own; a connection that
does not send a complete request head within ``REQUEST_TIMEOUT_S`` or sends more than
``MAX_REQUEST_BYTES`` is dropped. Every other path is 404, every other method 405.

Invariant: instruments only grow (counters) or are replaced whole (collectors); rendering never
mutates them. A collector that raises is logged and skipped, so one bug does not blank the page.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("shoal.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_REQUEST_BYTES = 8192
REQUEST_TIMEOUT_S = 10.0

LabelValues = tuple[str, ...]
Sample = tuple[LabelValues, float]


# ---------------------------------------------------------------------------------- text format

def _escape_label(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(v: float) -> str:
    """A sample value as Prometheus writes it (integers without a fraction, +Inf, NaN)."""
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


# Label text by (names, values): the same series are rendered on every scrape, and one
# share-partition's labels appear in a dozen families. Cleared when it grows past the bound.
_label_text: dict[tuple[tuple[str, ...], LabelValues], str] = {}
_LABEL_CACHE_MAX = 100_000


def _labels(names: tuple[str, ...], values: LabelValues) -> str:
    if not names:
        return ""
    key = (names, values)
    text = _label_text.get(key)
    if text is None:
        if len(_label_text) >= _LABEL_CACHE_MAX:
            _label_text.clear()
        text = "{" + ",".join(f'{n}="{_escape_label(str(v))}"'
                              for n, v in zip(names, values)) + "}"
        _label_text[key] = text
    return text


@dataclass(slots=True)
class Family:
    """One metric family as rendered: name (with ``_total`` for counters), type, help, samples."""

    name: str
    type: str  # "counter" | "gauge"
    help: str
    labelnames: tuple[str, ...] = ()
    samples: list[Sample] = field(default_factory=list)

    def add(self, labels: LabelValues, value: float) -> None:
        self.samples.append((labels, value))

    def render(self, out: list[str]) -> None:
        out.append(f"# HELP {self.name} {_escape_help(self.help)}\n")
        out.append(f"# TYPE {self.name} {self.type}\n")
        for labels, value in self.samples:
            out.append(f"{self.name}{_labels(self.labelnames, labels)} {format_value(value)}\n")


# ---------------------------------------------------------------------------------- instruments

class Counter:
    """A number that only goes up. Hot path: ``c.value += n`` or ``c.inc(n)``."""

    __slots__ = ("name", "help", "value")

    def __init__(self, name: str, help: str) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        self.name = name
        self.help = help
        self.value = 0

    def inc(self, n: int | float = 1) -> None:
        self.value += n

    def collect(self) -> Iterable[Family]:
        yield Family(self.name, "counter", self.help, (), [((), self.value)])


class LabelledCounter:
    """Counters keyed by label values. With one label the key is the bare string, else a tuple.

    Hot path: ``inc(key, n)`` is one dict lookup and store; label text is built at scrape time.
    """

    __slots__ = ("name", "help", "labelnames", "values")

    def __init__(self, name: str, help: str, labelnames: Sequence[str]) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        if not labelnames:
            raise ValueError("a LabelledCounter needs at least one label")
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self.values: dict[object, int | float] = {}

    def inc(self, key: object, n: int | float = 1) -> None:
        v = self.values
        v[key] = v.get(key, 0) + n

    def get(self, key: object) -> int | float:
        return self.values.get(key, 0)

    def collect(self) -> Iterable[Family]:
        fam = Family(self.name, "counter", self.help, self.labelnames)
        single = len(self.labelnames) == 1
        for key, value in sorted(self.values.items(), key=lambda kv: str(kv[0])):
            if single:
                fam.add((str(key),), value)
            else:
                assert isinstance(key, tuple), f"{self.name}: key {key!r} is not a tuple"
                fam.add(tuple(str(k) for k in key), value)
        yield fam


#: Latency buckets in seconds: 100 µs to 10 s (fsync-bound writes land in the ms range).
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Observations counted into fixed upper-bound buckets (rendered cumulatively)."""

    __slots__ = ("name", "help", "bounds", "counts", "sum", "count")

    def __init__(self, name: str, help: str, buckets: Sequence[float] = LATENCY_BUCKETS) -> None:
        if list(buckets) != sorted(set(buckets)):
            raise ValueError("histogram buckets must be strictly increasing")
        self.name = name
        self.help = help
        self.bounds = tuple(float(b) for b in buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound falls in that bucket (le is inclusive).
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def render(self, out: list[str]) -> None:
        out.append(f"# HELP {self.name} {_escape_help(self.help)}\n")
        out.append(f"# TYPE {self.name} histogram\n")
        running = 0
        for bound, n in zip(self.bounds, self.counts):
            running += n
            out.append(f'{self.name}_bucket{{le="{format_value(bound)}"}} {running}\n')
        running += self.counts[-1]
        out.append(f'{self.name}_bucket{{le="+Inf"}} {running}\n')
        out.append(f"{self.name}_sum {format_value(self.sum)}\n")
        out.append(f"{self.name}_count {self.count}\n")


#: Seconds on a high-resolution monotonic counter, for durations only. Latency histograms need
#: sub-millisecond resolution, which ``Clock.monotonic_ms`` does not give; a duration is not a
#: point in time (STYLE.md 1.2 is about ``now``), so it is read here and nowhere else.
perf_counter = time.perf_counter


# ---------------------------------------------------------------------------------- registry

Collector = Callable[[], Iterable[Family]]


class Registry:
    def __init__(self) -> None:
        self._instruments: list[Counter | LabelledCounter | Histogram] = []
        self._collectors: list[Collector] = []
        self._names: set[str] = set()

    def _claim(self, name: str) -> None:
        if name in self._names:
            raise ValueError(f"metric {name} registered twice")
        self._names.add(name)

    def counter(self, name: str, help: str) -> Counter:
        self._claim(name)
        c = Counter(name, help)
        self._instruments.append(c)
        return c

    def labelled_counter(self, name: str, help: str, labelnames: Sequence[str]) -> LabelledCounter:
        self._claim(name)
        c = LabelledCounter(name, help, labelnames)
        self._instruments.append(c)
        return c

    def histogram(self, name: str, help: str,
                  buckets: Sequence[float] = LATENCY_BUCKETS) -> Histogram:
        self._claim(name)
        h = Histogram(name, help, buckets)
        self._instruments.append(h)
        return h

    def add_collector(self, collector: Collector) -> None:
        self._collectors.append(collector)

    def render(self) -> str:
        """The whole exposition, instruments first, then every collector's families."""
        out: list[str] = []
        for inst in self._instruments:
            if isinstance(inst, Histogram):
                inst.render(out)
            else:
                for fam in inst.collect():
                    fam.render(out)
        for collector in self._collectors:
            try:
                families = list(collector())
            except Exception:
                log.exception("metrics collector %s failed; its metrics are left out of this "
                              "scrape", getattr(collector, "__qualname__", collector))
                continue
            for fam in families:
                fam.render(out)
        return "".join(out)


# ---------------------------------------------------------------------------------- HTTP

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error"}


def http_response(status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
                  head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head if head_only else head + body


def answer(request_head: bytes, render: Callable[[], str]) -> bytes:
    """The HTTP response to one request head (request line plus headers)."""
    line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return http_response(400, b"bad request\n")
    method, target, _version = parts
    path = target.split("?", 1)[0]
    if path != "/metrics":
        return http_response(404, b"not found: try /metrics\n")
    if method not in ("GET", "HEAD"):
        return http_response(405, b"only GET and HEAD\n")
    try:
        body = render().encode()
    except Exception:
        log.exception("rendering /metrics failed")
        return http_response(500, b"internal error\n")
    return http_response(200, body, CONTENT_TYPE, head_only=method == "HEAD")


class _HttpConnection(asyncio.Protocol):
    def __init__(self, server: MetricsServer) -> None:
        self._server = server
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timeout: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server._open.add(self)
        self._timeout = asyncio.get_running_loop().call_later(REQUEST_TIMEOUT_S, self.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._open.discard(self)
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None

    def data_received(self, data: bytes) -> None:
        t = self._transport
        if t is None or t.is_closing():
            return
        self._buf += data
        if not self._buf[:1].isalpha():  # no HTTP method: a Kafka client on the wrong port?
            t.write(http_response(400, b"not an HTTP request: this is Shoal's metrics port, "
                                       b"not a Kafka listener\n"))
            t.close()
            return
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_REQUEST_BYTES:
                t.write(http_response(431, b"request too large\n"))
                t.close()
            return
        t.write(answer(bytes(self._buf[:end]), self._server.render))
        t.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class MetricsServer:
    """Serves ``registry.render()`` at ``http://HOST:PORT/metrics``."""

    def __init__(self, render: Callable[[], str]) -> None:
        self.render = render
        self._server: asyncio.AbstractServer | None = None
        self._open: set[_HttpConnection] = set()
        self.host = ""
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        """Bind and listen.

        Raises:
            OSError: the address cannot be bound.
        """
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _HttpConnection(self), host, port,
                                                reuse_address=True)
        self.host, self.port = self._server.sockets[0].getsockname()[:2]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._server = None
