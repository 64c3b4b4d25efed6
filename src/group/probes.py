"""Requests that may fail by design, on spare channels of a :class:`~pumpd.engine.link.Link`:
asking whether a queue is free, held or there, claiming an exclusive queue, reading a
last-value record without consuming it.

In AMQP 0-9-1 a refused request closes its channel: a passive declare of a missing queue
answers 404 NOT_FOUND, of another connection's exclusive queue 405 RESOURCE_LOCKED, and both
end the channel. A link's own channel must never see that (its close ends the link), so these
requests run on channels of their own, opened on the link's connection. A channel a request
left open goes back to a small pool and serves the next one; a refused one is gone, and the
next request opens another (one round trip, and several requests open theirs at once: a
group's poll of many names costs about three round trips, not three per name).

Only pika's public channel API is used (``connection.channel``, ``queue_declare``,
``queue_delete``, ``basic_get``, ``basic_reject``); the broker's refusals are read with
:func:`pumpd.engine.link_errors.reply_code`.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping
from typing import Any

from ..engine.link import Link, LinkError
from ..engine.link_errors import describe, reply_code

__all__ = ["NOT_FOUND", "PRECONDITION_FAILED", "RESOURCE_LOCKED", "Probes", "QueueState",
           "lease_is_free"]

NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406



class QueueState(enum.Enum):
    """What a passive declare says of a queue, from one connection's point of view."""

    FREE = "free"  # 404: no such queue
    HELD = "held"  # 405: another connection's exclusive queue
    THERE = "there"  # declare-ok: a shared queue, or this connection's own exclusive one


class _Refused(Exception):
    """The broker closed the request's channel with ``code``."""

    def __init__(self, code: int | None, exc: BaseException) -> None:
        super().__init__(describe(exc))
        self.code = code


