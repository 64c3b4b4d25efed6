"""The AMQP 1.0 source and destination: one connection, one session and one link each, seen
through the engine's contract (``endpoint.py``) as a :class:`MessageSource` and a
:class:`MessageDestination` on the generic path.

The source is a receiving link on ``src-address``. Its credit is the shovel's prefetch: at most
that many deliveries unsettled at once. Its settlements are dispositions in ranges: ACCEPT is
``accepted``, REJECT ``rejected``, REQUEUE ``released``. Whatever it delivered and nobody settled
goes back to the peer when the link or the connection ends (``released`` first when the session
closes politely), so nothing is lost. A delivery counts as redelivered when its header's
delivery-count is above 0 or its first-acquirer is false.

The destination is a sending link on ``dest-address``. With ``on_confirm`` every transfer is
unsettled and its outcome is the settlement: ``accepted`` ACCEPT, ``rejected`` REJECT (the
undeliverable policy), ``released`` and ``modified`` REQUEUE (sent again). Otherwise transfers go
pre-settled. The destination sends only on credit: the path asks :attr:`credit_left`.

A message from AMQP 1.0 is sent with its bare message as it came, byte for byte; only the
sections before it (header, annotations) are encoded again, and only when something is added
to them. A message from AMQP 0-9-1 goes through RabbitMQ's mapping (``pumpd.amqp10.mapping``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...amqp10.codec import DecodeError, EncodeError
from ...amqp10.connection import Connection, connect
from ...amqp10.errors import Amqp10Error
from ...amqp10.link import Receiver, Sender
from ...amqp10.mapping import UnmappableMessage, from_amqp091
from ...amqp10.message import (
    Message,
    Properties,
    complete,
    decode_message,
    encode_message,
    encode_with_annotations,
)
from ...amqp10.performatives import Accepted, Error, Rejected, Released
from ...amqp10.session import Session
from ...amqp10.values import Described, Symbol, Timestamp, ULong
from ...config.model import AckMode, Amqp10URI, Declaration, SaslMechanism, ShovelConfig
from ...config.tls import ssl_context
from ...dataplane.api import Delivered, Returned
from ..endpoint import Edits, Incoming, Settlement, Unforwardable
from ..link_errors import LinkError

__all__ = ["WIRE", "Amqp10Destination", "Amqp10Source", "connect_destination", "connect_source"]

log = logging.getLogger("pumpd.amqp10")

WIRE = "amqp10"
STEP_TIMEOUT = 30.0  # seconds a connection step may take (connect, sasl, open, attach)
# Seconds of a peer's silence after which its connection is given up, when the URI names no
# idle_time_out: as AMQP 0-9-1's heartbeat, so that a source gone silent (nothing else can
# tell: an AMQP 1.0 source has no backlog for the stall rule to read) is noticed.
DEFAULT_IDLE_TIME_OUT = 60.0
CLOSE_TIMEOUT = 5.0  # seconds a polite close waits for the peer's answer
# A source's consumer arguments the plugin maps onto an AMQP 1.0 filter (RabbitMQ's streams)
_FILTERS = {"x-stream-offset": "rabbitmq:stream-offset-spec",
            "x-stream-filter": "rabbitmq:stream-filter"}
_SASL = {SaslMechanism.ANONYMOUS: "anonymous", SaslMechanism.PLAIN: "plain",
         SaslMechanism.EXTERNAL: "external"}
# the plugin's names of the properties section's fields, as dest-properties spells them
_PROPERTY_FIELDS = {"message_id", "user_id", "to", "subject", "reply_to", "correlation_id",
                    "content_type", "content_encoding", "absolute_expiry_time", "creation_time",
                    "group_id", "group_sequence", "reply_to_group_id"}


class _Side:
    """What both sides share: the connection and its one session."""

    wire = WIRE

    def __init__(self, connection: Connection, side: str) -> None:
        self.connection = connection
        self.side = side
        self.closed: asyncio.Future[BaseException] = connection.closed
        self.pause_reading: Callable[..., None] = connection.pause_reading
        self._session: Session | None = None

    @property
    def is_open(self) -> bool:
        return self.connection.is_open

    @property
    def heartbeat(self) -> int:
        """The peer's idle time-out in whole seconds (0: none): silence after which it gives up."""
        return int(self.connection.idle_time_out)

    def on_blocked(self, callback: Callable[[bool], None]) -> None:
        """AMQP 1.0 has no connection-wide block: a peer that takes no more gives no credit."""

    async def declare(self, declarations: Sequence[Declaration]) -> None:
        if declarations:
            raise LinkError(f"{self.side}: an AMQP 1.0 side declares nothing (its address names "
                            "what exists)", side=self.side)

    async def _begin(self) -> Session:
        if self._session is None:
            try:
                self._session = await self.connection.begin()
            except Amqp10Error as exc:
                raise _link_error(exc, self.side) from None
        return self._session

    async def close_quietly(self) -> None:
        try:
            await asyncio.wait_for(self.connection.close(), CLOSE_TIMEOUT)
        except Exception as exc:  # closing is best effort: the socket ends either way
            log.debug("%s: close: %s", self.side, exc)
            self.connection.abort()

    def abort(self) -> None:
        self.connection.abort()


