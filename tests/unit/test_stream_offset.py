"""A stream message's offset is read from its ``x-stream-offset`` header."""

from __future__ import annotations

from pumpd.dataplane.properties import encode_properties
from pumpd.engine.stream_position import stream_offset


def test_stream_offset_is_read_from_the_headers() -> None:
    assert stream_offset(encode_properties({"headers": {"a": "b", "x-stream-offset": 2**40}})) \
        == 2**40
    assert stream_offset(encode_properties({"headers": {"x-stream-offset": 7}})) == 7
    assert stream_offset(encode_properties({"message_id": "m"})) is None
    assert stream_offset(b"\x00") is None

