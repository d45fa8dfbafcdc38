"""A structural pre-check of request bodies, run before kio's native reader.

Why: kio's native reader reserves memory for a whole array as soon as it reads the array's
length. A hostile or broken client can claim 2^32 elements in a 20-byte frame, and the failed
allocation aborts the whole process (Rust's ``handle_alloc_error``), taking every connection down.
This walker follows the schema (kio's dataclass field metadata) over the raw bytes without building
anything and refuses any array whose claimed length could not fit in the bytes that remain, given
the smallest encoding one of its elements can have (Kafka's ``MessageUtil`` bound,
"count * min size <= remaining").

Cost: every request is walked; there is no gate. (An earlier byte-pattern gate tried to skip
"ordinary" requests, but the random bytes of any topic id or offset match such a pattern, so it
skipped almost nothing.) The walker is therefore built for speed: for each request type it
generates and compiles one straight-line Python function per entity, in which consecutive
fixed-size fields collapse into a single ``pos += n``, arrays of fixed-size primitives are skipped
by multiplication, and one-byte varints (nearly all lengths) take a fast path. Tagged fields are
walked in place against an end bound; nothing is ever copied. Work is linear in the frame size:
each entity element costs a bounded number of operations and consumes at least one byte, or is
bounded by the count check.

The walker can also count the elements of chosen array paths (for example ``topics.partitions``
and ``forgotten_topics_data.partitions`` of a ShareFetch) so that a request listing more partitions
than the broker will accept can be refused before kio builds an object for each of them.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import lru_cache
from typing import Any, Callable

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
_VARLEN = ("string", "bytes", "records")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Walker = Callable[[bytes, int, int, list[int]], int]
CountPaths = tuple[tuple[str, ...], ...]


class _TooMany(Exception):
    """Internal: an array count that cannot fit (turned into MalformedRequestError)."""


def uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos`` and the position after it (the generated code inlines the
    one-byte case and calls this for the rest).

    Raises:
        MalformedRequestError: longer than 5 bytes. IndexError: past the end of ``buf``.
    """
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise MalformedRequestError("varint longer than 5 bytes")


def _too_many(n: int, min_size: int, remaining: int, what: str) -> MalformedRequestError:
    return MalformedRequestError(
        f"{what} claims {n} elements of at least {min_size} byte(s) each but only "
        f"{max(remaining, 0)} bytes remain in the request")


def _check_end(pos: int, end: int, what: str) -> None:
    if pos > end:
        raise MalformedRequestError(f"{what} runs {pos - end} bytes past the end of its bound")


