"""The AMQP 0-9-1 source and destination: a :class:`~pumpd.engine.link.Link` each (pika for the
control plane, raw bytes for the data plane), seen through the engine's contract.

Both offer their byte streams (``ByteSource`` / ``ByteDestination``), so two of them are paired
on the native relay. A settlement by range is one ``basic.ack`` / ``basic.nack`` with
``multiple`` (or a single one when the range is one tag).

Both are message endpoints too (``MessageSource`` / ``MessageDestination``, through
``message_endpoints.py``), for the generic path: paired with another wire's endpoint, or with
each other when the generic path is asked for (``wiring.py``). A side serves one path: the
relay's interceptor or the message one, whichever the path installs.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...amqp10.message import Message
from ...config.model import BrokerURI, Declaration
from ...config.uri import URIError
from ...dataplane.api import Delivered, Returned
from ...dataplane.frames import basic_ack_frame, basic_nack_frame, basic_reject_frame
from ..endpoint import UNLIMITED, Edits, Incoming, Settlement
from ..lease import take_lease
from ..link import Link, LinkError, open_link
from ..parameters import to_pika_parameters
from .message_endpoints import PublishStream, delivery_interceptor

__all__ = ["Amqp091Destination", "Amqp091Source", "connect_destination", "connect_source"]

WIRE = "amqp091"


class _Side:
    """What both sides share: the link, and the calls the contract names as the link does."""

    wire = WIRE

    def __init__(self, link: Link) -> None:
        self.link = link
        self.closed: asyncio.Future[BaseException] = link.closed
        # the byte path's calls, bound once: a flush writes without a call through this class
        self.write: Callable[[builtins.bytes], None] = link.write
        self.intercept: Callable[[Callable[[bytes], bytes] | None], None] = link.intercept
        self.hand_to_client: Callable[[builtins.bytes], None] = link.hand_to_pika
        self.pause_reading: Callable[..., None] = link.pause_reading
        self.on_blocked: Callable[[Callable[[bool], None]], None] = link.on_blocked

    @property
    def is_open(self) -> bool:
        return self.link.is_open

    @property
    def heartbeat(self) -> int:
        return self.link.heartbeat

    @property
    def channel_number(self) -> int:
        return self.link.channel_number

    @property
    def frame_max(self) -> int:
        return self.link.frame_max

    async def declare(self, declarations: Sequence[Declaration]) -> None:
        await self.link.declare(declarations)

    async def close_quietly(self) -> None:
        await self.link.close_quietly()

    def abort(self) -> None:
        self.link.abort()


class Amqp091Source(_Side):
    """A queue consumed on one channel; deliveries go to the relay, never to pika."""

    backlog_known = True

    @property
    def last_declared_queue(self) -> str:
        return self.link.last_declared_queue

    @last_declared_queue.setter
    def last_declared_queue(self, queue: str) -> None:
        self.link.last_declared_queue = queue

    async def take_lease(self, name: str) -> None:
        await take_lease(self.link, name)

    async def backlog(self, queue: str) -> int:
        return await self.link.queue_length(queue)

    async def credit(self, prefetch: int) -> None:
        await self.link.qos(prefetch)

    async def consume(self, queue: str, *, no_ack: bool, arguments: Mapping[str, Any],
                      consumer_tag: str) -> str:
        return await self.link.consume(queue, no_ack=no_ack, arguments=arguments,
                                       consumer_tag=consumer_tag)

    async def cancel(self, consumer_tag: str) -> None:
        await self.link.cancel(consumer_tag)

    def on_delivery(self, callback: Callable[[Incoming], None]) -> None:
        """Deliveries go to ``callback`` from now on (instead of a relay)."""
        self.link.intercept(delivery_interceptor(self.link.channel_number, self.link.frame_max,
                                                 callback))

    def settle(self, first: int, last: int, how: Settlement) -> None:
        channel, multiple = self.link.channel_number, last > first
        if how == Settlement.ACCEPT:
            frame = basic_ack_frame(channel, last, multiple)
        elif not multiple:
            frame = basic_reject_frame(channel, last, how == Settlement.REQUEUE)
        else:
            frame = basic_nack_frame(channel, last, multiple, how == Settlement.REQUEUE)
        self.link.write(frame)


class Amqp091Destination(_Side):
    """An exchange published to on one channel, in confirm mode for ``on_confirm``."""

    def __init__(self, link: Link) -> None:
        super().__init__(link)
        self._publishes: PublishStream | None = None

    async def expect_confirms(self) -> None:
        await self.link.confirm_select()

    def on_write_pressure(self, callback: Callable[[bool], None], high_water: int) -> None:
        self.link.on_write_pressure(callback, high_water)

    # -- as a message destination (the generic path) -----------------------------------------

    @property
    def publishes(self) -> PublishStream:
        """The message side, set up at its first use: from then on it reads the confirms."""
        if self._publishes is None:
            self._publishes = PublishStream(self.link.channel_number, self.link.frame_max)
            self.link.intercept(self._publishes.feed)
        return self._publishes

    @property
    def credit_left(self) -> int:
        return UNLIMITED  # AMQP 0-9-1 has no credit: flow control and TCP hold a publisher back

    def on_credit(self, callback: Callable[[], None]) -> None:
        """Never called: the credit is never short."""

    def set_edits(self, edits: Edits) -> None:
        self.publishes.edits = edits

    def forward(self, message: Delivered | Message) -> int:
        frames, seq = self.publishes.encode(message)
        self.link.write(frames)
        return seq

    def on_settled(self, callback: Callable[[int, int, Settlement], None]) -> None:
        self.publishes.on_settled = callback

    def on_returned(self, callback: Callable[[Returned], None]) -> None:
        self.publishes.on_returned = callback


async def _open(uri: BrokerURI, client_name: str, side: str) -> Link:
    """:raises LinkError: naming ``side``, also for TLS files that cannot be loaded"""
    try:
        return await open_link(uri, to_pika_parameters(uri, client_name=client_name))
    except LinkError as exc:
        raise LinkError(f"{side}: {exc}", reply_code=exc.reply_code, side=side) from exc
    except URIError as exc:
        raise LinkError(f"{side}: {exc}", side=side) from None


async def connect_source(uri: BrokerURI, client_name: str) -> Amqp091Source:
    """:raises LinkError: naming the source side"""
    return Amqp091Source(await _open(uri, client_name, "source"))


async def connect_destination(uri: BrokerURI, client_name: str) -> Amqp091Destination:
    """:raises LinkError: naming the destination side"""
    return Amqp091Destination(await _open(uri, client_name, "destination"))
