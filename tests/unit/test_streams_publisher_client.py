"""pumpd's asyncio streams client for publishing, against a scripted peer on a real socket:
tune honoured both ways, publishes batched into frames within the agreed size, confirms and
publish errors handed over by publisher, and every lie of the peer (a frame larger than agreed,
a count its frame cannot hold, an answer nobody asked for, a confirm for a publisher never
declared, silence past two heartbeats) closing the connection with an error that names it."""

from __future__ import annotations

import asyncio
import itertools
import struct

import pytest
from pumpd.streams.client import connect
from pumpd.streams.codes import (
    CLOSE,
    DECLARE_PUBLISHER,
    METADATA,
    PUBLISH,
    PUBLISH_CONFIRM,
    PUBLISH_ERROR,
    QUERY_PUBLISHER_SEQUENCE,
)
from pumpd.streams.errors import PeerViolation, StreamsError
from pumpd.streams.wire import frame, string

from tests.support.streams_peer import PeerSide, Script, serve

pytestmark = pytest.mark.timeout(30)

SECRET = "s3cret-never-shown"


async def _client(script: Script, **tune: int):  # type: ignore[no-untyped-def]
    server, port = await serve(script, **tune)
    client = await connect(host="127.0.0.1", port=port, username="u", password=SECRET,
                           vhost="/", step_timeout=5)
    return server, client


async def _declared(side: PeerSide, publisher: int = 0) -> None:
    key, corr, rest = await side.request()
    assert key == DECLARE_PUBLISHER and rest[0] == publisher
    side.answer(key, corr)


def _confirm(publisher: int, *ids: int) -> bytes:
    return frame(PUBLISH_CONFIRM, struct.pack(">Bi", publisher, len(ids))
                 + b"".join(struct.pack(">Q", i) for i in ids))


async def _closed_with(client, text: str) -> str:  # type: ignore[no-untyped-def]
    error = await asyncio.wait_for(client.closed, 10)
    assert text in str(error), str(error)
    assert SECRET not in str(error)
    return str(error)


def test_tune_is_honoured_both_ways_and_publishes_fit_the_agreed_frame() -> None:
    frames: list[bytes] = []

    async def script(side: PeerSide) -> None:
        await _declared(side)
        total = 0
        while total < 50:
            data = await side.read_frame()
            frames.append(data)
            total += struct.unpack_from(">i", data, 9)[0]
        side.send(_confirm(0, *range(1, 51)))

    async def main() -> None:
        server, client = await _client(script, frame_max=4096, heartbeat=5)
        assert (client.frame_max, client.heartbeat) == (4096, 5)
        got: list[int] = []
        done = asyncio.get_running_loop().create_future()

        def confirmed(ids: list[int]) -> None:
            got.extend(ids)
            if len(got) == 50:
                done.set_result(None)

        await client.declare_publisher(0, "ref", "s", on_confirm=confirmed,
                                       on_error=lambda e: None)
        client.publish(0, [(i, bytes([i]) * 300) for i in range(1, 51)])
        await asyncio.wait_for(done, 10)
        assert got == list(range(1, 51))
        with pytest.raises(ValueError, match="does not fit a frame of 4096 bytes"):
            client.publish(0, [(51, b"x" * 4096)])
        await client.close()
        server.close()

    asyncio.run(main())
    assert len(frames) > 1
    assert all(len(f) <= 4096 and struct.unpack_from(">H", f, 4)[0] == PUBLISH for f in frames)


def test_publish_errors_reach_the_publisher_with_their_codes() -> None:
    async def script(side: PeerSide) -> None:
        await _declared(side, 3)
        await side.read_frame()
        side.send(frame(PUBLISH_ERROR, struct.pack(">Bi", 3, 2) + struct.pack(">QH", 1, 18)
                        + struct.pack(">QH", 2, 16)))

    async def main() -> list[tuple[int, int]]:
        server, client = await _client(script)
        errors: asyncio.Future[list[tuple[int, int]]] = asyncio.get_running_loop().create_future()
        await client.declare_publisher(3, "", "s", on_confirm=lambda ids: None,
                                       on_error=errors.set_result)
        client.publish(3, [(1, b"a"), (2, b"b")])
        got = await asyncio.wait_for(errors, 10)
        client.abort()
        server.close()
        return got

    assert asyncio.run(main()) == [(1, 18), (2, 16)]


