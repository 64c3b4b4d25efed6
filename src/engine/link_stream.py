"""The pika interception under a :class:`~pumpd.engine.link.Link`: pika's stream on an asyncio
transport of the running loop, every byte read going first through an interceptor.

pika's asyncio adapter drives the socket with add_reader and Python ``recv`` calls; here
``_AsyncioIOServicesAdapter.create_streaming_connection`` is overridden so that the stream is an
asyncio transport (uvloop's in pumpd), whose reads pass the interceptor (the relay, or until one
takes over, the frame guard) before pika sees what is left. A peer breaking AMQP's framing gets
connection.close 501 FRAME_ERROR, as RabbitMQ sends. Used by ``link.py`` only; with it, the only
modules touching pika internals.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Any

from pika.adapters.asyncio_connection import _AsyncioIOServicesAdapter
from pika.adapters.utils import nbio_interface
from pika.connection import Connection

from ..dataplane.frames import CONNECTION_CLOSE_FRAME_ERROR, FrameError, connection_close_frame
from ..dataplane.received import FrameGuard

Interceptor = Callable[[bytes], bytes]


class _PikaTransport(nbio_interface.AbstractStreamTransport):  # type: ignore[misc]
    """What pika's protocol sees of an asyncio transport."""

    def __init__(self, transport: asyncio.Transport, protocol: Any) -> None:
        self._transport = transport
        self._protocol = protocol
        self.muted = False  # after a frame error: pika's writes (its own close) are dropped

    def abort(self) -> None:
        self._transport.abort()

    def get_protocol(self) -> Any:
        return self._protocol

    def write(self, data: bytes) -> None:
        if not self.muted:
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()


