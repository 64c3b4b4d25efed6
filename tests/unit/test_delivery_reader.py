"""The delivery reader (native and reference, same tests): deliveries taken whole out of the
bytes pika would have read, every other frame handed back in order, frames checked.

The frames are written by pika's own codec (tests/support/pika_wire.py), so the reader is checked against
an independent encoder, cut at every byte boundary as a socket may cut them.
"""

from __future__ import annotations

from typing import Any

import pika
import pika.frame
import pika.spec
import pytest
from pumpd.dataplane.frames import FrameError

from tests.support.impls import IMPLEMENTATIONS, delivery_reader_class
from tests.support.pika_wire import deliver_frames, method, raw_properties

CH = 1


@pytest.fixture(params=IMPLEMENTATIONS)
def reader_class(request: pytest.FixtureRequest) -> Any:
    return delivery_reader_class(request.param)


def feed_in_pieces(reader: Any, data: bytes, piece: int) -> bytes:
    passed = b""
    for i in range(0, len(data), piece):
        passed += reader.feed(data[i:i + piece])
    return passed


RICH = pika.BasicProperties(content_type="application/json", delivery_mode=2, priority=7,
                            headers={"tenant": "a", "n": 3, "nested": {"x": [1, b"b"]}},
                            message_id="m-1", timestamp=1_700_000_000)


def test_deliveries_come_out_whole_and_the_rest_goes_to_pika_in_order(reader_class: Any) -> None:
    heartbeat = pika.frame.Heartbeat().marshal()
    qos_ok = method(CH, pika.spec.Basic.QosOk())
    other_channel = deliver_frames(9, b"not mine", channel=2)
    data = b"".join([
        qos_ok,
        *deliver_frames(1, b"plain", channel=CH),
        heartbeat,
        *deliver_frames(2, b"rich" * 100, RICH, channel=CH, exchange="", routing_key="q",
                        redelivered=True),
        *other_channel,
        *deliver_frames(3, b"", channel=CH),  # an empty body: no body frame at all
        method(CH, pika.spec.Basic.Cancel(consumer_tag="ctag-1")),
    ])
    for piece in (1, 7, 64, len(data)):
        reader = reader_class(CH)
        passed = feed_in_pieces(reader, data, piece)
        assert passed == b"".join([qos_ok, heartbeat, *other_channel,
                                   method(CH, pika.spec.Basic.Cancel(consumer_tag="ctag-1"))])
        assert reader.pending == 3 and reader.delivered == 3
        got = reader.take(2)
        assert got == [(1, False, b"ex", b"rk", raw_properties(pika.BasicProperties()), b"plain"),
                       (2, True, b"", b"q", raw_properties(RICH), b"rich" * 100)]
        assert reader.take(10) == [(3, False, b"ex", b"rk",
                                    raw_properties(pika.BasicProperties()), b"")]
        assert reader.take(10) == [] and reader.pending == 0


def test_a_body_over_many_frames_is_joined(reader_class: Any) -> None:
    body = bytes(range(256)) * 40  # 10,240 bytes in frames of 4,088
    reader = reader_class(CH, frame_max=4096)
    data = b"".join(deliver_frames(7, body, channel=CH, frame_max=4096))
    assert feed_in_pieces(reader, data, 1000) == b""
    [(tag, _, _, _, _, got)] = reader.take(5)
    assert tag == 7 and got == body


def test_clear_forgets_a_half_read_message(reader_class: Any) -> None:
    reader = reader_class(CH)
    frames = deliver_frames(1, b"x" * 10, channel=CH)
    reader.feed(b"".join(frames[:2]) + frames[2][:5])
    reader.clear()
    assert reader.pending == 0
    reader.feed(b"".join(deliver_frames(1, b"fresh", channel=CH)))
    assert [d[5] for d in reader.take(5)] == [b"fresh"]


@pytest.mark.parametrize("case", ["no header", "body too long", "end octet", "over frame_max",
                                  "body over bound", "truncated deliver"])
def test_broken_frames_are_refused(reader_class: Any, case: str) -> None:
    reader = reader_class(CH, frame_max=4096, max_body_size=1000)
    deliver, header, _body = deliver_frames(1, b"abc", channel=CH)
    if case == "no header":
        data, match = deliver + deliver, "without its content header"
    elif case == "body too long":
        data, match = deliver + header + pika.frame.Body(CH, b"abcd").marshal(), "more than the 3"
    elif case == "end octet":
        data, match = deliver[:-1] + b"\x00" + header, "end octet"
    elif case == "over frame_max":
        data, match = pika.frame.Body(2, b"x" * 5000).marshal(), "exceeds the negotiated"
    elif case == "body over bound":
        data = b"".join(deliver_frames(1, b"y" * 1001, channel=CH, frame_max=4096))
        match = "1001"
    else:
        payload = deliver[7:-1]
        short = payload[:12]  # the consumer tag, and too little after it
        data = b"\x01" + CH.to_bytes(2, "big") + len(short).to_bytes(4, "big") + short + b"\xce"
        match = "basic.deliver truncated"
    with pytest.raises(FrameError, match=match):
        reader.feed(data)


def test_take_stops_at_a_byte_bound_and_counts_what_waits(reader_class: Any) -> None:
    reader = reader_class(CH)
    sizes = [10, 30, 5, 100, 1]
    reader.feed(b"".join(f for i, n in enumerate(sizes)
                         for f in deliver_frames(i + 1, b"x" * n, channel=CH)))
    assert reader.pending == 5 and reader.pending_bytes == 146
    # the bound is reached by the second body: two taken
    assert [len(d[5]) for d in reader.take(10, max_bytes=35)] == [10, 30]
    assert reader.pending_bytes == 106
    # one body over the bound alone is still taken (a micro-batch always moves)
    assert [len(d[5]) for d in reader.take(10, max_bytes=1)] == [5]
    assert [len(d[5]) for d in reader.take(10, max_bytes=50)] == [100]
    assert [len(d[5]) for d in reader.take(10, max_bytes=1000)] == [1]
    assert reader.pending == 0 and reader.pending_bytes == 0
    reader.feed(b"".join(deliver_frames(9, b"y" * 7, channel=CH)))
    reader.clear()
    assert reader.pending_bytes == 0
