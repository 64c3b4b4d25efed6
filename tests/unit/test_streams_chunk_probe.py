"""The streams layer's chunk probe (``streams/chunk_probe.py``) against a scripted peer on a
real socket: a stream's last offset and a chunk's header read from the first Deliver frame of a
subscription at credit 1, unsubscribed after; nothing delivered reads as None; and every lie
(a chunk that does not hold the offset asked for, data that runs past its frame, a chunk of no
records, a Deliver for a subscription never made) closing the connection with an error that
names it."""

from __future__ import annotations

import asyncio
import struct

import pytest
from pumpd.streams.chunk_probe import chunk_at, last_offset
from pumpd.streams.client import DELIVER_FRAME_MAX, connect
from pumpd.streams.codes import DELIVER
from pumpd.streams.errors import PeerViolation
from pumpd.streams.wire import LAST, OFFSET, frame

from tests.support.streams_peer import (
    PeerSide,
    Script,
    chunk_deliver,
    serve,
    subscribed,
    unsubscribed,
)

pytestmark = pytest.mark.timeout(30)


def _run(script: Script, probe, frame_max: int = 1 << 20):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        server, port = await serve(script, frame_max=frame_max)
        client = await connect(host="127.0.0.1", port=port, username="u", password="p",
                               vhost="/", step_timeout=5)
        try:
            return await probe(client)
        finally:
            client.abort()
            server.close()

    return asyncio.run(main())


def test_the_last_offset_is_the_last_chunks_last_record_and_the_probe_unsubscribes() -> None:
    seen: list[str] = []

    async def script(side: PeerSide) -> None:
        sub, stream, spec = await subscribed(side)
        assert stream == "orders"
        assert spec == struct.pack(">HHi", LAST, 1, 0)  # last, credit 1, no properties
        side.send(chunk_deliver(sub, 10, 5, entries=2))
        await unsubscribed(side, seen)

    got = _run(script, lambda c: last_offset(c, "orders", wait=5))
    assert got == 14
    assert seen == ["unsubscribed"]


def test_the_chunk_holding_an_offset_gives_its_header_without_its_messages() -> None:
    async def script(side: PeerSide) -> None:
        sub, _stream, spec = await subscribed(side)
        assert spec[:10] == struct.pack(">Hq", OFFSET, 12)
        side.send(chunk_deliver(sub, 10, 5, timestamp=1_234_567, data=b"not a message"))
        await unsubscribed(side, [])

    head = _run(script, lambda c: chunk_at(c, "orders", OFFSET, 12, wait=5))
    assert (head.first, head.records, head.last, head.timestamp) == (10, 5, 14, 1_234_567)


def test_nothing_delivered_within_the_wait_is_none() -> None:
    seen: list[str] = []

    async def script(side: PeerSide) -> None:
        await subscribed(side)
        await unsubscribed(side, seen)

    assert _run(script, lambda c: last_offset(c, "empty", wait=0.2)) is None
    assert seen == ["unsubscribed"]


def test_a_chunk_larger_than_the_agreed_frame_is_taken_whilesubscribed() -> None:
    async def script(side: PeerSide) -> None:
        sub, _stream, _spec = await subscribed(side)
        side.send(chunk_deliver(sub, 0, 3, data=b"m" * 10_000))
        await unsubscribed(side, [])

    assert _run(script, lambda c: last_offset(c, "big", wait=5), frame_max=4096) == 2


def _lie(deliver, text: str, kind: int = OFFSET, value: int = 50) -> None:  # type: ignore[no-untyped-def]
    async def script(side: PeerSide) -> None:
        sub, _stream, _spec = await subscribed(side)
        side.send(deliver(sub))
        await side.reader.read()

    async def probe(client):  # type: ignore[no-untyped-def]
        with pytest.raises(PeerViolation) as info:
            await chunk_at(client, "orders", kind, value, wait=5)
        assert text in str(info.value), str(info.value)
        error = await asyncio.wait_for(client.closed, 5)
        assert text in str(error), str(error)

    _run(script, probe)


def test_a_chunk_that_does_not_hold_the_offset_asked_for_closes_the_connection() -> None:
    _lie(lambda sub: chunk_deliver(sub, 10, 5),
         "the chunk of offsets 10 to 14 of stream 'orders' for offset 50")


def test_chunk_data_past_its_frame_closes_the_connection() -> None:
    _lie(lambda sub: chunk_deliver(sub, 60, 5, length=1_000_000),
         "says 1000000 bytes of data; its frame holds 20")


def test_a_chunk_of_no_records_closes_the_connection() -> None:
    _lie(lambda sub: chunk_deliver(sub, 60, 0, entries=1), "says 1 entries and 0 records")


def test_a_chunk_that_is_not_messages_closes_the_connection() -> None:
    _lie(lambda sub: chunk_deliver(sub, 60, 1, kind=2), "of type 2, not messages")


def test_a_deliver_frame_too_short_for_a_chunk_header_closes_the_connection() -> None:
    _lie(lambda sub: frame(DELIVER, bytes([sub]) + b"\0" * 10), "a chunk header")


def test_a_deliver_for_a_subscription_never_made_closes_the_connection() -> None:
    _lie(lambda sub: chunk_deliver(sub + 7, 60, 1),
         "DELIVER for subscription 7, which this connection does not have")


def test_a_deliver_frame_past_its_bound_closes_the_connection_even_whilesubscribed() -> None:
    size = DELIVER_FRAME_MAX + 1
    _lie(lambda sub: struct.pack(">IHHB", size, DELIVER, 1, sub) + b"\0" * 64,
         f"a frame of {size} bytes")