class Amqp10Source(_Side):
    """A receiving link; deliveries go to the generic path as :class:`Incoming`."""

    last_declared_queue = ""
    backlog_known = False  # AMQP 1.0 counts nothing for a receiver: no backlog, no stall read

    def __init__(self, connection: Connection) -> None:
        super().__init__(connection, "source")
        self._receiver: Receiver | None = None
        self._prefetch = 0
        self._callback: Callable[[Incoming], None] | None = None
        # the first delivery's number: tags start at 1 (the relay's and AMQP 0-9-1's rule)
        self._base: int | None = None

    async def take_lease(self, name: str) -> None:
        raise LinkError("source: an AMQP 1.0 source cannot hold a group's lease (it lives on an "
                        "AMQP 0-9-1 connection to the source broker)", side="source")

    async def backlog(self, queue: str) -> int:
        """-1, not known: an AMQP 1.0 link has no message count to read (the configuration
        refuses delete_after "queue-length" for such a source). Answered at once, so that the
        stall rule never takes an idle source for one that does not answer."""
        return -1

    async def credit(self, prefetch: int) -> None:
        self._prefetch = prefetch
        if self._receiver is not None:
            self._receiver.flow(prefetch or _UNBOUNDED_CREDIT)

    def on_delivery(self, callback: Callable[[Incoming], None]) -> None:
        self._callback = callback

    async def consume(self, queue: str, *, no_ack: bool, arguments: Mapping[str, Any],
                      consumer_tag: str) -> str:
        session = await self._begin()
        name = consumer_tag or f"pumpd-receiver-{queue}"
        try:
            self._receiver = await session.attach_receiver(
                queue, name=name, credit=self._prefetch or _UNBOUNDED_CREDIT,
                settle_mode="settled" if no_ack else "first", filters=_filters(arguments))
        except Amqp10Error as exc:
            raise _link_error(exc, "source") from None
        self._receiver.on_transfer(self._on_transfer)
        return name

    def _on_transfer(self, delivery: int, payload: bytes, settled: bool) -> None:
        if self._base is None:
            self._base = delivery - 1
        tag = delivery - self._base
        try:
            # the head only: a message passed on unchanged is never decoded further
            message = decode_message(payload, head_only=True)
        except DecodeError as exc:
            # Not a message by AMQP 1.0's rules: nothing can forward it faithfully. Rejected
            # at the source, which keeps it (its dead-letter queue) rather than losing it.
            log.error("source: delivery %d is not a valid AMQP 1.0 message (%s): rejected at the "
                      "source", tag, exc)
            if not settled and self._receiver is not None:
                self._receiver.settle(delivery, delivery, Rejected(error=Error(
                    condition=Symbol("amqp:decode-error"), description=str(exc)[:500])))
            return
        if self._callback is not None:
            self._callback(Incoming(tag, _redelivered(message), message))

    async def cancel(self, consumer_tag: str) -> None:
        # Stop the peer sending, keep the link: what it delivered is still to be settled here.
        if self._receiver is not None:
            self._receiver.flow(0)

    def settle(self, first: int, last: int, how: Settlement) -> None:
        if self._receiver is None or self._base is None:
            return
        state: Any = (Accepted() if how == Settlement.ACCEPT
                      else Rejected() if how == Settlement.REJECT else Released())
        self._receiver.settle(first + self._base, last + self._base, state)


