"""The native extension against the reference, byte for byte, on random streams; and its build.

The shared tests (test_confirms.py, test_relay.py) check each implementation against pika's codec;
these drive both implementations with the same random input, cut at the same random places, and
require the same output bytes and counters. In a debug build (``PUMPD_DEBUG=1``) the extension
also checks its invariants after every call, so running this file there exercises them.
"""

from __future__ import annotations

import os
import random
import re
from typing import Any

import pika
import pika.frame
import pika.spec
import pytest
from pumpd.dataplane import confirm_window_ref, relay_ref
from pumpd.dataplane.frames import ACK_MODE_NO_ACK, ACK_MODE_ON_CONFIRM, ACK_MODE_ON_PUBLISH
from pumpd.dataplane.properties import FrameError, encode_hop, encode_property_overrides

from tests.support.impls import native
from tests.support.pika_wire import deliver_frames, raw_properties

SRC, DST = 3, 5

PROPS = [
    None,
    pika.BasicProperties(delivery_mode=2),
    pika.BasicProperties(content_type="text/plain", headers={"a": 1, "b": "two"}, priority=3),
    pika.BasicProperties(
        content_type="application/json", content_encoding="gzip", headers={"x": [1, 2]},
        delivery_mode=1, priority=9, correlation_id="c", reply_to="r", expiration="100",
        message_id="m", timestamp=1_700_000_000, type="t", user_id="guest", app_id="a",
        cluster_id="cl"),
]


# Property lists as bytes: the header edits' cases, and lists the relay must refuse to edit.
RAW_PROPS = [
    raw_properties(pika.BasicProperties(headers={"x-shovelled": [{"a": "b"}], "k": 15})),
    raw_properties(pika.BasicProperties(headers={"x-shovelled": "not an array"})),  # the Python edit
    raw_properties(pika.BasicProperties(headers={"x-shovelled": 7, "x-invalid-headers": {"x": 1}})),
    raw_properties(pika.BasicProperties(headers={"x-shovelled-timestamp": 5, "z": None}, priority=1)),
    raw_properties(pika.BasicProperties(headers={"big": "x" * 6000})),  # over frame_max 4096
    b"\x20\x00\x00\x00\x00\x04\x01kZ\x00",  # a field type RabbitMQ does not know
    b"\x20\x00\x00\x00\x00\x09\x01kS\x00\x00\x00\x09ab",  # a value past the table
    b"\x80\x00",  # content_type flagged, missing
    b"\x00\x01",  # flag continuation
    b"\x00",
]
HOP = encode_hop([("shovelled-by", "pumpd@test"), ("shovel-type", "static"),
                  ("shovel-name", "s"), ("src-uri", "amqp://a"), ("dest-uri", "amqp://b")])

OVERRIDES = [
    {},
    {"delivery_mode": 2},
    {"app_id": "pumpd", "headers": {"x-shovelled": True}, "timestamp": 5},
    {"content_type": "x", "cluster_id": "y", "priority": 1},
]


def test_debug_build_flag_matches_the_build() -> None:
    """A normal build leaves the invariant checks out; ``PUMPD_DEBUG=1`` (``make debug``) has
    them."""
    assert native().DEBUG_BUILD is (os.environ.get("PUMPD_DEBUG") == "1")


def _deliver(rng: random.Random, tag: int, channel: int = SRC) -> list[bytes]:
    size = rng.choice([0, 1, 64, 64, 64, 500, 4089, 4090, 9000, 140_000])
    body = rng.randbytes(size)
    frame_max = rng.choice([4096, 131072])
    props = rng.choice(RAW_PROPS) if rng.random() < 0.15 else rng.choice(PROPS)
    return deliver_frames(tag, body, props, channel=channel, consumer_tag="ctag",
                          redelivered=rng.random() < 0.2,
                          exchange=rng.choice(["", "ex", "amq.topic"]),
                          routing_key=rng.choice(["", "rk", "a.b.c" * 20]), frame_max=frame_max)


def _source_stream(rng: random.Random, n: int) -> bytes:
    heartbeat = pika.frame.Heartbeat().marshal()
    out: list[bytes] = []
    for tag in range(1, n + 1):
        for f in _deliver(rng, tag):
            out.append(f)
            if rng.random() < 0.05:
                out.append(heartbeat)
        if rng.random() < 0.1:
            out += _deliver(rng, 1000 + tag, channel=SRC + 1)  # another channel: for pika
        if rng.random() < 0.05:
            out.append(pika.frame.Method(SRC, pika.spec.Basic.ConsumeOk("ctag")).marshal())
    return b"".join(out)


