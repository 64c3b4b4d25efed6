"""pumpd's AMQP 1.0 client connection against a scripted peer in this process: the handshake
and its failures (each naming its step), idle time-outs both ways, the peer's close, step
time-outs, batched writes and paused reading."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pumpd.amqp10.connection import Connection, connect
from pumpd.amqp10.errors import RESOURCE_LIMIT_EXCEEDED, Amqp10Error
from pumpd.amqp10.framing import AMQP_HEADER, SASL_HEADER, TYPE_SASL
from pumpd.amqp10.performatives import (
    Attach,
    Begin,
    Close,
    Detach,
    End,
    Error,
    Flow,
    Open,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    Transfer,
)
from pumpd.amqp10.values import Symbol, UByte, UInt

from tests.support.amqp10_peer import EVENT_LOOPS, PeerSide, run_on, scripted_peer

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("loop", EVENT_LOOPS)]


async def _connect(port: int, **kw: Any) -> Connection:
    kw.setdefault("step_timeout", 5.0)
    return await connect(host="127.0.0.1", port=port, container_id="client-test", **kw)


def _run(script: Any, client: Any, loop: str) -> Any:
    async def main() -> Any:
        async with scripted_peer(script) as port:
            return await client(port)
    return run_on(loop, main)


def test_open_sends_what_was_asked_and_learns_the_peers_limits(loop: str) -> None:
    seen: dict[str, Any] = {}

    async def script(p: PeerSide) -> None:
        assert await p.read_header() == SASL_HEADER
        p.send_raw(SASL_HEADER)
        p.send(0, SaslMechanisms([Symbol("PLAIN")]), type=TYPE_SASL)
        _, _, init, _ = await p.read_frame()
        seen["init"] = init
        # the outcome and the AMQP header in one write: the client must keep them apart
        p.send(0, SaslOutcome(UByte(0)), type=TYPE_SASL)
        p.send_raw(AMQP_HEADER)
        assert await p.read_header() == AMQP_HEADER
        _, _, seen["open"], _ = await p.read_frame()
        p.send(0, Open(container_id="peer", max_frame_size=UInt(4096), idle_time_out=UInt(8000)))
        await p.expect(Close)
        p.send(0, Close())

    async def client(port: int) -> tuple[float, int]:
        c = await _connect(port, sasl="plain", username="u", password="pw",
                           hostname="vhost:v1", idle_time_out=30, max_frame_size=8192,
                           properties={"product": "pumpd"})
        assert c.is_open
        result = (c.idle_time_out, c.remote_max_frame_size)
        await c.close()
        assert not c.is_open
        cause = c.closed.result()
        assert isinstance(cause, Amqp10Error) and cause.step == "close"
        return result

    assert _run(script, client, loop) == (8.0, 4096)
    assert seen["init"] == SaslInit(Symbol("PLAIN"), b"\0u\0pw", "127.0.0.1")
    o = seen["open"]
    assert (o.container_id, o.hostname, o.max_frame_size, o.idle_time_out) == \
        ("client-test", "vhost:v1", 8192, 30000)
    assert o.properties == {Symbol("product"): "pumpd"}


def _refusal(script: Any, loop: str, **kw: Any) -> Amqp10Error:
    async def client(port: int) -> Amqp10Error:
        with pytest.raises(Amqp10Error) as info:
            await _connect(port, **kw)
        return info.value
    result: Amqp10Error = _run(script, client, loop)
    return result


def test_a_sasl_outcome_other_than_ok_is_an_error_naming_sasl_and_the_code(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake(outcome=1)
        await p.closed_by_client()

    err = _refusal(script, loop, sasl="plain", username="guest", password="wrong-pass-w0rd")
    assert err.step == "sasl"
    assert "outcome code 1 (auth: authentication failed" in str(err)
    assert "wrong-pass-w0rd" not in str(err)


def test_a_mechanism_the_peer_does_not_offer_is_an_error_naming_both(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake(mechanisms=("PLAIN", "AMQPLAIN"))

    err = _refusal(script, loop, sasl="external")
    assert str(err).endswith("sasl: the peer does not offer SASL mechanism EXTERNAL (it offers "
                             "PLAIN, AMQPLAIN)"), err


@pytest.mark.parametrize(("answer", "sasl", "step", "what"), [
    (b"AMQP\x00\x00\x09\x01", "anonymous", "sasl",
     "the peer does not speak AMQP 1.0: it answered with protocol header "
     "b'AMQP\\x00\\x00\\t\\x01' (AMQP 0-9-1)"),
    (SASL_HEADER, "none", "open", "the peer requires SASL (it answered with the SASL header)"),
    (AMQP_HEADER, "anonymous", "sasl", "the peer has no SASL layer"),
    (b"HTTP/1.1", "none", "open", "the peer is not an AMQP peer: it answered b'HTTP/1.1'"),
])
def test_a_wrong_protocol_header_is_named(answer: bytes, sasl: str, step: str,
                                          what: str, loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.read_header()
        p.send_raw(answer)
        await p.closed_by_client()

    err = _refusal(script, loop, sasl=sasl)
    assert err.step == step and err.what.startswith(what), err


def test_a_close_instead_of_open_names_open_and_the_peers_error(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        assert await p.read_header() == AMQP_HEADER
        p.send_raw(AMQP_HEADER)
        await p.read_frame()
        p.send(0, Close(error=Error(Symbol("amqp:unauthorized-access"), "vhost v9 not found")))
        await p.expect(Close)

    err = _refusal(script, loop, sasl="none")
    assert (err.step, err.condition, err.description) == \
        ("open", "amqp:unauthorized-access", "vhost v9 not found")
    assert str(err) == ("AMQP 1.0 127.0.0.1:" + err.peer.split(":")[1] + ": open: the peer "
                        "closed the connection: amqp:unauthorized-access (vhost v9 not found)")


def test_a_peer_that_does_not_answer_a_step_times_out_naming_it(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.closed_by_client()  # never answers begin

    async def client(port: int) -> Amqp10Error:
        c = await _connect(port, step_timeout=0.3)
        with pytest.raises(Amqp10Error) as info:
            await c.begin()
        assert c.closed.done()
        return info.value

    err = _run(script, client, loop)
    assert (err.step, err.what) == ("begin", "no answer from the peer within 0.3s")


def test_nothing_listening_is_a_connect_error(loop: str) -> None:
    async def client() -> Amqp10Error:
        async with scripted_peer(lambda p: asyncio.sleep(0)) as port:
            pass  # closed again: nothing listens on port now
        with pytest.raises(Amqp10Error) as info:
            await _connect(port)
        return info.value

    err = run_on(loop, client)
    assert err.step == "connect" and "refused" in err.what.lower(), err


def test_a_peer_closing_with_an_error_sets_closed_with_its_condition(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await asyncio.sleep(0.1)  # the client's open step is over
        p.send(0, Close(error=Error(Symbol("amqp:connection:forced"), "shutdown")))
        await p.expect(Close)  # the client answers

    async def client(port: int) -> Any:
        c = await _connect(port)
        return await asyncio.wait_for(c.closed, 5)

    cause = _run(script, client, loop)
    assert isinstance(cause, Amqp10Error)
    assert (cause.step, cause.what, cause.condition, cause.description) == \
        ("connection", "the peer closed the connection", "amqp:connection:forced", "shutdown")


def test_a_silent_peer_is_given_up_after_our_idle_time_out(loop: str) -> None:
    closes: list[Close] = []

    async def script(p: PeerSide) -> None:
        await p.handshake()
        _, close, _ = await p.expect(Close)
        closes.append(close)

    async def client(port: int) -> tuple[Any, float]:
        c = await _connect(port, idle_time_out=0.2)
        began = asyncio.get_running_loop().time()
        cause = await asyncio.wait_for(c.closed, 5)
        return cause, asyncio.get_running_loop().time() - began

    cause, waited = _run(script, client, loop)
    assert 0.15 <= waited <= 1.0, waited
    assert cause.condition == RESOURCE_LIMIT_EXCEEDED
    assert "no frame from the peer for 0.2s" in str(cause)
    assert closes[0].error.condition == RESOURCE_LIMIT_EXCEEDED


def test_paused_reading_does_not_count_as_the_peers_silence(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.closed_by_client()

    async def client(port: int) -> float:
        c = await _connect(port, idle_time_out=0.2)
        c.pause_reading(True, "a")
        c.pause_reading(True, "b")
        await asyncio.sleep(0.6)
        assert c.is_open and c.reading_paused
        c.pause_reading(False, "a")
        assert c.reading_paused  # "b" still holds it
        c.pause_reading(False, "b")
        began = asyncio.get_running_loop().time()
        await asyncio.wait_for(c.closed, 5)
        return asyncio.get_running_loop().time() - began

    assert 0.15 <= _run(script, client, loop) <= 1.0


def test_the_client_sends_empty_frames_at_half_the_peers_idle_time_out(loop: str) -> None:
    counted: list[int] = []

    async def script(p: PeerSide) -> None:
        await p.handshake(open_=Open(container_id="peer", idle_time_out=UInt(200)))
        reading = asyncio.ensure_future(p.expect(Close))
        await asyncio.sleep(0.75)
        counted.append(p.heartbeats)
        await reading

    async def client(port: int) -> None:
        c = await _connect(port)
        await asyncio.sleep(0.8)
        await c.close()

    _run(script, client, loop)
    assert 4 <= counted[0] <= 8, counted  # every 0.1s for 0.75s; a busy machine may lag


class _CountingTransport:
    """A transport's stand-in that counts the writes (uvloop's cannot be patched)."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self.writes: list[int] = []

    def write(self, data: bytes) -> None:
        self.writes.append(len(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def test_frames_written_in_one_loop_iteration_go_out_in_one_write(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        p.flow(handle=0, delivery_count=0, link_credit=500, next_incoming_id=0)
        got = 0
        while got < 300:
            _, _, _ = await p.expect(Transfer)
            got += 1
        await p.expect(Detach)
        p.send(0, Detach(handle=UInt(0), closed=True))
        await p.answer_close()

    async def client(port: int) -> list[int]:
        c = await _connect(port)
        s = await c.begin()
        sender = await s.attach_sender("q", name="s", settled=True)
        while sender.credit == 0:
            await asyncio.sleep(0.01)
        transport = c._transport
        counting = _CountingTransport(transport)
        c._transport = counting
        for _ in range(300):
            sender.send(b"\x00\x53\x77\x45", settled=True)
        await asyncio.sleep(0.05)
        c._transport = transport
        await asyncio.wait_for(sender.detach(), 5)
        await c.close()
        return counting.writes

    writes = _run(script, client, loop)
    assert len(writes) == 1, writes


def test_write_pressure_is_reported_above_high_water(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach()
        p.flow(handle=0, delivery_count=0, link_credit=100_000, next_incoming_id=0)
        await asyncio.sleep(1.0)  # not reading: the client's writes pile up
        await p.closed_by_client()

    async def client(port: int) -> list[bool]:
        c = await _connect(port)
        s = await c.begin(incoming_window=100)
        sender = await s.attach_sender("q", name="s", settled=True)
        while sender.credit == 0:
            await asyncio.sleep(0.01)
        pressure: list[bool] = []
        c.on_write_pressure(pressure.append, 64 * 1024)
        payload = b"\x00\x53\x75\xb0" + (60_000).to_bytes(4, "big") + bytes(60_000)
        for _ in range(200):
            if sender.credit == 0 or pressure:
                break
            sender.send(payload, settled=True)
            await asyncio.sleep(0)
        await asyncio.sleep(0.2)
        c.abort()
        return pressure

    assert _run(script, client, loop)[:1] == [True]


def test_begin_and_attach_on_a_closed_connection_say_why_it_closed(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        p.send(0, Close(error=Error(Symbol("amqp:connection:forced"), "bye")))
        await p.expect(Close)

    async def client(port: int) -> Amqp10Error:
        c = await _connect(port)
        await asyncio.wait_for(c.closed, 5)
        with pytest.raises(Amqp10Error) as info:
            await c.begin()
        return info.value

    err = _run(script, client, loop)
    assert (err.step, err.condition) == ("begin", "amqp:connection:forced")


def test_a_session_the_peer_begins_on_its_own_is_refused(loop: str) -> None:
    closes: list[Close] = []

    async def script(p: PeerSide) -> None:
        await p.handshake()
        p.send(3, Begin(next_outgoing_id=UInt(0), incoming_window=UInt(5),
                        outgoing_window=UInt(5)))
        _, close, _ = await p.expect(Close)
        closes.append(close)

    async def client(port: int) -> Any:
        c = await _connect(port)
        return await asyncio.wait_for(c.closed, 5)

    cause = _run(script, client, loop)
    assert cause.condition == "amqp:not-allowed"
    assert "sessions from the peer are not accepted" in cause.description
    assert closes[0].error.condition == "amqp:not-allowed"


def test_an_attach_the_peer_refuses_names_the_address_and_its_error(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.attach(refuse=True)
        p.send(0, Detach(handle=UInt(0), closed=True,
                         error=Error(Symbol("amqp:not-found"), "no queue 'q9'")))
        await p.expect(Detach)  # the client detaches too
        await p.expect(Close)

    async def client(port: int) -> tuple[Amqp10Error, Any]:
        c = await _connect(port)
        s = await c.begin()
        with pytest.raises(Amqp10Error) as info:
            await s.attach_receiver("/amq/queue/q9", name="r", credit=5)
        return info.value, await asyncio.wait_for(c.closed, 5)

    err, cause = _run(script, client, loop)
    assert (err.step, err.what, err.condition, err.description) == \
        ("attach /amq/queue/q9", "the peer refused the link", "amqp:not-found", "no queue 'q9'")
    assert cause.condition == "amqp:not-found"


def test_flow_frames_before_open_are_refused(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        assert await p.read_header() == AMQP_HEADER
        p.send_raw(AMQP_HEADER)
        await p.read_frame()
        p.send(0, Flow(incoming_window=UInt(1), next_outgoing_id=UInt(0),
                       outgoing_window=UInt(1)))
        await p.expect(Close)

    err = _refusal(script, loop, sasl="none")
    assert (err.step, err.condition, err.description) == \
        ("open", "amqp:not-allowed", "flow before open")


def test_attach_frames_for_links_never_asked_for_are_refused(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        p.send(0, Attach(name="theirs", handle=UInt(0), role=False))
        await p.expect(Close)

    async def client(port: int) -> Any:
        c = await _connect(port)
        await c.begin()
        return await asyncio.wait_for(c.closed, 5)

    cause = _run(script, client, loop)
    assert cause.condition == "amqp:not-allowed"
    assert "attach for link 'theirs', which we did not attach" in cause.description


def test_without_sasl_the_amqp_header_and_open_go_first(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        client_open = await p.handshake(sasl=False)
        assert client_open.container_id == "client-test"
        await p.answer_close()

    async def client(port: int) -> bool:
        c = await _connect(port, sasl="none")
        opened = c.is_open
        await c.close()
        return opened

    assert _run(script, client, loop)


def test_a_session_ended_by_the_client_leaves_the_connection_open(loop: str) -> None:
    async def script(p: PeerSide) -> None:
        await p.handshake()
        await p.begin()
        await p.expect(End)
        p.send(0, End())
        await p.begin(channel=1)  # the next session
        await p.answer_close()

    async def client(port: int) -> tuple[Any, int]:
        c = await _connect(port)
        s = await c.begin()
        await s.end()
        with pytest.raises(Amqp10Error, match="end: ended by the client"):
            await s.attach_receiver("q", name="r", credit=1)
        assert c.is_open
        again = await c.begin()
        await c.close()
        return s.closed.result(), again.channel

    cause, channel = _run(script, client, loop)
    assert (cause.step, cause.what) == ("end", "ended by the client")
    assert channel == 0  # the channel is free again