class _Gen:
    """Generates the walker functions of one request type (one per entity and count path)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[tuple[type, CountPaths], str] = {}
        self.min_sizes: dict[type, int] = {}
        self.env: dict[str, Any] = {"_uv": uvarint, "_too_many": _too_many, "_end": _check_end,
                                    "_I16": _I16.unpack_from, "_I32": _I32.unpack_from,
                                    "Malformed": MalformedRequestError}

    # -- sizes --------------------------------------------------------------------------------

    def min_size(self, entity_type: type[Any]) -> int:
        """Fewest bytes one encoded element of ``entity_type`` takes."""
        cached = self.min_sizes.get(entity_type)
        if cached is not None:
            return cached
        flexible = entity_type.__flexible__
        total = 1 if flexible else 0  # the tagged-field count
        for f in dataclasses.fields(entity_type):
            if "tag" in f.metadata:
                continue
            fc = classify_field(f)
            if isinstance(fc, (EntityTupleField, PrimitiveTupleField)):
                total += 1 if flexible else 4
            elif isinstance(fc, EntityField):
                total += 1 if is_optional(f) else self.min_size(fc.type_)
            else:
                kind = f.metadata["kafka_type"]
                if kind in _FIXED:
                    total += _FIXED[kind]
                elif kind == "string":
                    total += 1 if flexible else 2
                elif kind in _VARLEN:
                    total += 1 if flexible else 4
                else:
                    raise ValueError(f"unknown kafka_type {kind!r} in {entity_type.__name__}")
        self.min_sizes[entity_type] = total
        return total

    # -- code ---------------------------------------------------------------------------------

    def walker(self, entity_type: type[Any], paths: CountPaths) -> str:
        """Name of the function walking one ``entity_type`` (counting ``paths`` below it)."""
        key = (entity_type, paths)
        name = self.names.get(key)
        if name is not None:
            return name
        name = f"_w{len(self.names)}"
        self.names[key] = name
        body: list[str] = []
        flexible = entity_type.__flexible__
        fixed_run = 0
        tagged: dict[int, tuple[dataclasses.Field[Any], Any]] = {}
        for f in dataclasses.fields(entity_type):
            if "tag" in f.metadata:
                tagged[int(f.metadata["tag"])] = (f, classify_field(f))
                continue
            fc = classify_field(f)
            kind = f.metadata.get("kafka_type")
            if not isinstance(fc, (EntityField, EntityTupleField, PrimitiveTupleField)) \
                    and kind in _FIXED:
                fixed_run += _FIXED[kind]
                continue
            if fixed_run:
                body.append(f"pos += {fixed_run}")
                fixed_run = 0
            subs = [p[1:] for p in paths if p and p[0] == f.name]
            body += self._field(entity_type, f, fc, flexible, () in subs,
                                tuple(p for p in subs if p), "end")
        if fixed_run:
            body.append(f"pos += {fixed_run}")
        if flexible:
            body += self._tagged(entity_type, tagged)
        src = [f"def {name}(buf, pos, end, acc):"] + ["    " + ln for ln in body] + ["    return pos"]
        self.lines += src + [""]
        return name

    def _length(self, var: str, flexible: bool, width: int) -> list[str]:
        """Read a length into ``var``: compact (uvarint - 1) or a signed int16/int32."""
        if flexible:
            return [f"{var} = buf[pos]",
                    f"if {var} < 0x80:",
                    "    pos += 1",
                    "else:",
                    f"    {var}, pos = _uv(buf, pos)",
                    f"{var} -= 1"]
        unpack = "_I16" if width == 2 else "_I32"
        return [f"({var},) = {unpack}(buf, pos)", f"pos += {width}"]

    def _field(self, owner: type, f: dataclasses.Field[Any], fc: Any, flexible: bool,
               count: bool, below: CountPaths, end: str) -> list[str]:
        what = f"{owner.__name__}.{f.name}"
        if isinstance(fc, EntityTupleField):
            elem = fc.type_
            size = max(1, self.min_size(elem))
            child = self.walker(elem, below)
            lines = self._length("n", flexible, 4)
            lines += ["if n > 0:",
                      f"    if n * {size} > {end} - pos:",
                      f"        raise _too_many(n, {size}, {end} - pos, {what!r})"]
            if count:
                lines.append("    acc[0] += n")
            lines += ["    for _ in range(n):",
                      f"        pos = {child}(buf, pos, {end}, acc)"]
            return lines
        if isinstance(fc, EntityField):
            child = self.walker(fc.type_, below)
            if is_optional(f):
                return ["if buf[pos] == 0xFF:",
                        "    pos += 1",
                        "else:",
                        "    pos += 1",
                        f"    pos = {child}(buf, pos, {end}, acc)"]
            return [f"pos = {child}(buf, pos, {end}, acc)"]
        kind = f.metadata["kafka_type"]
        if isinstance(fc, PrimitiveTupleField):
            lines = self._length("n", flexible, 4)
            if count:
                lines += ["if n > 0:", "    acc[0] += n"]
            if kind in _FIXED:
                size = _FIXED[kind]
                return lines + ["if n > 0:",
                                f"    if n * {size} > {end} - pos:",
                                f"        raise _too_many(n, {size}, {end} - pos, {what!r})",
                                f"    pos += n * {size}"]
            inner = self._varlen(kind, flexible, "m")
            return lines + ["if n > 0:",
                            f"    if n > {end} - pos:",
                            f"        raise _too_many(n, 1, {end} - pos, {what!r})",
                            "    for _ in range(n):"] + ["        " + ln for ln in inner]
        if kind in _FIXED:
            return [f"pos += {_FIXED[kind]}"]
        if kind in _VARLEN:
            return self._varlen(kind, flexible, "n")
        raise ValueError(f"unknown kafka_type {kind!r} in {owner.__name__}")

    def _varlen(self, kind: str, flexible: bool, var: str) -> list[str]:
        lines = self._length(var, flexible, 2 if kind == "string" else 4)
        return lines + [f"if {var} > 0:", f"    pos += {var}"]

    def _tagged(self, owner: type, tagged: dict[int, tuple[dataclasses.Field[Any], Any]]
                ) -> list[str]:
        lines = ["t = buf[pos]",
                 "if t < 0x80:",
                 "    pos += 1",
                 "else:",
                 "    t, pos = _uv(buf, pos)",
                 "if t:",
                 "    if t * 2 > end - pos:",
                 f"        raise _too_many(t, 2, end - pos, {owner.__name__ + ' tagged fields'!r})",
                 "    for _ in range(t):",
                 "        tag, pos = _uv(buf, pos)",
                 "        size, pos = _uv(buf, pos)",
                 "        stop = pos + size",
                 "        _end(stop, end, 'a tagged field')"]
        branches: list[str] = []
        for tag, (f, fc) in sorted(tagged.items()):
            inner = self._field(owner, f, fc, True, False, (), "stop")
            branches += [f"{'if' if not branches else 'elif'} tag == {tag}:"]
            branches += ["    " + ln for ln in inner]
            branches += [f"    _end(pos, stop, {f.name!r})"]
        lines += ["        " + ln for ln in branches]
        lines += ["        pos = stop"]
        return lines


@lru_cache(maxsize=None)
def _compiled(entity_type: type, count_paths: CountPaths | None) -> Walker:
    gen = _Gen()
    top = gen.walker(entity_type, count_paths or ())
    exec(compile("\n".join(gen.lines), f"<guard {entity_type.__name__}>", "exec"), gen.env)
    walker: Walker = gen.env[top]
    return walker


def check_body(entity_type: type, frame: bytes, pos: int,
               count_paths: CountPaths | None = None) -> int:
    """Walk a request body; raise if a length could not fit in the frame.

    Returns the total number of elements of the arrays at ``count_paths`` (each a tuple of field
    names from the request down, e.g. ``(("topics", "partitions"),)``), or 0 without paths.

    Raises:
        MalformedRequestError: a length or field runs past the end of the frame.
    """
    walker = _compiled(entity_type, count_paths)
    acc = [0]
    end = len(frame)
    try:
        stop = walker(frame, pos, end, acc)
    except MalformedRequestError:
        raise
    except (IndexError, struct.error):
        raise MalformedRequestError("the request ends in the middle of a field") from None
    _check_end(stop, end, "the request body")
    return acc[0]
