"""A scripted AMQP 1.0 peer in the test's own event loop, on a loopback port: enough of a broker
to bring pumpd's AMQP 1.0 client (pumpd.amqp10.connection) to the state a test needs, then the
frames the test sends, lies included.

``async with scripted_peer(script) as port:`` runs ``script(peer)`` for each connection the
client makes; :class:`PeerSide` reads the client's frames and writes the peer's. The frames are
made with pumpd's own codec (whose tests check it against the specification's bytes); what this
peer checks is the client's behaviour. :func:`run_on` runs a test on either event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import uvloop
from pumpd.amqp10.framing import AMQP_HEADER, SASL_HEADER, TYPE_AMQP, TYPE_SASL, encode_frame
from pumpd.amqp10.performatives import (
    Attach,
    Begin,
    Close,
    Flow,
    Open,
    SaslMechanisms,
    SaslOutcome,
    Source,
    Target,
    decode_performative,
    encode_performative,
)
from pumpd.amqp10.values import Symbol, UByte, UInt

Script = Callable[["PeerSide"], Awaitable[None]]
T = TypeVar("T")

#: the event loops the client is tested on: asyncio's own, and uvloop (pumpd's daemon runs it)
EVENT_LOOPS = ("asyncio", "uvloop")


def run_on(loop: str, main: Callable[[], Awaitable[T]]) -> T:
    """``main()`` to completion on a new event loop of kind ``loop`` (see EVENT_LOOPS)."""
    factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())  # type: ignore[arg-type]


class PeerSide:
    """The peer's end of one connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.heartbeats = 0  # empty frames the client sent

    # -- writing ----------------------------------------------------------------------------

    def send(self, channel: int, performative: Any, payload: bytes = b"",
             type: int = TYPE_AMQP) -> None:
        self.writer.write(encode_frame(channel, encode_performative(performative), payload,
                                       type=type))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    # -- reading ----------------------------------------------------------------------------

    async def read_header(self) -> bytes:
        return await self.reader.readexactly(8)

    async def read_frame(self) -> tuple[int, int, Any, bytes]:
        """The client's next frame that is not a heartbeat: (type, channel, performative,
        payload)."""
        while True:
            size = struct.unpack(">I", await self.reader.readexactly(4))[0]
            rest = await self.reader.readexactly(size - 4)
            doff, ftype, channel = struct.unpack(">BBH", rest[:4])
            body = rest[doff * 4 - 4:]
            if not body:
                self.heartbeats += 1
                continue
            performative, pos = decode_performative(body)
            return ftype, channel, performative, body[pos:]

    async def expect(self, kind: type) -> tuple[int, Any, bytes]:
        """Read frames until one carries a ``kind``; (channel, performative, payload)."""
        while True:
            _, channel, performative, payload = await self.read_frame()
            if isinstance(performative, kind):
                return channel, performative, payload

    async def answer_close(self) -> Any:
        """Read until the client's close, answer it, wait for the TCP close; returns the
        client's close."""
        _, close, _ = await self.expect(Close)
        self.send(0, Close())
        await self.closed_by_client()
        return close

    async def closed_by_client(self) -> bool:
        """Wait until the client closes the TCP connection (True), reading what comes."""
        try:
            while await self.reader.read(65536):
                pass
        except ConnectionError:
            pass
        return True

    # -- a broker's answers -----------------------------------------------------------------

    async def handshake(self, *, sasl: bool = True, mechanisms: tuple[str, ...] = ("ANONYMOUS",
                        "PLAIN"), outcome: int = 0, open_: Open | None = None) -> Open:
        """The protocol headers, SASL (when ``sasl``) and open; returns the client's open."""
        if sasl:
            assert await self.read_header() == SASL_HEADER
            self.send_raw(SASL_HEADER)
            self.send(0, SaslMechanisms([Symbol(m) for m in mechanisms]), type=TYPE_SASL)
            await self.read_frame()  # sasl-init
            self.send(0, SaslOutcome(UByte(outcome)), type=TYPE_SASL)
            if outcome:
                return Open(container_id="")
        assert await self.read_header() == AMQP_HEADER
        self.send_raw(AMQP_HEADER)
        _, _, client_open, _ = await self.read_frame()
        self.send(0, open_ or Open(container_id="scripted-peer"))
        return client_open  # type: ignore[no-any-return]

    async def begin(self, *, next_outgoing_id: int = 0, incoming_window: int = 10_000,
                    channel: int = 0) -> Begin:
        """Answer the client's begin on ``channel``; returns the client's begin."""
        client_channel, begin, _ = await self.expect(Begin)
        self.send(channel, Begin(remote_channel=client_channel,
                                 next_outgoing_id=UInt(next_outgoing_id),
                                 incoming_window=UInt(incoming_window),
                                 outgoing_window=UInt(10_000)))
        return begin  # type: ignore[no-any-return]

    async def attach(self, *, handle: int = 0, initial_delivery_count: int = 0,
                     channel: int = 0, refuse: bool = False) -> Attach:
        """Answer the client's attach as its peer (the other role); returns the client's."""
        _, attach, _ = await self.expect(Attach)
        sending = bool(attach.role)  # the client receives: we send
        self.send(channel, Attach(
            name=attach.name, handle=UInt(handle), role=not attach.role,
            source=None if refuse and sending else attach.source or Source(),
            target=None if refuse and not sending else attach.target or Target(),
            initial_delivery_count=UInt(initial_delivery_count) if sending else None))
        return attach  # type: ignore[no-any-return]

    def flow(self, *, handle: int, delivery_count: int, link_credit: int, next_incoming_id: int,
             incoming_window: int = 10_000, next_outgoing_id: int = 0, channel: int = 0,
             drain: bool = False, echo: bool = False) -> None:
        self.send(channel, Flow(next_incoming_id=UInt(next_incoming_id),
                                incoming_window=UInt(incoming_window),
                                next_outgoing_id=UInt(next_outgoing_id),
                                outgoing_window=UInt(10_000), handle=UInt(handle),
                                delivery_count=UInt(delivery_count),
                                link_credit=UInt(link_credit), drain=drain, echo=echo))


@contextlib.asynccontextmanager
async def scripted_peer(script: Script) -> AsyncIterator[int]:
    """A listening peer on 127.0.0.1; yields its port. A script's failure is raised when the
    block ends (after the client's own assertions)."""
    failures: list[BaseException] = []
    tasks: set[asyncio.Task[None]] = set()

    async def run(peer: PeerSide) -> None:
        try:
            await script(peer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed: what the script waited for did not come
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # reported when the block ends
            failures.append(exc)
        finally:
            peer.writer.close()

    def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.add(asyncio.ensure_future(run(PeerSide(reader, writer))))

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.close()
        if tasks:  # the scripts' last reads: what the client sent before it closed
            await asyncio.wait(tasks, timeout=5)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if failures:
            raise failures[0]
