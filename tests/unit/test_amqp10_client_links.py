"""pumpd's AMQP 1.0 receivers and senders against a scripted peer in this process: delivery
numbers across the 2^16 and 2^32 wraps, credit as a prefetch, messages in several frames, the
peer's credit and session window, dispositions in ranges."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pumpd.amqp10.connection import Connection, connect
from pumpd.amqp10.errors import NoCredit
from pumpd.amqp10.link import Receiver, Sender
from pumpd.amqp10.performatives import (
    Accepted,
    Detach,
    Disposition,
    Flow,
    Open,
    Rejected,
    Released,
    Transfer,
)
from pumpd.amqp10.serials import MASK
from pumpd.amqp10.values import UInt

from tests.support.amqp10_dataplane import client_dataplane  # noqa: F401  # the fixture
from tests.support.amqp10_peer import EVENT_LOOPS, PeerSide, run_on, scripted_peer

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("loop", EVENT_LOOPS),
              pytest.mark.usefixtures("client_dataplane")]


def _transfer(delivery_id: int | None, *, handle: int = 0, settled: bool = False,
              more: bool = False, aborted: bool = False) -> Transfer:
    return Transfer(handle=UInt(handle),
                    delivery_id=None if delivery_id is None else UInt(delivery_id & MASK),
                    delivery_tag=None if delivery_id is None else b"t%d" % delivery_id,
                    message_format=None if delivery_id is None else UInt(0), settled=settled,
                    more=more, aborted=aborted)


async def _receiver(port: int, *, credit: int = 10, settle_mode: str = "first",
                    **kw: Any) -> tuple[Connection, Receiver, list[tuple[int, bytes, bool]]]:
    c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
    s = await c.begin()
    r = await s.attach_receiver("q", name="r", credit=credit, settle_mode=settle_mode, **kw)
    got: list[tuple[int, bytes, bool]] = []
    r.on_transfer(lambda d, p, st: got.append((d, p, st)))
    return c, r, got


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    async def wait() -> None:
        while not predicate():
            await asyncio.sleep(0.005)
    await asyncio.wait_for(wait(), timeout)


def _run(script: Any, client: Any, loop: str) -> Any:
    async def main() -> Any:
        async with scripted_peer(script) as port:
            return await client(port)
    return run_on(loop, main)


async def _peer_receiver_link(p: PeerSide, *, next_outgoing_id: int = 0,
                              initial_delivery_count: int = 0) -> Flow:
    """Handshake, begin, attach as the sender; returns the client's first flow (its credit)."""
    await p.handshake()
    await p.begin(next_outgoing_id=next_outgoing_id)
    await p.attach(initial_delivery_count=initial_delivery_count)
    _, flow, _ = await p.expect(Flow)
    return flow  # type: ignore[no-any-return]


@pytest.mark.parametrize("start", [2**16 - 3, 2**32 - 3])
def test_delivery_ids_across_a_wrap_map_onto_a_counter_that_does_not_wrap(start: int, loop: str) -> None:
    dispositions: list[tuple[int, int | None, Any]] = []

    async def script(p: PeerSide) -> None:
        flow = await _peer_receiver_link(p, next_outgoing_id=start & MASK,
                                         initial_delivery_count=start & MASK)
        assert (flow.delivery_count, flow.link_credit) == (start & MASK, 10)
        p.send_raw(b"".join(_frame(_transfer(start + i), b"m%d" % i) for i in range(6)))
        for _ in range(2 if start > MASK - 10 else 1):
            _, d, _ = await p.expect(Disposition)
            dispositions.append((int(d.first), None if d.last is None else int(d.last),
                                 d.state))
        await p.answer_close()

    async def client(port: int) -> list[int]:
        c, r, got = await _receiver(port)
        await _until(lambda: len(got) == 6)
        assert r.unsettled == 6
        r.settle(got[0][0], got[-1][0], Accepted())
        assert r.unsettled == 0
        await asyncio.sleep(0.05)
        await c.close()
        return [d for d, _, _ in got]

    numbers = _run(script, client, loop)
    assert numbers == [start + i for i in range(6)]
    if start > MASK - 10:  # split where the wire's delivery-id wraps
        assert dispositions == [(MASK - 2, MASK, Accepted()), (0, 2, Accepted())]
    else:
        assert dispositions[0] == (start, start + 5, Accepted())


