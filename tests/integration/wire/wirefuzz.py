"""Structure-aware wire fuzzing: hypothesis strategies for kio request bodies, frame mutations,
and a probe that sends one frame and classifies what the broker did with it.

Strategies are derived from the generated dataclasses (field types plus the ``kafka_type``
metadata kio's serializer reads), so every served (api key, version) gets bodies of the right
shape without a hand-written generator. Sizes are bounded (arrays of at most three elements,
short strings) and values lean towards what reaches deep handler paths: the names of a topic and
a share group that exist, the topic's id, partition numbers 0-3, and the boundaries of each
integer type.

A few fields are bounded because a valid value would legitimately stall or swamp the test rather
than find a bug: wait times (a Fetch long-polls for ``max_wait``), and partition counts in
CreateTopics/CreatePartitions (each partition costs three open files; issue 12 section 5 bounds
them in the broker).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import socket
import struct
import types
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.config import TOPIC_CONFIGS
from broker.group_configs import GROUP_CONFIGS
from protocol.codec import decode_response, encode_request
from tests.integration.rawclient import request_type
from tests.unit.batches import make_batch

TOPIC = "fuzz-topic"
GROUP = "fuzz-group"
CLIENT_ID = "wirefuzz"


@dataclass
class World:
    """Names and ids of things that exist on the broker (refreshed by the test)."""

    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)
    member_ids: list[str] = field(default_factory=list)


WORLD = World()

_INT_RANGES = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
               "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
               "uint16": (0, 2**16 - 1)}
# Fields whose legitimate values make the broker wait (milliseconds) or allocate per unit.
_WAIT_FIELDS = re.compile(r"max_wait|^timeout$|timeout_ms")
_COUNT_FIELDS = {("CreatableTopic", "num_partitions"), ("CreatePartitionsTopic", "count")}
_NAMES = [TOPIC, GROUP, "", "fuzz-other", "__consumer_offsets", "__share_group_state", ".", "a" * 249]


def _int(kind: str) -> st.SearchStrategy[int]:
    lo, hi = _INT_RANGES[kind]
    edges = sorted({v for v in (lo, lo + 1, -2, -1, 0, 1, 2, 3, hi - 1, hi) if lo <= v <= hi})
    return st.one_of(st.sampled_from(edges), st.integers(0, 4), st.integers(lo, hi))


# Config names a topic or share group accepts (broker configs are left out: a fuzzed dynamic
# num.partitions of 2^31-1 would make the next auto-created topic exhaust the broker's files,
# a legitimate outcome until issue 12 section 5), and values at the edges of their parsers.
_CONFIG_NAMES = sorted(set(TOPIC_CONFIGS) | set(GROUP_CONFIGS))
_VALUES = ["-1", "0", "1", "2147483647", "2147483648", "-2147483649", "9223372036854775807",
           "9223372036854775808", "1.5", "1e3", "true", "false", "earliest", "latest",
           "by_duration:PT1S", "by_duration:P999999999D", "by_duration:", "read_committed",
           "delete", "compact", " "]


def _string() -> st.SearchStrategy[str]:
    member = st.builds(lambda: WORLD.member_ids[-1] if WORLD.member_ids else "m")
    return st.one_of(st.sampled_from(_NAMES), member, st.sampled_from(_CONFIG_NAMES),
                     st.sampled_from(_VALUES), st.text(max_size=12))


def _uuid() -> st.SearchStrategy[uuid.UUID]:
    return st.one_of(st.builds(lambda: WORLD.topic_id), st.just(uuid.UUID(int=0)), st.uuids())


def _records() -> st.SearchStrategy[bytes]:
    valid = st.builds(lambda n: make_batch([(None, b"v%d" % i) for i in range(n)]),
                      st.integers(1, 3))
    return st.one_of(valid, st.binary(max_size=80), st.just(b""))


def _millis(wait: bool, wide: int) -> st.SearchStrategy[datetime.timedelta]:
    ms = st.integers(-1, 50) if wait else st.one_of(
        st.sampled_from([-(2**31), -1, 0, 1, 2**31 - 1]), st.integers(-1, wide))
    return ms.map(lambda v: datetime.timedelta(milliseconds=v))


def _primitive(kind: str, name: str, owner: str) -> st.SearchStrategy[Any]:
    if (owner, name) in _COUNT_FIELDS:
        return st.integers(-1, 3)
    if kind in _INT_RANGES:
        return _int(kind)
    if kind == "bool":
        return st.booleans()
    if kind == "error_code":
        return st.sampled_from(list(ErrorCode))
    if kind == "string":
        return _string()
    if kind == "bytes":
        return st.binary(max_size=32)
    if kind == "records":
        return _records()
    if kind == "uuid":
        return _uuid()
    if kind == "timedelta_i32":
        return _millis(bool(_WAIT_FIELDS.search(name)), 2**31 - 1)
    if kind == "timedelta_i64":
        return _millis(bool(_WAIT_FIELDS.search(name)), 2**40)
    if kind == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "datetime_i64":
        return st.integers(0, 2**41).map(
            lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC))
    raise LookupError(f"no strategy for kafka type {kind} ({owner}.{name})")


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _field_strategy(f: dataclasses.Field[Any], owner: type) -> st.SearchStrategy[Any]:
    tp, optional = _unwrap_optional(f.type)
    if get_origin(tp) is tuple:
        inner, _ = get_args(tp)
        inner, _ = _unwrap_optional(inner)
        elem = (entity(inner) if dataclasses.is_dataclass(inner)
                else _primitive(f.metadata["kafka_type"], f.name, owner.__name__))
        strat: st.SearchStrategy[Any] = st.lists(elem, max_size=3).map(tuple)
    elif dataclasses.is_dataclass(tp):
        strat = entity(tp)
    else:
        strat = _primitive(f.metadata["kafka_type"], f.name, owner.__name__)
    return st.one_of(st.none(), strat) if optional else strat


@lru_cache(maxsize=None)
def entity(cls: type) -> st.SearchStrategy[Any]:
    """Instances of a kio entity dataclass, every field drawn from its type."""
    fields = {f.name: st.deferred(lambda f=f: _field_strategy(f, cls))
              for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


def body(api_key: int, api_version: int) -> st.SearchStrategy[Any]:
    """Valid-shaped request bodies of one API version."""
    return entity(request_type(api_key, api_version))


def header_size(api_key: int, api_version: int) -> int:
    """Bytes of the size prefix plus request header that ``frame`` writes."""
    flexible = request_type(api_key, api_version).__flexible__
    return 4 + 8 + 2 + len(CLIENT_ID.encode()) + (1 if flexible else 0)


def frame(api_key: int, api_version: int, correlation_id: int, req: Any) -> bytes:
    return encode_request(api_key, api_version, correlation_id, CLIENT_ID, req)


# ---------------------------------------------------------------------------------------------
# Mutations of an encoded frame. The header is kept, so the broker knows which API it is and
# which correlation id to answer; only the body is damaged. The size prefix is kept consistent
# with the bytes sent, so each mutated frame is still exactly one frame on the wire.

INFLATED = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08",
             b"\xff\xff", b"\x7f\xff", b"\x00\x10\x00\x00"]


@st.composite
def mutated(draw: st.DrawFn, data: bytes, head: int) -> bytes:
    """One damaged copy of ``data`` (a size-prefixed frame whose header is ``head`` bytes)."""
    body_ = bytearray(data[head:])
    kind = draw(st.sampled_from(["flip", "truncate", "inflate", "splice"]))
    if kind == "flip" and body_:
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(body_) - 1))
            body_[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del body_[draw(st.integers(0, max(0, len(body_) - 1))):]
    elif kind == "inflate":
        i = draw(st.integers(0, len(body_)))
        blob = draw(st.sampled_from(INFLATED))
        body_[i:i + len(blob)] = blob
    else:
        i = draw(st.integers(0, len(body_)))
        body_[i:i] = draw(st.binary(min_size=1, max_size=16))
    payload = data[4:head] + bytes(body_)
    return struct.pack(">i", len(payload)) + payload


# ---------------------------------------------------------------------------------------------
# Sending and classifying


class Probe:
    """A raw connection that sends a frame followed by an ApiVersions v0 sentinel.

    ``exchange`` reads until the sentinel's answer; what came before it is the answer to the
    fuzzed frame (none for Produce with acks=0). ``closed`` means the broker dropped the
    connection instead; ``waiting`` means neither happened within the timeout.
    """

    SENTINEL_KEY, SENTINEL_VERSION = 18, 0

    def __init__(self, bootstrap: str, timeout: float = 5.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.addr = (host, int(port))
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.correlation = 1000

    def _connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(self.addr, timeout=self.timeout)
        return self.sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def next_id(self) -> int:
        self.correlation += 1
        return self.correlation

    def exchange(self, api_key: int, api_version: int, data: bytes, correlation_id: int,
                 timeout: float | None = None) -> tuple[str, list[tuple[int, bytes]]]:
        """Send ``data`` and the sentinel; return (outcome, [(correlation id, frame)])."""
        sock = self._connect()
        sock.settimeout(timeout or self.timeout)
        sentinel_id = self.next_id()
        sentinel = encode_request(self.SENTINEL_KEY, self.SENTINEL_VERSION, sentinel_id,
                                  CLIENT_ID, request_type(18, 0)())
        got: list[tuple[int, bytes]] = []
        try:
            sock.sendall(data + sentinel)
            while True:
                size = struct.unpack(">i", _recv(sock, 4))[0]
                frame_ = _recv(sock, size)
                cid = struct.unpack_from(">i", frame_, 0)[0]
                if cid == sentinel_id:
                    return "answered", got
                got.append((cid, frame_))
        except (ConnectionError, EOFError):
            self.close()
            return "closed", got
        except TimeoutError:
            self.close()
            return "waiting", got


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("closed")
        buf += chunk
    return bytes(buf)


def check_response(api_key: int, api_version: int, correlation_id: int,
                   got: list[tuple[int, bytes]]) -> None:
    """The frames before the sentinel are exactly one well-formed answer to ``correlation_id``."""
    assert [cid for cid, _ in got] == [correlation_id], \
        f"expected one answer to {correlation_id}, got correlation ids {[c for c, _ in got]}"
    cid, _body = decode_response(api_key, api_version, got[0][1])
    assert cid == correlation_id


# ---------------------------------------------------------------------------------------------
# The broker's log

# Lines that mean the broker hit an exception it did not expect. WARNING lines about bad
# requests ("bad request from client ...; closing this connection") are the expected outcome of
# undecodable input and are not listed.
_BAD_LINE = re.compile(r" (ERROR|CRITICAL) |Traceback \(most recent call last\)|failed for client")


class LogWatch:
    """Reads what a broker log file gained since the last call and picks out bad lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def new_text(self) -> str:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        return data.decode(errors="replace")

    def bad(self) -> str | None:
        """The new log text from the first bad line on, or None."""
        text = self.new_text()
        m = _BAD_LINE.search(text)
        if m is None:
            return None
        start = text.rfind("\n", 0, m.start()) + 1
        return text[start:start + 3000]