class Probes:
    """Spare channels on ``link``'s connection and the requests made on them.

    :param timeout: seconds any one request may take before it fails with :class:`LinkError`
    :param keep: open channels kept for the next requests
    """

    def __init__(self, link: Link, *, timeout: float = 30.0, keep: int = 4) -> None:
        self.link = link
        self.timeout = timeout
        self.keep = keep
        self._idle: list[Any] = []
        # A channel's pending request, by channel number: its close callback fails it.
        self._pending: dict[int, asyncio.Future[Any]] = {}

    # -- channels ----------------------------------------------------------------------------

    async def _open_channel(self) -> Any:
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[Any] = loop.create_future()

        def on_open(ch: Any) -> None:
            if not opened.done():
                opened.set_result(ch)

        try:
            self.link.connection.channel(on_open_callback=on_open)
        except Exception as exc:  # pika refuses to open one on a closing connection
            raise LinkError(f"opening a channel on {self.link.uri.redacted()}: "
                            f"{describe(exc)}") from exc
        ch = await self._wait(opened, "opening a channel")
        ch.add_on_close_callback(self._on_close)
        return ch

    def _on_close(self, ch: Any, exc: BaseException) -> None:
        if ch in self._idle:
            self._idle.remove(ch)
        pending = self._pending.pop(ch.channel_number, None)
        if pending is not None and not pending.done():
            pending.set_exception(_Refused(reply_code(exc), exc))

    async def _channel(self) -> Any:
        while self._idle:
            ch = self._idle.pop()
            if ch.is_open:
                return ch
        return await self._open_channel()

    def _give_back(self, ch: Any) -> None:
        if not ch.is_open:
            return
        if len(self._idle) < self.keep:
            self._idle.append(ch)
        else:
            ch.close()

    async def _wait(self, fut: asyncio.Future[Any], what: str) -> Any:
        """``fut``'s result, or :class:`LinkError` when the connection ends or time is up."""
        try:
            done, _ = await asyncio.wait({fut, self.link.closed}, timeout=self.timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        if fut in done:
            return fut.result()  # may raise _Refused
        fut.cancel()
        if self.link.closed.done():
            cause = self.link.closed.result()
            raise LinkError(f"{what} on {self.link.uri.redacted()}: {cause}",
                            reply_code=getattr(cause, "reply_code", None))
        raise LinkError(f"{what} on {self.link.uri.redacted()}: no answer in {self.timeout:g} s")

    async def _request(self, start: Callable[[Any, Callable[[Any], None]], None],
                       what: str) -> Any:
        """Send one request on a spare channel; its reply frame, or :class:`_Refused` with the
        broker's code when it closed the channel instead (the channel is then gone)."""
        ch = await self._channel()
        try:
            fut = self._expect(ch, start)
        except Exception as exc:  # pika refuses to send on a closing channel or connection
            self._pending.pop(ch.channel_number, None)
            raise LinkError(f"{what} on {self.link.uri.redacted()}: {describe(exc)}") from exc
        try:
            frame = await self._wait(fut, what)
        except _Refused:
            raise
        except BaseException:
            # timed out, cancelled, or the connection went: this channel may still get an
            # answer to the old request, so it serves no other
            self._pending.pop(ch.channel_number, None)
            if ch.is_open:
                ch.close()
            raise
        self._pending.pop(ch.channel_number, None)
        self._give_back(ch)
        return frame

    def _expect(self, ch: Any,
                start: Callable[[Any, Callable[[Any], None]], None]) -> asyncio.Future[Any]:
        """The future of ``ch``'s reply, registered before ``start`` sends the request (which
        may raise: pika refuses to send on a closing channel or connection)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[ch.channel_number] = fut

        def reply(frame: Any) -> None:
            if not fut.done():
                fut.set_result(frame)

        start(ch, reply)
        return fut

    def _refused(self, what: str, refusal: _Refused) -> LinkError:
        return LinkError(f"{what} on {self.link.uri.redacted()}: {refusal}",
                         reply_code=refusal.code)

    # -- requests ----------------------------------------------------------------------------

    async def state(self, queue: str) -> QueueState:
        """Whether ``queue`` is free, another connection's exclusive queue, or there (a passive
        declare: nothing is created or taken).

        :raises LinkError: another refusal (403 access refused...), or the connection failed
        """
        what = f"checking queue {queue!r}"
        try:
            await self._request(lambda ch, cb: ch.queue_declare(queue=queue, passive=True,
                                                                 callback=cb), what)
        except _Refused as refusal:
            if refusal.code == NOT_FOUND:
                return QueueState.FREE
            if refusal.code == RESOURCE_LOCKED:
                return QueueState.HELD
            raise self._refused(what, refusal) from None
        return QueueState.THERE

    async def claim(self, queue: str, arguments: Mapping[str, Any] | None = None) -> bool:
        """Declare ``queue`` exclusive to this connection: True when it is now this
        connection's (made, or already its own), False when it is held elsewhere (405) or a
        shared queue of that name is in the way (405 or 406 by broker version).

        :raises LinkError: another refusal, or the connection failed
        """
        what = f"claiming queue {queue!r}"
        try:
            await self._request(lambda ch, cb: ch.queue_declare(
                queue=queue, exclusive=True, auto_delete=False, durable=False,
                arguments=dict(arguments) if arguments else None, callback=cb), what)
        except _Refused as refusal:
            if refusal.code in (RESOURCE_LOCKED, PRECONDITION_FAILED):
                return False
            raise self._refused(what, refusal) from None
        return True

    async def declare(self, queue: str, *, durable: bool = True,
                      arguments: Mapping[str, Any] | None = None) -> int:
        """Declare a shared queue (or find it there with the same arguments); its message
        count.

        :raises LinkError: refused (406: there with other arguments), or the connection failed
        """
        what = f"declaring queue {queue!r}"
        try:
            frame = await self._request(lambda ch, cb: ch.queue_declare(
                queue=queue, durable=durable,
                arguments=dict(arguments) if arguments else None, callback=cb), what)
        except _Refused as refusal:
            raise self._refused(what, refusal) from None
        return int(frame.method.message_count)

    async def delete(self, queue: str) -> None:
        """Delete ``queue`` (nothing to do when it is not there).

        :raises LinkError: refused (405: another connection's exclusive queue...), or the
            connection failed
        """
        what = f"deleting queue {queue!r}"
        try:
            await self._request(lambda ch, cb: ch.queue_delete(queue=queue, callback=cb), what)
        except _Refused as refusal:
            if refusal.code == NOT_FOUND:  # brokers before 3.x answered so for a missing one
                return
            raise self._refused(what, refusal) from None

    async def read_last(self, queue: str) -> bytes | None:
        """The body of the message at the head of ``queue``, left in it (``basic.get``, then
        ``basic.reject`` with requeue): a last-value record read without taking it away.
        None when the queue is empty or not there.

        pika answers a get only when a message came (``basic.get-empty`` reaches no
        callback), so a passive declare follows the get on the same channel: the broker
        answers a channel's requests in order, and when the declare's answer is in, the get's
        is too.

        :raises LinkError: another refusal, or the connection failed
        """
        what = f"reading queue {queue!r}"
        got: list[tuple[int, bytes]] = []

        def on_message(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
            got.append((int(method.delivery_tag), body))

        def start(ch: Any, cb: Callable[[Any], None]) -> None:
            ch.basic_get(queue=queue, callback=on_message, auto_ack=False)
            ch.queue_declare(queue=queue, passive=True, callback=cb)

        # The request's channel is handed back only after the reject is sent: a channel
        # from the pool carries no unsettled delivery into the next request.
        ch = await self._channel()
        try:
            await self._wait(self._expect(ch, start), what)
        except _Refused as refusal:
            if refusal.code == NOT_FOUND:
                return None
            raise self._refused(what, refusal) from None
        except BaseException as exc:
            self._pending.pop(ch.channel_number, None)
            if ch.is_open:
                ch.close()  # an unsettled delivery goes back to the queue with the channel
            if isinstance(exc, Exception) and not isinstance(exc, LinkError):
                raise LinkError(f"{what} on {self.link.uri.redacted()}: {describe(exc)}") \
                    from exc
            raise
        self._pending.pop(ch.channel_number, None)
        if not got:
            self._give_back(ch)
            return None
        tag, body = got[0]
        ch.basic_reject(delivery_tag=tag, requeue=True)
        self._give_back(ch)
        return body

    async def close(self) -> None:
        """Close the pooled channels (the link itself stays open)."""
        idle, self._idle = self._idle, []
        for ch in idle:
            if ch.is_open:
                ch.close()


async def lease_is_free(link: Link, queue: str, *, timeout: float = 30.0) -> bool:
    """Whether nobody holds the lease queue ``queue`` (an exclusive queue), told by a passive
    declare on a spare channel of ``link``: 404 free, 405 held by another connection; the
    lease is neither taken nor disturbed. A queue there for this very link (its own lease)
    is not free.

    :raises LinkError: another refusal, or the connection failed
    """
    probes = Probes(link, timeout=timeout, keep=0)
    return await probes.state(queue) is QueueState.FREE
