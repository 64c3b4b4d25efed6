"""The publisher's data plane, pure-Python reference.

:class:`PublishPlane` encodes ``basic.publish`` + content header + body frames for many messages
into one buffer, numbers them by the channel's confirm sequence (1, 2, ...), and reads
``basic.ack`` / ``basic.nack`` / ``basic.return`` straight from the bytes read off the socket,
handing every other frame back (for pika). Outstanding confirms are the shovel's confirm
window (:class:`~pumpd.dataplane.confirm_window_ref.ConfirmWindow` here, the native one in
``pumpd._fastpath.PublishPlane``). Same API, same tests.

A ``basic.return`` carries no sequence number. RabbitMQ sends it while it handles the publish,
before it sends that publish's confirm, so a return is attributed to the sequence number of the
first confirm frame that follows it: exact when the broker flushes a confirm per unroutable
publish (individual mode, or one return between two confirm flushes); when several returns
precede one flush they all get that flush's number. The returned properties (``message_id``)
identify the message exactly; :class:`pumpd.publishing.publisher.PublishError` reports both.

Properties arrive encoded (:func:`pumpd.dataplane.properties.encode_properties`, once per
call); ``publish_arrow``'s deterministic ids are spliced as
:class:`pumpd.dataplane.properties.IdSplice` does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from .api import PublishReturn
from .confirm_window_ref import ConfirmCounts, ConfirmWindow
from .frames import (
    BASIC_ACK,
    BASIC_NACK,
    BASIC_PUBLISH,
    BASIC_RETURN,
    CLASS_BASIC,
    FRAME_BODY,
    FRAME_HEAD,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    METHOD_ID,
    shortstr,
)
from .received import (
    MAX_BODY_SIZE,
    basic_method_of,
    confirm_fields,
    scan_frames,
)
from .return_assembler_ref import HEADER, IDLE, ReturnAssembler

_HEADER_PREFIX = struct.Struct(">BHIHHQ")  # frame head + class, weight, body size



# -- the data plane ------------------------------------------------------------------------------


class PublishPlane(ConfirmCounts):
    """Publish frames out, confirms in. See the module docstring.

    :param channel: the publishing channel's number
    :param frame_max: the connection's negotiated frame_max (body frames are split to fit)
    :param exchange: the exchange every publish goes to
    :param mandatory: publish with mandatory set: unroutable messages come back as returns
    :param max_body_size: the largest body a returned message's content header may announce

    A frame received over ``frame_max``, or a content header over ``max_body_size``, raises
    :class:`FrameError` (the publisher closes the connection with 501 FRAME_ERROR).
    """

    def __init__(self, *, channel: int, frame_max: int, exchange: bytes = b"",
                 mandatory: bool = False, max_body_size: int = MAX_BODY_SIZE) -> None:
        if frame_max and frame_max < 4096:
            raise ValueError(f"frame_max {frame_max} is below AMQP's 4096")
        if len(exchange) > 255:
            raise ValueError("exchange name longer than 255 bytes")
        self._ch = channel
        self._body_max = (frame_max or 131072) - FRAME_OVERHEAD
        self._frame_max = frame_max
        self._exchange = shortstr(exchange)
        self._mandatory = b"\x01" if mandatory else b"\x00"
        self._out: list[bytes] = []
        self._buf = b""
        # each publish recorded with its own sequence number as its tag: a nack hands them back
        self._window = ConfirmWindow(4096)
        self._nacked_seqs: list[int] = []
        self._returns: list[PublishReturn] = []
        self._unattributed = 0  # returns waiting for the next confirm frame's number
        # the content of a basic.return; its properties kept (the message id says which it is)
        self._returning = ReturnAssembler(max_body_size, True, False)
        self.published = 0
        self.returned = 0

    # -- state ---------------------------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Published and not yet acked or nacked."""
        return self._window.outstanding

    @property
    def next_seq(self) -> int:
        return self._window.next_seq

    def unconfirmed(self) -> list[int]:
        """Sequence numbers published and not yet settled, oldest first."""
        return self._window.unsettled()

    def take_nacked(self) -> list[int]:
        out, self._nacked_seqs = self._nacked_seqs, []
        return out

    def take_returns(self) -> list[PublishReturn]:
        """Returned messages attributed to a sequence number so far (see the module docstring)."""
        n = len(self._returns) - self._unattributed
        out, self._returns = self._returns[:n], self._returns[n:]
        return out

    # -- publishing ----------------------------------------------------------------------------

    def _method(self, routing_key: bytes) -> bytes:
        payload = (METHOD_ID.pack(CLASS_BASIC, BASIC_PUBLISH) + b"\x00\x00" + self._exchange
                   + shortstr(routing_key) + self._mandatory)
        return FRAME_HEAD.pack(FRAME_METHOD, self._ch, len(payload)) + payload + b"\xce"

    def _encode(self, method: bytes, body: bytes, properties: bytes) -> None:
        out = self._out
        out.append(method)
        out.append(_HEADER_PREFIX.pack(FRAME_HEADER, self._ch, 12 + len(properties), CLASS_BASIC,
                                       0, len(body)) + properties + b"\xce")
        step = self._body_max
        for i in range(0, len(body), step):
            chunk = body[i : i + step]
            out.append(FRAME_HEAD.pack(FRAME_BODY, self._ch, len(chunk)) + chunk + b"\xce")
        self._window.add(self._window.next_seq)
        self.published += 1

    def publish(self, body: bytes, routing_key: bytes, properties: bytes) -> int:
        """Encode one message; returns its sequence number."""
        seq = self._window.next_seq
        self._encode(self._method(routing_key), bytes(body), properties)
        return seq

    def publish_many(self, bodies: Sequence[bytes], routing_key: bytes, properties: bytes) -> int:
        """Encode every body with the same routing key and raw properties; returns the sequence
        number of the first."""
        seq = self._window.next_seq
        method = self._method(routing_key)
        for body in bodies:
            self._encode(method, bytes(body), properties)
        return seq

    def publish_arrow(self, offsets: Any, data: Any, offset: int, count: int,
                      routing_key: bytes, properties: bytes, *, large: bool = False,
                      properties_tail: bytes | None = None, id_prefix: bytes | None = None,
                      id_start: int = 0) -> int:
        """Encode ``count`` bodies from an Arrow binary column's buffers (``offsets``: int32,
        or int64 with ``large``; ``data``), from element ``offset``. With ``id_prefix``, each
        message's properties are ``properties`` + shortstr(id_prefix + decimal(id_start + row))
        + ``properties_tail``. Returns the first sequence number."""
        if offset < 0 or count < 0:
            raise ValueError("negative offset or count")
        ov = memoryview(offsets).cast("B").cast("q" if large else "i")
        if offset + count + 1 > len(ov):
            raise ValueError("offsets buffer shorter than offset + count + 1 entries")
        dv = memoryview(data).cast("B") if data is not None else memoryview(b"")
        if id_prefix is not None and len(id_prefix) > 230:
            raise ValueError("id_prefix longer than 230 bytes")
        seq = self._window.next_seq
        method = self._method(routing_key)
        tail = properties_tail or b""
        for i in range(offset, offset + count):
            start, end = ov[i], ov[i + 1]
            if start < 0 or end < start or end > len(dv):
                raise ValueError(f"offsets out of range at element {i}")
            props = properties
            if id_prefix is not None:
                props = properties + shortstr(id_prefix + str(id_start + i - offset).encode()) + tail
            self._encode(method, bytes(dv[start:end]), props)
        return seq

    def take_output(self) -> bytes:
        data = b"".join(self._out)
        self._out.clear()
        return data

    # -- confirms ------------------------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        """Scan bytes read from the connection; returns the frames meant for pika."""
        self._buf, passthrough = scan_frames(self._buf + data if self._buf else data, self._ch,
                                             self._take, frame_max=self._frame_max)
        return passthrough

    def _take(self, ftype: int, buf: bytes, start: int, end: int) -> bool:
        returning = self._returning
        if returning.state != IDLE:
            if returning.state == HEADER:
                returning.take(ftype, buf, start, end)
                # recorded at its content header, attributed at the next confirm
                code, text, exchange, rk = returning.fields
                self._returns.append((0, code, text, exchange, rk, returning.properties))
                self._unattributed += 1
                self.returned += 1
            else:
                returning.take(ftype, buf, start, end)
            return True
        method_id = basic_method_of(ftype, buf, start, end)
        if method_id == BASIC_ACK or method_id == BASIC_NACK:
            seq, multiple = confirm_fields(buf, start, end, method_id)
            self._attribute_returns(seq)
            if method_id == BASIC_ACK:
                self._window.ack(seq, multiple)
            else:
                self._nacked_seqs.extend(self._window.nack(seq, multiple))
            return True
        if method_id == BASIC_RETURN:
            returning.start(buf, start, end)
            return True
        return False

    def _attribute_returns(self, seq: int) -> None:
        if self._unattributed:
            k = len(self._returns) - self._unattributed
            for i in range(k, len(self._returns)):
                self._returns[i] = (seq, *self._returns[i][1:])
            self._unattributed = 0
