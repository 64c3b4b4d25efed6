"""One table of malformed frames, fed to every data plane (relay source and destination sides,
publish plane; native and reference) by tests/unit/test_malformed_frames.py, and the runner that
turns what a plane did into a comparable verdict (also used by tests/unit/test_frame_fuzz.py).

Every case's stream is followed by :data:`MARKER`, a valid frame on another channel: a plane
that reads past the bad frame would hand it to pika (or put its bytes in a field), so the tests
check that the marker's text appears in nothing a plane returned.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from pumpd.dataplane import publish_plane_ref, relay_ref
from pumpd.dataplane.frames import ACK_MODE_ON_CONFIRM
from pumpd.dataplane.properties import encode_hop
from pumpd.testing.hostile import (
    basic_ack,
    basic_deliver,
    basic_return,
    body,
    content_header,
    frame,
    longstr,
    method,
    shortstr,
)

from tests.support.impls import native

CH = 1
FRAME_MAX = 131072
MARKER_TEXT = b"MARKER-outside-the-frame"
MARKER = method(7, 10, 10, MARKER_TEXT * 8)
HOP = encode_hop([("shovelled-by", "fuzz"), ("shovel-name", "s")])

# basic.deliver, then a valid message of 3 bytes
DELIVER = basic_deliver(CH, 1)
MESSAGE = DELIVER + content_header(CH, 3) + body(CH, b"abc")
RETURN = basic_return(CH, 312, shortstr("NO_ROUTE"), shortstr("ex"), shortstr("rk"))


@dataclass(frozen=True)
class Case:
    name: str
    plane: str  # "source" / "destination" (the relay's sides) or "publish"
    stream: bytes
    verdict: str  # the start of the verdict both implementations must give
    edits: bool = False  # the relay edits properties (forward headers): it parses them


def _headers_props(table: bytes) -> bytes:
    return struct.pack(">H", 1 << 13) + table  # only the headers flag


CASES = [
    # -- frame headers, on every plane
    *[Case(f"oversized frame header ({plane})", plane,
           (DELIVER + content_header(CH, 10) if plane == "source" else b"")
           + frame(3, CH, b"", size=0xFFFFFFF0, end=b""),
           "error: a frame of 4294967288 bytes (type 3, channel 1) exceeds the negotiated "
           "frame_max 131072") for plane in ("source", "destination", "publish")],
    *[Case(f"frame_max + 1 ({plane})", plane, frame(1, 0, bytes(FRAME_MAX - 7)),
           "error: a frame of 131073 bytes (type 1, channel 0) exceeds the negotiated frame_max")
      for plane in ("source", "destination", "publish")],
    *[Case(f"unknown frame type ({plane})", plane, frame(5, CH, b"x"),
           "error: unknown frame type 5 on channel 1")
      for plane in ("source", "destination", "publish")],
    *[Case(f"bad frame-end octet ({plane})", plane, frame(1, CH, b"\x00\x3c\x00\x50", end=b"\x00"),
           "error: frame end octet missing on channel 1")
      for plane in ("source", "destination", "publish")],
    *[Case(f"0-byte method ({plane})", plane, frame(1, CH, b""), "error: method frame of 0 bytes")
      for plane in ("source", "destination", "publish")],
    *[Case(f"2-byte method ({plane})", plane, frame(1, CH, b"\x00\x3c"),
           "error: method frame of 2 bytes") for plane in ("source", "destination", "publish")],
    # -- the source side: deliveries
    Case("body_size 2^63", "source", DELIVER + content_header(CH, 1 << 63),
         "error: a content header announces a body of 9223372036854775808 bytes, over the limit"),
    Case("short content header", "source", DELIVER + frame(2, CH, b"\x00\x3c\x00"),
         "error: content header of 3 bytes"),
    Case("empty content header", "source", DELIVER + frame(2, CH, b""),
         "error: content header of 0 bytes"),
    Case("deliver: consumer tag longer than the frame", "source",
         method(CH, 60, 60, shortstr("c", length=200) + bytes(9) + b"\x00\x00"),
         "error: basic.deliver truncated"),
    Case("deliver: exchange longer than the frame", "source",
         method(CH, 60, 60, shortstr("c") + bytes(9) + shortstr("ex", length=90) + b"\x00"),
         "error: basic.deliver truncated"),
    Case("deliver: routing key longer than the frame", "source",
         method(CH, 60, 60, shortstr("c") + bytes(9) + shortstr("") + shortstr("rk", length=255)),
         "error: basic.deliver truncated"),
    Case("deliver: no routing key", "source",
         method(CH, 60, 60, shortstr("c") + bytes(9) + shortstr("")),
         "error: basic.deliver truncated"),
    Case("deliver: 4 bytes", "source", method(CH, 60, 60), "error: basic.deliver truncated"),
    Case("body longer than body_size", "source",
         DELIVER + content_header(CH, 2) + body(CH, b"abc"),
         "error: body frames longer than the content header's body size"),
    Case("method where a header belongs", "source", DELIVER + DELIVER,
         "error: expected a content header after basic.deliver, got frame type 1"),
    Case("header where a body belongs", "source",
         DELIVER + content_header(CH, 5) + content_header(CH, 5),
         "error: expected a body frame, got frame type 2"),
    Case("headers table longer than the frame", "source",
         DELIVER + content_header(CH, 0, _headers_props(longstr(b"\x01k", length=5000))),
         "undeliverable: its properties cannot be parsed: content header properties truncated",
         edits=True),
    Case("headers table: entry longer than the table", "source",
         DELIVER + content_header(CH, 0, _headers_props(longstr(b"\x01kS" + longstr(b"v", length=900)))),
         "undeliverable: its properties cannot be parsed: headers table truncated", edits=True),
    Case("headers table: key longer than the table", "source",
         DELIVER + content_header(CH, 0, _headers_props(longstr(b"\x30kk"))),
         "undeliverable: its properties cannot be parsed: headers table truncated", edits=True),
    Case("shortstr property longer than the header", "source",
         DELIVER + content_header(CH, 0, struct.pack(">H", 1 << 15) + shortstr("t", length=250)),
         "undeliverable: its properties cannot be parsed: content header properties truncated",
         edits=True),
    Case("property flags cut short", "source", DELIVER + content_header(CH, 0, b"\x80"),
         "undeliverable: its properties cannot be parsed: content header without property flags",
         edits=True),
    Case("property flag continuation", "source", DELIVER + content_header(CH, 0, b"\x00\x01"),
         "undeliverable: its properties cannot be parsed: property flag continuation", edits=True),
    # -- the destination side and the publish plane: confirms and returns
    *[c for plane in ("destination", "publish") for c in (
        Case(f"4-byte ack ({plane})", plane, method(CH, 60, 80), "error: basic.ack truncated"),
        Case(f"12-byte nack ({plane})", plane, method(CH, 60, 120, bytes(8)),
             "error: basic.nack truncated"),
        Case(f"return: 4 bytes ({plane})", plane, method(CH, 60, 50),
             "error: basic.return truncated"),
        Case(f"return: reply_text longer than the frame ({plane})", plane,
             basic_return(CH, 312, shortstr("NO_ROUTE", length=255), shortstr(""), shortstr("")),
             "error: basic.return truncated"),
        Case(f"return: exchange longer than the frame ({plane})", plane,
             basic_return(CH, 312, shortstr("x"), shortstr("ex", length=200), shortstr("")),
             "error: basic.return truncated"),
        Case(f"return: routing key longer than the frame ({plane})", plane,
             basic_return(CH, 312, shortstr("x"), shortstr("ex"), shortstr("rk", length=3)),
             "error: basic.return truncated"),
        Case(f"return: no routing key ({plane})", plane,
             basic_return(CH, 312, shortstr("x"), shortstr("ex"), b""),
             "error: basic.return truncated"),
        Case(f"return: short content header ({plane})", plane,
             RETURN + frame(2, CH, b"\x00\x3c"), "error: content header of 2 bytes"),
        Case(f"return: body_size 2^63 ({plane})", plane, RETURN + content_header(CH, 1 << 63),
             "error: a content header announces a body of 9223372036854775808 bytes"),
        Case(f"return: body longer than body_size ({plane})", plane,
             RETURN + content_header(CH, 1) + body(CH, b"ab"),
             "error: body frames longer than the content header's body size"),
        Case(f"return: method where a header belongs ({plane})", plane, RETURN + RETURN,
             "error: expected a content header after basic.return"),
        Case(f"return: header where a body belongs ({plane})", plane,
             RETURN + content_header(CH, 4) + content_header(CH, 4),
             "error: expected a body frame, got frame type 2"),
    )],
    # -- well-formed streams: the verdict, and the marker handed to pika untouched
    Case("a valid message", "source", MESSAGE, "ok"),
    Case("a valid message, edited", "source", MESSAGE, "ok", edits=True),
    Case("a valid return and ack (destination)", "destination",
         RETURN + content_header(CH, 2) + body(CH, b"hi") + basic_ack(CH, 1), "returned: 312"),
    Case("a valid return and ack (publish)", "publish",
         RETURN + content_header(CH, 2) + body(CH, b"hi") + basic_ack(CH, 1), "ok"),
]


def make_plane(plane: str, impl: str, *, edits: bool = False) -> Any:
    if plane == "publish":
        cls = publish_plane_ref.PublishPlane if impl == "reference" else native().PublishPlane
        return cls(channel=CH, frame_max=FRAME_MAX, exchange=b"x", mandatory=True)
    cls = relay_ref.Relay if impl == "reference" else native().Relay
    return cls(source_channel=CH, dest_channel=CH, dest_frame_max=FRAME_MAX,
               source_frame_max=FRAME_MAX, ack_mode=ACK_MODE_ON_CONFIRM, window=64,
               forward_hop=HOP if edits else None, hold_returns=True)


def feed(p: Any, plane: str, data: bytes) -> bytes:
    if plane == "publish":
        return bytes(p.feed(data))
    return bytes(p.feed_source(data) if plane == "source" else p.feed_destination(data))


def outputs(p: Any, plane: str) -> list[tuple[str, bytes]]:
    """Everything a plane hands out besides the passthrough: ("field", ...) for what is cut from
    one received frame (names, reply texts, properties), ("made", ...) for what the plane
    encodes or joins (publish frames, acks, bodies, reasons)."""
    out: list[tuple[str, bytes]] = []
    if plane == "publish":
        for _seq, _code, text, exchange, rk, props in p.take_returns():
            out += [("field", text), ("field", exchange), ("field", rk), ("field", props)]
        out.append(("made", bytes(p.take_output())))
        return out
    out.append(("made", bytes(p.take_publishes())))
    out.append(("made", bytes(p.take_source_output())))
    for item in (p.take_undeliverable(), p.last_message):
        if item is not None:
            _tag, _redelivered, exchange, rk, props, body_, reason = item
            out += [("field", exchange), ("field", rk), ("field", props), ("made", body_),
                    ("made", reason.encode())]
    returned = p.take_returned()
    if returned is not None:
        _code, text, exchange, rk, props, body_ = returned
        out += [("field", text.encode()), ("field", exchange), ("field", rk), ("field", props),
                ("made", body_)]
    return [(kind, bytes(data)) for kind, data in out]


def run(plane: str, impl: str, chunks: list[bytes], *, edits: bool = False
        ) -> tuple[str, bytes, list[tuple[str, bytes]]]:
    """Feed ``chunks`` in turn: (verdict, passthrough, outputs). The verdict is ``error: ...``
    (a FrameError, its message), ``undeliverable: ...`` (the relay paused on a message, its
    reason), ``returned: CODE`` (the relay paused on a returned message) or ``ok``. Any other
    exception propagates: the tests fail on it."""
    from pumpd.dataplane.properties import FrameError

    p = make_plane(plane, impl, edits=edits)
    passed = b""
    verdict = "ok"
    try:
        for chunk in chunks:
            passed += feed(p, plane, chunk)
            if plane == "source" and p.paused:
                verdict = f"undeliverable: {p.take_undeliverable()[6]}"
                break
            if plane == "destination" and p.destination_paused:
                verdict = f"returned: {p.take_returned()[0]}"
                break
    except FrameError as exc:
        verdict = f"error: {exc}"
    return verdict, passed, outputs(p, plane)
