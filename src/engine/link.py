"""One AMQP connection with one channel: pika for the control plane, raw bytes for the data plane.

This module and ``link_stream.py`` (the interception itself) are the only ones that touch pika
internals (tested with pika 1.3.2 and 1.4.4, pinned in pyproject.toml). pika negotiates the connection, opens the channel, runs declarations, qos,
consume and confirm.select, handles heartbeats, connection.blocked and every error. The socket
itself is an asyncio transport of the running loop (uvloop's in pumpd), and every byte read off it
goes first through an *interceptor* (the relay), which keeps the frames of the data plane and hands
the rest to pika. Data-plane frames are written straight to the transport.

What pika internals are used, and why:
- ``_AsyncioIOServicesAdapter.create_streaming_connection`` is overridden so the stream is an
  asyncio transport (pika's own asyncio adapter drives the socket with add_reader and Python
  ``recv`` calls);
- ``Connection.bytes_received`` / ``bytes_sent`` are credited with the bytes the relay reads and
  writes, because pika's heartbeat checker judges liveness by them;
- ``Connection.params.frame_max`` holds the negotiated frame size after connection.tune;
- ``Connection.connection_state`` says which handshake step a connection that ran out of time
  was waiting for (``link_stream.py`` records it).

Every step waits for the broker within a bound that the failure names (``parameters.py``:
pika's socket and stack timeouts for the TCP connect and the handshake, :class:`StepTimeouts`
after it), and every failure quotes the broker's own ``reply_code`` and ``reply_text`` when the
broker closed the connection or the channel (``link_errors.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pika
import pika.channel
import pika.exceptions
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.adapters.utils.connection_workflow import AMQPConnectorStackTimeout

from ..config.model import BrokerURI, Declaration
from ..config.vocabulary import (
    BIT,
    DECLARATION_METHODS,
    REQUIRED_FIELDS,
    SHORTSTR,
    TABLE,
    USES_LAST_QUEUE,
)
from ..dataplane.frames import FrameError
from .link_errors import LinkError, closed_how, describe, quiet_pika_errors, reply_code, root_cause
from .link_stream import InterceptedStream, InterceptingServices, Interceptor, future_callback
from .parameters import StepTimeouts, step_timeouts

__all__ = ["Interceptor", "Link", "LinkError", "open_link", "quiet_pika_errors"]

log = logging.getLogger("pumpd.amqp_link")

# What pika is given for a field a declaration leaves out: AMQP's default for its type (pika
# would put the queue name for a missing routing key), or this field's own default.
_OMITTED_KIND: dict[str, Any] = {BIT: False, SHORTSTR: "", TABLE: None}
_OMITTED = {"type": "direct"}
# pika's keyword for a field, where it is not the field's own name.
_PIKA_KEYWORD = {"type": "exchange_type"}


class Link:
    """An open connection with one open channel. Create with :func:`open_link`."""

    def __init__(
        self,
        uri: BrokerURI,
        connection: Any,
        channel: pika.channel.Channel,
        stream: InterceptedStream,
        loop: asyncio.AbstractEventLoop,
        timeouts: StepTimeouts | None = None,
    ) -> None:
        self.uri = uri
        self.timeouts = timeouts or step_timeouts(uri)
        self.connection = connection
        self.channel = channel
        self._stream = stream
        self._loop = loop
        self.closed: asyncio.Future[BaseException] = loop.create_future()
        self.last_declared_queue = ""
        self._blocked_cb: Callable[[bool], None] | None = None
        # Why reading is paused ("write-pressure", "read-hold", ...): reading resumes only once
        # every reason is gone, so one pauser cannot undo another's pause.
        self._read_holds: set[str] = set()
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_cancel_callback(self._on_consumer_cancelled)
        connection.add_on_connection_blocked_callback(lambda *_: self._blocked(True))
        connection.add_on_connection_unblocked_callback(lambda *_: self._blocked(False))
        stream.on_intercept_error = self._data_plane_failed

    # -- state -------------------------------------------------------------------------------

    @property
    def frame_max(self) -> int:
        return int(self.connection.params.frame_max)

    @property
    def heartbeat(self) -> int:
        """The negotiated heartbeat timeout in seconds (0: heartbeats off)."""
        return int(self.connection.params.heartbeat or 0)

    @property
    def frame_error(self) -> FrameError | None:
        """The framing fault that made pumpd close this connection with 501, if one did."""
        return self._stream.frame_error

    @property
    def channel_number(self) -> int:
        return int(self.channel.channel_number)

    @property
    def is_open(self) -> bool:
        return not self.closed.done()

    def on_blocked(self, callback: Callable[[bool], None]) -> None:
        """``callback(True)`` on connection.blocked, ``callback(False)`` on unblocked."""
        self._blocked_cb = callback

    def _blocked(self, blocked: bool) -> None:
        if self._blocked_cb is not None:
            self._blocked_cb(blocked)

    def _fail(self, exc: BaseException) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)

    def _data_plane_failed(self, exc: BaseException) -> None:
        """The relay could not make sense of the byte stream: the connection is dropped."""
        if isinstance(exc, FrameError):
            message = (f"connection to {self.uri.redacted()} closed by pumpd with 501 "
                       f"FRAME_ERROR: {exc}")
            log.warning("%s", message)
            self._fail(LinkError(message))
            return
        self._fail(LinkError(f"connection to {self.uri.redacted()} dropped: the data plane "
                             f"failed on its byte stream: {exc}"))

    def _on_connection_closed(self, exc: BaseException) -> None:
        self._fail(LinkError(f"connection to {self.uri.redacted()} {closed_how(exc)}",
                             reply_code=reply_code(exc)))

    def _on_channel_closed(self, _channel: Any, exc: BaseException) -> None:
        self._fail(LinkError(f"channel on {self.uri.redacted()} {closed_how(exc)}",
                             reply_code=reply_code(exc)))
        if self.connection.is_open:
            try:
                self.connection.close()
            except pika.exceptions.ConnectionWrongStateError:
                pass

    def _on_consumer_cancelled(self, _frame: Any) -> None:
        self._fail(LinkError(f"the broker at {self.uri.redacted()} cancelled the consumer "
                             "(queue deleted or failed over?)"))

    # -- data plane --------------------------------------------------------------------------

    def intercept(self, interceptor: Interceptor | None) -> None:
        self._stream.interceptor = interceptor

    def hand_to_pika(self, data: bytes) -> None:
        """Give pika frames the interceptor kept back for a while (see ``Relay.resume``)."""
        if data and not self.closed.done():
            self._stream.pika_protocol.data_received(data)

    def write(self, data: bytes) -> None:
        """Write raw frames (built by the relay) to the connection."""
        if data and self._stream.transport is not None and self._stream.frame_error is None \
                and not self._stream.transport.is_closing():
            self._stream.transport.write(data)
            self.connection.bytes_sent += len(data)

    def on_write_pressure(self, callback: Callable[[bool], None], high_water: int) -> None:
        """``callback(True)`` when more than ``high_water`` bytes wait to be sent on this
        connection, ``callback(False)`` once they drained below a quarter of it."""
        self._stream.on_write_pressure = callback
        t = self._stream.transport
        if t is not None and not t.is_closing():
            t.set_write_buffer_limits(high=high_water)

    def pause_reading(self, paused: bool, reason: str = "write-pressure") -> None:
        """Stop reading this connection for ``reason`` (``paused``), or drop that reason; the
        transport reads again once no reason is left."""
        was_paused = bool(self._read_holds)
        if paused:
            self._read_holds.add(reason)
        else:
            self._read_holds.discard(reason)
        now_paused = bool(self._read_holds)
        t = self._stream.transport
        if now_paused != was_paused and t is not None and not t.is_closing():
            t.pause_reading() if now_paused else t.resume_reading()

    @property
    def reading_paused(self) -> bool:
        return bool(self._read_holds)

    def write_buffer_size(self) -> int:
        t = self._stream.transport
        return t.get_write_buffer_size() if t is not None else 0

    # -- control plane -----------------------------------------------------------------------

    async def _call(self, start: Callable[[Callable[[Any], None]], None], what: str,
                    timeout: float) -> Any:
        """Send one method and wait for its answer, the link's end, or ``timeout`` seconds.

        :raises LinkError: the link ended (its cause, and ``what`` it was doing), or no answer
            came within ``timeout`` (naming ``what``)
        """
        fut: asyncio.Future[Any] = self._loop.create_future()
        start(future_callback(fut))
        return await self._answer(fut, what, timeout)

    async def _answer(self, fut: asyncio.Future[Any], what: str, timeout: float) -> Any:
        """``fut``'s result, unless the link ends first or ``timeout`` seconds pass."""
        done, _ = await asyncio.wait({fut, self.closed}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if fut in done:
            return fut.result()
        if not done:
            raise LinkError(f"no answer to {what} within {timeout:g}s")
        cause = self.closed.result()
        if isinstance(cause, LinkError):  # already says what happened and where
            raise LinkError(f"{cause} (while {what})", reply_code=cause.reply_code)
        raise LinkError(f"{what} failed: {describe(cause)}", reply_code=reply_code(cause))

    async def declare(self, declarations: Sequence[Declaration]) -> None:
        """Issue every declaration in order; ``queue: ""`` means the last queue declared."""
        for decl in declarations:
            await self._declare_one(decl)

    async def _declare_one(self, decl: Declaration) -> None:
        if decl.method not in DECLARATION_METHODS:
            raise LinkError(f"unsupported declaration {decl.method}")
        kwargs = self._pika_arguments(decl)
        what = f"{decl.method} on {self.uri.redacted()}"
        if decl.method == "queue.declare" and decl.if_missing and await self._queue_exists(kwargs):
            self.last_declared_queue = kwargs["queue"]
            return
        start = getattr(self.channel, decl.method.replace(".", "_"))  # queue.bind: queue_bind
        frame = await self._call(lambda cb: start(**kwargs, callback=cb), what, self.timeouts.work)
        if decl.method == "queue.declare":
            self.last_declared_queue = frame.method.queue

    def _pika_arguments(self, decl: Declaration) -> dict[str, Any]:
        """The keyword arguments of pika's call for ``decl``, every field of its method given."""
        kwargs: dict[str, Any] = {}
        required = REQUIRED_FIELDS.get(decl.method, ())
        a = decl.arguments
        for name, kind in DECLARATION_METHODS[decl.method].items():
            if name == "nowait":
                continue  # pika always waits for the -ok; a declaration must succeed
            if name in required:
                value = a[name]
            elif name == "queue" and decl.method in USES_LAST_QUEUE:
                value = a.get(name) or self.last_declared_queue
            else:
                value = a.get(name, _OMITTED.get(name, _OMITTED_KIND[kind]))
            kwargs[_PIKA_KEYWORD.get(name, name)] = value
        return kwargs

    async def _queue_exists(self, a: dict[str, Any]) -> bool:
        """A passive declare on a channel of its own: a missing queue closes the channel (404),
        which must not be the link's channel."""
        where = self.uri.redacted()
        fut: asyncio.Future[Any] = self._loop.create_future()
        self.connection.channel(on_open_callback=future_callback(fut))
        probe = await self._answer(fut, f"channel.open (a probe channel) on {where}",
                                   self.timeouts.answer)
        answer: asyncio.Future[bool] = self._loop.create_future()

        def on_close(_ch: Any, exc: BaseException) -> None:
            if not answer.done():
                if isinstance(exc, pika.exceptions.ChannelClosedByBroker) and exc.reply_code == 404:
                    answer.set_result(False)
                else:
                    answer.set_exception(LinkError(f"checking queue {a['queue']!r}: {describe(exc)}"))

        probe.add_on_close_callback(on_close)
        def declared(_frame: Any) -> None:
            if not answer.done():
                answer.set_result(True)

        probe.queue_declare(queue=a["queue"], passive=True, callback=declared)
        exists: bool = await self._answer(
            answer, f"checking queue {a['queue']!r} on {where}", self.timeouts.work)
        if exists and probe.is_open:
            probe.close()
        return exists

    async def declare_park_queue(self, queue: str) -> None:
        """Use ``queue`` as it is when it exists (whatever its arguments), else create it durable."""
        if not await self._queue_exists({"queue": queue}):
            await self._call(
                lambda cb: self.channel.queue_declare(queue=queue, durable=True, callback=cb),
                f"declaring the park queue {queue!r} on {self.uri.redacted()}",
                self.timeouts.work,
            )

    async def queue_length(self, queue: str) -> int:
        """Messages ready in ``queue`` (a passive declare)."""
        frame = await self._call(
            lambda cb: self.channel.queue_declare(queue=queue, passive=True, callback=cb),
            f"checking queue {queue!r} on {self.uri.redacted()}",
            self.timeouts.work,
        )
        return int(frame.method.message_count)

    async def qos(self, prefetch_count: int) -> None:
        await self._call(
            lambda cb: self.channel.basic_qos(prefetch_count=prefetch_count, callback=cb),
            f"basic.qos on {self.uri.redacted()}",
            self.timeouts.answer,
        )

    async def consume(self, queue: str, *, no_ack: bool,
                      arguments: Mapping[str, Any] | None = None, consumer_tag: str = "") -> str:
        """Start consuming; deliveries go to the interceptor, never to pika's callbacks.

        :param arguments: basic.consume's arguments (x-stream-offset, x-priority, ...)
        :param consumer_tag: "" lets the broker choose one
        """

        def unexpected(*_: Any) -> None:
            log.error("a delivery reached pika on %s: the relay was not in place", self.uri.redacted())

        frame = await self._call(
            lambda cb: self.channel.basic_consume(
                queue=queue, on_message_callback=unexpected, auto_ack=no_ack, callback=cb,
                arguments=dict(arguments) if arguments else None,
                consumer_tag=consumer_tag or None,
            ),
            f"basic.consume from queue {queue!r} on {self.uri.redacted()}",
            self.timeouts.work,
        )
        return str(frame.method.consumer_tag)

    async def cancel(self, consumer_tag: str) -> None:
        if self.is_open:
            await self._call(
                lambda cb: self.channel.basic_cancel(consumer_tag=consumer_tag, callback=cb),
                f"basic.cancel on {self.uri.redacted()}",
                self.timeouts.answer,
            )

    async def confirm_select(self, on_confirm: Callable[[Any], None] | None = None) -> None:
        """Put the channel in confirm mode. Without ``on_confirm`` the relay takes the ack / nack
        frames before pika sees them; with it, pika hands each ack / nack method frame to it."""
        callback = on_confirm or (lambda _f: None)
        await self._call(
            lambda cb: self.channel.confirm_delivery(ack_nack_callback=callback, callback=cb),
            f"confirm.select on {self.uri.redacted()}",
            self.timeouts.answer,
        )

    async def close(self) -> None:
        """Close the connection politely; returns when it is closed (or at once if it is)."""
        if self._stream.frame_error is not None:
            # closing already (see InterceptedStream._close_on_frame_error): within a second
            t = self._stream.transport
            for _ in range(120):
                if t is None or t.is_closing():
                    return
                await asyncio.sleep(0.01)
            self.abort()
            return
        if self.connection.is_closed:
            self._fail(LinkError("closed"))
            return
        if not self.connection.is_closing:
            try:
                self.connection.close()
            except pika.exceptions.ConnectionWrongStateError:
                pass
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), timeout=5)
        except asyncio.TimeoutError:
            if self._stream.transport is not None:
                self._stream.transport.abort()

    def abort(self) -> None:
        if self._stream.transport is not None:
            self._stream.transport.abort()

    async def close_quietly(self) -> None:
        """:meth:`close`, best effort: the broker may be gone; whatever fails, the socket is
        dropped (session, parking and stream-position connections all close this way)."""
        try:
            await self.close()
        except Exception as exc:
            log.debug("closing %s: %s", self.uri.redacted(), exc)
            self.abort()


