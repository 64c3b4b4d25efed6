"""AMQP 1.0 frames (AMQP 1.0 §2.3): the protocol headers, :func:`encode_frame` and a
:class:`FrameReader` that cuts a byte stream into :class:`Frame` values.

A frame is ``size`` (4 bytes, the whole frame), ``doff`` (data offset in 4-byte words, at least
2), ``type`` (0 AMQP, 1 SASL), a type-specific 2 bytes (the channel for AMQP frames), an extended
header of ``doff * 4 - 8`` bytes (ignored, as the spec asks), then the body: a performative and,
for a transfer, the payload. An empty body is a heartbeat.

The reader checks a frame's header as soon as its 8 bytes are there: a size beyond the agreed
maximum is refused before any of the frame's body is buffered, so a peer cannot make pumpd hold
more than one maximum frame of its bytes.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = [
    "AMQP_HEADER", "HEARTBEAT", "MIN_MAX_FRAME_SIZE", "SASL_HEADER", "TYPE_AMQP", "TYPE_SASL",
    "Frame", "FrameReader", "FramingError", "encode_frame",
]

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
TYPE_AMQP = 0
TYPE_SASL = 1
#: the largest frame every peer must accept, before open has agreed one (§2.7.1)
MIN_MAX_FRAME_SIZE = 512
#: an empty AMQP frame on channel 0: keeps an idle connection alive (§2.4.5)
HEARTBEAT = b"\x00\x00\x00\x08\x02\x00\x00\x00"

_HEADER = struct.Struct(">IBBH")
_MAX_UINT = 0xFFFF_FFFF


class FramingError(ValueError):
    """A frame header that breaks §2.3 or the agreed maximum frame size."""


class Frame(NamedTuple):
    """One frame: ``body`` is what follows the extended header (performative then payload);
    empty for a heartbeat. ``channel`` is 0 for a SASL frame."""

    type: int
    channel: int
    body: bytes


def encode_frame(channel: int, performative_bytes: bytes, payload: bytes = b"",
                 type: int = TYPE_AMQP) -> bytes:
    """One frame of ``performative_bytes`` then ``payload``, with no extended header."""
    size = 8 + len(performative_bytes) + len(payload)
    if size > _MAX_UINT:
        raise FramingError(f"a frame of {size} bytes is beyond the 4-byte size field")
    return _HEADER.pack(size, 2, type, channel) + performative_bytes + payload


class FrameReader:
    """Frames from a byte stream: :meth:`feed` the bytes as they come, get the whole frames
    they complete. ``max_frame_size`` is the largest frame accepted (settable: open agrees
    one after the reader starts, at :data:`MIN_MAX_FRAME_SIZE` or more)."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame_size: int = MIN_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._max = _check_max(max_frame_size)

    @property
    def max_frame_size(self) -> int:
        return self._max

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        self._max = _check_max(value)

    @property
    def buffered(self) -> int:
        """Bytes held that do not make a whole frame yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        """The frames that ``data`` completes (none, one or several); the bytes of an
        incomplete frame are kept for the next call. :class:`FramingError` on a bad header (the
        stream cannot be resynchronised after one: the connection must close)."""
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        n = len(buf)
        maximum = self._max
        while n - pos >= 8:
            size, doff, ftype, channel = _HEADER.unpack_from(buf, pos)
            if size < 8:
                raise FramingError(f"frame size {size} is less than the 8-byte frame header")
            if size > maximum:
                raise FramingError(f"frame size {size} is beyond the maximum frame size "
                                   f"{maximum}")
            if doff < 2:
                raise FramingError(f"frame data offset {doff} is less than 2 (the 8-byte "
                                   "header)")
            if doff * 4 > size:
                raise FramingError(f"frame data offset {doff} ({doff * 4} bytes) is beyond "
                                   f"the frame's size {size}")
            if ftype != TYPE_AMQP and ftype != TYPE_SASL:
                raise FramingError(f"frame type {ftype} is neither AMQP (0) nor SASL (1)")
            if n - pos < size:
                break
            body = bytes(buf[pos + doff * 4:pos + size])
            frames.append(Frame(ftype, channel if ftype == TYPE_AMQP else 0, body))
            pos += size
        if pos:
            del buf[:pos]
        return frames


def _check_max(value: int) -> int:
    if not MIN_MAX_FRAME_SIZE <= value <= _MAX_UINT:
        raise ValueError(f"max frame size {value} is outside {MIN_MAX_FRAME_SIZE}..{_MAX_UINT}")
    return value
