"""The one adapter between raw frames and kio's typed messages (STYLE.md 1.11).

Only this module imports ``kio.serial``. It decodes a request frame into ``(RequestHeader, body)``
and encodes a typed response body into a complete size-prefixed frame. Readers and writers are
looked up once per (api key, version) and cached.

Faults are ``protocol.errors`` exceptions: an unknown key or version is ``UnsupportedApiError``, a
body that does not parse is ``MalformedRequestError``.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from protocol import guard, nulls, share_codec, share_state_codec
from protocol.errors import LocalProtocolError, MalformedRequestError, UnsupportedApiError
from protocol.headers import response_header_version

_PEEK = struct.Struct(">hhi")
_I32 = struct.Struct(">i")
_CORRELATION_V1_EMPTY_TAGS = b"\x00"


@dataclass(frozen=True, slots=True)
class RequestPreamble:
    """The first fields of every request header, readable without knowing the schema."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    # Elements found at the caller's count path when they exceeded its limit; the body is then
    # None (not decoded), and the caller answers with an error instead (see decode_request).
    over_limit: int = 0


def peek(frame: bytes) -> RequestPreamble:
    """Read api key, version and correlation id from a request frame.

    Raises:
        MalformedRequestError: the frame is shorter than the fixed header fields.
    """
    if len(frame) < _PEEK.size:
        raise MalformedRequestError(f"request frame of {len(frame)} bytes has no header")
    key, version, correlation_id = _PEEK.unpack_from(frame, 0)
    return RequestPreamble(key, version, correlation_id)


@dataclass(frozen=True, slots=True)
class _RequestCodec:
    header_reader: Any
    body_reader: Any
    request_type: type


@dataclass(frozen=True, slots=True)
class _ResponseCodec:
    writer: Any
    header_version: int
    response_type: type


@lru_cache(maxsize=None)
def _request_codec(api_key: int, api_version: int) -> _RequestCodec:
    try:
        module = load_payload_module(api_key, api_version, EntityType.request)
    except Exception as exc:  # kio raises its own index errors; all mean "unknown here"
        raise UnsupportedApiError(
            f"api key {api_key} version {api_version} is not known"
        ) from exc
    request_type = _payload_type(module, "Request")
    header_type = RequestHeaderV2 if request_type.__flexible__ else RequestHeaderV1
    return _RequestCodec(entity_reader(header_type), entity_reader(request_type), request_type)


@lru_cache(maxsize=None)
def _response_codec(api_key: int, api_version: int) -> _ResponseCodec:
    try:
        module = load_payload_module(api_key, api_version, EntityType.response)
    except Exception as exc:
        raise LocalProtocolError(f"no response schema for api {api_key} v{api_version}") from exc
    response_type = _payload_type(module, "Response")
    # The share RPCs' responses (one per consumer poll) and WriteShareGroupState's (one per
    # persister flush on a cluster) have direct writers (same bytes).
    direct = (share_codec.WRITERS.get((api_key, api_version))
              or share_state_codec.RESPONSE_WRITERS.get((api_key, api_version)))
    return _ResponseCodec(
        direct or entity_writer(response_type),
        response_header_version(api_key, response_type.__flexible__),
        response_type,
    )


def _payload_type(module: Any, suffix: str) -> type[Any]:
    for name in dir(module):
        obj = getattr(module, name)
        if (
            isinstance(obj, type)
            and name.endswith(suffix)
            and getattr(obj, "__type__", None)
            in (EntityType.request, EntityType.response)
            and obj.__module__ == module.__name__
        ):
            return obj
    raise LocalProtocolError(f"{module.__name__} has no {suffix} type")


def response_type(api_key: int, api_version: int) -> type:
    """The kio response dataclass for an API version (for handlers building responses)."""
    return _response_codec(api_key, api_version).response_type


@lru_cache(maxsize=4096)
def response_module(api_key: int, api_version: int) -> Any:
    """The kio module holding the response types of an API version (looked up once per key and
    version: kio's lookup costs several microseconds, and every request asks)."""
    return load_payload_module(api_key, api_version, EntityType.response)


@lru_cache(maxsize=4096)
def request_module(api_key: int, api_version: int) -> Any:
    """The kio module holding the request types of an API version (looked up once)."""
    return load_payload_module(api_key, api_version, EntityType.request)


def request_type(api_key: int, api_version: int) -> type:
    """The kio request dataclass of an API version (for clients building requests).

    Raises:
        UnsupportedApiError: kio has no schema for the key/version.
    """
    return _request_codec(api_key, api_version).request_type


def decode_request(frame: bytes,
                   limit: tuple[guard.CountPaths, int] | None = None) -> DecodedRequest:
    """Decode a whole request frame (without its size prefix).

    Every body is first walked by ``protocol.guard`` (linear in the frame size). With ``limit``
    = (array paths, most elements), a request whose arrays at those paths hold more elements in
    total is not decoded at all: it comes back with ``body=None`` and ``over_limit`` set, so
    that no object is built for each of, say, two million listed partitions.

    Raises:
        UnsupportedApiError: kio has no schema for the key/version.
        MalformedRequestError: the header or body does not decode.
    """
    pre = peek(frame)
    codec = _request_codec(pre.api_key, pre.api_version)
    try:
        header, pos = codec.header_reader(frame, 0)
        counted = guard.check_body(codec.request_type, frame, pos,
                                   limit[0] if limit is not None else None)
        if limit is not None and counted > limit[1]:
            return DecodedRequest(pre.api_key, pre.api_version, pre.correlation_id,
                                  header.client_id, None, counted)
        body, size = codec.body_reader(frame, pos)
        nulls.check(body)
    except MalformedRequestError:
        raise
    except Exception as exc:  # the native reader raises assorted errors on garbage
        raise MalformedRequestError(
            f"could not decode api {pre.api_key} v{pre.api_version} "
            f"(correlation id {pre.correlation_id}): {exc}"
        ) from exc
    return DecodedRequest(
        pre.api_key, pre.api_version, pre.correlation_id, header.client_id, body
    )


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """Encode a typed response into a size-prefixed frame.

    Raises:
        LocalProtocolError: the body does not fit the schema (a broker bug).
    """
    codec = _response_codec(api_key, api_version)
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    buf.write(_I32.pack(correlation_id))
    if codec.header_version == 1:
        buf.write(_CORRELATION_V1_EMPTY_TAGS)
    try:
        codec.writer(buf, body)
    except Exception as exc:
        raise LocalProtocolError(
            f"could not encode api {api_key} v{api_version} response: {exc}"
        ) from exc
    # The size goes in place and getvalue() hands over BytesIO's own buffer: no copy of a frame
    # that can be megabytes (fetch answers), where getbuffer() + bytes() copied it once more.
    size = buf.tell() - 4
    buf.seek(0)
    buf.write(_I32.pack(size))
    return buf.getvalue()


