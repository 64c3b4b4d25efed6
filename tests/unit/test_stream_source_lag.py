"""A stream source's lag readings (``engine/streams/source_lag.py``) against a scripted streams
peer on a real socket: readings share one connection held between them; a peer that lies on it
gets the connection dropped, the reading unknown, and the next reading a new connection; a
connection the peer closed between readings is replaced; :meth:`StreamSourceLag.close` closes
the held connection politely."""

from __future__ import annotations

import asyncio
import struct

import pytest
from pumpd.config.uri import parse_uri
from pumpd.engine.streams.source_lag import StreamSourceLag
from pumpd.streams.codes import CLOSE, SUBSCRIBE, UNSUBSCRIBE
from pumpd.streams.wire import LAST, OFFSET

from tests.support.streams_peer import PeerSide, chunk_deliver, serve, subscribe_fields

pytestmark = pytest.mark.timeout(30)

WRITTEN_MS = 1_700_000  # the chunks' timestamp


class Stream:
    """A peer serving stream ``orders`` of offsets 0 to 9 in one chunk, on each connection:
    ``lie_on`` connections answer an offset subscription with a chunk that ends before it,
    ``hang_up_on`` connections close after their first unsubscribe."""

    def __init__(self, lie_on: tuple[int, ...] = (), hang_up_on: tuple[int, ...] = ()) -> None:
        self.connections = 0
        self.closed_politely: list[int] = []
        self.lie_on, self.hang_up_on = lie_on, hang_up_on

    async def script(self, side: PeerSide) -> None:
        n = self.connections
        self.connections += 1
        while True:
            key, corr, rest = await side.request()
            side.answer(key, corr)
            if key == CLOSE:
                self.closed_politely.append(n)
                return
            if key == UNSUBSCRIBE and n in self.hang_up_on:
                side.writer.close()
                return
            if key != SUBSCRIBE:
                continue
            subscription, _stream, spec = subscribe_fields(rest)
            kind = struct.unpack_from(">H", spec)[0]
            if kind == OFFSET and n in self.lie_on:
                side.send(chunk_deliver(subscription, 0, 3, timestamp=WRITTEN_MS))
            else:
                assert kind in (LAST, OFFSET), kind
                side.send(chunk_deliver(subscription, 0, 10, timestamp=WRITTEN_MS))


def _readings(peer: Stream, calls: list[int | str]) -> list[object]:
    """The readings after each offset forwarded in ``calls``; "close" closes the held
    connection, "wait" lets the peer's hang-up arrive."""

    async def main() -> list[object]:
        server, port = await serve(peer.script)
        lag = StreamSourceLag(parse_uri("amqp://u:p@127.0.0.1/"), "orders", port,
                              shovel="orders", client_name="pumpd orders (stream lag)")
        got: list[object] = []
        try:
            for call in calls:
                if call == "close":
                    await lag.close()
                elif call == "wait":
                    await asyncio.sleep(0.3)
                else:
                    assert isinstance(call, int)
                    got.append(await lag.read(call))
        finally:
            await lag.close()
            server.close()
        return got

    return asyncio.run(main())


def test_readings_share_one_connection_and_close_closes_it_politely() -> None:
    peer = Stream()
    got = _readings(peer, [9, 9, 4, "close"])
    assert got == [(0, None), (0, None), (5, WRITTEN_MS / 1000)]
    assert peer.connections == 1
    assert peer.closed_politely == [0]


def test_a_lie_drops_the_connection_and_the_next_reading_opens_another(
        caplog: pytest.LogCaptureFixture) -> None:
    peer = Stream(lie_on=(0,))
    got = _readings(peer, [9, 4, 9, 4, "close"])
    assert got == [(0, None), None, (0, None), (5, WRITTEN_MS / 1000)]
    assert peer.connections == 2
    assert peer.closed_politely == [1]
    assert "the lag of stream 'orders' is not known" in caplog.text
    assert "for offset 5, which that chunk does not hold" in caplog.text


def test_a_connection_the_peer_closed_between_readings_is_replaced() -> None:
    peer = Stream(hang_up_on=(0,))
    got = _readings(peer, [9, "wait", 9, 9, "close"])
    assert got == [(0, None), (0, None), (0, None)]
    assert peer.connections == 2
    assert peer.closed_politely == [1]
