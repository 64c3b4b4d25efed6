"""pumpd.amqp10.framing: frames cut from a stream fed in any pieces; heartbeats, SASL frames and
extended headers; bad headers refused as soon as their 8 bytes are there."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.amqp10.framing import (
    AMQP_HEADER,
    HEARTBEAT,
    MIN_MAX_FRAME_SIZE,
    SASL_HEADER,
    TYPE_AMQP,
    TYPE_SASL,
    Frame,
    FrameReader,
    FramingError,
    encode_frame,
)


def test_constants() -> None:
    assert AMQP_HEADER == b"AMQP\x00\x01\x00\x00"
    assert SASL_HEADER == b"AMQP\x03\x01\x00\x00"
    assert (TYPE_AMQP, TYPE_SASL, MIN_MAX_FRAME_SIZE) == (0, 1, 512)
    assert HEARTBEAT == encode_frame(0, b"")


def test_encode_frame_layout() -> None:
    assert encode_frame(7, b"\x00\x53\x18\x45", b"pay") == (
        struct.pack(">IBBH", 15, 2, 0, 7) + b"\x00\x53\x18\x45pay")
    assert encode_frame(0, b"x", type=TYPE_SASL)[5] == TYPE_SASL


frames = st.lists(st.tuples(st.sampled_from([TYPE_AMQP, TYPE_SASL]), st.integers(0, 0xFFFF),
                            st.binary(max_size=600)), max_size=6)


@given(frames, st.data())
def test_frames_come_out_whole_however_the_stream_is_cut(spec: list[tuple[int, int, bytes]],
                                                        data: st.DataObject) -> None:
    stream = b"".join(encode_frame(ch, body, type=t) for t, ch, body in spec)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    reader = FrameReader(4096)
    got: list[Frame] = []
    last = 0
    for c in [*cuts, len(stream)]:
        got += reader.feed(stream[last:c])
        last = c
    assert got == [Frame(t, ch if t == TYPE_AMQP else 0, body) for t, ch, body in spec]
    assert reader.buffered == 0


def test_heartbeat_is_an_empty_frame() -> None:
    assert FrameReader().feed(HEARTBEAT) == [Frame(TYPE_AMQP, 0, b"")]


def test_extended_header_is_skipped() -> None:
    frame = struct.pack(">IBBH", 8 + 8 + 3, 4, 0, 2) + b"EXTENDED" + b"abc"
    assert FrameReader().feed(frame) == [Frame(TYPE_AMQP, 2, b"abc")]


def test_sasl_frame_channel_is_ignored() -> None:
    frame = struct.pack(">IBBH", 9, 2, 1, 0xBEEF) + b"s"
    assert FrameReader().feed(frame) == [Frame(TYPE_SASL, 0, b"s")]


def test_incomplete_frame_is_kept() -> None:
    r = FrameReader()
    f = encode_frame(1, b"abcdef")
    assert r.feed(f[:10]) == []
    assert r.buffered == 10
    assert r.feed(f[10:] + f[:3]) == [Frame(0, 1, b"abcdef")]
    assert r.buffered == 3


BAD = [
    (struct.pack(">IBBH", 7, 2, 0, 0), "frame size 7 is less than the 8-byte frame header"),
    (struct.pack(">IBBH", 8, 1, 0, 0), "frame data offset 1 is less than 2"),
    (struct.pack(">IBBH", 12, 4, 0, 0), "frame data offset 4 (16 bytes) is beyond the frame's"
                                        " size 12"),
    (struct.pack(">IBBH", 8, 2, 2, 0), "frame type 2 is neither AMQP (0) nor SASL (1)"),
    (struct.pack(">IBBH", 513, 2, 0, 0), "frame size 513 is beyond the maximum frame size 512"),
]


@pytest.mark.parametrize(("header", "message"), BAD, ids=[m[:30] for _, m in BAD])
def test_bad_headers_are_refused_from_the_header_alone(header: bytes, message: str) -> None:
    with pytest.raises(FramingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        FrameReader(MIN_MAX_FRAME_SIZE).feed(header)


def test_oversized_frame_is_refused_before_its_body_is_buffered() -> None:
    r = FrameReader(1024)
    with pytest.raises(FramingError, match="beyond the maximum frame size 1024"):
        r.feed(struct.pack(">IBBH", 2**32 - 1, 2, 0, 0))
    # the stream is broken after this; nothing of a frame's body had to be held
    assert r.buffered == 8


def test_max_frame_size_is_settable_and_bounded() -> None:
    r = FrameReader()
    big = encode_frame(0, b"x" * 1000)
    with pytest.raises(FramingError):
        FrameReader().feed(big)
    r.max_frame_size = 2048
    assert r.feed(big) == [Frame(0, 0, b"x" * 1000)]
    with pytest.raises(ValueError, match="outside 512"):
        r.max_frame_size = 511
    with pytest.raises(ValueError, match="outside 512"):
        FrameReader(2**32)


def test_frame_at_exactly_the_maximum_is_accepted() -> None:
    f = encode_frame(0, b"y" * (MIN_MAX_FRAME_SIZE - 8))
    assert len(f) == MIN_MAX_FRAME_SIZE
    assert FrameReader().feed(f) == [Frame(0, 0, b"y" * (MIN_MAX_FRAME_SIZE - 8))]
