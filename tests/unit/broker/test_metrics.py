"""broker/metrics.py: text exposition 0.0.4, instruments, and the /metrics HTTP server."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from kio.schema.errors import ErrorCode

from broker.broker_metrics import error_label, first_response_error
from broker.metrics import (
    CONTENT_TYPE,
    MAX_REQUEST_BYTES,
    Family,
    MetricsServer,
    Registry,
    answer,
    format_value,
)

SAMPLE_LINE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*'
                         r'(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? '
                         r'(-?[0-9.e+-]+|\+Inf|-Inf|NaN)$')


def assert_valid_exposition(text: str) -> None:
    """Every line is HELP, TYPE or a sample; a family's samples follow its TYPE line."""
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            if line.startswith("# TYPE "):
                name, kind = line.split()[2:4]
                assert kind in ("counter", "gauge", "histogram"), line
                assert name not in typed, f"{name} typed twice"
                typed.add(name)
            continue
        assert SAMPLE_LINE.match(line), line
        name = line.split("{")[0].split()[0]
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in typed or base in typed, f"sample before its TYPE: {line}"
    assert text.endswith("\n")


def test_counters_and_labels_render_in_text_format() -> None:
    r = Registry()
    c = r.counter("x_requests_total", "Requests.")
    lc = r.labelled_counter("x_bytes_total", "Bytes by topic.", ("topic",))
    multi = r.labelled_counter("x_errors_total", "Errors.", ("api", "error"))
    c.inc()
    c.value += 2
    lc.inc("orders", 10)
    lc.inc("orders", 5)
    lc.inc('we"ird\\name\n', 1)
    multi.inc(("fetch", "NONE"))
    text = r.render()
    assert_valid_exposition(text)
    assert "# TYPE x_requests_total counter\nx_requests_total 3\n" in text
    assert 'x_bytes_total{topic="orders"} 15\n' in text
    assert 'x_bytes_total{topic="we\\"ird\\\\name\\n"} 1\n' in text
    assert 'x_errors_total{api="fetch",error="NONE"} 1\n' in text
    assert lc.get("orders") == 15 and lc.get("absent") == 0


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    r = Registry()
    h = r.histogram("x_latency_seconds", "Latency.", buckets=(0.001, 0.01, 0.1))
    for v in (0.0005, 0.001, 0.005, 0.05, 3.0):
        h.observe(v)
    text = r.render()
    assert_valid_exposition(text)
    assert 'x_latency_seconds_bucket{le="0.001"} 2\n' in text  # le is inclusive
    assert 'x_latency_seconds_bucket{le="0.01"} 3\n' in text
    assert 'x_latency_seconds_bucket{le="0.1"} 4\n' in text
    assert 'x_latency_seconds_bucket{le="+Inf"} 5\n' in text
    assert "x_latency_seconds_count 5\n" in text
    assert "x_latency_seconds_sum 3.0565\n" in text


@pytest.mark.parametrize("bad", [
    pytest.param(lambda r: r.counter("no_suffix", "x"), id="counter-without-_total"),
    pytest.param(lambda r: r.labelled_counter("a_total", "x", ()), id="labelled-without-labels"),
    pytest.param(lambda r: r.histogram("h", "x", buckets=(2, 1)), id="unsorted-buckets"),
    pytest.param(lambda r: (r.counter("a_total", "x"), r.counter("a_total", "y")), id="twice"),
])
def test_registry_rejects_bad_definitions(bad) -> None:
    with pytest.raises(ValueError):
        bad(Registry())


@pytest.mark.parametrize("value,text", [
    (3, "3"), (2.0, "2"), (0.25, "0.25"), (float("inf"), "+Inf"), (float("nan"), "NaN"),
])
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


def test_collectors_run_at_scrape_time_and_a_failing_one_is_skipped(caplog) -> None:
    r = Registry()
    state = {"lag": 7}
    r.add_collector(lambda: [Family("x_lag", "gauge", "Lag.", ("group",),
                                    [(("g",), state["lag"])])])

    def broken() -> list[Family]:
        raise RuntimeError("bug")

    r.add_collector(broken)
    with caplog.at_level(logging.ERROR, logger="shoal.metrics"):
        assert 'x_lag{group="g"} 7\n' in r.render()
        state["lag"] = 0
        assert 'x_lag{group="g"} 0\n' in r.render()
    assert "collector" in caplog.text


@pytest.mark.parametrize("head,status", [
    (b"GET /metrics HTTP/1.1\r\nHost: x", 200),
    (b"GET /metrics?name=x HTTP/1.1", 200),
    (b"HEAD /metrics HTTP/1.0", 200),
    (b"GET / HTTP/1.1", 404),
    (b"GET /metricsz HTTP/1.1", 404),
    (b"POST /metrics HTTP/1.1", 405),
    (b"garbage", 400),
], ids=["get", "query", "head", "root", "other-path", "post", "garbage"])
def test_http_answers(head: bytes, status: int) -> None:
    resp = answer(head, lambda: "x_up 1\n")
    assert resp.startswith(f"HTTP/1.1 {status} ".encode())
    if status == 200:
        assert f"Content-Type: {CONTENT_TYPE}".encode() in resp
        assert resp.endswith(b"x_up 1\n") != head.startswith(b"HEAD")


async def _http(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data


async def test_server_serves_metrics_and_drops_oversized_requests() -> None:
    r = Registry()
    r.counter("x_total", "X.").inc(4)
    server = MetricsServer(r.render)
    await server.start("127.0.0.1", 0)
    try:
        ok = await _http(server.port, b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and ok.endswith(b"x_total 4\n")
        missing = await _http(server.port, b"GET /nope HTTP/1.1\r\n\r\n")
        assert missing.startswith(b"HTTP/1.1 404 ")
        big = await _http(server.port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * MAX_REQUEST_BYTES)
        assert big.startswith(b"HTTP/1.1 431 ")
    finally:
        await server.stop()


def test_error_labels_and_first_response_error() -> None:
    from types import SimpleNamespace as NS

    assert error_label(ErrorCode.invalid_record_state) == "INVALID_RECORD_STATE"
    assert error_label(9999) == "9999"
    ok = NS(error_code=ErrorCode.none, responses=[NS(partitions=[
        NS(error_code=ErrorCode.none, acknowledge_error_code=0)])])
    assert first_response_error(ok) == 0
    bad = int(ErrorCode.invalid_record_state)
    ack_err = NS(error_code=ErrorCode.none, responses=[NS(partitions=[
        NS(error_code=ErrorCode.none, acknowledge_error_code=bad)])])
    assert first_response_error(ack_err) == ErrorCode.invalid_record_state
    top = NS(error_code=ErrorCode.share_session_not_found, responses=[])
    assert first_response_error(top) == ErrorCode.share_session_not_found