def _lie(lie: bytes, expected: str, *, declare: bool = True) -> None:
    async def script(side: PeerSide) -> None:
        if declare:
            await _declared(side)
        side.send(lie)

    async def main() -> None:
        server, client = await _client(script)
        if declare:
            await client.declare_publisher(0, "", "s", on_confirm=lambda ids: None,
                                           on_error=lambda e: None)
        error = await asyncio.wait_for(client.closed, 10)
        assert isinstance(error, PeerViolation)
        assert expected in str(error), str(error)
        assert SECRET not in str(error)
        server.close()

    asyncio.run(main())


def test_a_confirm_for_a_publisher_never_declared_closes_the_connection() -> None:
    _lie(_confirm(7, 1), "publisher 7, which this connection did not declare")


def test_a_frame_larger_than_agreed_closes_the_connection() -> None:
    _lie(struct.pack(">I", (1 << 20) + 1) + b"\0" * 16, f"a frame of {(1 << 20) + 1} bytes")


def test_a_count_its_frame_cannot_hold_closes_the_connection() -> None:
    _lie(frame(PUBLISH_CONFIRM, struct.pack(">Bi", 0, 1_000_000) + struct.pack(">Q", 1)),
         "PUBLISH_CONFIRM ids: 1000000 elements")


def test_an_answer_to_no_request_closes_the_connection() -> None:
    _lie(frame(QUERY_PUBLISHER_SEQUENCE | 0x8000, struct.pack(">IHQ", 999, 1, 5)),
         "correlation id 999, which answers no request of ours", declare=False)


def test_a_malformed_metadata_answer_fails_the_request_and_the_connection() -> None:
    async def script(side: PeerSide) -> None:
        key, corr, _ = await side.request()
        assert key == METADATA
        side.send(frame(METADATA | 0x8000, struct.pack(">Ii", corr, 5000)))

    async def main() -> None:
        server, client = await _client(script)
        with pytest.raises(PeerViolation, match="metadata brokers: 5000 elements"):
            await client.metadata(["s"])
        assert client.closed.done()
        server.close()

    asyncio.run(main())


def test_the_brokers_close_and_refusals_are_named() -> None:
    async def script(side: PeerSide) -> None:
        key, corr, _ = await side.request()
        side.answer(key, corr, code=16)  # ACCESS_REFUSED
        side.send(frame(CLOSE, struct.pack(">IH", 1, 15) + string("going away")))

    async def main() -> None:
        server, client = await _client(script)
        with pytest.raises(StreamsError, match=r"user 'u' may not declare publisher 0 on stream "
                                               r"'s' \(ACCESS_REFUSED\)"):
            await client.declare_publisher(0, "r", "s", on_confirm=lambda ids: None,
                                           on_error=lambda e: None)
        await _closed_with(client, "INTERNAL_ERROR")
        await _closed_with(client, "'going away'")
        server.close()

    asyncio.run(main())


def test_a_silent_peer_is_given_up_after_two_heartbeats() -> None:
    async def script(side: PeerSide) -> None:
        await asyncio.sleep(10)

    async def main() -> None:
        server, client = await _client(script, heartbeat=1)
        await _closed_with(client, "no frame from the broker for 2 s")
        server.close()

    asyncio.run(main())


def test_a_sequence_query_returns_the_brokers_number() -> None:
    async def script(side: PeerSide) -> None:
        key, corr, rest = await side.request()
        assert key == QUERY_PUBLISHER_SEQUENCE and rest == string("ref") + string("s")
        side.answer(key, corr, rest=struct.pack(">Q", 41))

    async def main() -> int:
        server, client = await _client(script)
        got = await client.query_publisher_sequence("ref", "s")
        client.abort()
        server.close()
        return got

    assert asyncio.run(main()) == 41


def test_a_refused_connection_names_the_address() -> None:
    async def main() -> None:
        with pytest.raises(StreamsError, match=r"cannot connect to 127\.0\.0\.1:1"):
            await connect(host="127.0.0.1", port=1, username="u", password=SECRET, vhost="/")

    asyncio.run(main())


def test_an_idle_client_sends_a_heartbeat_every_interval() -> None:
    beats: list[float] = []

    async def script(side: PeerSide) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while loop.time() - start < 3.5:
            data = await side.read_frame()
            if struct.unpack_from(">H", data, 4)[0] == 0x0017:
                beats.append(loop.time() - start)
                side.send(frame(0x0017, b""))  # heard from the peer too

    async def main() -> None:
        server, client = await _client(script, heartbeat=1)
        await asyncio.sleep(3.6)
        assert not client.closed.done()
        client.abort()
        server.close()

    asyncio.run(main())
    # the first interval had the login's writes; from then on one beat per interval
    assert len(beats) >= 2 and all(b - a < 1.5 for a, b in itertools.pairwise(beats)), beats
