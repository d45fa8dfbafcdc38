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
connection, then close); a connection that does not send a complete request head within
``REQUEST_TIMEOUT_S`` or sends more than ``MAX_REQUEST_BYTES`` is dropped. Every other path is
404, every other method 405. It is bounded (``metrics.max.connections``, a page cached for
``metrics.render.cache.ms``) and offers TLS and basic auth from an exporter-toolkit web config
file (``metrics.web.config.file``, ``broker/security/metrics_web.py``); see its class doc.

Invariant: instruments only grow (counters) or are replaced whole (collectors); rendering never
mutates them. A collector that raises is logged and skipped, so one bug does not blank the page.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import ssl
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from broker.security.metrics_web import BasicAuth, WebConfig

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

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}
DEFAULT_MAX_CONNECTIONS = 16


def http_response(status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
                  head_only: bool = False, headers: str = "") -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{headers}Connection: close\r\n\r\n").encode()
    return head if head_only else head + body


UNAUTHORIZED = http_response(401, b"unauthorized\n",
                             headers='WWW-Authenticate: Basic realm="shoal metrics"\r\n')


def request_problem(request_head: bytes) -> bytes | None:
    """The error response to a request head that is not a GET or HEAD of /metrics, else None."""
    line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return http_response(400, b"bad request\n")
    method, target, _version = parts
    if target.split("?", 1)[0] != "/metrics":
        return http_response(404, b"not found: try /metrics\n")
    if method not in ("GET", "HEAD"):
        return http_response(405, b"only GET and HEAD\n")
    return None


def header(request_head: bytes, name: str) -> str | None:
    """The value of header ``name`` (case-insensitive) in a request head, or None."""
    want = name.lower().encode()
    for line in request_head.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == want:
            return value.strip().decode("latin-1")
    return None


def _page_response(request_head: bytes, body: bytes | None) -> bytes:
    if body is None:
        return http_response(500, b"internal error\n")
    return http_response(200, body, CONTENT_TYPE, head_only=request_head.startswith(b"HEAD "))


def _render_body(render: Callable[[], str]) -> bytes | None:
    try:
        return render().encode()
    except Exception:
        log.exception("rendering /metrics failed")
        return None


def answer(request_head: bytes, render: Callable[[], str]) -> bytes:
    """The HTTP response to one request head (request line plus headers), without auth."""
    problem = request_problem(request_head)
    if problem is not None:
        return problem
    return _page_response(request_head, _render_body(render))


