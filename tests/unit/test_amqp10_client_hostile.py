"""A lying AMQP 1.0 peer: every breach of the protocol closes the connection with the AMQP error
condition that names it and a description of what the peer did; ``closed`` carries the same."""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import pytest
from pumpd.amqp10.connection import connect
from pumpd.amqp10.errors import (
    DECODE_ERROR,
    FRAMING_ERROR,
    MESSAGE_SIZE_EXCEEDED,
    NOT_ALLOWED,
    UNATTACHED_HANDLE,
    WINDOW_VIOLATION,
    Amqp10Error,
)
from pumpd.amqp10.framing import TYPE_SASL, encode_frame
from pumpd.amqp10.performatives import (
    Accepted,
    Close,
    Disposition,
    Flow,
    Open,
    SaslOutcome,
    Transfer,
    encode_performative,
)
from pumpd.amqp10.values import UByte, UInt

from tests.support.amqp10_dataplane import client_dataplane  # noqa: F401  # the fixture
from tests.support.amqp10_peer import EVENT_LOOPS, PeerSide, run_on, scripted_peer

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("client_dataplane")]


def _f(performative: Any, payload: bytes = b"", channel: int = 0, type: int = 0) -> bytes:
    return encode_frame(channel, encode_performative(performative), payload, type=type)


def _t(delivery_id: int | None, *, handle: int = 0, more: bool = False) -> bytes:
    return _f(Transfer(handle=UInt(handle),
                       delivery_id=None if delivery_id is None else UInt(delivery_id),
                       delivery_tag=b"t", message_format=UInt(0), more=more), b"x" * 80)


def _flow(**kw: Any) -> bytes:
    fields: dict[str, Any] = {"next_incoming_id": UInt(0), "incoming_window": UInt(100),
                              "next_outgoing_id": UInt(0), "outgoing_window": UInt(100)}
    fields.update(kw)
    return _f(Flow(**fields))


class Case(NamedTuple):
    name: str
    client_role: str  # "receiver" or "sender": the link the client attaches
    crafted: bytes
    condition: str
    description: str
    client: tuple[tuple[str, int], ...] = ()  # the client's arguments


