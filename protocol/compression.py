"""Decompressing the records of a v2 batch, with a bound on the output (pure, no I/O).

Codec ids are the low three bits of the batch attributes: 1 gzip, 2 snappy, 3 lz4, 4 zstd
(0 is none; 5-7 are unassigned). The formats are what producers write:

- gzip: a gzip member (RFC 1952);
- snappy: either the xerial framing the Java client writes (an 8-byte magic, two version ints,
  then length-prefixed raw snappy blocks) or one raw snappy block (librdkafka);
- lz4: the LZ4 frame format;
- zstd: a zstd frame.

cramjam does the work for every codec (one native wheel). Output goes into a buffer of bounded
size, so a small batch that expands to gigabytes (a "decompression bomb") costs at most ``limit``
bytes of memory: the buffer starts at a guess and grows by 4x up to ``limit``.
"""

from __future__ import annotations

import struct

import cramjam

__all__ = ["CODEC_NAMES", "DecompressionError", "decompress"]

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, version int32, compatible version int32
_INT32 = struct.Struct(">i")
_FIRST_GUESS = 64 * 1024
_DEFLATE_MAX_RATIO = 1032
# cramjam's message when the output buffer filled up before the input ended.
_FULL = "failed to write whole buffer"


class DecompressionError(ValueError):
    """The payload does not decompress with its codec, or expands beyond the limit."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def decompress(codec: int, data: bytes | bytearray | memoryview, limit: int) -> memoryview:
    """The decompressed bytes of ``data`` (at most ``limit`` of them).

    Raises:
        DecompressionError: unknown codec, corrupt input, or output larger than ``limit``
            (``too_large`` set).
    """
    if codec == 2:
        return _snappy(data, limit)
    module = _MODULES.get(codec)
    if module is None:
        raise DecompressionError(f"unknown compression codec {codec}")
    guess = _FIRST_GUESS + 4 * len(data)
    if codec == 1 and len(data) >= 4:
        # The gzip trailer holds the input size modulo 2^32: a good first guess, but only a claim
        # (deflate expands at most about 1032x, so a larger one is not believed).
        isize = int.from_bytes(bytes(data[-4:]), "little")
        guess = max(guess, min(isize + 1, _DEFLATE_MAX_RATIO * len(data) + _FIRST_GUESS))
    return _bounded(module, data, guess, limit, CODEC_NAMES[codec])


def _bounded(module: object, data: bytes | bytearray | memoryview, guess: int, limit: int,
             name: str) -> memoryview:
    size = min(guess, limit + 1)
    while True:
        out = bytearray(size)
        try:
            n = module.decompress_into(data, out)  # type: ignore[attr-defined]
        except cramjam.DecompressionError as exc:
            if _FULL not in str(exc):
                raise DecompressionError(f"{name} payload does not decompress: {exc}") from None
            if size > limit:
                raise DecompressionError(
                    f"{name} payload decompresses to more than {limit} bytes", too_large=True
                ) from None
            size = min(size * 4, limit + 1)
            continue
        if n > limit:
            raise DecompressionError(f"{name} payload decompresses to more than {limit} bytes",
                                     too_large=True)
        del out[n:]  # shrinks in place: the buffer then holds exactly the records
        return memoryview(out)


def _snappy(data: bytes | bytearray | memoryview, limit: int) -> memoryview:
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        return _snappy_block(view, limit)
    # Xerial framing: [int32 length][raw snappy block] repeated after the 16-byte header.
    pos = _XERIAL_HEADER
    parts: list[memoryview] = []
    total = 0
    while pos < len(view):
        if pos + 4 > len(view):
            raise DecompressionError("snappy (xerial) payload ends inside a block length")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise DecompressionError(f"snappy (xerial) block of {length} bytes overruns the batch")
        block = _snappy_block(view[pos : pos + length], limit - total)
        total += len(block)
        parts.append(block)
        pos += length
    if len(parts) == 1:
        return parts[0]
    return memoryview(b"".join(parts))


def _snappy_block(view: memoryview, limit: int) -> memoryview:
    # A raw block starts with its uncompressed length: check it before allocating anything.
    try:
        n = cramjam.snappy.decompress_raw_len(view)
    except cramjam.DecompressionError as exc:
        raise DecompressionError(f"snappy payload does not decompress: {exc}") from None
    if n > limit:
        raise DecompressionError(f"snappy payload decompresses to more than {limit} bytes",
                                 too_large=True)
    out = bytearray(n)
    try:
        got = cramjam.snappy.decompress_raw_into(view, out)
    except cramjam.DecompressionError as exc:
        raise DecompressionError(f"snappy payload does not decompress: {exc}") from None
    del out[got:]
    return memoryview(out)


_MODULES = {1: cramjam.gzip, 3: cramjam.lz4, 4: cramjam.zstd}
