"""The AMQP 0-9-1 side of the generic path on bytes (``engine/amqp091/message_endpoints.py``):
deliveries taken out of a source's stream, publishes encoded exactly as the native relay encodes
them (the relay is the oracle), confirms and returns read into ranges; and the pairing rule of
``engine/wiring.py``."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pika
import pika.spec
import pytest
from pumpd.amqp10.message import Message
from pumpd.dataplane.api import Delivered, Returned
from pumpd.dataplane.frames import ACK_MODE_ON_CONFIRM, FrameError
from pumpd.dataplane.properties import encode_hop, encode_property_overrides
from pumpd.engine import message_forms, wiring
from pumpd.engine.amqp091.message_endpoints import PublishStream, delivery_interceptor
from pumpd.engine.endpoint import Edits, Incoming, Settlement, Unforwardable
from pumpd.engine.message_path import MessagePath, hop_fields

from tests.support.impls import IMPLEMENTATIONS, relay_class
from tests.support.pika_wire import deliver_frames, method, raw_properties

CH = 1
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"
RICH = pika.BasicProperties(content_type="text/plain", headers={"a": 1, "n": {"x": [1, "y"]}},
                            delivery_mode=2, priority=3, correlation_id="c", message_id="m1",
                            timestamp=1_700_000_000, app_id="app")


def pieces(data: bytes, rng: random.Random) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = rng.randint(1, 40)
        out.append(data[pos:pos + n])
        pos += n
    return out


# -- the source: deliveries out of the byte stream -------------------------------------------------


def test_deliveries_are_handed_over_whole_and_in_order_and_the_rest_goes_to_pika() -> None:
    got: list[Incoming] = []
    feed = delivery_interceptor(CH, 131072, got.append)
    bodies = [b"", b"x", b"y" * 300_000]
    stream = b"".join(b"".join(deliver_frames(i + 1, body, RICH if i else None, channel=CH,
                                              redelivered=i == 1, frame_max=131072))
                      + HEARTBEAT for i, body in enumerate(bodies))
    stream += method(2, pika.spec.Basic.Deliver("t", 9, False, "e", "k"))  # another channel
    passed = b"".join(feed(p) for p in pieces(stream, random.Random(1)))
    assert passed == HEARTBEAT * 3 + method(2, pika.spec.Basic.Deliver("t", 9, False, "e", "k"))
    assert [(i.tag, i.redelivered) for i in got] == [(1, False), (2, True), (3, False)]
    for i, body in zip(got, bodies, strict=True):
        assert isinstance(i.message, Delivered)
        assert i.message.body == body and i.message.delivery_tag == i.tag
        assert (i.message.exchange, i.message.routing_key, i.message.reason) == (b"ex", b"rk", "")
    assert got[1].message.properties == raw_properties(RICH)  # byte for byte


def test_a_delivery_cut_short_is_a_frame_error() -> None:
    feed = delivery_interceptor(CH, 131072, lambda _i: None)
    frames = deliver_frames(1, b"abc", None, channel=CH)
    with pytest.raises(FrameError, match="cut short"):
        feed(frames[0] + frames[1] + method(CH, pika.spec.Basic.Ack(1, False)))


# -- the destination: publishes as the relay writes them -------------------------------------------


@pytest.fixture(params=IMPLEMENTATIONS)
def Relay(request: pytest.FixtureRequest) -> Any:
    return relay_class(request.param)


EDIT_SETS: dict[str, dict[str, Any]] = {
    "none": {},
    "exchange-and-key": {"exchange": b"out", "routing_key": b"k2"},
    "properties": {"property_overrides": encode_property_overrides(
        {"app_id": "pumpd", "delivery_mode": 1, "headers": {"h": "v"}})},
    "forward-headers": {"forward_hop": encode_hop([("shovelled-by", "pumpd@h"),
                                                   ("shovel-name", "s")])},
    "timestamp": {"timestamp_header": True},
    "all": {"exchange": b"", "routing_key": b"q", "mandatory": True,
            "property_overrides": encode_property_overrides({"type": "t"}),
            "forward_hop": encode_hop([("shovel-name", "s")]), "timestamp_header": True},
}


@pytest.mark.parametrize("edits", list(EDIT_SETS))
@pytest.mark.parametrize("frame_max", [4096, 131072])
def test_publishes_are_the_relays_byte_for_byte(Relay: Any, edits: str, frame_max: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    options = EDIT_SETS[edits]
    if options.get("timestamp_header") and Relay is not relay_class("reference"):
        pytest.skip("the native relay's clock cannot be frozen: the reference's is the oracle")
    monkeypatch.setattr("time.time", lambda: 1_750_000_000.5)
    options = {"mandatory": False, **EDIT_SETS[edits]}
    relay = Relay(source_channel=CH, dest_channel=CH, dest_frame_max=frame_max,
                  ack_mode=ACK_MODE_ON_CONFIRM, window=100, **options)
    stream = PublishStream(CH, frame_max)
    stream.edits = Edits(hop=hop_fields(options.get("forward_hop")), **options)
    rng = random.Random(frame_max)
    mine = []
    for tag in range(1, 30):
        body = rng.randbytes(rng.choice([0, 1, 100, 4088, 4089, 20_000]))
        props = rng.choice([None, RICH, pika.BasicProperties(headers={"x-shovelled": "odd"})])
        data = b"".join(deliver_frames(tag, body, props, channel=CH, frame_max=frame_max))
        assert relay.feed_source(data) == b""
        delivered = Delivered(tag, False, b"ex", b"rk",
                              raw_properties(props or pika.BasicProperties()), body, "")
        frames, seq = stream.encode(delivered)
        assert seq == tag
        mine.append(frames)
    assert b"".join(mine) == relay.take_publishes()
    assert stream.published == 29


def test_a_message_that_cannot_be_published_as_it_is_is_unforwardable_and_not_numbered() -> None:
    stream = PublishStream(CH, 4096)
    big = Delivered(1, False, b"", b"q", raw_properties(
        pika.BasicProperties(headers={"big": "x" * 6000})), b"b", "")
    with pytest.raises(Unforwardable, match="frame_max 4096"):
        stream.encode(big)
    stream.edits = Edits(timestamp_header=True)
    bad = Delivered(2, False, b"", b"q", b"\x20\x00\x00\x00\x00\x09", b"b", "")  # headers cut
    with pytest.raises(Unforwardable, match="properties cannot be parsed"):
        stream.encode(bad)
    stream.edits = Edits(routing_key=b"k" * 256)
    with pytest.raises(Unforwardable, match="routing key is 256 bytes"):
        stream.encode(Delivered(3, False, b"", b"q", b"\x00\x00", b"", ""))
    stream.edits = Edits()
    assert stream.encode(Delivered(4, False, b"", b"q", b"\x00\x00", b"", ""))[1] == 1


def test_an_amqp_1_0_message_goes_through_the_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    class Mapping:
        @staticmethod
        def to_amqp091(message: Message) -> message_forms.Amqp091Form:
            if message.body == [b"refused"]:
                raise ValueError("section footer has no counterpart")
            return message_forms.Amqp091Form(b"from-annotation", b"\x00\x00", message.body[0])

    monkeypatch.setattr(message_forms, "_mapping", lambda: Mapping)
    stream = PublishStream(CH, 131072)
    frames, seq = stream.encode(Message(body=[b"payload"]))
    assert seq == 1 and b"from-annotation" in frames and frames.endswith(b"payload\xce")
    with pytest.raises(Unforwardable, match="no AMQP 0-9-1 form: section footer"):
        stream.encode(Message(body=[b"refused"]))


def test_without_the_mapping_an_amqp_1_0_message_is_unforwardable_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Any:
        raise message_forms.MappingUnavailable("needs pumpd.amqp10.mapping")

    monkeypatch.setattr(message_forms, "_mapping", missing)
    with pytest.raises(Unforwardable, match=r"pumpd\.amqp10\.mapping"):
        PublishStream(CH, 131072).encode(Message(body=[b"x"], raw=b"raw"))
    view = message_forms.delivered_view(5, True, Message(body=[b"x"], raw=b"raw"), "refused")
    assert (view.delivery_tag, view.redelivered, view.body, view.properties) == (
        5, True, b"raw", b"\x00\x00")
    assert view.reason.startswith("refused; shown as its AMQP 1.0 encoding")


# -- the destination: confirms and returns ----------------------------------------------------------


def reader() -> tuple[PublishStream, list[Any]]:
    events: list[Any] = []
    stream = PublishStream(CH, 131072)
    stream.on_settled = lambda first, last, how: events.append((first, last, how))
    stream.on_returned = events.append
    return stream, events


def test_confirms_become_ranges_of_sequence_numbers() -> None:
    stream, events = reader()
    data = b"".join([
        method(CH, pika.spec.Basic.Ack(2, False)),
        method(CH, pika.spec.Basic.Ack(4, True)),  # 1..4: 2 again, which keeps its settlement
        method(CH, pika.spec.Basic.Nack(5, False, False)),
        method(CH, pika.spec.Basic.Nack(8, True, False)),
        method(CH, pika.spec.Basic.Ack(8, True)),  # nothing left below 9
        HEARTBEAT,
        method(2, pika.spec.Basic.Ack(1, False)),  # another channel's: pika's
    ])
    passed = b"".join(stream.feed(p) for p in pieces(data, random.Random(2)))
    assert passed == HEARTBEAT + method(2, pika.spec.Basic.Ack(1, False))
    A, R = Settlement.ACCEPT, Settlement.REJECT
    assert events == [(2, 2, A), (1, 4, A), (5, 5, R), (6, 8, R)]


def test_a_return_is_reported_whole_before_the_confirm_after_it() -> None:
    stream, events = reader()
    body = b"z" * 200_000
    data = (method(CH, pika.spec.Basic.Return(312, "NO_ROUTE", "ex", "rk"))
            + b"".join(deliver_frames(0, body, RICH, channel=CH)[1:])
            + method(CH, pika.spec.Basic.Ack(1, False)))
    for p in pieces(data, random.Random(3)):
        assert stream.feed(p) == b""
    assert events == [Returned(312, "NO_ROUTE", b"ex", b"rk", raw_properties(RICH), body),
                      (1, 1, Settlement.ACCEPT)]


def test_a_returned_message_over_the_bound_is_a_frame_error() -> None:
    stream = PublishStream(CH, 131072, max_body_size=10)
    data = (method(CH, pika.spec.Basic.Return(312, "NO_ROUTE", "ex", "rk"))
            + deliver_frames(0, b"x" * 11, None, channel=CH)[1])
    with pytest.raises(FrameError):
        stream.feed(data)


# -- pairing -----------------------------------------------------------------------------------------


class _Side:
    """The contract's calls for a source and a destination that hand messages as objects;
    what pair() looks at (nothing here moves a message)."""

    last_declared_queue = ""
    backlog_known = True
    is_open = True
    heartbeat = 0
    credit_left = 0

    def __init__(self, wire: str) -> None:
        self.wire = wire
        self.closed: asyncio.Future[BaseException] = asyncio.Future(
            loop=asyncio.new_event_loop())

    def pause_reading(self, paused: bool, reason: str = "write-pressure") -> None: ...
    def on_blocked(self, callback: Callable[[bool], None]) -> None: ...
    async def declare(self, declarations: Any) -> None: ...
    async def close_quietly(self) -> None: ...
    def abort(self) -> None: ...
    async def take_lease(self, name: str) -> None: ...
    async def backlog(self, queue: str) -> int:
        return 0
    async def credit(self, prefetch: int) -> None: ...
    async def consume(self, queue: str, *, no_ack: bool, arguments: Any,
                      consumer_tag: str) -> str:
        return ""
    async def cancel(self, consumer_tag: str) -> None: ...
    def settle(self, first: int, last: int, how: Settlement) -> None: ...
    def on_delivery(self, callback: Callable[[Incoming], None]) -> None: ...
    async def expect_confirms(self) -> None: ...
    def on_write_pressure(self, callback: Callable[[bool], None], high_water: int) -> None: ...
    def on_credit(self, callback: Callable[[], None]) -> None: ...
    def set_edits(self, edits: Edits) -> None: ...
    def forward(self, message: Any) -> int:
        return 0
    def on_settled(self, callback: Callable[[int, int, Settlement], None]) -> None: ...
    def on_returned(self, callback: Callable[[Returned], None]) -> None: ...

    def close_loop(self) -> None:
        self.closed.get_loop().close()


def test_message_endpoints_are_paired_on_the_generic_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    source, destination = _Side("amqp091"), _Side("amqp091")
    try:
        path = wiring.pair(source, destination, ack_mode=ACK_MODE_ON_CONFIRM, window=10)
        assert isinstance(path, MessagePath)
        monkeypatch.setattr(message_forms, "_mapping", lambda: object())
        assert isinstance(wiring.pair(_Side("amqp10"), destination,
                                      ack_mode=ACK_MODE_ON_CONFIRM), MessagePath)

        def missing() -> Any:
            raise message_forms.MappingUnavailable("needs pumpd.amqp10.mapping")

        monkeypatch.setattr(message_forms, "_mapping", missing)
        with pytest.raises(NotImplementedError, match=r"pumpd\.amqp10\.mapping"):
            wiring.pair(_Side("amqp10"), destination, ack_mode=ACK_MODE_ON_CONFIRM)
    finally:
        source.close_loop()
        destination.close_loop()


def test_the_path_variable_is_native_or_generic(monkeypatch: pytest.MonkeyPatch) -> None:
    side = _Side("amqp091")
    try:
        monkeypatch.setenv(wiring.PATH_VARIABLE, "fast")
        with pytest.raises(ValueError, match="PUMPD_PATH must be native or generic, not 'fast'"):
            wiring.pair(side, side, ack_mode=ACK_MODE_ON_CONFIRM)
        monkeypatch.setenv(wiring.PATH_VARIABLE, "generic")
        assert isinstance(wiring.pair(side, side, ack_mode=ACK_MODE_ON_CONFIRM), MessagePath)
    finally:
        side.close_loop()
