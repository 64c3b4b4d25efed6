"""The AMQP 0-9-1 side of the generic path: a source's deliveries as Python objects, and a
destination that publishes one message at a time and reports its confirms in ranges.

The source's deliveries are taken out of the bytes read off its connection by the data plane's
:class:`~pumpd.dataplane.implementation.DeliveryReader` (native when built), as the Spark queue
reader does: one :class:`~pumpd.dataplane.api.Delivered` per message, its properties raw.

The destination is :class:`PublishStream`: publish frames out, confirms and returns in, read
from the destination's bytes before pika sees them. Not the Publisher's
:class:`~pumpd.dataplane.implementation.PublishPlane`: that one publishes every message to one
exchange fixed when it is made, keeps no body of a returned message and reports confirms as a
count, while a shovel keeps each message's own exchange unless told otherwise, parks a returned
message whole, and the path needs each confirm's range of sequence numbers. Publish frames are
encoded as the relay encodes them (:mod:`pumpd.dataplane.frames`), property edits are the
relay's (:func:`pumpd.dataplane.properties.edit_properties`), and frames are checked as every
reader checks them (:func:`pumpd.dataplane.received.scan_frames`).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable

from ...amqp10.message import Message
from ...dataplane.api import Delivered, Returned
from ...dataplane.frames import (
    BASIC_ACK,
    BASIC_NACK,
    BASIC_RETURN,
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    basic_publish_payload,
    content_header_payload,
    frame,
)
from ...dataplane.implementation import DeliveryReader
from ...dataplane.properties import UnparseableProperties, edit_properties
from ...dataplane.received import MAX_BODY_SIZE, basic_method_of, confirm_fields, scan_frames
from ...dataplane.return_assembler_ref import IDLE, ReturnAssembler
from ..endpoint import Edits, Incoming, Settlement, Unforwardable
from ..message_forms import MappingUnavailable, amqp091_form

__all__ = ["PublishStream", "delivery_interceptor"]

# frame_max before connection.tune said otherwise (AMQP 0-9-1's default)
_DEFAULT_FRAME_MAX = 131072


def delivery_interceptor(channel: int, frame_max: int,
                         callback: Callable[[Incoming], None]) -> Callable[[bytes], bytes]:
    """An interceptor for a source link: every delivery on ``channel`` goes to ``callback``
    as an :class:`Incoming` of a :class:`Delivered`, in order; every other frame to pika.

    :raises FrameError: (from the reader) for a frame over ``frame_max``, a content frame out of
        place, a body over the reader's bound: the link closes the connection with 501
    """
    reader = DeliveryReader(channel, frame_max)

    def feed(data: bytes) -> bytes:
        rest = reader.feed(data)
        if reader.pending:
            for tag, redelivered, exchange, routing_key, properties, body in \
                    reader.take(reader.pending):
                callback(Incoming(tag, redelivered, Delivered(
                    tag, redelivered, exchange, routing_key, properties, body, "")))
        return rest

    return feed


def _ignore_settled(first: int, last: int, how: Settlement) -> None:
    pass


def _ignore_returned(returned: Returned) -> None:
    pass


class PublishStream:
    """One destination channel's publishes and what the broker answers to them (see the
    module docstring).

    Publishes are numbered 1, 2, ... as the broker numbers them in confirm mode (the channel
    publishes nothing else). :meth:`feed` reads ``basic.ack`` (ACCEPT), ``basic.nack`` (REJECT:
    the broker refused the message, e.g. a queue at its ``x-max-length`` with ``reject-publish``)
    and ``basic.return`` off the channel's frames, and hands every other frame back for pika.

    :param channel: the publishing channel's number
    :param frame_max: the connection's negotiated frame_max (0: AMQP's default)
    :param max_body_size: the largest body a returned message's content header may announce
    """

    def __init__(self, channel: int, frame_max: int,
                 max_body_size: int = MAX_BODY_SIZE) -> None:
        self._channel = channel
        self._frame_max = frame_max
        self._body_max = (frame_max or _DEFAULT_FRAME_MAX) - FRAME_OVERHEAD
        self.edits = Edits()
        self.on_settled: Callable[[int, int, Settlement], None] = _ignore_settled
        self.on_returned: Callable[[Returned], None] = _ignore_returned
        self._next_seq = 1
        self._floor = 1  # every sequence number below it was reported settled
        self._carry = b""  # a frame not yet whole
        self._returning = ReturnAssembler(max_body_size, True, True)

    @property
    def published(self) -> int:
        return self._next_seq - 1

    # -- publishing ----------------------------------------------------------------------------

    def encode(self, message: Delivered | Message) -> tuple[builtins.bytes, int]:
        """The frames publishing ``message`` with the edits, and its sequence number.

        :raises Unforwardable: the message cannot be published as it is (nothing is numbered)
        """
        edits = self.edits
        if isinstance(message, Message):
            try:
                routing_key, properties, body = amqp091_form(message)
            except (ValueError, MappingUnavailable) as exc:
                raise Unforwardable(f"it has no AMQP 0-9-1 form: {exc}") from None
            exchange = b""
        else:
            exchange, routing_key = message.exchange, message.routing_key
            properties, body = message.properties, message.body
        if edits.exchange is not None:
            exchange = edits.exchange
        if edits.routing_key is not None:
            routing_key = edits.routing_key
        routing_key = routing_key or b""
        for name, value in (("exchange", exchange), ("routing key", routing_key)):
            if len(value) > 255:
                raise Unforwardable(f"its {name} is {len(value)} bytes, over AMQP 0-9-1's 255")
        if edits.property_overrides or edits.forward_hop is not None or edits.timestamp_header:
            try:
                properties = edit_properties(
                    properties, edits.property_overrides, edits.forward_hop,
                    int(time.time()) if edits.timestamp_header else None)
            except UnparseableProperties as exc:
                raise Unforwardable(f"its properties cannot be parsed: {exc}") from None
        header_size = FRAME_OVERHEAD + 12 + len(properties)
        if self._frame_max and header_size > self._frame_max:
            raise Unforwardable(f"content header of {header_size} bytes exceeds the "
                                f"destination's frame_max {self._frame_max}")
        channel, step = self._channel, self._body_max
        out = [frame(FRAME_METHOD, channel,
                     basic_publish_payload(exchange, routing_key, edits.mandatory)),
               frame(FRAME_HEADER, channel, content_header_payload(len(body), properties))]
        for i in range(0, len(body), step):
            out.append(frame(FRAME_BODY, channel, body[i:i + step]))
        seq = self._next_seq
        self._next_seq = seq + 1
        return b"".join(out), seq

    # -- what the broker answers ---------------------------------------------------------------

    def feed(self, data: builtins.bytes) -> builtins.bytes:
        """Read the confirms and returns in ``data`` (with what an earlier call left
        unfinished); the other whole frames, in order, for pika.

        :raises FrameError: for a frame over frame_max, without its end octet, or a returned
            message's content that is out of place or over ``max_body_size``
        """
        buf = self._carry + data if self._carry else data
        self._carry, passed = scan_frames(buf, self._channel, self._take,
                                          frame_max=self._frame_max)
        return passed

    def _take(self, ftype: int, buf: builtins.bytes, start: int, end: int) -> bool:
        returning = self._returning
        if returning.state != IDLE:
            if returning.take(ftype, buf, start, end):
                code, text, exchange, routing_key = returning.fields
                self.on_returned(Returned(code, text.decode("utf-8", "replace"), exchange,
                                          routing_key, returning.properties,
                                          returning.take_body()))
            return True
        method_id = basic_method_of(ftype, buf, start, end)
        if method_id == BASIC_ACK or method_id == BASIC_NACK:
            seq, multiple = confirm_fields(buf, start, end, method_id)
            self._settled(seq, multiple,
                          Settlement.ACCEPT if method_id == BASIC_ACK else Settlement.REJECT)
            return True
        if method_id == BASIC_RETURN:
            returning.start(buf, start, end)
            return True
        return False

    def _settled(self, seq: int, multiple: bool, how: Settlement) -> None:
        if multiple:
            if seq >= self._floor:
                first, self._floor = self._floor, seq + 1
                self.on_settled(first, seq, how)
            return
        if seq == self._floor:
            self._floor += 1
        self.on_settled(seq, seq, how)