CASES = [
    Case("delivery-id out of sequence", "receiver", _t(5) + _t(7), NOT_ALLOWED,
         "delivery-id 7 out of sequence (expected 6)"),
    Case("unknown handle", "receiver", _t(0, handle=9), UNATTACHED_HANDLE,
         "transfer for handle 9, which is not attached"),
    Case("channel not begun", "receiver", _f(Flow(incoming_window=UInt(1),
                                                  next_outgoing_id=UInt(0),
                                                  outgoing_window=UInt(1)), channel=3),
         NOT_ALLOWED, "flow on channel 3, which no session has begun"),
    Case("frame beyond max-frame-size", "receiver", b"\x00\x00\x10\x01\x02\x00\x00\x00",
         FRAMING_ERROR, "a frame of 4097 bytes (type 0, channel 0) exceeds max-frame-size 4096"),
    Case("beyond the session window", "receiver", _t(0) + _t(1) + _t(2), WINDOW_VIOLATION,
         "a transfer beyond our incoming-window (channel 0)", (("incoming_window", 2),)),
    Case("message beyond max-message-size", "receiver", _t(0, more=True) + _t(None),
         MESSAGE_SIZE_EXCEEDED,
         "transfer on channel 0: delivery 0 on handle 0 reaches 160 bytes, over "
         "max-message-size 100",
         (("max_message_size", 100),)),
    Case("undecodable performative", "receiver", encode_frame(0, b"\x00\x53\x77\x45"),
         DECODE_ERROR, "unknown performative descriptor"),
    Case("continuation of another delivery", "receiver", _t(0, more=True) + _t(5),
         NOT_ALLOWED, "transfer on channel 0: delivery-id 5 continues delivery 0"),
    Case("delivery without an id", "receiver", _t(None), NOT_ALLOWED,
         "transfer on channel 0: delivery-id missing on handle 0's first transfer "
         "of a delivery"),
    Case("SASL frame after SASL", "receiver", _f(SaslOutcome(UByte(0)), type=TYPE_SASL),
         FRAMING_ERROR, "a frame of type 1 after the SASL exchange"),
    Case("second open", "receiver", _f(Open(container_id="again")), NOT_ALLOWED,
         "open on channel 0 of an open connection"),
    Case("transfer to our sender", "sender", _t(0), NOT_ALLOWED,
         "transfer on link 'l', on which we are the sender"),
    Case("disposition for deliveries never sent", "sender",
         _f(Disposition(role=True, first=UInt(5), settled=True, state=Accepted())),
         NOT_ALLOWED, "disposition for delivery-ids 5..5, which were not sent (next "
         "delivery-id 0)"),
    Case("flow acknowledging transfers never sent", "sender",
         _flow(next_incoming_id=UInt(3)), WINDOW_VIOLATION,
         "flow with next-incoming-id 3, ahead of our next-outgoing-id 0"),
    Case("transfer field of the wrong type", "receiver",
         encode_frame(0, b"\x00\x53\x14\xc0\x03\x01\xa1\x00"), DECODE_ERROR,
         "transfer on channel 0: field handle at offset 14 has type code 0xa1, not a uint"),
    Case("delivery-tag over 32 bytes", "receiver",
         _f(Transfer(handle=UInt(0), delivery_id=UInt(0), delivery_tag=b"t" * 33), b"x"),
         NOT_ALLOWED, "transfer on channel 0: delivery-tag of 33 bytes, over 32"),
    Case("disposition state of no known kind", "sender",
         encode_frame(0, b"\x00\x53\x15\xc0\x09\x05\x41\x43\x40\x41\x00\x53\x77\x45"),
         DECODE_ERROR, "disposition on channel 0: field state at offset"),
    Case("protocol header after open", "receiver", b"AMQP\x00\x01\x00\x00", FRAMING_ERROR,
         "a protocol header after the SASL exchange"),
    Case("frame of type 2", "receiver", b"\x00\x00\x00\x0c\x02\x02\x00\x00\x00\x53\x10\x45",
         FRAMING_ERROR, "a frame of type 2 after the SASL exchange"),
    Case("link flow counting deliveries never sent", "sender",
         _flow(handle=UInt(0), delivery_count=UInt(4), link_credit=UInt(1)), NOT_ALLOWED,
         "flow on link 'l': delivery-count 4 is ahead of ours (0)"),
]


@pytest.mark.parametrize("loop", EVENT_LOOPS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_breach_closes_the_connection_naming_it(case: Case, loop: str) -> None:
    closes: list[Close] = []

    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        if case.client_role == "receiver":
            await p.expect(Flow)  # the client's credit: the link is attached
        else:
            await asyncio.sleep(0.05)
        p.send_raw(case.crafted)
        _, close, _ = await p.expect(Close)
        closes.append(close)

    async def main() -> Any:
        async with scripted_peer(script) as port:
            c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5,
                              max_frame_size=4096)
            kw: dict[str, Any] = dict(case.client)
            s = await c.begin(incoming_window=kw.pop("incoming_window", 100))
            if case.client_role == "receiver":
                await s.attach_receiver("q", name="l", credit=kw.pop("credit", 10), **kw)
            else:
                await s.attach_sender("q", name="l")
            return await asyncio.wait_for(c.closed, 5)

    cause = run_on(loop, main)
    assert isinstance(cause, Amqp10Error)
    assert (cause.step, cause.what, cause.condition) == \
        ("connection", "the peer broke the protocol", case.condition), cause
    assert cause.description is not None and cause.description.startswith(case.description), \
        cause.description
    error = closes[0].error
    assert (error.condition, error.description) == (cause.condition, cause.description)
