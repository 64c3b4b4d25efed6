"""The data plane of one shovel session, pure Python reference.

A relay sits between the bytes read off two sockets and pika. It takes, on the source channel,
``basic.deliver`` + content header + body frames and turns each message into ``basic.publish``
frames for the destination channel; on the destination channel it takes ``basic.ack`` /
``basic.nack`` / ``basic.return`` and turns confirms into coalesced source acks. Every other frame
is handed back untouched, for pika. ``pumpd._fastpath.Relay`` implements the same API in C.

Framing errors raise :class:`pumpd.dataplane.frames.FrameError`; the session treats them as a connection
failure.

A message the relay cannot forward (its properties cannot be parsed where the relay must edit
them, or its content header would not fit the destination's frame_max) is *undeliverable*: no
frame is written for it, it never enters the ack bookkeeping, and the relay pauses right after
its last frame. While paused, source bytes are kept unscanned; :meth:`Relay.take_undeliverable`
hands the message to the engine, which settles its delivery tag at the source itself, then
:meth:`Relay.resume` scans the kept bytes. Since nothing after it is published before that, no
coalesced source ack can cover its tag.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from .api import Delivered, Returned
from .confirm_window_ref import ConfirmCounts, ConfirmWindow
from .frames import (
    ACK_MODE_NO_ACK,
    ACK_MODE_ON_CONFIRM,
    ACK_MODE_ON_PUBLISH,
    BASIC_ACK,
    BASIC_DELIVER,
    BASIC_NACK,
    BASIC_RETURN,
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    FrameError,
    UnparseableProperties,
    basic_ack_frame,
    basic_nack_frame,
    basic_publish_payload,
    content_header_payload,
    edit_properties,
    frame,
)
from .received import (
    MAX_BODY_SIZE,
    basic_deliver_fields,
    basic_method_of,
    confirm_fields,
    content_header_fields,
    scan_frames,
)
from .return_assembler_ref import IDLE, ReturnAssembler

# States of the delivery assembler on the source channel.
_IDLE, _HEADER, _BODY = 0, 1, 2


class _Assembler:
    """Collects method + header + body frames of one message on one channel."""

    __slots__ = ("body", "deliver", "properties", "remaining", "state")

    def __init__(self) -> None:
        self.state = _IDLE
        self.remaining = 0
        self.properties = b""
        self.body: list[bytes] = []
        # delivery_tag, redelivered, exchange, routing_key of the basic.deliver
        self.deliver: tuple[int, bool, bytes, bytes] = (0, False, b"", b"")


class _PausableScan:
    """The bytes read off one connection, scanned for one channel's frames. After a frame that
    makes ``paused()`` true the scan stops; what follows, and every byte fed meanwhile, is kept
    unscanned until :meth:`resume`."""

    __slots__ = ("_channel", "_frame_max", "_kept", "_partial", "_paused", "_take")

    def __init__(self, channel: int, take: Callable[[int, bytes, int, int], bool],
                 paused: Callable[[], bool], frame_max: int) -> None:
        self._channel = channel
        self._take = take
        self._paused = paused
        self._frame_max = frame_max
        self._partial = b""  # an incomplete frame, carried over to the next read
        self._kept = b""  # bytes received while paused, not yet scanned

    def feed(self, data: bytes) -> bytes:
        """Scan ``data``; returns the bytes meant for pika (nothing while paused)."""
        if self._paused():
            self._kept += data
            return b""
        buf, rest = scan_frames(self._partial + data if self._partial else data, self._channel,
                                self._take, self._paused, self._frame_max)
        if self._paused():
            self._partial, self._kept = b"", buf
        else:
            self._partial = buf
        return rest

    def resume(self) -> bytes:
        """Scan the bytes kept while paused; the caller has just left the pause."""
        kept, self._kept = self._kept, b""
        return self.feed(kept)


class _PropertyEdits:
    """What the relay changes in every message's properties (see :class:`Relay`'s parameters)."""

    __slots__ = ("_hop", "_overrides", "_timestamp", "any")

    def __init__(self, overrides: Mapping[int, bytes] | None, hop: bytes | None,
                 timestamp: bool) -> None:
        self._overrides = dict(overrides or {})
        self._hop = None if hop is None else bytes(hop)
        self._timestamp = timestamp
        self.any = bool(self._overrides) or self._hop is not None or timestamp

    def apply(self, properties: bytes) -> bytes:
        """The edited properties; raises :class:`UnparseableProperties`."""
        return edit_properties(properties, self._overrides, self._hop,
                               int(time.time()) if self._timestamp else None)


class Relay(ConfirmCounts):
    """One session's data plane. See the module docstring.

    :param source_channel: channel number of the consuming channel on the source connection
    :param dest_channel: channel number of the publishing channel on the destination connection
    :param dest_frame_max: negotiated frame_max of the destination connection
    :param ack_mode: ``frames.ACK_MODE_*``
    :param exchange: fixed exchange for re-publishing, or None to keep the original
    :param routing_key: fixed routing key, or None to keep the original
    :param property_overrides: property index → encoded value (``properties.encode_property_overrides``)
    :param forward_hop: this hop's encoded table (``properties.encode_hop``), put first in each
        message's ``x-shovelled`` array; None for no forward headers
    :param timestamp_header: set ``x-shovelled-timestamp`` (seconds, 64-bit) on each message
    :param window: prefetch (sizes the confirm ring; 0 = unlimited, the ring grows)
    :param mandatory: publish with mandatory set, so unroutable messages come back and are counted
    :param limit: stop forwarding after this many deliveries (0 = no limit); later deliveries are
        held unpublished and unacknowledged, so closing the source channel requeues them
    :param keep_last: keep the last message published as :attr:`last_message` (for isolating a
        message the destination refuses; meant for prefetch 1, it copies every message)
    :param hold_returns: a basic.return pauses the destination side (see
        :meth:`take_returned`)
    :param source_frame_max: negotiated frame_max of the source connection. A frame received
        over its connection's frame_max (0: ``received.DEFAULT_FRAME_MAX``), or a content header
        announcing more than ``max_body_size`` bytes, raises :class:`FrameError`: the session
        closes that connection with 501 FRAME_ERROR.
    """

    def __init__(
        self,
        *,
        source_channel: int,
        dest_channel: int,
        dest_frame_max: int,
        ack_mode: int,
        exchange: bytes | None = None,
        routing_key: bytes | None = None,
        property_overrides: Mapping[int, bytes] | None = None,
        forward_hop: bytes | None = None,
        timestamp_header: bool = False,
        window: int = 0,
        mandatory: bool = True,
        limit: int = 0,
        keep_last: bool = False,
        hold_returns: bool = False,
        source_frame_max: int = 0,
        max_body_size: int = MAX_BODY_SIZE,
    ) -> None:
        if dest_frame_max and dest_frame_max < 4096:
            raise ValueError(f"destination frame_max {dest_frame_max} is below AMQP's 4096")
        if ack_mode not in (ACK_MODE_NO_ACK, ACK_MODE_ON_PUBLISH, ACK_MODE_ON_CONFIRM):
            raise ValueError(f"unknown ack mode {ack_mode}")
        self._src_ch = source_channel
        self._dst_ch = dest_channel
        self._body_max = (dest_frame_max or 131072) - FRAME_OVERHEAD
        self._frame_max = dest_frame_max
        self._max_body = max_body_size
        self._ack_mode = ack_mode
        self._exchange = exchange
        self._routing_key = routing_key
        self._edits = _PropertyEdits(property_overrides, forward_hop, timestamp_header)
        self._keep_last = keep_last
        # hold_returns: a basic.return pauses the destination side after its content, before the
        # message's confirm (the broker sends the return first), until resume_destination()
        self._hold_returns = hold_returns
        self._returned: Returned | None = None
        self._hold_rest = False
        self.last_message: Delivered | None = None
        self._undeliverable: Delivered | None = None  # set while paused
        self._mandatory = mandatory
        self._limit = limit
        self._window = ConfirmWindow(window or 64)
        self._source = _PausableScan(source_channel, self._take_source_frame,
                                     lambda: self._undeliverable is not None, source_frame_max)
        self._destination = _PausableScan(dest_channel, self._take_dest_frame,
                                          lambda: self._returned is not None, dest_frame_max)
        self._deliver = _Assembler()
        self._returning = ReturnAssembler(max_body_size, hold_returns, hold_returns)
        self._publishes: list[bytes] = []
        self._source_out: list[bytes] = []
        self._last_tag = 0  # on_publish: newest delivery tag encoded and not yet acked
        self._buffered = 0
        # the counters the session reports
        self.consumed = self.published = self.redelivered = self.returned = self.bytes = 0
        self.undeliverable = 0
        self._acked_on_publish = 0
        self._pub_ack_tag = 0  # on_publish: the newest published tag not yet acked
        self._pub_ack_count = 0

    # -- counters -----------------------------------------------------------------------------

    @property
    def acked(self) -> int:
        return self._window.acked + self._acked_on_publish

    @property
    def in_flight(self) -> int:
        """Published and not yet settled by the destination (on_confirm only)."""
        return self._window.outstanding

    @property
    def buffered(self) -> int:
        """Messages encoded for the destination and not yet taken (held while blocked)."""
        return self._buffered

    @property
    def limit_reached(self) -> bool:
        return bool(self._limit) and self.consumed >= self._limit

    @property
    def pending_acks(self) -> int:
        """Source messages the next take_source_output() ack will cover."""
        if self._ack_mode == ACK_MODE_ON_PUBLISH:
            return self._pub_ack_count
        return self._window.pending_acks

    def has_source_output(self) -> bool:
        return bool(self._source_out or self._window.pending_acks or self._pub_ack_tag)

    def has_output(self) -> bool:
        return bool(self._publishes) or self.has_source_output()

    # -- source side ----------------------------------------------------------------------------

    def feed_source(self, data: bytes) -> bytes:
        """Scan bytes read from the source connection; returns the bytes meant for pika. While
        paused, the bytes are kept unscanned and nothing is returned."""
        return self._source.feed(data)

    @property
    def paused(self) -> bool:
        """An undeliverable message stopped the scan; see :meth:`take_undeliverable`."""
        return self._undeliverable is not None

    def take_undeliverable(self) -> Delivered | None:
        """(delivery_tag, redelivered, exchange, routing_key, raw properties as received, body,
        reason) of the message that caused the pause; None when not paused. The engine settles
        its delivery tag at the source (reject, or park then ack, or stop) before :meth:`resume`.
        """
        return self._undeliverable

    def hold_rest(self) -> None:
        """From now on hold every delivery: parsed, never published nor acked, so the source
        requeues it when the session closes (the ``stop`` policy; the delivery limit does the
        same once reached)."""
        self._hold_rest = True

    def resume(self) -> bytes:
        """Leave the pause and scan the bytes kept meanwhile (which may pause again); returns
        the bytes meant for pika, as :meth:`feed_source` does."""
        if self._undeliverable is None:
            return b""
        self._undeliverable = None
        return self._source.resume()

    def _take_source_frame(self, ftype: int, buf: bytes, start: int, end: int) -> bool:
        asm = self._deliver
        if asm.state == _IDLE:
            if basic_method_of(ftype, buf, start, end) != BASIC_DELIVER:
                return False
            asm.deliver = basic_deliver_fields(buf, start, end)
            asm.state = _HEADER
            return True
        if asm.state == _HEADER:
            if ftype != FRAME_HEADER:
                raise FrameError(f"expected a content header after basic.deliver, got frame type {ftype}")
            asm.remaining = content_header_fields(buf, start, end, self._max_body)
            asm.properties = buf[start + 12 : end]
            asm.body = []
            if asm.remaining == 0:
                self._on_delivery(asm)
            else:
                asm.state = _BODY
            return True
        if ftype != FRAME_BODY:
            raise FrameError(f"expected a body frame, got frame type {ftype}")
        chunk = buf[start:end]
        asm.body.append(chunk)
        asm.remaining -= len(chunk)
        if asm.remaining <= 0:
            if asm.remaining < 0:
                raise FrameError("body frames longer than the content header's body size")
            self._on_delivery(asm)
        return True

    def _on_delivery(self, asm: _Assembler) -> None:
        asm.state = _IDLE
        tag, redelivered, exchange, routing_key = asm.deliver
        if self._hold_rest or (self._limit and self.consumed >= self._limit):
            return  # held unacknowledged: requeued at the source when the session closes
        body = b"".join(asm.body)
        props = asm.properties
        reason = ""
        if self._edits.any:
            try:
                props = self._edits.apply(props)
            except UnparseableProperties as exc:
                reason = f"its properties cannot be parsed: {exc}"
        header_size = FRAME_OVERHEAD + 12 + len(props)
        if not reason and self._frame_max and header_size > self._frame_max:
            reason = (
                f"content header of {header_size} bytes exceeds the destination's "
                f"frame_max {self._frame_max}"
            )
        message = Delivered(tag, redelivered, exchange, routing_key, asm.properties, body, reason)
        if reason:
            self.undeliverable += 1
            self._undeliverable = message
            return
        if self._keep_last:
            self.last_message = message
        self.consumed += 1
        if redelivered:
            self.redelivered += 1
        out = self._publishes
        out.append(
            frame(
                FRAME_METHOD,
                self._dst_ch,
                basic_publish_payload(
                    self._exchange if self._exchange is not None else exchange,
                    self._routing_key if self._routing_key is not None else routing_key,
                    self._mandatory,
                ),
            )
        )
        out.append(frame(FRAME_HEADER, self._dst_ch, content_header_payload(len(body), props)))
        for i in range(0, len(body), self._body_max):
            out.append(frame(FRAME_BODY, self._dst_ch, body[i : i + self._body_max]))
        if self._ack_mode == ACK_MODE_ON_CONFIRM:
            self._window.add(tag)
        elif self._ack_mode == ACK_MODE_ON_PUBLISH:
            self._last_tag = tag
        self._buffered += 1
        self.bytes += len(body)

    def take_publishes(self) -> bytes:
        """All publish frames encoded since the last call, as one buffer to write. In on_publish
        mode this also queues the source ack covering them."""
        data = b"".join(self._publishes)
        self._publishes.clear()
        self.published += self._buffered
        if self._ack_mode == ACK_MODE_ON_PUBLISH and self._last_tag:
            self._pub_ack_tag = self._last_tag
            self._pub_ack_count += self._buffered
            self._last_tag = 0
        self._buffered = 0
        return data

    def take_source_output(self) -> bytes:
        """Ack / nack frames for the source channel, in the order they must be sent: nacks
        first, then one multiple ack covering everything settled (or published) since the last
        call. Calling it less often coalesces acks further."""
        tag = self._window.take_ack()
        if self._pub_ack_tag:
            tag = self._pub_ack_tag
            self._acked_on_publish += self._pub_ack_count
            self._pub_ack_tag = self._pub_ack_count = 0
        if tag:
            self._source_out.append(basic_ack_frame(self._src_ch, tag, True))
        data = b"".join(self._source_out)
        self._source_out.clear()
        return data

    # -- destination side -----------------------------------------------------------------------

    def feed_destination(self, data: bytes) -> bytes:
        """Scan bytes read from the destination connection; returns the bytes meant for pika.
        While the destination side is paused on a return, the bytes are kept unscanned."""
        return self._destination.feed(data)

    @property
    def destination_paused(self) -> bool:
        """hold_returns: a returned message stopped the destination scan; see take_returned()."""
        return self._returned is not None

    def take_returned(self) -> Returned | None:
        """(reply_code, reply_text, exchange, routing_key, raw properties, body) of the returned
        message that paused the destination side; None when not paused. Its confirm, which
        follows, is read only after :meth:`resume_destination`."""
        return self._returned

    def resume_destination(self) -> bytes:
        """Leave the destination pause and scan the bytes kept meanwhile (which may pause again);
        returns the bytes meant for pika, as :meth:`feed_destination` does."""
        if self._returned is None:
            return b""
        self._returned = None
        return self._destination.resume()

    def _take_dest_frame(self, ftype: int, buf: bytes, start: int, end: int) -> bool:
        if self._returning.state != IDLE:
            # the content of a basic.return: counted, and kept with hold_returns
            if self._returning.take(ftype, buf, start, end) and self._hold_returns:
                code, text, exchange, routing_key = self._returning.fields
                self._returned = Returned(code, text.decode("utf-8", "replace"), exchange,
                                          routing_key, self._returning.properties,
                                          self._returning.take_body())
            return True
        method_id = basic_method_of(ftype, buf, start, end)
        if method_id == BASIC_ACK:
            self._window.ack(*confirm_fields(buf, start, end, method_id))
            return True
        if method_id == BASIC_NACK:
            # Queued before the multiple ack that take_source_output() adds: once the source has
            # the nack, that ack cannot cover the refused tag.
            for tag in self._window.nack(*confirm_fields(buf, start, end, method_id)):
                self._source_out.append(basic_nack_frame(self._src_ch, tag, False, True))
            return True
        if method_id == BASIC_RETURN:
            self._returning.start(buf, start, end)
            self.returned += 1
            return True
        return False
