"""The content of a ``basic.return``, pure-Python reference: one assembler for the relay and the
publish plane (``pumpd._fastpath.ReturnAssembler`` in C).

A return's method frame is followed, on its channel, by its content header and body frames;
anything else there is a :class:`~pumpd.dataplane.frames.FrameError`, as is a content header
announcing more than ``max_body`` bytes.
"""

from __future__ import annotations

from .frames import FRAME_BODY, FRAME_HEADER, FrameError
from .received import basic_return_fields, content_header_fields

IDLE, HEADER, BODY = 0, 1, 2


class ReturnAssembler:
    """One channel's returned message being received. ``keep_properties`` / ``keep_body``: what
    is kept of its content (the relay keeps both with hold_returns; the publish plane keeps the
    properties, for the message id)."""

    __slots__ = ("_body", "fields", "keep_body", "keep_properties", "max_body", "properties",
                 "remaining", "state")

    def __init__(self, max_body: int, keep_properties: bool, keep_body: bool) -> None:
        self.max_body = max_body
        self.keep_properties = keep_properties
        self.keep_body = keep_body
        self.state = IDLE
        self.remaining = 0  # body bytes still to come
        # (reply_code, reply_text, exchange, routing_key) of the return
        self.fields: tuple[int, bytes, bytes, bytes] = (0, b"", b"", b"")
        self.properties = b""
        self._body: list[bytes] = []

    def start(self, buf: bytes, start: int, end: int) -> None:
        """The basic.return method whose payload is ``buf[start:end]``."""
        self.fields = basic_return_fields(buf, start, end)
        self.state = HEADER

    def take(self, ftype: int, buf: bytes, start: int, end: int) -> bool:
        """A frame of the channel while a return's content is due (``state != IDLE``); True when
        it completes the returned message."""
        if self.state == HEADER:
            if ftype != FRAME_HEADER:
                raise FrameError("expected a content header after basic.return")
            self.remaining = content_header_fields(buf, start, end, self.max_body)
            self.state = BODY if self.remaining else IDLE
            if self.keep_properties:
                self.properties = bytes(buf[start + 12 : end])
            if self.keep_body:
                self._body = []
        else:
            if ftype != FRAME_BODY:
                raise FrameError(f"expected a body frame, got frame type {ftype}")
            if end - start > self.remaining:
                raise FrameError("body frames longer than the content header's body size")
            self.remaining -= end - start
            if self.keep_body:
                self._body.append(buf[start:end])
            if self.remaining <= 0:
                self.state = IDLE
        return self.state == IDLE

    def take_body(self) -> bytes:
        """The kept body of the message just completed, joined."""
        body, self._body = b"".join(self._body), []
        return body