def _frame(performative: Any, payload: bytes = b"", channel: int = 0) -> bytes:
    from pumpd.amqp10.framing import encode_frame
    from pumpd.amqp10.performatives import encode_performative
    return encode_frame(channel, encode_performative(performative), payload)


def test_credit_is_a_prefetch_granted_again_once_used_up_for_what_was_settled(loop: str) -> None:
    flows: list[tuple[int, int]] = []

    async def script(p: PeerSide) -> None:
        flow = await _peer_receiver_link(p)
        flows.append((flow.delivery_count, flow.link_credit))
        p.send_raw(b"".join(_frame(_transfer(i), b"x") for i in range(8)))
        _, f, _ = await p.expect(Flow)
        flows.append((f.delivery_count, f.link_credit))
        await asyncio.sleep(0.1)  # the client settles two more: no flow while credit is left
        p.send_raw(b"".join(_frame(_transfer(i), b"x") for i in range(8, 10)))
        _, f, _ = await p.expect(Flow)
        flows.append((f.delivery_count, f.link_credit))
        await p.answer_close()

    async def client(port: int) -> None:
        c, r, got = await _receiver(port, credit=8)
        await _until(lambda: len(got) == 8)
        r.settle(0, 1, Released())
        assert r.unsettled == 6
        await asyncio.sleep(0.05)
        r.settle(2, 3, Rejected())
        await _until(lambda: len(got) == 10)
        assert r.unsettled == 6
        await asyncio.sleep(0.05)
        await c.close()

    _run(script, client, loop)
    # 8 granted and received; 2 settled: 2 granted; 2 more settled, but 2 granted are not used
    # up yet; they come: 8 - 6 unsettled granted again. Never more than 8 in all.
    assert flows == [(0, 8), (8, 2), (10, 2)]


def test_settling_skips_what_is_settled_and_splits_into_consecutive_ranges(loop: str) -> None:
    dispositions: list[tuple[int, int | None, str]] = []

    async def script(p: PeerSide) -> None:
        await _peer_receiver_link(p)
        p.send_raw(b"".join(_frame(_transfer(i, settled=i == 4), b"x") for i in range(8)))
        while len(dispositions) < 4:
            _, d, _ = await p.expect(Disposition)
            assert d.settled and d.role
            dispositions.append((int(d.first), None if d.last is None else int(d.last),
                                 type(d.state).__name__))
        await p.answer_close()

    async def client(port: int) -> None:
        c, r, got = await _receiver(port)
        await _until(lambda: len(got) == 8)
        assert [st for _, _, st in got] == [False] * 4 + [True] + [False] * 3
        r.settle(2, 2, Rejected())
        r.settle(0, 7, Accepted())  # 2 is settled, 4 came settled
        r.settle(0, 7, Accepted())  # nothing left: nothing sent
        await asyncio.sleep(0.05)
        await c.close()

    _run(script, client, loop)
    assert dispositions == [(2, None, "Rejected"), (0, 1, "Accepted"), (3, None, "Accepted"),
                            (5, 7, "Accepted")]


