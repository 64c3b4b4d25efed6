"""The AMQP 1.0 client on the data plane's frame scanner and transfer writer (either
implementation): the wire's order kept between transfers, dispositions and every other frame
read in one go, aborted deliveries counted, another session's transfers read by the codec, and
transfers written ahead of what is written after them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pumpd.amqp10.connection import connect
from pumpd.amqp10.framing import encode_frame
from pumpd.amqp10.performatives import (
    Accepted,
    Attach,
    Detach,
    Disposition,
    Error,
    Flow,
    Modified,
    Received,
    Rejected,
    Transfer,
    encode_performative,
)
from pumpd.amqp10.values import Symbol, UInt

from tests.support.amqp10_dataplane import client_dataplane  # noqa: F401  # the fixture
from tests.support.amqp10_peer import EVENT_LOOPS, PeerSide, run_on, scripted_peer

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("loop", EVENT_LOOPS),
              pytest.mark.usefixtures("client_dataplane")]


def _f(performative: Any, payload: bytes = b"", channel: int = 0) -> bytes:
    return encode_frame(channel, encode_performative(performative), payload)


def _t(delivery_id: int | None, payload: bytes = b"m", *, handle: int = 0, channel: int = 0,
       more: bool = False, aborted: bool = False) -> bytes:
    return _f(Transfer(handle=UInt(handle),
                       delivery_id=None if delivery_id is None else UInt(delivery_id),
                       delivery_tag=None if delivery_id is None else b"t%d" % delivery_id,
                       more=more, aborted=aborted), payload, channel)


def _run(script: Any, client: Any, loop: str) -> Any:
    async def main() -> Any:
        async with scripted_peer(script) as port:
            return await client(port)
    return run_on(loop, main)


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    async def wait() -> None:
        while not predicate():
            await asyncio.sleep(0.005)
    await asyncio.wait_for(wait(), timeout)


def test_transfers_before_a_detach_in_one_read_are_delivered_before_it(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        await p.expect(Flow)
        p.send_raw(_t(0) + _t(1, more=True) + _t(None, b"2")
                   + _f(Detach(handle=UInt(0), closed=True,
                               error=Error(Symbol("amqp:resource-deleted"), "gone"))))
        await p.expect(Detach)
        await p.answer_close()

    async def client(port: int) -> tuple[list[Any], Any]:
        c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
        s = await c.begin()
        r = await s.attach_receiver("q", name="r", credit=10)
        got: list[Any] = []
        r.on_transfer(lambda d, p, st: got.append((d, p, r.closed.done())))
        cause = await asyncio.wait_for(c.closed, 5)
        return got, cause.condition

    assert _run(script, client, loop) == ([(0, b"m", False), (1, b"m2", False)],
                                         "amqp:resource-deleted")


def test_a_flow_between_transfers_in_one_read_sees_those_before_it(loop: str) -> None:
    echoed: list[int] = []

    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        await p.expect(Flow)
        # the flow asks for ours (echo): its delivery-count counts the transfers before it
        p.send_raw(_t(0) + _t(1) + _f(Flow(
            next_incoming_id=UInt(0), incoming_window=UInt(100), next_outgoing_id=UInt(2),
            outgoing_window=UInt(100), handle=UInt(0), delivery_count=UInt(2),
            link_credit=UInt(8), echo=True)) + _t(2))
        _, flow, _ = await p.expect(Flow)
        echoed.append(int(flow.delivery_count))
        await p.answer_close()

    async def client(port: int) -> int:
        c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
        s = await c.begin()
        r = await s.attach_receiver("q", name="r", credit=10)
        got: list[Any] = []
        r.on_transfer(lambda d, p, st: got.append(d))
        await _until(lambda: len(got) == 3 and bool(echoed))
        await c.close()
        return r.beyond_credit

    assert _run(script, client, loop) == 0
    assert echoed == [2]


def test_transfers_right_after_the_attach_in_one_read_reach_the_link(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        _, attach, _ = await p.expect(Attach)
        p.send_raw(_f(Attach(name=attach.name, handle=UInt(0), role=False,
                             source=attach.source, target=attach.target,
                             initial_delivery_count=UInt(0))) + _t(0, b"early"))
        await p.answer_close()

    async def client(port: int) -> list[Any]:
        c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
        s = await c.begin()
        r = await s.attach_receiver("q", name="r", credit=10)
        got: list[Any] = []
        r.on_transfer(lambda d, p, st: got.append((d, p)))
        await _until(lambda: bool(got))
        await c.close()
        return got

    assert _run(script, client, loop) == [(0, b"early")]


def test_an_aborted_delivery_uses_its_credit_and_its_delivery_id(loop: str) -> None:
    flows: list[tuple[int, int]] = []

    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        await p.expect(Flow)  # credit 3
        # 1 aborted in its second frame, 2 aborted in its first
        p.send_raw(_t(0) + _t(1, more=True) + _t(None, aborted=True)
                   + _t(2, aborted=True))
        p.send_raw(_t(3, more=True))
        await asyncio.sleep(0.05)
        p.send_raw(_t(None, aborted=True) + _t(4))
        _, flow, _ = await p.expect(Flow)  # the credit used up, granted again
        flows.append((int(flow.delivery_count), int(flow.link_credit)))
        await p.answer_close()

    async def client(port: int) -> list[Any]:
        c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
        s = await c.begin()
        r = await s.attach_receiver("q", name="r", credit=3, settle_mode="settled")
        got: list[Any] = []
        r.on_transfer(lambda d, p, st: got.append(d))
        await _until(lambda: len(got) == 2 and bool(flows))
        await c.close()
        return [got, r.beyond_credit]

    # 0, 1 and 2 used the credit of 3 (it was granted again, counting them), 3 and 4 the new
    assert _run(script, client, loop) == [[0, 4], 0]
    assert flows[0][0] == 3


def test_another_sessions_transfers_are_read_by_the_codec(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin(channel=0)
        await p.attach(channel=0)
        await p.begin(channel=1)  # the first link's credit may come before or after it
        await p.attach(channel=1)
        await asyncio.sleep(0.05)
        p.send_raw(_t(0, b"a0") + _t(0, b"b0", channel=1) + _t(1, b"a1")
                   + _t(1, b"b", channel=1, more=True) + _t(None, b"1", channel=1))
        await p.answer_close()

    async def client(port: int) -> list[Any]:
        c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
        got: list[Any] = []
        for name in ("a", "b"):
            s = await c.begin()
            r = await s.attach_receiver("q", name=name, credit=10)
            r.on_transfer(lambda d, p, st, name=name: got.append((name, d, p)))
        await _until(lambda: len(got) == 4)
        await c.close()
        return got

    assert _run(script, client, loop) == [("a", 0, b"a0"), ("b", 0, b"b0"), ("a", 1, b"a1"),
                                         ("b", 1, b"b1")]


def test_transfers_go_out_before_what_is_written_after_them(loop: str) -> None:
    seen: list[Any] = []

    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        p.flow(handle=0, delivery_count=0, link_credit=5, next_incoming_id=0)
        for _ in range(3):
            _, _, performative, payload = await p.read_frame()
            seen.append((type(performative).__name__, payload))
        p.send(0, Detach(handle=UInt(0), closed=True))
        await p.answer_close()

    async def client(port: int) -> None:
        c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
        s = await c.begin()
        sender = await s.attach_sender("q", name="s")
        await _until(lambda: sender.credit == 5)
        sender.send(b"\x00\x53\x77\xa1\x01a", settled=False)
        sender.send(b"\x00\x53\x77\xa1\x01b", settled=False)
        await sender.detach()  # written in the same loop iteration as the transfers
        await c.close()

    _run(script, client, loop)
    assert seen == [("Transfer", b"\x00\x53\x77\xa1\x01a"), ("Transfer", b"\x00\x53\x77\xa1\x01b"),
                    ("Detach", b"")]


def test_outcomes_with_fields_go_out_whole_and_come_in_as_their_kind(loop: str) -> None:
    states: list[Any] = []

    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        p.flow(handle=0, delivery_count=0, link_credit=5, next_incoming_id=0)
        for _ in range(4):
            await p.expect(Transfer)
        p.send_raw(
            _f(Disposition(role=True, first=UInt(0), settled=False, state=Received(
                section_number=UInt(0), section_offset=0)))
            + _f(Disposition(role=True, first=UInt(0), settled=True, state=Rejected(
                error=Error(Symbol("amqp:precondition-failed"), "no")))))
        p.send_raw(_f(Disposition(role=True, first=UInt(1), last=UInt(2), settled=False,
                                  state=Modified(delivery_failed=True)))
                   + _f(Disposition(role=True, first=UInt(3), settled=True, state=None)))
        _, d, _ = await p.expect(Disposition)  # ours: the modified ones settled
        states.append((int(d.first), int(d.last), d.settled, d.state))
        await p.answer_close()

    async def client(port: int) -> list[Any]:
        c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
        s = await c.begin()
        sender = await s.attach_sender("q", name="s")
        await _until(lambda: sender.credit == 5)
        got: list[Any] = []
        sender.on_disposition(lambda f, last, st: got.append((f, last, st)))
        for _ in range(4):
            sender.send(b"\x00\x53\x77\x45", settled=False)
        await _until(lambda: len(got) == 3)
        await c.close()
        return got

    got = _run(script, client, loop)
    assert got == [(0, 0, Rejected()), (1, 2, Modified()), (3, 3, None)]
    assert states == [(1, 2, True, Modified())]


def test_a_rejection_with_an_error_goes_out_with_it(loop: str) -> None:
    dispositions: list[Any] = []

    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        await p.expect(Flow)
        p.send_raw(_t(0) + _t(1))
        for _ in range(2):
            _, d, _ = await p.expect(Disposition)
            dispositions.append((int(d.first), d.last, d.settled, d.state))
        await p.answer_close()

    async def client(port: int) -> None:
        c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
        s = await c.begin()
        r = await s.attach_receiver("q", name="r", credit=10)
        got: list[Any] = []
        r.on_transfer(lambda d, p, st: got.append(d))
        await _until(lambda: len(got) == 2)
        r.settle(0, 0, Rejected(error=Error(Symbol("amqp:decode-error"), "bad")))
        r.settle(1, 1, Accepted())
        await _until(lambda: len(dispositions) == 2)
        await c.close()

    _run(script, client, loop)
    assert dispositions == [
        (0, None, True, Rejected(error=Error(Symbol("amqp:decode-error"), "bad"))),
        (1, None, True, Accepted())]
