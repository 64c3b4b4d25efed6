"""Reading what a peer sent, bounded: frame headers checked against frame_max before their
payload is waited for, and every length-prefixed field read only within its frame.

Used by the pure-Python data plane (:mod:`.relay_ref`, :mod:`.publish_ref`), by the native one
for its error messages (``_fastpath.pyx`` does the same checks in C), and by the engine's links
(:class:`FrameGuard`). Everything here raises :class:`~.frames.FrameError`, never reads a byte
outside the frame it was given.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from .frames import (
    BASIC_ACK,
    CLASS_BASIC,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEAD,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    METHOD_ID,
    U64,
    FrameError,
)

_U16 = struct.Struct(">H")

# A frame over the negotiated frame_max is a connection error (RabbitMQ closes with 501
# FRAME_ERROR, and so does pumpd). Without a negotiated value, pika's largest is the bound.
DEFAULT_FRAME_MAX = 131072
# The largest body a content header may announce: RabbitMQ's hard limit for max_message_size (its
# default is 128 MiB), so no message a RabbitMQ broker accepts is refused, and a lying body_size
# cannot make a buffer grow without bound.
MAX_BODY_SIZE = 512 * 1024 * 1024
_FRAME_TYPES = frozenset((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT))


def check_frame_head(ftype: int, channel: int, size: int, frame_max: int) -> None:
    """Refuse a frame by its header alone (before its payload is waited for): an unknown type,
    or a size over ``frame_max`` (0: :data:`DEFAULT_FRAME_MAX`). A frame's size counts its
    7-byte header and end octet, as AMQP's frame-max does.

    :raises FrameError: naming the size and the limit
    """
    limit = frame_max or DEFAULT_FRAME_MAX
    if ftype not in _FRAME_TYPES:
        raise FrameError(f"unknown frame type {ftype} on channel {channel}")
    if size > limit - FRAME_OVERHEAD:
        raise FrameError(f"a frame of {size + FRAME_OVERHEAD} bytes (type {ftype}, channel "
                         f"{channel}) exceeds the negotiated frame_max {limit}")


def check_body_size(body_size: int, max_body_size: int) -> None:
    """:raises FrameError: for a content header announcing more than ``max_body_size`` bytes"""
    if body_size > max_body_size:
        raise FrameError(f"a content header announces a body of {body_size} bytes, over the "
                         f"limit of {max_body_size}")


class FrameGuard:
    """An interceptor for a stream pika parses itself (the handshake and declarations, before a
    data plane takes the stream over; a park connection): it walks the frame boundaries, keeping
    nothing but a partial header, and refuses a frame header by :func:`check_frame_head`. pika
    would buffer whatever size a header announced. ``frame_max()`` is read per frame: before
    connection.tune it is the client's proposal, after it the negotiated value.

    A stream that starts with ``AMQP`` is a broker refusing the protocol version (its own
    protocol header): it is left to pika, which says so.
    """

    def __init__(self, frame_max: Callable[[], int]) -> None:
        self._frame_max = frame_max
        self._head = b""  # a frame header not yet whole
        self._left = 0  # bytes of the current frame still to come (payload and end octet)
        self._first = True
        self._off = False

    def __call__(self, data: bytes) -> bytes:
        pos, n = 0, len(data)
        while pos < n and not self._off:
            if self._left:
                k = min(self._left, n - pos)
                self._left -= k
                pos += k
                continue
            k = min(FRAME_HEADER_SIZE - len(self._head), n - pos)
            self._head += data[pos : pos + k]
            pos += k
            if len(self._head) < FRAME_HEADER_SIZE:
                break
            head, self._head = self._head, b""
            if self._first and head[:4] == b"AMQP":
                self._off = True
                break
            self._first = False
            ftype, channel, size = FRAME_HEAD.unpack(head)
            check_frame_head(ftype, channel, size, self._frame_max())
            self._left = size + 1
        return data


def scan_frames(
    buf: bytes,
    channel: int,
    take: Callable[[int, bytes, int, int], bool],
    stop: Callable[[], bool] = lambda: False,
    frame_max: int = 0,
) -> tuple[bytes, bytes]:
    """Walk the whole frames in ``buf``: ``take(type, buf, payload_start, payload_end)`` decides
    for each frame on ``channel`` whether the caller keeps it; after a frame for which ``stop()``
    holds, the walk ends there. Returns the rest (an incomplete tail to carry over, or what
    follows the stop) and the frames meant for pika, in order.

    Every frame header is checked (:func:`check_frame_head`) as soon as its 7 bytes are in, so
    the tail carried over is never more than ``frame_max`` bytes.
    """
    passthrough: list[bytes] = []
    pos = 0
    n = len(buf)
    while n - pos >= 7:
        ftype, frame_channel, size = FRAME_HEAD.unpack_from(buf, pos)
        check_frame_head(ftype, frame_channel, size, frame_max)
        end = pos + 7 + size
        if end >= n:
            break
        if buf[end] != FRAME_END:
            raise FrameError(f"frame end octet missing on channel {frame_channel}")
        if not (frame_channel == channel and take(ftype, buf, pos + 7, end)):
            passthrough.append(buf[pos : end + 1])
        pos = end + 1
        if stop():
            break
    return buf[pos:], b"".join(passthrough)


def method_id_of(buf: bytes, start: int, end: int) -> tuple[int, int]:
    """(class id, method id) of the method frame whose payload is ``buf[start:end]``.

    :raises FrameError: for a payload shorter than the two ids
    """
    if end - start < 4:
        raise FrameError(f"method frame of {end - start} bytes")
    class_id, method_id = METHOD_ID.unpack_from(buf, start)
    return class_id, method_id


def basic_method_of(ftype: int, buf: bytes, start: int, end: int) -> int:
    """The method id of a frame if it is a ``basic`` class method frame, else 0 (a frame the
    data plane hands to pika)."""
    if ftype != FRAME_METHOD:
        return 0
    class_id, method_id = method_id_of(buf, start, end)
    return method_id if class_id == CLASS_BASIC else 0


def confirm_fields(buf: bytes, start: int, end: int, method_id: int) -> tuple[int, bool]:
    """(delivery tag, multiple) of the basic.ack or basic.nack whose payload is
    ``buf[start:end]``.

    :raises FrameError: for a payload too short for them
    """
    if end - start < 13:
        raise FrameError("basic.ack truncated" if method_id == BASIC_ACK else "basic.nack truncated")
    return U64.unpack_from(buf, start + 4)[0], bool(buf[start + 12] & 1)


def content_header_fields(buf: bytes, start: int, end: int, max_body_size: int) -> int:
    """The body size of the content header whose payload is ``buf[start:end]`` (its property
    list is ``buf[start + 12:end]``).

    :raises FrameError: for a payload shorter than class, weight and body size, or a body size
        over ``max_body_size``
    """
    if end - start < 12:
        raise FrameError(f"content header of {end - start} bytes")
    body_size: int = U64.unpack_from(buf, start + 4)[0]
    check_body_size(body_size, max_body_size)
    return body_size


def _shortstr_at(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes, int]:
    """The short string at ``pos`` and the position after it, both inside ``end``."""
    if pos >= end or pos + 1 + buf[pos] > end:
        raise FrameError(f"{what} truncated")
    n = buf[pos]
    return bytes(buf[pos + 1 : pos + 1 + n]), pos + 1 + n


def basic_deliver_fields(buf: bytes, start: int, end: int) -> tuple[int, bool, bytes, bytes]:
    """delivery_tag, redelivered, exchange and routing_key of the basic.deliver whose payload
    (class and method ids first) is ``buf[start:end]``.

    :raises FrameError: when a length points past the frame
    """
    _ctag, pos = _shortstr_at(buf, start + 4, end, "basic.deliver")
    if end - pos < 10:  # tag, redelivered, and at least the exchange's length
        raise FrameError("basic.deliver truncated")
    tag = U64.unpack_from(buf, pos)[0]
    redelivered = bool(buf[pos + 8] & 1)
    exchange, pos = _shortstr_at(buf, pos + 9, end, "basic.deliver")
    routing_key, pos = _shortstr_at(buf, pos, end, "basic.deliver")
    return tag, redelivered, exchange, routing_key


def basic_return_fields(buf: bytes, start: int, end: int) -> tuple[int, bytes, bytes, bytes]:
    """reply_code, reply_text, exchange and routing_key of the basic.return method whose payload
    (class and method ids first) is ``buf[start:end]``.

    :raises FrameError: when a length points past the frame
    """
    pos = start + 4
    if end - pos < 2:
        raise FrameError("basic.return truncated")
    code = _U16.unpack_from(buf, pos)[0]
    pos += 2
    text, pos = _shortstr_at(buf, pos, end, "basic.return")
    exchange, pos = _shortstr_at(buf, pos, end, "basic.return")
    routing_key, pos = _shortstr_at(buf, pos, end, "basic.return")
    return code, text, exchange, routing_key
