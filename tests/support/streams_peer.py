"""A scripted streams protocol peer on a real socket: it logs a client in (peer properties,
SASL, tune, open) as RabbitMQ does, answers the requests it is given answers for, and sends
whatever frames a test makes it send, lies included."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pumpd.streams.codes import (
    DELIVER,
    OPEN,
    PEER_PROPERTIES,
    RESPONSE_BIT,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SUBSCRIBE,
    TUNE,
    UNSUBSCRIBE,
)
from pumpd.streams.wire import CHUNK_HEAD, frame, string


@dataclass
class PeerSide:
    """The peer's end of one connection: the frames the client sent after login, and a way to
    send it frames."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    tune: tuple[int, int] = (0, 0)  # what the client answered to tune
    received: list[bytes] = field(default_factory=list)

    async def read_frame(self) -> bytes:
        size = await self.reader.readexactly(4)
        body = await self.reader.readexactly(struct.unpack(">I", size)[0])
        return size + body

    async def request(self) -> tuple[int, int, bytes]:
        """The client's next request other than a heartbeat: key, correlation id, the rest."""
        while True:
            data = await self.read_frame()
            key = struct.unpack_from(">H", data, 4)[0]
            if key != 0x0017:
                self.received.append(data)
                return key, struct.unpack_from(">I", data, 8)[0], data[12:]

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def answer(self, key: int, corr: int, code: int = 1, rest: bytes = b"") -> None:
        self.send(frame(key | RESPONSE_BIT, struct.pack(">IH", corr, code) + rest))


Script = Callable[[PeerSide], Awaitable[None]]


async def serve(script: Script, *, frame_max: int = 1 << 20, heartbeat: int = 60
                ) -> tuple[asyncio.Server, int]:
    """A listening peer on 127.0.0.1 (its port returned) that logs each client in with the tune
    values given, then runs ``script`` on the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        side = PeerSide(reader, writer)
        try:
            key, corr, _ = await side.request()
            assert key == PEER_PROPERTIES
            side.answer(key, corr, rest=struct.pack(">i", 0))
            key, corr, _ = await side.request()
            assert key == SASL_HANDSHAKE
            side.answer(key, corr, rest=struct.pack(">i", 1) + string("PLAIN"))
            key, corr, _ = await side.request()
            assert key == SASL_AUTHENTICATE
            side.answer(key, corr)
            side.send(frame(TUNE, struct.pack(">II", frame_max, heartbeat)))
            got = await side.read_frame()
            side.tune = struct.unpack_from(">II", got, 8)
            key, corr, _ = await side.request()
            assert key == OPEN
            side.answer(key, corr, rest=struct.pack(">i", 0))
            await script(side)
            await reader.read()  # until the client hangs up
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def chunk_deliver(subscription: int, first: int, records: int, *,
                  entries: int | None = None, data: bytes = b"x" * 20,
                  length: int | None = None, timestamp: int = 1_700_000,
                  kind: int = 0) -> bytes:
    """A Deliver frame of one chunk for ``subscription``: ``records`` records from offset
    ``first``, written at ``timestamp`` (ms); ``entries`` and ``length`` may lie."""
    head = CHUNK_HEAD.pack(subscription, 0x50, kind, records if entries is None else entries,
                           records, timestamp, 0, first, 0,
                           len(data) if length is None else length, 0)
    return frame(DELIVER, head + b"\0" * 4 + data)


async def subscribed(side: PeerSide) -> tuple[int, str, bytes]:
    """The subscribe request: answered; its subscription id, stream and offset spec + credit."""
    key, corr, rest = await side.request()
    assert key == SUBSCRIBE
    side.answer(key, corr)
    return subscribe_fields(rest)


def subscribe_fields(rest: bytes) -> tuple[int, str, bytes]:
    """A subscribe request's body after its correlation id: its subscription id, stream, and
    offset specification + credit."""
    n = struct.unpack_from(">h", rest, 1)[0]
    return rest[0], rest[3:3 + n].decode(), rest[3 + n:]


async def unsubscribed(side: PeerSide, seen: list[str]) -> None:
    """The unsubscribe request: answered, and noted in ``seen``."""
    key, corr, _ = await side.request()
    assert key == UNSUBSCRIBE
    seen.append("unsubscribed")
    side.answer(key, corr)