def test_a_message_in_several_frames_is_reassembled_and_an_aborted_one_dropped(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await _peer_receiver_link(p)
        p.send_raw(
            _frame(_transfer(0, more=True), b"aaa")
            + _frame(_transfer(None, more=True), b"bbb")
            + _frame(_transfer(0), b"ccc")
            + _frame(_transfer(1, more=True), b"zzz")
            + _frame(_transfer(None, aborted=True))
            + _frame(_transfer(2, settled=True), b"last"))
        await p.answer_close()

    async def client(port: int) -> list[tuple[int, bytes, bool]]:
        c, r, got = await _receiver(port)
        await _until(lambda: len(got) == 2)
        assert r.unsettled == 1
        await c.close()
        return got

    assert _run(script, client, loop) == [(0, b"aaabbbccc", False), (2, b"last", True)]


def test_deliveries_before_the_callback_is_set_are_handed_to_it(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await _peer_receiver_link(p)
        p.send_raw(_frame(_transfer(0), b"early"))
        await p.answer_close()

    async def client(port: int) -> list[tuple[int, bytes, bool]]:
        c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
        s = await c.begin()
        r = await s.attach_receiver("q", name="r", credit=1)
        await asyncio.sleep(0.1)
        got: list[tuple[int, bytes, bool]] = []
        r.on_transfer(lambda d, p, st: got.append((d, p, st)))
        await c.close()
        return got

    assert _run(script, client, loop) == [(0, b"early", False)]


def test_a_pre_settled_receiver_grants_credit_again_as_deliveries_arrive(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        flow = await _peer_receiver_link(p)
        credit, count = int(flow.link_credit), 0
        for _round in range(5):  # 5 x credit deliveries: only possible if credit comes back
            p.send_raw(b"".join(_frame(_transfer(count + i, settled=True), b"x")
                                for i in range(credit)))
            count += credit
            while True:
                _, f, _ = await p.expect(Flow)
                if f.delivery_count == count:
                    credit = int(f.link_credit)
                    break
        await p.answer_close()

    async def client(port: int) -> int:
        c, r, got = await _receiver(port, credit=4, settle_mode="settled")
        await _until(lambda: len(got) >= 20)
        assert r.unsettled == 0
        await c.close()
        return len(got)

    assert _run(script, client, loop) >= 20


# -- senders -----------------------------------------------------------------------------------


async def _sender(port: int, **kw: Any) -> tuple[Connection, Sender]:
    c = await connect(host="127.0.0.1", port=port, container_id="t", step_timeout=5)
    s = await c.begin()
    return c, await s.attach_sender("q", name="s", **kw)


def test_a_sender_sends_within_the_peers_credit_and_hears_of_more(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        attach = await p.attach()
        assert (attach.snd_settle_mode, attach.initial_delivery_count) == (2, 0)
        p.flow(handle=0, delivery_count=0, link_credit=2, next_incoming_id=0)
        for _ in range(2):
            await p.expect(Transfer)
        p.flow(handle=0, delivery_count=1, link_credit=4, next_incoming_id=2)  # 1 in flight
        p.send(0, Disposition(role=True, first=UInt(0), last=UInt(1), settled=True,
                              state=Accepted()))
        await p.answer_close()

    async def client(port: int) -> list[Any]:
        c, sender = await _sender(port)
        events: list[Any] = []
        sender.on_credit(lambda: events.append(("credit", sender.credit)))
        sender.on_disposition(lambda f, last, st: events.append((f, last, st)))
        await _until(lambda: sender.credit == 2)
        assert [sender.send(b"\x00\x53\x77\x45", settled=False) for _ in range(2)] == [0, 1]
        assert sender.credit == 0
        with pytest.raises(NoCredit, match="no credit on link 's' to q"):
            sender.send(b"\x00\x53\x77\x45", settled=False)
        await _until(lambda: len(events) >= 2)
        await c.close()
        return events

    assert _run(script, client, loop)[-2:] == [("credit", 3), (0, 1, Accepted())]


def test_a_closed_session_window_holds_frames_and_credit_until_it_reopens(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin(incoming_window=1)
        await p.attach()
        p.flow(handle=0, delivery_count=0, link_credit=10, next_incoming_id=0,
               incoming_window=1)
        await p.expect(Transfer)
        await asyncio.sleep(0.1)  # the client must not send the second one yet
        p.flow(handle=0, delivery_count=1, link_credit=9, next_incoming_id=1, incoming_window=5)
        _, t, _ = await p.expect(Transfer)
        assert t.delivery_id == 1
        await p.answer_close()

    async def client(port: int) -> list[int]:
        c, sender = await _sender(port, settled=True)
        credits: list[int] = []
        sender.on_credit(lambda: credits.append(sender.credit))
        await _until(lambda: sender.credit == 1)  # link credit 10, the window 1
        sender.send(b"\x00\x53\x77\x45", settled=True)
        assert sender.credit == 0  # the window is used up
        await _until(lambda: sender.credit > 0)
        sender.send(b"\x00\x53\x77\x45", settled=True)
        await asyncio.sleep(0.05)
        await c.close()
        return credits

    assert _run(script, client, loop)[-1] == 5  # link credit 9 left, the window 5


def test_a_message_larger_than_the_peers_frames_is_split_with_no_empty_frame(loop: str) -> None:
    frames: list[tuple[int, Transfer, bytes]] = []
    payload = bytes(range(256)) * 12  # 3072 bytes

    async def script(p: PeerSide) -> None:
        await p.handshake(open_=Open(container_id="peer", max_frame_size=UInt(512)))
        await p.begin()
        await p.attach()
        p.flow(handle=0, delivery_count=0, link_credit=10, next_incoming_id=0)
        for size in (len(payload), 1000):
            while True:
                _, t, data = await p.expect(Transfer)
                frames.append((size, t, data))
                if not t.more:
                    break
        await p.answer_close()

    async def client(port: int) -> None:
        c, sender = await _sender(port)
        await _until(lambda: sender.credit > 0)
        sender.send(payload, settled=False)
        sender.send(payload[:1000], settled=True)
        await asyncio.sleep(0.05)
        await c.close()

    _run(script, client, loop)
    first = [(t, d) for size, t, d in frames if size == len(payload)]
    assert b"".join(d for _, d in first) == payload
    assert all(d for _, _, d in frames)
    assert first[0][0].delivery_id == 0 and all(t.delivery_id is None for t, _ in first[1:])
    assert [t.more for t, _ in first] == [True] * (len(first) - 1) + [False]
    second = [(t, d) for size, t, d in frames if size == 1000]
    assert second[0][0].delivery_id == 1 and second[0][0].settled is True
    assert b"".join(d for _, d in second) == payload[:1000]


def test_a_drain_uses_up_the_credit_the_caller_does_not_use(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        p.flow(handle=0, delivery_count=0, link_credit=5, next_incoming_id=0, drain=True)
        _, f, _ = await p.expect(Flow)
        assert (f.delivery_count, f.link_credit, f.drain) == (5, 0, True)
        await p.answer_close()

    async def client(port: int) -> int:
        c, sender = await _sender(port)
        await asyncio.sleep(0.1)
        credit = sender.credit
        await c.close()
        return credit

    assert _run(script, client, loop) == 0


def test_a_peer_detaching_a_running_link_ends_the_connection_naming_the_link(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await _peer_receiver_link(p)
        await asyncio.sleep(0.05)
        from pumpd.amqp10.performatives import Error
        from pumpd.amqp10.values import Symbol
        p.send(0, Detach(handle=UInt(0), closed=True,
                         error=Error(Symbol("amqp:resource-deleted"), "queue 'q' deleted")))
        await p.expect(Detach)
        await p.answer_close()

    async def client(port: int) -> tuple[Any, Any]:
        c, r, _ = await _receiver(port)
        cause = await asyncio.wait_for(c.closed, 5)
        return cause, r.closed.result()

    cause, link_cause = _run(script, client, loop)
    assert (cause.step, cause.what, cause.condition, cause.description) == \
        ("transfer q", "the peer detached the link", "amqp:resource-deleted",
         "queue 'q' deleted")
    assert link_cause is cause


def test_deliveries_beyond_the_credit_are_taken_and_counted(
        loop: str, caplog: pytest.LogCaptureFixture) -> None:
    async def script(p: PeerSide) -> None:
        await _peer_receiver_link(p)  # credit 2
        p.send_raw(b"".join(_frame(_transfer(i), b"x") for i in range(5)))
        await p.answer_close()

    async def client(port: int) -> tuple[int, int]:
        c, r, got = await _receiver(port, credit=2)
        await _until(lambda: len(got) == 5)
        await c.close()
        return r.beyond_credit, r.unsettled

    assert _run(script, client, loop) == (3, 5)
    assert "delivery-id 2 came beyond the credit granted" in caplog.text


def test_a_callback_that_raises_aborts_the_connection_naming_the_fault(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await _peer_receiver_link(p)
        p.send_raw(_frame(_transfer(0), b"x"))
        await p.closed_by_client()

    async def client(port: int) -> Any:
        c, r, _ = await _receiver(port)

        def fails(delivery: int, payload: bytes, settled: bool) -> None:
            raise KeyError("the caller's bug")

        r.on_transfer(fails)
        return await asyncio.wait_for(c.closed, 5)

    cause = _run(script, client, loop)
    assert (cause.step, cause.what) == \
        ("connection", "the client failed on a frame from the peer: KeyError(\"the caller's bug\")")