def _redelivered(message: Message) -> bool:
    """Whether the source says the message may have been delivered before (a possible
    duplicate): a delivery-count above 0, or first-acquirer set false. RabbitMQ 3.x never sets
    the count and marks a redelivery by first-acquirer false (true on a first delivery); a
    header that leaves first-acquirer out says nothing (its default, false, is no claim)."""
    header = message.header
    if header is None:
        return False
    return bool(header.delivery_count) or header.first_acquirer is False


# with prefetch 0 (no bound) a receiver still needs credit: this much, topped up as it is used
_UNBOUNDED_CREDIT = 10_000


class Amqp10Destination(_Side):
    """A sending link; see the module docstring."""

    def __init__(self, connection: Connection, address: str, *,
                 properties: Mapping[str, Any] | None = None,
                 application_properties: Mapping[str, Any] | None = None,
                 message_annotations: Mapping[str, Any] | None = None) -> None:
        super().__init__(connection, "destination")
        self.address = address
        self._sender: Sender | None = None
        self._settled = True  # pre-settled until expect_confirms
        self._annotations: dict[Symbol | ULong, Any] = {}
        self._timestamp = False
        self._properties = dict(properties or {})
        self._application_properties = dict(application_properties or {})
        self._message_annotations: dict[Symbol | ULong, Any] = {
            Symbol(k): v for k, v in (message_annotations or {}).items()}
        self._on_settled: Callable[[int, int, Settlement], None] | None = None
        self._on_credit: Callable[[], None] | None = None
        self._base: int | None = None  # sequence numbers start at 1

    async def expect_confirms(self) -> None:
        if self._settled:
            raise LinkError("destination: the link was attached pre-settled: the peer confirms "
                            "nothing on it", side="destination")

    async def attach(self, name: str, *, settled: bool) -> None:
        """Attach the sending link: ``settled`` sends every message pre-settled (the peer
        reports no outcome), else the peer's outcomes are the settlements."""
        self._settled = settled
        session = await self._begin()
        try:
            self._sender = await session.attach_sender(self.address, name=name,
                                                       settled=self._settled)
        except Amqp10Error as exc:
            raise _link_error(exc, "destination") from None
        self._sender.on_disposition(self._on_disposition)
        self._sender.on_credit(self._credit_rose)

    def on_write_pressure(self, callback: Callable[[bool], None], high_water: int) -> None:
        self.connection.on_write_pressure(callback, high_water)

    @property
    def credit_left(self) -> int:
        return 0 if self._sender is None else self._sender.credit

    def on_credit(self, callback: Callable[[], None]) -> None:
        self._on_credit = callback

    def _credit_rose(self) -> None:
        if self._on_credit is not None:
            self._on_credit()

    def set_edits(self, edits: Edits) -> None:
        # the plugin's forward headers, as message annotations (rabbit_amqp10_shovel)
        self._annotations = {Symbol(f"x-opt-{k}"): v for k, v in edits.hop
                             if k in ("shovelled-by", "shovel-type", "shovel-name")}
        self._timestamp = edits.timestamp_header

    def on_settled(self, callback: Callable[[int, int, Settlement], None]) -> None:
        self._on_settled = callback

    def on_returned(self, callback: Callable[[Returned], None]) -> None:
        """AMQP 1.0 returns nothing: an unroutable message is ``rejected`` or ``released``."""

    def forward(self, message: Delivered | Message) -> int:
        if self._sender is None:
            raise Unforwardable("the destination link is not attached")
        payload = self._payload(message)
        number = self._sender.send(payload, settled=self._settled)
        if self._base is None:
            self._base = number - 1
        return number - self._base

    def _payload(self, message: Delivered | Message) -> bytes:
        try:
            return self._encode(message)
        except EncodeError as exc:
            raise Unforwardable(f"cannot be encoded for AMQP 1.0: {exc}") from None

    def _encode(self, message: Delivered | Message) -> bytes:
        if isinstance(message, Delivered):
            try:
                message = from_amqp091(message.exchange, message.routing_key,
                                       message.properties, message.body)
            except UnmappableMessage as exc:
                raise Unforwardable(f"no AMQP 1.0 form: {exc}") from None
        edit_bare = bool(self._properties or self._application_properties)
        if not (self._annotations or self._timestamp or self._message_annotations or edit_bare):
            return message.raw if message.raw is not None else encode_message(message)
        annotations = dict(message.message_annotations or {})
        annotations.update(self._message_annotations)
        annotations.update(self._annotations)
        if self._timestamp:
            annotations[Symbol("x-opt-shovelled-timestamp")] = Timestamp(int(time.time() * 1000))
        message.message_annotations = annotations
        if not edit_bare:
            return encode_with_annotations(message)
        try:
            message = complete(message)
        except DecodeError as exc:
            raise Unforwardable(f"not a valid AMQP 1.0 message: {exc}") from None
        if self._properties:
            props = message.properties or Properties()
            for name, value in self._properties.items():
                setattr(props, name, _property_value(name, value))
            message.properties = props
        if self._application_properties:
            app = dict(message.application_properties or {})
            app.update(self._application_properties)
            message.application_properties = app
        return encode_message(message)

    def _on_disposition(self, first: int, last: int, state: Any) -> None:
        if self._on_settled is None or self._base is None or state is None:
            return
        if isinstance(state, Accepted):
            how = Settlement.ACCEPT
        elif isinstance(state, Rejected):
            how = Settlement.REJECT
        else:  # released, modified: not taken, send again
            how = Settlement.REQUEUE
        self._on_settled(first - self._base, last - self._base, how)