async def open_link(uri: BrokerURI, parameters: pika.ConnectionParameters) -> Link:
    """Connect, open one channel, and return the :class:`Link`.

    Each step is bounded: the TCP connect by ``parameters.socket_timeout``, the whole handshake
    by ``parameters.stack_timeout``, channel.open by :func:`step_timeouts`; a broker that closes
    the connection at any step (a connection or channel limit, a refused login, a
    connection.close right after open-ok) is quoted at once.

    :raises LinkError: when the broker cannot be reached, refuses the connection or the channel,
        or does not answer a step in time (the message names the step)
    """
    loop = asyncio.get_running_loop()
    services = InterceptingServices(loop)
    timeouts = step_timeouts(uri)
    where = uri.redacted()
    opened: asyncio.Future[Any] = loop.create_future()
    # Until the Link exists: the connection's end, whatever step it came at.
    ended: asyncio.Future[BaseException] = loop.create_future()
    closed_holder: list[Link] = []

    def on_open(conn: Any) -> None:
        if not opened.done():
            opened.set_result(conn)

    def on_open_error(_conn: Any, exc: BaseException) -> None:
        if not opened.done():
            opened.set_exception(LinkError(f"cannot connect to {where}: {handshake_failure(exc)}",
                                           reply_code=reply_code(exc)))

    def handshake_failure(exc: BaseException) -> str:
        stream = services.stream
        if stream is not None and stream.frame_error is not None:
            return f"closed by pumpd with 501 FRAME_ERROR: {stream.frame_error}"
        root = root_cause(exc)
        # pika's stack_timeout: during the AMQP handshake pika closes the connection itself
        # (nothing else closes one that is not open yet), before it an AMQPConnectorStackTimeout
        if isinstance(root, (AMQPConnectorStackTimeout, pika.exceptions.ConnectionOpenAborted)):
            return f"no answer to {services.waiting_for()} within {parameters.stack_timeout:g}s"
        if isinstance(root, TimeoutError):  # pika's socket_timeout: the TCP connect
            return f"no answer to {services.waiting_for()} within {parameters.socket_timeout:g}s"
        return describe(exc, uri)

    def on_close(_conn: Any, exc: BaseException) -> None:
        if closed_holder:
            closed_holder[0]._on_connection_closed(exc)
        elif not ended.done():
            ended.set_result(exc)

    connection = AsyncioConnection(
        parameters,
        on_open_callback=on_open,
        on_open_error_callback=on_open_error,
        on_close_callback=on_close,
        custom_ioloop=services,
    )
    try:
        await opened
        ch_fut: asyncio.Future[Any] = loop.create_future()
        connection.channel(on_open_callback=future_callback(ch_fut))
        done, _ = await asyncio.wait({ch_fut, ended}, timeout=timeouts.answer,
                                     return_when=asyncio.FIRST_COMPLETED)
        if ch_fut not in done:
            if ended in done:  # e.g. 530 NOT_ALLOWED: a channel limit, at channel.open
                cause = ended.result()
                raise LinkError(f"connection to {where} {closed_how(cause)} (at channel.open)",
                                reply_code=reply_code(cause))
            raise LinkError(f"connection to {where}: no answer to channel.open within "
                            f"{timeouts.answer:g}s")
        channel = ch_fut.result()
    except BaseException:
        _give_up(connection, services, loop)
        raise
    assert services.stream is not None
    link = Link(uri, connection, channel, services.stream, loop, timeouts)
    closed_holder.append(link)
    if not connection.is_open:
        link._fail(LinkError(f"connection to {where} closed while opening"))
    return link


def _give_up(connection: Any, services: InterceptingServices,
             loop: asyncio.AbstractEventLoop) -> None:
    """An opening that failed: close the connection politely when it is open, and drop the
    socket a second later whatever the peer does (a peer that answered nothing in time may
    not answer the close either)."""
    if connection.is_open:
        try:
            connection.close()
        except pika.exceptions.ConnectionWrongStateError:
            pass
    transport = services.stream.transport if services.stream is not None else None
    if transport is not None and not transport.is_closing():
        loop.call_later(1.0, _abort_unless_closed, transport)


def _abort_unless_closed(transport: Any) -> None:
    if not transport.is_closing():
        transport.abort()
