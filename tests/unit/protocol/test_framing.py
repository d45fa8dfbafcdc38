"""The frame decoder: any split of a valid stream gives the same frames; bad sizes are refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import FrameTooLargeError, ProtocolError
from protocol.framing import FrameDecoder, encode_frame

payloads = st.lists(st.binary(max_size=300), max_size=20)


@given(payloads, st.lists(st.integers(min_value=0, max_value=400), max_size=40))
@settings(max_examples=300, deadline=None)
def test_any_split_decodes_to_the_same_frames(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(f) for f in frames)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)])]
    dec = FrameDecoder(max_frame_bytes=1000)
    out: list[bytes] = []
    for piece in pieces:
        out.extend(dec.feed(piece))
    assert out == frames
    assert dec.buffered == 0


@given(st.binary(max_size=2000))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_give_frames_or_protocol_error(data: bytes) -> None:
    dec = FrameDecoder(max_frame_bytes=500)
    try:
        for f in dec.feed(data):
            assert len(f) <= 500
    except ProtocolError:
        pass


@pytest.mark.parametrize(
    "size",
    [pytest.param(2**31 - 1, id="2GiB-1"), pytest.param(-1, id="negative"),
     pytest.param(-(2**31), id="int32-min"), pytest.param(101, id="just-over-cap")],
)
def test_size_prefix_outside_cap_is_refused_before_buffering(size: int) -> None:
    dec = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameTooLargeError):
        dec.feed(struct.pack(">i", size) + b"x" * 10)
    assert dec.buffered == 0


def test_frame_at_cap_is_accepted_and_partial_frames_wait() -> None:
    dec = FrameDecoder(max_frame_bytes=100)
    frame = encode_frame(b"a" * 100)
    assert dec.feed(frame[:50]) == []
    assert dec.feed(frame[50:]) == [b"a" * 100]


def test_zero_length_frame() -> None:
    assert FrameDecoder().feed(encode_frame(b"") * 3) == [b"", b"", b""]


def test_large_frames_from_chunks_of_any_type_and_size_decode_intact() -> None:
    # Buffers a caller reuses after feed() returns must not leak into a frame, and frames may end
    # mid-chunk.
    big = bytes(range(256)) * 4096  # 1 MiB
    stream = encode_frame(big) + encode_frame(b"small") + encode_frame(big[::-1]) + encode_frame(b"")
    for size in (7, 4096, 65536, 300_001, len(stream)):
        dec = FrameDecoder(max_frame_bytes=2 << 20)
        got: list[bytes] = []
        scratch = bytearray(size)
        for i in range(0, len(stream), size):
            chunk = stream[i : i + size]
            if size % 2:
                scratch[: len(chunk)] = chunk
                got += dec.feed(memoryview(scratch)[: len(chunk)])
                scratch[:] = b"\xff" * len(scratch)  # the caller reuses its buffer
            else:
                got += dec.feed(chunk)
            assert dec.buffered <= len(big) + 4
        assert got == [big, b"small", big[::-1], b""], size
        assert dec.buffered == 0