class InterceptedStream(asyncio.Protocol):
    """asyncio protocol in front of pika's: incoming bytes pass the interceptor first."""

    def __init__(self, pika_protocol: Any) -> None:
        self.pika_protocol = pika_protocol
        self.pika_transport: _PikaTransport | None = None
        self.transport: Any = None  # asyncio.Transport, or uvloop's TCPTransport
        self.interceptor: Interceptor | None = None
        self.on_intercept_error: Callable[[BaseException], None] | None = None
        self.on_write_pressure: Callable[[bool], None] | None = None
        self.frame_error: FrameError | None = None
        # pika's connection state after the last bytes it was given, until the connection is
        # open: what the handshake waits for when it runs out of time (see waiting_for)
        self.handshake_state: int | None = None

    def frame_max(self) -> int:
        """The connection's frame_max: pika's proposal until connection.tune, then the
        negotiated value."""
        return int(self.pika_protocol.conn.params.frame_max)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass, but has the same methods
        self.transport = transport  # type: ignore[assignment]
        self.pika_transport = _PikaTransport(self.transport, self.pika_protocol)
        self.pika_protocol.connection_made(self.pika_transport)
        self.handshake_state = self.pika_protocol.conn.connection_state

    def data_received(self, data: bytes) -> None:
        interceptor = self.interceptor
        if interceptor is not None:
            try:
                rest = interceptor(data)
            except FrameError as exc:  # the peer broke AMQP's framing: as RabbitMQ does, say so
                self._close_on_frame_error(exc)
                return
            except Exception as exc:  # a fault of the data plane: the stream cannot be trusted
                if self.on_intercept_error is not None:
                    self.on_intercept_error(exc)
                if self.transport is not None:
                    self.transport.abort()
                return
            # pika's heartbeat checker judges liveness by this count
            self.pika_protocol.conn.bytes_received += len(data) - len(rest)
            if not rest:
                return
            data = rest
        self.pika_protocol.data_received(data)
        if self.handshake_state is not None and self.handshake_state != _OPEN:
            self.handshake_state = self.pika_protocol.conn.connection_state

    def _close_on_frame_error(self, exc: FrameError) -> None:
        """connection.close 501 FRAME_ERROR with the reason and our end of the stream, then drop
        the connection when the peer closes its end, or after a second. Without waiting for
        close-ok: whatever arrives meanwhile is read and dropped, pika sees nothing more and
        writes nothing more. (Closing at once with unread bytes would reset the connection,
        and a peer may lose the close frame with the reset.)"""
        self.interceptor = _refuse_all
        self.frame_error = exc
        if self.pika_transport is not None:
            self.pika_transport.muted = True
        if self.on_intercept_error is not None:
            self.on_intercept_error(exc)
        t = self.transport
        if t is None or t.is_closing():
            return
        t.write(connection_close_frame(CONNECTION_CLOSE_FRAME_ERROR, f"FRAME_ERROR - {exc}"))
        if t.can_write_eof():
            t.write_eof()
        asyncio.get_running_loop().call_later(1.0, t.abort)

    def eof_received(self) -> bool | None:
        return bool(self.pika_protocol.eof_received())

    def pause_writing(self) -> None:
        if self.on_write_pressure is not None:
            self.on_write_pressure(True)

    def resume_writing(self) -> None:
        if self.on_write_pressure is not None:
            self.on_write_pressure(False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pika_protocol.connection_lost(exc)


# pika's connection states during the handshake, and what each one waits for.
_OPEN = Connection.CONNECTION_OPEN
_AWAITED = {
    Connection.CONNECTION_PROTOCOL: "the AMQP protocol header (connection.start)",
    Connection.CONNECTION_START: "the login (connection.start-ok)",
    Connection.CONNECTION_TUNE: "connection.open",
}


def _refuse_all(_data: bytes) -> bytes:
    """After a frame error: whatever is still read is dropped, for pika too."""
    return b""


class InterceptingServices(_AsyncioIOServicesAdapter):  # type: ignore[misc]
    """pika's asyncio services, with the stream on an asyncio transport of our own."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.stream: InterceptedStream | None = None

    def waiting_for(self) -> str:
        """The handshake step that has not been answered yet: the TCP connect, the TLS
        handshake, or the AMQP method last sent."""
        stream = self.stream
        if stream is None:
            return "the TCP connect"
        if stream.transport is None:
            return "the TLS handshake"
        return _AWAITED.get(stream.handshake_state or 0, "the AMQP handshake")

    def create_streaming_connection(
        self,
        protocol_factory: Callable[[], Any],
        sock: socket.socket,
        on_done: Callable[[Any], None],
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> Any:
        loop = self.get_native_ioloop()

        async def connect() -> None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                stream = InterceptedStream(protocol_factory())
                # until a data plane takes the stream over, frame sizes are checked here
                stream.interceptor = FrameGuard(stream.frame_max)
                self.stream = stream  # for open_link's error, should the handshake fail
                await loop.create_connection(
                    lambda: stream,
                    sock=sock,
                    ssl=ssl_context,
                    server_hostname=server_hostname if ssl_context else None,
                )
            except BaseException as exc:  # handed to pika, which reports it to the opener
                # The loop has closed the descriptor, or never took it (then it leaks, rarely):
                # closing the object here could close a number someone else holds by now.
                sock.detach()
                on_done(exc)
                return
            # From here the event loop (libuv) alone closes the descriptor. uvloop attaches the
            # socket object to the transport only after the connection is made; a reset in
            # between closes the transport first, the object is never detached, and its
            # garbage collection later closes whatever reused that descriptor number (seen: the
            # fault proxy's sockets, and the event loop's own epoll fd, which aborts the
            # process). Detached now, it can close nothing.
            sock.detach()
            self.stream = stream
            on_done((stream.pika_transport, stream.pika_protocol))

        task = loop.create_task(connect())

        class _Ref(nbio_interface.AbstractIOReference):  # type: ignore[misc]
            def cancel(self) -> bool:
                return bool(task.cancel())

        return _Ref()


def future_callback(fut: asyncio.Future[Any]) -> Callable[[Any], None]:
    def done(frame: Any) -> None:
        if not fut.done():
            fut.set_result(frame)

    return done
