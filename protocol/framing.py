"""Incremental decoder for Kafka's size-prefixed frames.

A Kafka connection is a stream of frames, each a big-endian int32 size followed by that many bytes.
``FrameDecoder.feed`` accepts any split of that stream and returns every frame that is complete,
in order; a partial frame stays buffered. Invariants:

- the decoder never buffers more than one frame's header plus ``max_frame_bytes`` of payload;
- a size prefix that is negative or above ``max_frame_bytes`` raises ``FrameTooLargeError`` before
  any of that frame's payload is buffered (Kafka's ``InvalidReceiveException``), so a client claiming
  2 GiB costs us nothing;
- any split of a valid stream yields the same frames (property-tested).
"""

from __future__ import annotations

import struct

from protocol.errors import FrameTooLargeError

_SIZE = struct.Struct(">i")

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default


class FrameDecoder:
    """Turns received bytes into whole frames (without their size prefix)."""

    __slots__ = ("_buf", "_max", "_need", "limit_name")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 limit_name: str = "socket.request.max.bytes") -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes
        self._need = -1  # payload size of the frame being assembled, -1 while reading its prefix
        self.limit_name = limit_name  # the config named in FrameTooLargeError

    def set_limit(self, max_frame_bytes: int, limit_name: str) -> None:
        """Change the cap for frames whose size prefix is read from now on (a SASL listener
        caps frames lower until the client has authenticated)."""
        self._max = max_frame_bytes
        self.limit_name = limit_name

    @property
    def buffered(self) -> int:
        """Bytes held for the frame being assembled."""
        return len(self._buf)

    @property
    def partial_size(self) -> int:
        """Declared payload size of the frame being assembled, or -1 before its prefix is read."""
        return self._need

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return the frames they complete.

        Raises:
            FrameTooLargeError: a size prefix is negative or above the cap.
        """
        buf = self._buf
        buf += data
        frames: list[bytes] = []
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
                        f"({self.limit_name}); closing the connection"
                    )
                pos += 4
                self._need = size
            if end - pos < self._need:
                break
            # One copy (a bytearray slice then bytes() made two: ~1 MB each for a
            # replica fetch answer or a producer's batch).
            frames.append(bytes(memoryview(buf)[pos : pos + self._need]))
            pos += self._need
            self._need = -1
        if pos:
            del buf[:pos]
        return frames


def encode_frame(payload: bytes) -> bytes:
    """Prefix a payload with its size."""
    return _SIZE.pack(len(payload)) + payload