def _property_value(name: str, value: str | int) -> Any:
    """A ``dest-properties`` value as its field's AMQP type."""
    if name in ("content_type", "content_encoding"):
        return Symbol(str(value))
    if name == "user_id":
        return str(value).encode()
    if name in ("absolute_expiry_time", "creation_time", "group_sequence"):
        return int(value)
    return value


def _filters(arguments: Mapping[str, Any]) -> dict[Any, Any] | None:
    out: dict[Any, Any] = {}
    for key, value in arguments.items():
        name = _FILTERS.get(key)
        if name is None:
            raise LinkError(f"source: consumer argument {key!r} has no AMQP 1.0 filter "
                            f"(known: {', '.join(sorted(_FILTERS))})", side="source")
        out[Symbol(name)] = Described(Symbol(name), value)
    return out or None


def _link_error(exc: Amqp10Error, side: str) -> LinkError:
    return LinkError(f"{side}: {exc}", side=side)


async def _open(uri: Amqp10URI, client_name: str, side: str) -> Connection:
    """:raises LinkError: naming ``side``"""
    try:
        ssl = ssl_context(uri) if uri.scheme == "amqps" else None
        return await connect(
            host=uri.effective_host, port=uri.port, ssl=ssl, sasl=_SASL[uri.sasl],
            username=uri.username or None, password=uri.password or None,
            hostname=uri.effective_hostname,
            container_id=uri.container_id or f"{client_name}",
            idle_time_out=(uri.idle_time_out / 1000 if uri.idle_time_out
                           else DEFAULT_IDLE_TIME_OUT),
            max_frame_size=uri.max_frame_size, step_timeout=STEP_TIMEOUT,
            properties={"connection_name": client_name, "product": "pumpd"})
    except Amqp10Error as exc:
        raise _link_error(exc, side) from None
    except (OSError, ValueError) as exc:
        raise LinkError(f"{side}: {exc}", side=side) from None


async def connect_source(uri: Amqp10URI, client_name: str) -> Amqp10Source:
    """:raises LinkError: naming the source side"""
    return Amqp10Source(await _open(uri, client_name, "source"))


async def open_destination(uri: Amqp10URI, client_name: str, cfg: ShovelConfig
                           ) -> Amqp10Destination:
    """The destination of ``cfg``, attached: pre-settled unless the ack mode is on_confirm.

    :raises LinkError: naming the destination side
    """
    assert cfg.destination.address is not None
    destination = await connect_destination(
        uri, client_name, cfg.destination.address, properties=cfg.amqp10_properties,
        application_properties=cfg.amqp10_application_properties,
        message_annotations=cfg.amqp10_message_annotations)
    try:
        await destination.attach(f"{client_name} sender",
                                 settled=cfg.ack_mode != AckMode.ON_CONFIRM)
    except BaseException:
        destination.abort()
        raise
    return destination


async def connect_destination(uri: Amqp10URI, client_name: str, address: str, *,
                              properties: Mapping[str, Any] | None = None,
                              application_properties: Mapping[str, Any] | None = None,
                              message_annotations: Mapping[str, Any] | None = None,
                              ) -> Amqp10Destination:
    """:raises LinkError: naming the destination side"""
    return Amqp10Destination(await _open(uri, client_name, "destination"), address,
                             properties=properties, application_properties=application_properties,
                             message_annotations=message_annotations)
