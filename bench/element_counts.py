"""Requests at large element counts (issue 25, section 2): every served API, every array.

``variants(api_key, version)`` lists the array paths of a request schema (``topics``,
``topics.partitions``, ...). ``wide_request(api_key, version, path, n)`` builds a request whose
array at ``path`` has ``n`` entries and every other array one, with values that reach the
handlers rather than the decoder: distinct names and ids per entry (``topic-17``, partition 17),
zero waits, small positive numbers elsewhere. CreateTopics and CreatePartitions are sent with
``validate_only`` (their real work, opening files per partition, is bounded separately by the
partition budget). Built from the kio dataclasses, so a new API or version is covered without a
hand-written builder.

Used by ``tests/integration/wire/test_element_counts.py`` (cost grows linearly; a control
connection is answered meanwhile) and by the hostile bench step ``element_counts``
(``bench/hostile.py``: control p99 and RSS growth while every such request is sent).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import socket
import struct
import time
import types
import uuid
from typing import Any, Union, get_args, get_origin

from kio.schema.errors import ErrorCode

from protocol.codec import decode_response, encode_request, request_type

# APIs left out: no array to grow (ApiVersions, SASL, InitProducerId, EndTxn, ...) are found
# by ``variants`` returning nothing; these change the connection's state instead.
SKIPPED = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate
VALIDATE_ONLY = frozenset({19, 37})  # CreateTopics, CreatePartitions
_WAIT = re.compile(r"max_wait|timeout|linger|backoff")
_INDEX = re.compile(r"partition|index|^id$|broker_id|replica")
CLIENT_ID = "shoal-element-counts"


def _unwrap(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _element(tp: Any) -> Any:
    inner, _ = get_args(tp)
    return _unwrap(inner)[0]


def variants(api_key: int, version: int) -> list[str]:
    """The dotted paths of every array in the request schema, outermost first."""
    out: list[str] = []

    def walk(cls: type, prefix: str, depth: int) -> None:
        for f in dataclasses.fields(cls):
            tp, _ = _unwrap(f.type)
            if get_origin(tp) is tuple:
                path = f"{prefix}{f.name}"
                out.append(path)
                inner = _element(tp)
                if dataclasses.is_dataclass(inner) and depth < 4:
                    walk(inner, path + ".", depth + 1)  # type: ignore[arg-type]
            elif dataclasses.is_dataclass(tp) and depth < 4:
                walk(tp, f"{prefix}{f.name}.", depth + 1)  # type: ignore[arg-type]

    if api_key not in SKIPPED:
        walk(request_type(api_key, version), "", 0)
    return out


def _primitive(kind: str, name: str, i: int) -> Any:
    if kind in ("int8", "int16", "int32", "int64", "uint16"):
        if _WAIT.search(name):
            return 0
        return i if _INDEX.search(name) else 1
    if kind == "bool":
        return False
    if kind == "error_code":
        return ErrorCode.none
    if kind == "string":
        return f"{name.replace('_', '-')}-{i}"
    if kind == "bytes":
        return b""
    if kind == "records":
        return None
    if kind == "uuid":
        return uuid.UUID(int=i + 1)
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0 if _WAIT.search(name) else 30_000)
    if kind == "float64":
        return 0.0
    if kind == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, datetime.UTC)
    raise LookupError(f"no value for kafka type {kind} ({name})")


def _build(cls: type, path: str, grow: str, n: int, i: int, top: bool) -> Any:
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp, optional = _unwrap(f.type)
        here = f"{path}{f.name}"
        if get_origin(tp) is tuple:
            inner = _element(tp)
            count = n if here == grow else 1
            if dataclasses.is_dataclass(inner):
                values[f.name] = tuple(_build(inner, here + ".", grow, n, j, False)  # type: ignore[arg-type]
                                       for j in range(count))
            else:
                values[f.name] = tuple(_primitive(f.metadata["kafka_type"], f.name, j)
                                       for j in range(count))
        elif dataclasses.is_dataclass(tp):
            values[f.name] = _build(tp, here + ".", grow, n, i, False)  # type: ignore[arg-type]
        elif f.metadata.get("kafka_type") == "records" and optional:
            values[f.name] = None
        else:
            values[f.name] = _primitive(f.metadata["kafka_type"], f.name, i)
        if top and f.name == "validate_only":
            values[f.name] = True
    return cls(**values)


def wide_request(api_key: int, version: int, path: str, n: int) -> Any:
    """A request of ``api_key``/``version`` with ``n`` entries in the array at ``path``."""
    return _build(request_type(api_key, version), "", path, n, 0, True)


def frame(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    return encode_request(api_key, version, correlation_id, CLIENT_ID, body)


def served(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """(api key, highest version) of every API with at least one array, from the advertised
    ranges."""
    return [(k, hi) for k, _lo, hi in ranges if variants(k, hi)]


def read_frame(sock: socket.socket) -> bytes:
    head = _recv(sock, 4)
    (size,) = struct.unpack(">i", head)
    return _recv(sock, size)


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def call(sock: socket.socket, api_key: int, version: int, data: bytes) -> Any:
    """Send one encoded frame and decode its answer (the connection must stay open)."""
    sock.sendall(data)
    body = read_frame(sock)
    return decode_response(api_key, version, body)


def send_all(sock: socket.socket, apis: list[tuple[int, int]], n: int,
             on_sent: Any = None,
             windows: list[tuple[str, float, float]] | None = None) -> dict[str, float]:
    """Send every variant of every API at ``n`` entries, one after the other on ``sock``;
    returns seconds per ``key/path`` (and appends ``(key/path, sent, answered)`` monotonic
    times to ``windows``). Raises ConnectionError if the broker drops it."""
    out: dict[str, float] = {}
    cid = 0
    for key, version in apis:
        for path in variants(key, version):
            cid += 1
            data = frame(key, version, cid, wide_request(key, version, path, n))
            t0 = time.monotonic()
            if on_sent is not None:
                on_sent(key, path, len(data))
            call(sock, key, version, data)
            t1 = time.monotonic()
            out[f"{key}/{path}"] = round(t1 - t0, 4)
            if windows is not None:
                windows.append((f"{key}/{path}", t0, t1))
    return out


def advertised(sock: socket.socket) -> list[tuple[int, int, int]]:
    """(api key, min, max) of every API the broker advertises (ApiVersions v3)."""
    from protocol.messages import make
    from protocol.codec import request_module

    body = make(request_module(18, 3).ApiVersionsRequest, client_software_name="bench",
                client_software_version="1")
    resp = call(sock, 18, 3, frame(18, 3, 0, body))[1]
    return [(int(a.api_key), int(a.min_version), int(a.max_version)) for a in resp.api_keys]


def attack(addr: tuple[str, int], n: int, timeout: float) -> dict[str, Any]:
    """The hostile bench step ``element_counts``: every array of every advertised API at ``n``
    entries, one request after the other on one connection. Figures: requests sent, total and
    slowest answers, the largest frame, and each request's (key/path, sent, answered) monotonic
    times (``windows``: the bench finds which requests the control pair waited behind)."""
    sock = socket.create_connection(addr, timeout=timeout)
    try:
        apis = served(advertised(sock))
        largest = [0]

        def sent(_key: int, _path: str, size: int) -> None:
            largest[0] = max(largest[0], size)

        windows: list[tuple[str, float, float]] = []
        times = send_all(sock, apis, n, sent, windows)
    finally:
        sock.close()
    slowest = sorted(times.items(), key=lambda kv: -kv[1])[:5]
    return {"apis": len(apis), "requests": len(times), "entries": n,
            "largest_frame_bytes": largest[0], "answer_s_total": round(sum(times.values()), 2),
            "slowest": dict(slowest), "windows": windows}
