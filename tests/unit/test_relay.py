"""The relay's framing and ack logic on bytes, with pika's own codec as the independent oracle."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pika
import pika.frame
import pika.spec
import pytest
from pumpd.dataplane.frames import (
    ACK_MODE_NO_ACK,
    ACK_MODE_ON_CONFIRM,
    ACK_MODE_ON_PUBLISH,
    FRAME_HEADER,
    content_header_payload,
    frame,
)
from pumpd.dataplane.properties import FrameError, encode_property_overrides
from pumpd.engine.status import Counters

from tests.support.amqp_helpers import naive
from tests.support.impls import IMPLEMENTATIONS, relay_class
from tests.support.pika_wire import deliver_frames, method, raw_properties

SRC, DST = 1, 1


@pytest.fixture(params=IMPLEMENTATIONS)
def Relay(request: pytest.FixtureRequest) -> Any:
    return relay_class(request.param)


def make(Relay: Any, **kw: Any) -> Any:
    args = dict(source_channel=SRC, dest_channel=DST, dest_frame_max=131072,
                ack_mode=ACK_MODE_ON_CONFIRM, window=1000)
    args.update(kw)
    return Relay(**args)


def deliver(tag: int, body: bytes, props: pika.BasicProperties | bytes | None = None, *,
            exchange: str = "ex", routing_key: str = "rk", redelivered: bool = False,
            channel: int = SRC, frame_max: int = 131072) -> bytes:
    """One delivery's frames; ``props`` as bytes is a raw property list, put in the content
    header as it is (pika cannot write a malformed one)."""
    return b"".join(deliver_frames(tag, body, props, channel=channel, exchange=exchange,
                                   routing_key=routing_key, redelivered=redelivered,
                                   frame_max=frame_max))


def decode_all(data: bytes) -> list[Any]:
    frames = []
    while data:
        used, f = pika.frame.decode_frame(data)
        assert f is not None, "incomplete frame in output"
        frames.append(f)
        data = data[used:]
    return frames


def published(data: bytes) -> list[tuple[Any, Any, bytes]]:
    """(basic.publish method, properties, body) for every message in a publish buffer."""
    msgs, frames = [], decode_all(data)
    i = 0
    while i < len(frames):
        m, h = frames[i], frames[i + 1]
        assert isinstance(m.method, pika.spec.Basic.Publish) and m.channel_number == DST
        body, i = b"", i + 2
        while len(body) < h.body_size:
            body += frames[i].fragment
            i += 1
        msgs.append((m.method, h.properties, body))
    return msgs


def feed_in_pieces(feed: Any, data: bytes, rng: random.Random) -> bytes:
    rest, pos = b"", 0
    while pos < len(data):
        n = rng.choice([1, 3, 7, 64, 1000, 70000])
        rest += feed(data[pos:pos + n])
        pos += n
    return rest


RICH = pika.BasicProperties(  # every AMQP table type pika can encode
    content_type="application/json", content_encoding="gzip",
    headers={"s": "x", "i": -5, "n": {"deep": [1, "two", {"three": Decimal("3.5")}]},
             "when": datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "b": True,
             "bytes": b"\x00\x01", "none": None, "big": 2**40},
    delivery_mode=2, priority=7, correlation_id="c-1", reply_to="r", expiration="60000",
    message_id="m-1", timestamp=1700000000, type="t", user_id="guest", app_id="app",
    cluster_id="cl")


def test_messages_are_republished_byte_for_byte(Relay: Any) -> None:
    r = make(Relay)
    rng = random.Random(1)
    msgs = [(b"", None), (b"x" * 10, RICH), (bytes(range(256)) * 2000, RICH), (b"y", None)]
    stream = b"".join(deliver(i + 1, body, props) for i, (body, props) in enumerate(msgs))
    assert feed_in_pieces(r.feed_source, stream, rng) == b""
    out = published(r.take_publishes())
    assert [body for _, _, body in out] == [b for b, _ in msgs]
    assert naive(out[1][1].headers) == naive(RICH.headers)
    for attr in ("content_type", "delivery_mode", "priority", "timestamp", "cluster_id"):
        assert getattr(out[2][1], attr) == getattr(RICH, attr)
    assert all((m.exchange, m.routing_key, m.mandatory) == ("ex", "rk", True) for m, _, _ in out)
    assert (r.consumed, r.published, r.in_flight, r.bytes) == (4, 4, 4, sum(len(b) for b, _ in msgs))


def test_content_header_bytes_are_forwarded_unchanged(Relay: Any) -> None:
    r = make(Relay)
    src = deliver(1, b"abc", RICH)
    r.feed_source(src)
    frames = decode_all(r.take_publishes())
    original_header = pika.frame.Header(DST, 3, RICH).marshal()
    assert frames[1].marshal() == original_header


def test_other_frames_pass_through_in_order(Relay: Any) -> None:
    r = make(Relay)
    heartbeat = pika.frame.Heartbeat().marshal()
    consume_ok = method(SRC, pika.spec.Basic.ConsumeOk(consumer_tag="ctag-1"))
    other = deliver(9, b"other channel", channel=2)
    stream = consume_ok + deliver(1, b"a") + heartbeat + other + deliver(2, b"b")
    rest = feed_in_pieces(r.feed_source, stream, random.Random(2))
    assert rest == consume_ok + heartbeat + other
    assert r.consumed == 2


def test_heartbeat_between_content_frames_is_passed_through(Relay: Any) -> None:
    r = make(Relay)
    d = deliver(1, b"z" * 10)
    hb = pika.frame.Heartbeat().marshal()
    method_len = len(method(SRC, pika.spec.Basic.Deliver("ctag-1", 1, False, "ex", "rk")))
    rest = r.feed_source(d[:method_len] + hb + d[method_len:])
    assert rest == hb
    assert published(r.take_publishes())[0][2] == b"z" * 10


def test_bodies_are_split_at_the_destination_frame_max(Relay: Any) -> None:
    r = make(Relay, dest_frame_max=4096)
    body = bytes(random.Random(3).randbytes(50_000))
    r.feed_source(deliver(1, body, frame_max=131072))
    data = r.take_publishes()
    frames = decode_all(data)
    assert all(len(f.fragment) <= 4096 - 8 for f in frames[2:])
    assert published(data)[0][2] == body


def test_publish_fields_and_properties_override(Relay: Any) -> None:
    overrides = encode_property_overrides({"delivery_mode": 2, "app_id": "shovel",
                                           "headers": {"x-from": "pumpd"}})
    r = make(Relay, exchange=b"", routing_key=b"fixed", property_overrides=overrides)
    r.feed_source(deliver(1, b"m", RICH) + deliver(2, b"n"))
    (m1, p1, _), (_m2, p2, _) = published(r.take_publishes())
    assert (m1.exchange, m1.routing_key) == ("", "fixed")
    assert p1.delivery_mode == 2 and p1.app_id == "shovel" and p1.headers == {"x-from": "pumpd"}
    assert p1.message_id == "m-1" and p1.cluster_id == "cl"  # the others unchanged
    assert p2.delivery_mode == 2 and p2.content_type is None


def test_on_confirm_acks_are_coalesced(Relay: Any) -> None:
    r = make(Relay)
    r.feed_source(b"".join(deliver(t, b"m") for t in range(1, 101)))
    r.take_publishes()
    confirms = b"".join(method(DST, pika.spec.Basic.Ack(delivery_tag=s, multiple=False))
                        for s in range(1, 51))
    assert r.feed_destination(confirms) == b""
    out = decode_all(r.take_source_output())
    assert len(out) == 1
    assert (out[0].method.delivery_tag, out[0].method.multiple) == (50, True)
    r.feed_destination(method(DST, pika.spec.Basic.Ack(delivery_tag=100, multiple=True)))
    (ack,) = decode_all(r.take_source_output())
    assert (ack.method.delivery_tag, ack.method.multiple) == (100, True)
    assert (r.confirmed, r.acked, r.in_flight) == (100, 100, 0)


def test_nack_requeues_at_the_source_before_the_ack_that_follows(Relay: Any) -> None:
    r = make(Relay)
    r.feed_source(b"".join(deliver(t, b"m") for t in range(1, 6)))
    r.take_publishes()
    r.feed_destination(method(DST, pika.spec.Basic.Nack(delivery_tag=2, multiple=False)) +
                       method(DST, pika.spec.Basic.Ack(delivery_tag=5, multiple=True)))
    out = [f.method for f in decode_all(r.take_source_output())]
    assert isinstance(out[0], pika.spec.Basic.Nack)
    assert (out[0].delivery_tag, out[0].requeue, out[0].multiple) == (2, True, False)
    assert isinstance(out[-1], pika.spec.Basic.Ack) and out[-1].delivery_tag == 5
    assert (r.nacked, r.acked) == (1, 4)


def test_returns_are_counted_and_their_content_dropped(Relay: Any) -> None:
    r = make(Relay)
    ret = method(DST, pika.spec.Basic.Return(312, "NO_ROUTE", "ex", "rk"))
    ret += pika.frame.Header(DST, 5, pika.BasicProperties()).marshal()
    ret += pika.frame.Body(DST, b"hello").marshal()
    close = method(0, pika.spec.Connection.Blocked("low on memory"))
    assert r.feed_destination(ret + close) == close
    assert r.returned == 1


def test_on_publish_acks_after_taking_the_publishes(Relay: Any) -> None:
    r = make(Relay, ack_mode=ACK_MODE_ON_PUBLISH)
    r.feed_source(b"".join(deliver(t, b"m") for t in range(1, 11)))
    assert r.take_source_output() == b""
    r.take_publishes()
    (ack,) = decode_all(r.take_source_output())
    assert (ack.method.delivery_tag, ack.method.multiple) == (10, True)
    assert r.acked == 10 and r.in_flight == 0


def test_no_ack_never_acks(Relay: Any) -> None:
    r = make(Relay, ack_mode=ACK_MODE_NO_ACK)
    r.feed_source(b"".join(deliver(t, b"m") for t in range(1, 11)))
    assert len(published(r.take_publishes())) == 10
    assert r.take_source_output() == b"" and r.acked == 0


def test_buffered_until_taken(Relay: Any) -> None:
    r = make(Relay)
    r.feed_source(b"".join(deliver(t, b"m") for t in range(1, 4)))
    assert (r.buffered, r.published, r.has_output()) == (3, 0, True)
    r.take_publishes()
    assert (r.buffered, r.published) == (0, 3)


def test_the_status_counters_are_read_off_either_relay(Relay: Any) -> None:
    r = make(Relay)
    r.feed_source(deliver(1, b"ab", redelivered=True) + deliver(2, b"c"))
    r.take_publishes()
    c = Counters.of_relay(r, parked=1)  # what the session counted beside the relay
    assert (c.consumed, c.published, c.in_flight, c.redelivered, c.bytes) == (2, 2, 2, 1, 3)
    assert (c.confirmed, c.acked, c.parked, c.reconnects, c.remaining) == (0, 0, 1, 0, -1)
    # a finished session's totals are carried, its gauges (2 in flight) are not
    assert Counters(reconnects=1).carry(c) == Counters(
        consumed=2, published=2, redelivered=1, bytes=3, parked=1, reconnects=1)


def test_limit_holds_later_deliveries_unpublished(Relay: Any) -> None:
    r = make(Relay, limit=3)
    r.feed_source(b"".join(deliver(t, b"m") for t in range(1, 6)))
    assert len(published(r.take_publishes())) == 3
    assert r.limit_reached and r.consumed == 3


def test_redelivered_flag_is_counted(Relay: Any) -> None:
    r = make(Relay)
    r.feed_source(deliver(1, b"a", redelivered=True) + deliver(2, b"b"))
    assert r.redelivered == 1


def test_corrupt_frame_end_is_an_error(Relay: Any) -> None:
    r = make(Relay)
    bad = bytearray(deliver(1, b"a"))
    bad[-1] = 0
    with pytest.raises(FrameError):
        r.feed_source(bytes(bad))


def test_bad_arguments_are_refused(Relay: Any) -> None:
    with pytest.raises(ValueError):
        make(Relay, dest_frame_max=100)
    with pytest.raises(ValueError):
        make(Relay, ack_mode=7)


# -- undeliverable messages ----------------------------------------------------------------------

BIG = pika.BasicProperties(message_id="big", headers={"pad": "x" * 5000})


@pytest.mark.parametrize("ack_mode", [ACK_MODE_ON_CONFIRM, ACK_MODE_ON_PUBLISH, ACK_MODE_NO_ACK])
def test_an_oversized_content_header_pauses_the_relay_after_the_message(Relay: Any, ack_mode: int) -> None:
    r = make(Relay, dest_frame_max=4096, ack_mode=ack_mode)
    hb = pika.frame.Heartbeat().marshal()
    big = deliver(2, b"big body" * 1000, BIG, frame_max=4096, redelivered=True)
    stream = deliver(1, b"before") + big + hb + deliver(3, b"after")
    assert feed_in_pieces(r.feed_source, stream, random.Random(5)) == b""  # the heartbeat waits
    assert r.paused and r.undeliverable == 1 and r.consumed == 1
    tag, redelivered, exchange, routing_key, props, body, reason = r.take_undeliverable()
    assert (tag, redelivered, exchange, routing_key, body) == (2, True, b"ex", b"rk", b"big body" * 1000)
    assert props == raw_properties(BIG)  # as received
    assert reason == f"content header of {len(props) + 20} bytes exceeds the destination's frame_max 4096"
    assert len(props) + 20 > 4096
    assert r.feed_source(deliver(4, b"later")) == b""  # kept while paused
    assert [b for _, _, b in published(r.take_publishes())] == [b"before"]
    if ack_mode == ACK_MODE_ON_CONFIRM:
        r.feed_destination(method(DST, pika.spec.Basic.Ack(delivery_tag=1, multiple=False)))
    if ack_mode != ACK_MODE_NO_ACK:
        (ack,) = decode_all(r.take_source_output())
        assert (ack.method.delivery_tag, ack.method.multiple) == (1, True)

    assert r.resume() == hb
    assert not r.paused and r.take_undeliverable() is None
    assert [b for _, _, b in published(r.take_publishes())] == [b"after", b"later"]
    assert (r.consumed, r.undeliverable) == (3, 1)
    if ack_mode == ACK_MODE_ON_CONFIRM:
        # confirms of seq 2 and 3 are those of tags 3 and 4: tag 2 was never in the window
        r.feed_destination(method(DST, pika.spec.Basic.Nack(delivery_tag=2, multiple=False)) +
                           method(DST, pika.spec.Basic.Ack(delivery_tag=3, multiple=True)))
        out = [f.method for f in decode_all(r.take_source_output())]
        assert [(type(m).__name__, m.delivery_tag) for m in out] == [("Nack", 3), ("Ack", 4)]
        assert (r.acked, r.nacked, r.in_flight) == (2, 1, 0)  # tags 1 and 4: never tag 2


def test_pausing_again_while_resuming(Relay: Any) -> None:
    r = make(Relay, dest_frame_max=4096)
    stream = deliver(1, b"", BIG) + deliver(2, b"mid") + deliver(3, b"", BIG) + deliver(4, b"end")
    r.feed_source(stream)
    assert r.take_undeliverable()[0] == 1
    assert r.resume() == b""
    assert r.paused and r.take_undeliverable()[0] == 3
    r.resume()
    assert [b for _, _, b in published(r.take_publishes())] == [b"mid", b"end"]
    assert (r.undeliverable, r.consumed, r.paused) == (2, 2, False)


@pytest.mark.parametrize("raw, why", [
    (b"\x80\x00", "content header properties truncated"),
    (b"\x00\x01", "property flag continuation is not used by basic properties"),
    (b"\x20\x00\x00\x00\x00\x04\x01kZ\x00", "headers table has an unknown field type 0x5a"),
    (b"\x20\x00\x00\x00\x00\x09\x01kS\x00\x00\x00\x09ab", "headers table truncated"),
])
def test_properties_that_cannot_be_parsed_for_an_edit_are_undeliverable(Relay: Any, raw: bytes, why: str) -> None:
    r = make(Relay, timestamp_header=True)
    r.feed_source(deliver(1, b"poison", raw) + deliver(2, b"fine"))
    assert r.take_undeliverable() == (1, False, b"ex", b"rk", raw, b"poison",
                                      f"its properties cannot be parsed: {why}")
    r.resume()
    assert [b for _, _, b in published(r.take_publishes())] == [b"fine"]


def test_without_edits_the_properties_are_not_parsed(Relay: Any) -> None:
    r = make(Relay)
    raw = b"\x20\x00\x00\x00\x00\x04\x01kZ\x00"
    r.feed_source(deliver(1, b"m", raw))
    header = frame(FRAME_HEADER, DST, content_header_payload(1, raw))
    assert not r.paused and header in r.take_publishes()


def test_keep_last_keeps_the_last_message_published(Relay: Any) -> None:
    r = make(Relay, keep_last=True, property_overrides=encode_property_overrides({"app_id": "p"}))
    assert r.last_message is None
    r.feed_source(deliver(1, b"one", RICH) + deliver(2, b"two" * 50_000, exchange="x2", redelivered=True))
    assert r.last_message == (2, True, b"x2", b"rk", raw_properties(pika.BasicProperties()),
                              b"two" * 50_000, "")
    assert [b for _, _, b in published(r.take_publishes())] == [b"one", b"two" * 50_000]


def returned_message(body: bytes, key: str = "lost") -> bytes:
    ret = method(DST, pika.spec.Basic.Return(312, "NO_ROUTE", "x", key))
    ret += pika.frame.Header(DST, len(body), RICH).marshal()
    if body:
        ret += pika.frame.Body(DST, body).marshal()
    return ret


def test_hold_returns_pauses_the_destination_before_the_returned_messages_confirm(
        Relay: Any) -> None:
    """The broker sends basic.return before the confirm of the same message: with hold_returns
    the relay stops after the return's content, so that message's source ack waits until the
    engine has dealt with it; then the confirm and what follows are read as usual."""
    r = make(Relay, hold_returns=True)
    r.feed_source(b"".join(deliver(t, b"m") for t in range(1, 4)))
    r.take_publishes()
    blocked = method(0, pika.spec.Connection.Blocked("low on memory"))
    stream = (method(DST, pika.spec.Basic.Ack(delivery_tag=1, multiple=False))
              + returned_message(b"lost body") + blocked
              + method(DST, pika.spec.Basic.Ack(delivery_tag=3, multiple=True)))
    rest = feed_in_pieces(r.feed_destination, stream, random.Random(5))
    assert rest == b"" and r.destination_paused
    (ack,) = decode_all(r.take_source_output())
    assert ack.method.delivery_tag == 1  # the confirm before the return only
    code, text, exchange, key, props, body = r.take_returned()
    assert (code, text, exchange, key, body) == (312, "NO_ROUTE", b"x", b"lost", b"lost body")
    assert props == raw_properties(RICH)
    assert r.feed_destination(b"more") == b""  # kept, unscanned, while paused
    assert r.resume_destination() == blocked
    assert not r.destination_paused and r.take_returned() is None
    (ack,) = decode_all(r.take_source_output())
    assert (ack.method.delivery_tag, r.acked, r.returned) == (3, 3, 1)


def test_hold_returns_with_an_empty_body_and_two_returns_in_a_row(Relay: Any) -> None:
    r = make(Relay, hold_returns=True)
    r.feed_source(b"".join(deliver(t, b"m") for t in range(1, 3)))
    r.take_publishes()
    stream = returned_message(b"", "a") + returned_message(b"bb", "b") + method(
        DST, pika.spec.Basic.Ack(delivery_tag=2, multiple=True))
    assert r.feed_destination(stream) == b""
    assert r.take_returned()[3:6:2] == (b"a", b"")
    assert r.resume_destination() == b""
    assert r.destination_paused and r.take_returned()[3] == b"b"
    assert r.resume_destination() == b""
    assert r.take_source_output() != b"" and r.acked == 2


def test_without_hold_returns_the_destination_never_pauses(Relay: Any) -> None:
    r = make(Relay)
    assert r.feed_destination(returned_message(b"x")) == b""
    assert not r.destination_paused and r.take_returned() is None and r.returned == 1
