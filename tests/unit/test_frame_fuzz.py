"""Property tests of the frame scanners (the relay's two sides, the publish plane; native and
reference): for arbitrary bytes and for mutated valid streams, cut anywhere, both
implementations give the same verdict, pass the same bytes to pika and hand out the same
results; nothing but FrameError is ever raised; every field handed out (names, reply text,
properties) is bytes of the input, never of memory past it.

``HYPOTHESIS_PROFILE=thorough`` (tests/conftest.py) runs 10,000 examples per property."""

from __future__ import annotations

import itertools
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pumpd.dataplane.properties import encode_properties
from pumpd.testing import hostile as wire

from tests.support.impls import native
from tests.support.malformed_frames import CH, MARKER, run

PLANES = ["source", "source-edits", "destination", "publish"]
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.binary(max_size=12)
props = st.one_of(
    st.just(b"\x00\x00"),
    st.binary(max_size=40),  # whatever: flags and values that may not parse
    st.builds(lambda mid, h: encode_properties({"message_id": mid, "headers": h}),
              st.text(max_size=8), st.dictionaries(st.text(max_size=6),
                                                   st.one_of(st.integers(-9, 9), st.text(max_size=5),
                                                             st.binary(max_size=5)), max_size=3)),
)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """One valid frame or a valid message's frames, on the planes' channel or another."""
    channel = draw(st.sampled_from([CH, CH, CH, 0, 2]))
    kind = draw(st.sampled_from(["message", "return", "ack", "nack", "heartbeat", "other"]))
    if kind == "message" or kind == "return":
        data = draw(st.binary(max_size=30))
        head = (wire.basic_deliver(channel, draw(st.integers(0, 2**64 - 1)),
                                   exchange=draw(st.text(max_size=5)),
                                   routing_key=draw(st.text(max_size=5)))
                if kind == "message" else
                wire.basic_return(channel, 312, wire.shortstr(draw(names)),
                                  wire.shortstr(draw(names)), wire.shortstr(draw(names))))
        out = head + wire.content_header(channel, len(data), draw(props))
        step = draw(st.integers(1, 31))
        return out + b"".join(wire.body(channel, data[i : i + step])
                              for i in range(0, len(data), step))
    if kind == "ack":
        return wire.basic_ack(channel, draw(st.integers(0, 70)), draw(st.booleans()))
    if kind == "nack":
        return wire.method(channel, 60, 120, struct.pack(">QB", draw(st.integers(0, 70)),
                                                          draw(st.integers(0, 3))))
    if kind == "heartbeat":
        return wire.frame(8, 0, b"")
    # a method the planes leave to pika (those they read are built above, well-formed)
    class_id, method_id = draw(st.sampled_from(
        [(10, 50), (20, 40), (50, 11), (60, 11), (60, 21), (60, 31), (60, 40), (60, 90)]))
    return wire.method(channel, class_id, method_id, draw(st.binary(max_size=20)))


def _split(data: bytes) -> list[tuple[int, int, bytes]]:
    """(type, channel, payload) of each frame of a well-formed stream."""
    out, pos = [], 0
    while pos < len(data):
        ftype, channel, size = struct.unpack_from(">BHI", data, pos)
        out.append((ftype, channel, data[pos + 7 : pos + 7 + size]))
        pos += 8 + size
    return out


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """Valid frames, then a few payloads edited inside well-formed frames (the fields' lengths
    lie, the framing does not), and a few bytes overwritten, inserted or cut anywhere (length
    fields included)."""
    parts = _split(b"".join(draw(st.lists(frames(), min_size=1, max_size=6))))
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(parts) - 1))
        ftype, channel, payload = parts[i]
        edited = bytearray(payload)
        pos = draw(st.integers(0, len(edited)))
        op = draw(st.sampled_from(["set", "insert", "cut", "truncate"]))
        if op == "set" and pos < len(edited):
            edited[pos] = draw(st.sampled_from([0, 1, 5, 11, 12, 13, 40, 127, 200, 255]))
        elif op == "insert":
            edited[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif op == "cut":
            del edited[pos : pos + draw(st.integers(1, 8))]
        else:
            del edited[pos:]
        parts[i] = (ftype, channel, bytes(edited))
    data = bytearray(b"".join(wire.frame(t, c, p) for t, c, p in parts))
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["set", "insert", "cut", "length"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif op == "cut" and data:
            del data[pos : pos + draw(st.integers(1, 8))]
        elif op == "length" and len(data) > pos + 4:  # a 32-bit big-endian lie anywhere
            data[pos : pos + 4] = struct.pack(">I", draw(st.sampled_from(
                [0, 1, 3, 11, 12, 255, 256, 131065, 131066, 2**31, 2**32 - 1])))
    return bytes(data)


def _cut(data: bytes, points: list[int]) -> list[bytes]:
    cuts = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(cuts)] or [b""]


def _check(plane: str, data: bytes, points: list[int]) -> None:
    native()  # a missing extension fails here rather than skipping
    kind, edits = plane.split("-")[0], plane.endswith("-edits")
    chunks = _cut(data + MARKER, points)
    results = [run(kind, impl, chunks, edits=edits) for impl in ("reference", "native")]
    assert results[0] == results[1], f"the implementations disagree on {data!r}"
    verdict, _passed, outs = results[0]
    assert verdict.split(":")[0] in ("ok", "error", "undeliverable", "returned")
    whole = data + MARKER
    for kind, out in outs:
        # what is cut from a frame is bytes of the input (a reply text decoded with
        # replacement characters aside); what the plane makes was compared above
        if kind == "field" and b"\xef\xbf\xbd" not in out:
            assert out in whole, out


@FUZZ
@given(plane=st.sampled_from(PLANES), data=st.binary(max_size=300),
       points=st.lists(st.integers(0, 400), max_size=5))
def test_arbitrary_bytes(plane: str, data: bytes, points: list[int]) -> None:
    _check(plane, data, points)


@FUZZ
@given(plane=st.sampled_from(PLANES), data=mutated(), points=st.lists(st.integers(0, 600),
                                                                      max_size=5))
def test_mutated_valid_streams(plane: str, data: bytes, points: list[int]) -> None:
    _check(plane, data, points)


@FUZZ
@given(plane=st.sampled_from(PLANES), data=st.lists(frames(), min_size=1, max_size=6).map(b"".join),
       points=st.lists(st.integers(0, 600), max_size=5))
def test_valid_streams_are_never_refused(plane: str, data: bytes, points: list[int]) -> None:
    """Well-formed frames: no FrameError (a message may be undeliverable, a return may pause)."""
    _check(plane, data, points)
    verdict = run(plane.split("-")[0], "reference", _cut(data, points),
                  edits=plane.endswith("-edits"))[0]
    assert not verdict.startswith("error"), verdict
