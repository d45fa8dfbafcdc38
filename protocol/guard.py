"""A cheap structural pre-check of request bodies, run before kio's native reader.

Why: kio's native reader reserves memory for a whole array as soon as it reads the array's
length. A hostile or broken client can claim 2^32 elements in a 20-byte frame, and the failed
allocation aborts the whole process (Rust's ``handle_alloc_error``), taking every connection down.
This walker follows the schema (kio's dataclass field metadata) over the raw bytes without building
anything and refuses any length that cannot fit in the bytes that remain. Every element of every
Kafka type takes at least one byte, so "count <= remaining bytes" is a safe bound.

It is gated (``needs_check``): only frames that contain a byte pattern that can encode a length of
2^21 or more are walked. Ordinary requests skip the walk entirely.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from functools import lru_cache
from typing import Any

from kio.serial._introspect import (  # the schema shape kio itself uses
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from protocol.errors import MalformedRequestError

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
          "timedelta_i32": 4, "int64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
          "uuid": 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# A varint of four or more bytes (value >= 2^21), or a big-endian int32 of 2^24 or more.
_SUSPECT = re.compile(rb"[\x80-\xff]{3}[\x01-\xff]|[\x01-\x7f][\x00-\xff]{3}")


def needs_check(body: bytes | memoryview, start: int) -> bool:
    """Whether a frame could hold a length large enough to matter."""
    return _SUSPECT.search(body, start) is not None


class _Cursor:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise MalformedRequestError(
                f"{what} needs {n} bytes but only {self.end - self.pos} remain in the request")

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            self.need(1, "varint")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise MalformedRequestError("varint longer than 5 bytes")

    def i16(self) -> int:
        self.need(2, "int16")
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return v

    def i32(self) -> int:
        self.need(4, "int32")
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v


@lru_cache(maxsize=None)
def _plan(entity_type: type) -> tuple[list[tuple[str, Any, bool]], dict[int, tuple[str, Any, bool]]]:
    """(untagged steps, tag -> step) for an entity type; a step is (kind, arg, optional)."""
    steps: list[tuple[str, Any, bool]] = []
    tagged: dict[int, tuple[str, Any, bool]] = {}
    for f in dataclasses.fields(entity_type):
        fc = classify_field(f)
        if isinstance(fc, EntityTupleField):
            step = ("entity_array", fc.type_, False)
        elif isinstance(fc, EntityField):
            step = ("entity", fc.type_, is_optional(f))
        elif isinstance(fc, PrimitiveTupleField):
            step = ("prim_array", f.metadata["kafka_type"], False)
        else:
            step = ("prim", f.metadata["kafka_type"], False)
        if "tag" in f.metadata:
            tagged[int(f.metadata["tag"])] = step
        else:
            steps.append(step)
    return steps, tagged


def _array_len(c: _Cursor, flexible: bool) -> int:
    n = c.uvarint() - 1 if flexible else c.i32()
    if n > c.end - c.pos:
        raise MalformedRequestError(
            f"array claims {n} elements but only {c.end - c.pos} bytes remain in the request")
    return n


def _prim(c: _Cursor, kind: str, flexible: bool) -> None:
    size = _FIXED.get(kind)
    if size is not None:
        c.skip(size, kind)
        return
    if kind == "string":
        n = c.uvarint() - 1 if flexible else c.i16()
    else:  # bytes, records
        n = c.uvarint() - 1 if flexible else c.i32()
    if n > 0:
        c.skip(n, kind)


def _step(c: _Cursor, step: tuple[str, Any, bool], flexible: bool) -> None:
    kind, arg, optional = step
    if kind == "prim":
        _prim(c, arg, flexible)
    elif kind == "prim_array":
        n = _array_len(c, flexible)
        for _ in range(max(n, 0)):
            _prim(c, arg, flexible)
    elif kind == "entity":
        if optional:
            c.need(1, "nullable struct marker")
            marker = c.buf[c.pos]
            c.pos += 1
            if marker == 0xFF:
                return
        _entity(c, arg)
    else:
        n = _array_len(c, flexible)
        for _ in range(max(n, 0)):
            _entity(c, arg)


def _entity(c: _Cursor, entity_type: type) -> None:
    steps, tagged = _plan(entity_type)
    flexible = entity_type.__flexible__
    for step in steps:
        _step(c, step, flexible)
    if flexible:
        count = c.uvarint()
        if count > c.end - c.pos:
            raise MalformedRequestError(f"{count} tagged fields cannot fit in the request")
        for _ in range(count):
            tag = c.uvarint()
            size = c.uvarint()
            c.need(size, "tagged field")
            step = tagged.get(tag)
            if step is None:
                c.pos += size
                continue
            sub = _Cursor(c.buf[: c.pos + size], c.pos)
            _step(sub, step, flexible)
            c.pos += size


def check_body(entity_type: type, frame: bytes, pos: int) -> None:
    """Walk a request body; raise if a length could not fit in the frame.

    Raises:
        MalformedRequestError: a length or field runs past the end of the frame.
    """
    _entity(_Cursor(frame, pos), entity_type)
