"""pumpd.testing.stomp's frame codec (no broker): encoding, header escapes, bodies by length or
up to the NUL, frames split across reads, and the bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.testing.stomp import FrameReader, StompError, StompFrame, encode_frame

header_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)


def _read_all(data: bytes, chunk: int) -> list[StompFrame]:
    reader = FrameReader()
    frames: list[StompFrame] = []
    for i in range(0, len(data), chunk):
        reader.feed(data[i : i + chunk])
        while (frame := reader.next_frame()) is not None:
            frames.append(frame)
    return frames


def test_encode_frame_escapes_headers_and_counts_the_body() -> None:
    data = encode_frame("SEND", {"destination": "/queue/a", "k:e\\y": "v\nw\r"}, b"a\0b")
    assert data == (b"SEND\ndestination:/queue/a\nk\\ce\\\\y:v\\nw\\r\ncontent-length:3\n\n"
                    b"a\0b\0")


@given(
    headers=st.dictionaries(header_text.filter(bool), header_text, max_size=5),
    body=st.binary(max_size=300),
    chunk=st.integers(1, 64),
)
def test_frames_round_trip_through_any_split(headers: dict[str, str], body: bytes,
                                             chunk: int) -> None:
    headers.pop("content-length", None)
    data = encode_frame("MESSAGE", headers, body) + b"\n" + encode_frame("RECEIPT", {"r": "1"})

    frames = _read_all(data, chunk)

    expected = dict(headers)
    if body:
        expected["content-length"] = str(len(body))
    assert frames == [StompFrame("MESSAGE", expected, body), StompFrame("RECEIPT", {"r": "1"})]


def test_a_body_without_content_length_ends_at_the_nul() -> None:
    [frame] = _read_all(b"\r\n\nMESSAGE\r\na:1\r\n\r\nhello\0", 5)
    assert frame == StompFrame("MESSAGE", {"a": "1"}, b"hello")


def test_line_ends_may_mix() -> None:
    [frame] = _read_all(b"MESSAGE\r\na:1\r\nb:2\n\r\nbody\0", 3)
    assert frame == StompFrame("MESSAGE", {"a": "1", "b": "2"}, b"body")


def test_the_first_of_a_repeated_header_wins() -> None:
    [frame] = _read_all(b"MESSAGE\na:1\na:2\n\n\0", 100)
    assert frame.headers == {"a": "1"}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"MESSAGE\nno colon\n\n\0", "without a colon"),
        (b"MESSAGE\na:\\t\n\n\0", r"bad escape \\t"),
        (b"MESSAGE\ncontent-length:x\n\n\0", "bad content-length"),
        (b"MESSAGE\ncontent-length:2\n\nabc\0", "no NUL after its 2-byte body"),
        (b"MESSAGE\ncontent-length:99999999\n\n", "exceeds the limit"),
    ],
)
def test_malformed_frames_are_refused(data: bytes, match: str) -> None:
    reader = FrameReader(max_frame_bytes=1024)
    reader.feed(data)
    with pytest.raises(StompError, match=match):
        reader.next_frame()


def test_a_frame_without_an_end_is_bounded() -> None:
    reader = FrameReader(max_frame_bytes=1024)
    reader.feed(b"MESSAGE\n\n" + b"x" * 2000)
    with pytest.raises(StompError, match="exceeds the limit of 1024"):
        reader.next_frame()
    endless_head = FrameReader()
    endless_head.feed(b"MESSAGE\n" + b"h:v\n" * 20000)
    with pytest.raises(StompError, match="head longer than"):
        endless_head.next_frame()


def test_an_incomplete_frame_waits_for_more() -> None:
    reader = FrameReader()
    reader.feed(b"MESSAGE\ncontent-length:4\n\nab")
    assert reader.next_frame() is None
    reader.feed(b"\0d\0")
    assert reader.next_frame() == StompFrame("MESSAGE", {"content-length": "4"}, b"ab\0d")


def test_encode_frame_refuses_a_bad_command() -> None:
    with pytest.raises(ValueError, match="bad STOMP command"):
        encode_frame("SE ND")