def _cuts(rng: random.Random, data: bytes) -> list[bytes]:
    pieces, pos = [], 0
    while pos < len(data):
        n = rng.choice([1, 2, 6, 7, 8, 20, 64, 300, 4096, 65536, 200_000])
        pieces.append(data[pos:pos + n])
        pos += n
    return pieces


def _state(r: Any) -> tuple[Any, ...]:
    return (r.consumed, r.published, r.confirmed, r.nacked, r.acked, r.returned, r.redelivered,
            r.bytes, r.in_flight, r.buffered, r.limit_reached, r.has_output(), r.undeliverable,
            r.paused, r.take_undeliverable(), r.last_message)


_STAMP = re.compile(re.escape(b"\x15x-shovelled-timestampl") + b".{8}", re.DOTALL)


def _unstamped(publishes: list[bytes]) -> list[bytes]:
    """The publish buffers with every x-shovelled-timestamp value zeroed: the two relays read
    the clock at different times."""
    return [_STAMP.sub(b"\x15x-shovelled-timestampl" + bytes(8), p) for p in publishes]


@pytest.mark.parametrize("seed", range(30))
def test_relay_matches_the_reference_byte_for_byte(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 5, 40, 120])
    kw: dict[str, Any] = {
        "source_channel": SRC, "dest_channel": DST,
        "dest_frame_max": rng.choice([0, 4096, 10_000, 131072]),
        "ack_mode": rng.choice([ACK_MODE_NO_ACK, ACK_MODE_ON_PUBLISH, ACK_MODE_ON_CONFIRM,
                             ACK_MODE_ON_CONFIRM]),
        "exchange": rng.choice([None, None, b"", b"to-ex"]),
        "routing_key": rng.choice([None, None, b"fixed"]),
        "property_overrides": encode_property_overrides(rng.choice(OVERRIDES)),
        "window": rng.choice([0, 10, 64, 1000]),
        "mandatory": rng.random() < 0.7,
        "limit": rng.choice([0, 0, n // 2, n + 5]),
    }
    kw["forward_hop"] = rng.choice([None, HOP])
    kw["timestamp_header"] = rng.random() < 0.3
    kw["keep_last"] = rng.random() < 0.2
    ref, nat = relay_ref.Relay(**kw), native().Relay(**kw)
    taken_ref, taken_nat = [], []
    for piece in _cuts(rng, _source_stream(rng, n)):
        assert nat.feed_source(piece) == ref.feed_source(piece)
        assert _state(nat) == _state(ref)
        if ref.paused and rng.random() < 0.3:
            # confirms keep flowing while the source is paused
            ack = pika.frame.Method(DST, pika.spec.Basic.Ack(
                delivery_tag=rng.randint(1, ref.in_flight + 1), multiple=False)).marshal()
            assert nat.feed_destination(ack) == ref.feed_destination(ack)
            assert nat.take_source_output() == ref.take_source_output()
        while ref.paused and rng.random() < 0.7:
            assert nat.resume() == ref.resume()
            assert _state(nat) == _state(ref)
        if rng.random() < 0.1:
            taken_ref.append(ref.take_publishes())
            taken_nat.append(nat.take_publishes())
            assert nat.take_source_output() == ref.take_source_output()
    while ref.paused:
        assert nat.resume() == ref.resume()
        assert _state(nat) == _state(ref)
    taken_ref.append(ref.take_publishes())
    taken_nat.append(nat.take_publishes())
    assert _unstamped(taken_nat) == _unstamped(taken_ref)
    assert nat.take_source_output() == ref.take_source_output()
    assert _state(nat) == _state(ref)

    # the destination: confirms in random order and shapes, returns, other frames
    seqs = list(range(1, ref.in_flight + ref.confirmed + ref.nacked + 1))
    dest: list[bytes] = []
    while seqs:
        seq = rng.choice(seqs)
        multiple = rng.random() < 0.3
        m: Any
        if rng.random() < 0.15:
            m = pika.spec.Basic.Nack(delivery_tag=seq, multiple=multiple)
        else:
            m = pika.spec.Basic.Ack(delivery_tag=seq, multiple=multiple)
        dest.append(pika.frame.Method(DST, m).marshal())
        seqs = [s for s in seqs if s != seq and not (multiple and s <= seq)]
        if rng.random() < 0.05:
            dest.append(pika.frame.Method(DST, pika.spec.Basic.Return(312, "NO_ROUTE", "e", "k"))
                        .marshal())
            size = rng.choice([0, 5, 9000])
            dest.append(pika.frame.Header(DST, size, pika.BasicProperties()).marshal())
            for i in range(0, size, 4088):
                dest.append(pika.frame.Body(DST, b"r" * min(4088, size - i)).marshal())
        if rng.random() < 0.05:
            dest.append(pika.frame.Method(0, pika.spec.Connection.Blocked("mem")).marshal())
    for piece in _cuts(rng, b"".join(dest)):
        assert nat.feed_destination(piece) == ref.feed_destination(piece)
        if rng.random() < 0.3:
            assert nat.take_source_output() == ref.take_source_output()
        assert _state(nat) == _state(ref)
    assert nat.take_source_output() == ref.take_source_output()
    assert nat.in_flight == 0


@pytest.mark.parametrize("seed", range(20))
def test_confirm_window_matches_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    cap = rng.choice([0, 1, 64, 65, 100, 1000])
    ref, nat = confirm_window_ref.ConfirmWindow(cap), native().ConfirmWindow(cap)
    tag = 0
    for _ in range(4000):
        op = rng.random()
        span = max(1, ref.next_seq - 1)
        if op < 0.45:
            tag += rng.choice([1, 1, 2, 7])
            assert nat.add(tag) == ref.add(tag)
        elif op < 0.85:
            seq, multiple = rng.randint(1, span + 3), rng.random() < 0.3
            ref.ack(seq, multiple)
            nat.ack(seq, multiple)
        else:
            seq, multiple = rng.randint(1, span + 3), rng.random() < 0.2
            assert nat.nack(seq, multiple) == ref.nack(seq, multiple)
        if rng.random() < 0.3:
            assert nat.take_ack() == ref.take_ack()
        assert (nat.outstanding, nat.next_seq, nat.capacity, nat.confirmed, nat.nacked,
                nat.acked) == (ref.outstanding, ref.next_seq, ref.capacity, ref.confirmed,
                               ref.nacked, ref.acked)


def test_a_framing_error_never_leaves_half_a_message_to_publish() -> None:
    good = b"".join(_deliver(random.Random(1), 1))
    bad = pika.frame.Method(SRC, pika.spec.Basic.Deliver("c", 2, False, "e", "k")).marshal()
    bad += pika.frame.Header(SRC, 3, pika.BasicProperties()).marshal()
    bad += pika.frame.Body(SRC, b"toolong").marshal()
    for impl in (relay_ref.Relay, native().Relay):
        r = impl(source_channel=SRC, dest_channel=DST, dest_frame_max=131072,
                 ack_mode=ACK_MODE_ON_CONFIRM)
        with pytest.raises(FrameError):
            r.feed_source(good + bad)
        assert r.consumed == 1
        assert r.take_publishes() == relay_ref_publishes(good)


def relay_ref_publishes(stream: bytes) -> bytes:
    r = relay_ref.Relay(source_channel=SRC, dest_channel=DST, dest_frame_max=131072,
                        ack_mode=ACK_MODE_ON_CONFIRM)
    r.feed_source(stream)
    return bytes(r.take_publishes())


@pytest.mark.parametrize("cut", [5, 12, 20, 30])
def test_native_refuses_a_truncated_deliver_with_a_frame_error(cut: int) -> None:
    """The reference would fail later with IndexError / struct.error; the native relay must not
    read past the frame, and says FrameError."""
    method = b"".join(pika.spec.Basic.Deliver("ctag", 1, False, "exchange", "routing-key")
                      .encode())[:cut]
    size = len(method) + 4
    frame = bytes([1]) + SRC.to_bytes(2, "big") + size.to_bytes(4, "big") + b"\x00\x3c\x00\x3c"
    frame += method + b"\xce"
    r = native().Relay(source_channel=SRC, dest_channel=DST, dest_frame_max=131072,
                       ack_mode=ACK_MODE_ON_CONFIRM)
    with pytest.raises(FrameError):
        r.feed_source(frame)