# A bytes value at least this long (record batches) stays a part of its own in a frame made by
# encode_response_parts instead of being copied into the frame.
SPLICE_MIN_BYTES = 64 * 1024


class _PartsWriter:
    """The write buffer of :func:`encode_response_parts`: small writes are joined, a large
    ``bytes`` value is kept by reference as a part of its own."""

    __slots__ = ("parts", "small")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.small = bytearray()

    def write(self, data: Any) -> int:
        n = len(data)
        if n >= SPLICE_MIN_BYTES and type(data) is bytes:  # immutable: safe to keep
            if self.small:
                self.parts.append(bytes(self.small))
                self.small = bytearray()
            self.parts.append(data)
        else:
            self.small += data
        return n


def encode_response_parts(api_key: int, api_version: int, correlation_id: int,
                          body: Any) -> bytes | tuple[bytes, ...]:
    """:func:`encode_response`, except that a response holding large record data (ShareFetch)
    comes back as the frame's parts in order (the record batches as they were read, not
    copied), for the transport's ``writelines``; one ``bytes`` when there is none.

    Raises:
        LocalProtocolError: the body does not fit the schema (a broker bug).
    """
    codec = _response_codec(api_key, api_version)
    w = _PartsWriter()
    w.small += _I32.pack(0) + _I32.pack(correlation_id)
    if codec.header_version == 1:
        w.small += _CORRELATION_V1_EMPTY_TAGS
    try:
        codec.writer(w, body)
    except Exception as exc:
        raise LocalProtocolError(
            f"could not encode api {api_key} v{api_version} response: {exc}"
        ) from exc
    if not w.parts:
        _I32.pack_into(w.small, 0, len(w.small) - 4)
        return bytes(w.small)
    parts = w.parts
    if w.small:
        parts.append(bytes(w.small))
    size = sum(len(p) for p in parts) - 4
    parts[0] = _I32.pack(size) + parts[0][4:]  # the header part is small (never a record part)
    return tuple(parts)


@lru_cache(maxsize=None)
def _client_request_codec(api_key: int, api_version: int) -> tuple[bool, Any]:
    """(flexible header, body writer) of a request a client sends (looked up once: kio's
    module lookup and the type scan cost ~25 us, and the broker's inter-broker client sends a
    request per share-state flush). WriteShareGroupState has a direct body writer."""
    module = load_payload_module(api_key, api_version, EntityType.request)
    request_type = _payload_type(module, "Request")
    direct = share_state_codec.REQUEST_WRITERS.get((api_key, api_version))
    return bool(request_type.__flexible__), direct or entity_writer(request_type)


@lru_cache(maxsize=None)
def _client_response_codec(api_key: int, api_version: int) -> tuple[int, Any]:
    """(body position in the frame, body reader) of a response a client reads (looked up
    once, as above)."""
    module = load_payload_module(api_key, api_version, EntityType.response)
    resp_type = _payload_type(module, "Response")
    pos = 4 + (1 if response_header_version(api_key, resp_type.__flexible__) == 1 else 0)
    return pos, entity_reader(resp_type)


_REQUEST_HEAD = struct.Struct(">hhih")  # RequestApiKey, RequestApiVersion, CorrelationId, len


def request_header(api_key: int, api_version: int, correlation_id: int,
                   client_id: str | None, flexible: bool) -> bytes:
    """Request header v2 (``flexible``: with empty tagged fields) or v1, the bytes kio writes
    (tests/unit/protocol/test_share_state_codec.py): ``client_id`` is a nullable, non-compact
    string in both. Written directly: kio's writer validated every field through its phantom
    types, a few microseconds per request the broker's inter-broker client sends."""
    data = b"" if client_id is None else client_id.encode()
    head = _REQUEST_HEAD.pack(api_key, api_version, correlation_id,
                              -1 if client_id is None else len(data))
    return head + data + b"\x00" if flexible else head + data


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """Encode a typed request into a size-prefixed frame (the clients' and the tests')."""
    flexible, write_body = _client_request_codec(api_key, api_version)
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    buf.write(request_header(api_key, api_version, correlation_id, client_id, flexible))
    write_body(buf, body)
    data = buf.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    data.release()
    return out


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """Decode a response frame (without size prefix) into (correlation id, body).

    Raises:
        MalformedRequestError: the frame does not decode.
    """
    pos, read_body = _client_response_codec(api_key, api_version)
    (correlation_id,) = _I32.unpack_from(frame, 0)
    try:
        body, _ = read_body(frame, pos)
    except Exception as exc:
        raise MalformedRequestError(f"could not decode api {api_key} v{api_version} response") from exc
    return correlation_id, body