class _HttpConnection(asyncio.Protocol):
    """One scrape: read a request head, hand it to the server, write its answer, close."""

    def __init__(self, server: MetricsServer) -> None:
        self._server = server
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timeout: asyncio.TimerHandle | None = None
        self._asked = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._timeout = asyncio.get_running_loop().call_later(REQUEST_TIMEOUT_S, self.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._open.discard(self)
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None

    def data_received(self, data: bytes) -> None:
        t = self._transport
        if t is None or t.is_closing() or self._asked:
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
                self.send(http_response(431, b"request too large\n"))
            return
        self._asked = True
        self._server._respond(self, bytes(self._buf[:end]))

    def send(self, response: bytes) -> None:
        t = self._transport
        if t is not None and not t.is_closing():
            t.write(response)
            t.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class MetricsServer:
    """Serves ``render()`` at ``http(s)://HOST:PORT/metrics``, bounded (issue 25).

    * At most ``max_connections`` connections at once, counted when accepted (before any TLS
      handshake); one more is closed at once (a plain-HTTP client first gets 503), with a
      rate-limited warning and a count in ``rejected``.
    * A page rendered less than ``cache_ms`` ago is served again instead of rendering anew, so
      a scrape storm renders at most once per ``cache_ms`` on the event loop (0: every scrape
      renders). ``render_seconds`` observes each render's duration.
    * ``web`` (``broker/security/metrics_web.py``): TLS (the handshake is bounded by
      ``REQUEST_TIMEOUT_S``) and basic auth; bcrypt runs on one worker thread of the server's
      own, so neither a storm of wrong passwords nor a slow hash stalls the loop or takes the
      threads the broker's disk I/O uses; a pair that passed is remembered.

    Accepting runs in the server's own task; each accepted socket gets a short task for its
    (TLS) setup. ``stop`` cancels them all and closes every connection.
    """

    def __init__(self, render: Callable[[], str], *,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, cache_ms: int = 0,
                 now_ms: Callable[[], int] | None = None, web: WebConfig | None = None,
                 render_seconds: Histogram | None = None,
                 rejected: Counter | None = None) -> None:
        self.render = render
        self.max_connections = max_connections
        self.cache_ms = cache_ms
        self._now_ms = now_ms or (lambda: int(time.monotonic() * 1000))
        self.ssl = web.ssl if web is not None else None
        self.auth = BasicAuth(web.users) if web is not None and web.users else None
        self._auth_pool: ThreadPoolExecutor | None = None
        self.render_seconds = render_seconds
        self.rejected = rejected
        self._page: bytes | None = None
        self._page_at = 0
        self._sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._open: set[_HttpConnection] = set()
        self._warned_at: int | None = None
        self.host = ""
        self.port = 0

    @property
    def scheme(self) -> str:
        return "https" if self.ssl is not None else "http"

    async def start(self, host: str, port: int) -> None:
        """Bind and listen.

        Raises:
            OSError: the address cannot be bound.
        """
        loop = asyncio.get_running_loop()
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]  # "::" is IPv6
        sock = socket.create_server((host, port), family=family, backlog=128)
        sock.setblocking(False)
        self._sockets.append(sock)
        self.host, self.port = sock.getsockname()[:2]
        if self.auth is not None:
            self._auth_pool = ThreadPoolExecutor(1, thread_name_prefix="shoal-metrics-auth")
        self._spawn(loop, self._accept(loop, sock))

    def _spawn(self, loop: asyncio.AbstractEventLoop, coro: Any) -> None:
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, loop: asyncio.AbstractEventLoop, listening: socket.socket) -> None:
        while True:
            try:
                sock, _addr = await loop.sock_accept(listening)
            except OSError as exc:
                log.warning("the metrics endpoint could not accept a connection: %s; retrying "
                            "in 1 s", exc)
                await asyncio.sleep(1)
                continue
            if len(self._open) >= self.max_connections:
                self._refuse(sock)
                continue
            conn = _HttpConnection(self)
            self._open.add(conn)
            self._spawn(loop, self._connect(loop, sock, conn))

    async def _connect(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                       conn: _HttpConnection) -> None:
        try:
            await loop.connect_accepted_socket(
                lambda: conn, sock, ssl=self.ssl,
                ssl_handshake_timeout=REQUEST_TIMEOUT_S if self.ssl is not None else None)
        except BaseException as exc:
            sock.close()
            self._open.discard(conn)
            if not isinstance(exc, (OSError, ssl.SSLError, EOFError)):
                raise
            log.debug("metrics connection setup failed: %s", exc)

    def _refuse(self, sock: socket.socket) -> None:
        if self.ssl is None:
            try:
                sock.send(http_response(503, b"too many connections (metrics.max.connections)\n"))
            except OSError:
                pass
        sock.close()
        if self.rejected is not None:
            self.rejected.inc()
        now = self._now_ms()
        if self._warned_at is None or now - self._warned_at >= 10_000:
            self._warned_at = now
            log.warning("the metrics endpoint already has %d connections "
                        "(metrics.max.connections); closed a new one", self.max_connections)

    def _respond(self, conn: _HttpConnection, head: bytes) -> None:
        problem = request_problem(head)
        if problem is not None:
            conn.send(problem)
            return
        auth = self.auth
        if auth is not None:
            creds = BasicAuth.credentials(header(head, "authorization"))
            if creds is None:
                conn.send(UNAUTHORIZED)
                return
            if not auth.remembered(*creds):
                if self._auth_pool is None:  # stopping
                    conn.abort()
                    return
                fut = asyncio.get_running_loop().run_in_executor(self._auth_pool, auth.check,
                                                                 *creds)
                fut.add_done_callback(lambda f: self._checked(f, conn, head, creds))
                return
        conn.send(_page_response(head, self._current_page()))

    def _checked(self, fut: asyncio.Future[bool], conn: _HttpConnection, head: bytes,
                 creds: tuple[str, str]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            conn.abort()
        elif fut.result():
            assert self.auth is not None
            self.auth.remember(*creds)
            conn.send(_page_response(head, self._current_page()))
        else:
            conn.send(UNAUTHORIZED)

    def _current_page(self) -> bytes | None:
        """The rendered page: the cached one while younger than ``cache_ms``, else a new one."""
        now = self._now_ms()
        if self._page is not None and now - self._page_at < self.cache_ms:
            return self._page
        started = time.perf_counter()
        page = _render_body(self.render)
        if self.render_seconds is not None:
            self.render_seconds.observe(time.perf_counter() - started)
        if page is not None:
            self._page, self._page_at = page, now
        return page

    async def stop(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        if self._auth_pool is not None:
            self._auth_pool.shutdown(wait=False, cancel_futures=True)
            self._auth_pool = None
