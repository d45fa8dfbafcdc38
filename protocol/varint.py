"""Kafka's signed varints (zig-zag, base-128 little-endian groups), as record fields use them.

Pure functions over bytes. The hot loops of the log validator and the request guard keep their
own unrolled decoders; everything else reads and writes varints here.
"""

from __future__ import annotations

MAX_VARINT_BYTES = 10  # a zig-zag varlong


def read_varint(b: bytes | bytearray | memoryview, q: int) -> tuple[int, int]:
    """The zig-zag varint at ``q``: (value, position after it).

    Raises:
        ValueError: longer than 10 bytes; IndexError: cut off.
    """
    value = shift = 0
    for k in range(MAX_VARINT_BYTES):
        x = b[q + k]
        value |= (x & 0x7F) << shift
        if x < 0x80:
            return (value >> 1) ^ -(value & 1), q + k + 1
        shift += 7
    raise ValueError(f"varint at byte {q} is longer than {MAX_VARINT_BYTES} bytes")


def encode_varint(value: int) -> bytes:
    """``value`` (a signed 64-bit integer) as a zig-zag varint."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)
