"""Incremental decoder for Kafka's size-prefixed frames.

A Kafka connection is a stream of frames, each a big-endian int32 size followed by that many bytes.
``FrameDecoder.feed`` accepts any split of that stream and returns every frame that is complete,
in order; a partial frame stays buffered. Invariants:

- the decoder never buffers more than one frame's header plus ``max_frame_bytes`` of payload;
- a size prefix that is negative or above ``max_frame_bytes`` raises ``FrameTooLargeError`` before
  any of that frame's payload is buffered (Kafka's ``InvalidReceiveException``), so a client claiming
  2 GiB costs us nothing;
- any split of a valid stream yields the same frames (property-tested);
- a large frame (``LARGE_FRAME_BYTES`` or more) is collected as the received chunks themselves and
  joined once when complete, so each byte is copied once however the stream is split (growing one
  buffer chunk by chunk copied a 4 MiB produce request many times over).
"""

from __future__ import annotations

import struct

from protocol.errors import FrameTooLargeError

_SIZE = struct.Struct(">i")

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
LARGE_FRAME_BYTES = 256 * 1024


class FrameDecoder:
    """Turns received bytes into whole frames (without their size prefix)."""

    __slots__ = ("_buf", "_got", "_max", "_need", "_parts")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes
        self._need = -1  # payload size of the frame being assembled, -1 while reading its prefix
        # A large frame being collected: its chunks so far (bytes) and their total size.
        self._parts: list[bytes] | None = None
        self._got = 0

    @property
    def buffered(self) -> int:
        """Bytes held for the frame being assembled."""
        return len(self._buf) + self._got

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return the frames they complete.

        Raises:
            FrameTooLargeError: a size prefix is negative or above the cap.
        """
        frames: list[bytes] = []
        if self._parts is not None:
            data = self._collect(data, frames)
            if not data:
                return frames
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        while True:
            if self._need < 0:
                if end - pos < 4:
                    break
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0 or size > self._max:
                    self._buf = bytearray()
                    raise FrameTooLargeError(
                        f"frame size {size} is outside 0..{self._max} "
                        "(socket.request.max.bytes); closing the connection"
                    )
                pos += 4
                self._need = size
            if end - pos < self._need:
                if self._need >= LARGE_FRAME_BYTES:
                    self._parts = [bytes(buf[pos:end])]
                    self._got = end - pos
                    pos = end
                break
            frames.append(bytes(buf[pos : pos + self._need]))
            pos += self._need
            self._need = -1
        if pos:
            del buf[:pos]
        return frames

    def _collect(self, data: bytes | bytearray | memoryview, frames: list[bytes]) -> bytes:
        """Add to the large frame being collected; return the bytes after it (if it completed)."""
        parts = self._parts
        assert parts is not None
        take = self._need - self._got
        rest = b""
        if len(data) <= take:
            # uvloop hands us fresh bytes objects: keep them; copy anything else.
            parts.append(data if type(data) is bytes else bytes(data))
            self._got += len(data)
        else:
            with memoryview(data) as view:
                parts.append(bytes(view[:take]))
                rest = bytes(view[take:])
            self._got += take
        if self._got == self._need:
            frames.append(parts[0] if len(parts) == 1 else b"".join(parts))
            self._parts, self._got, self._need = None, 0, -1
        return rest


def encode_frame(payload: bytes) -> bytes:
    """Prefix a payload with its size."""
    return _SIZE.pack(len(payload)) + payload
