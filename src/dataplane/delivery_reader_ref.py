"""The delivery reader, pure-Python reference: a consumer's deliveries taken whole out of the
bytes read off its connection, everything else handed on to pika.

For a reader that hands messages to Python (the Spark queue reader) rather than to a
destination: pika makes a method object, a properties object and three callbacks per message;
this keeps a delivery as one tuple of its fields and its raw properties, decoded only by whoever
needs them. The native twin is ``pumpd._fastpath.DeliveryReader`` (same API, same tests); the
contract is :class:`pumpd.dataplane.api.DeliveryReader`.

Only ``basic.deliver`` on the reader's channel and the content frames that follow it are kept;
any other frame (replies, heartbeats, other channels, a ``basic.cancel`` or ``channel.close``) is
passed through in order. Frames are checked as the relay checks them (``frame_max``, the end
octet, the body size bound) and a violation raises :class:`~.frames.FrameError`.
"""

from __future__ import annotations

from .api import Delivery
from .frames import BASIC_DELIVER, CLASS_BASIC, FRAME_BODY, FRAME_HEADER, FRAME_METHOD, FrameError
from .received import (
    MAX_BODY_SIZE,
    basic_deliver_fields,
    content_header_fields,
    method_id_of,
    scan_frames,
)

# what the reader waits for next on its channel
_METHOD, _HEADER, _BODY = 0, 1, 2


class DeliveryReader:
    """Deliveries of channel ``channel`` gathered from :meth:`feed`; :meth:`take` hands them
    out in order."""

    def __init__(self, channel: int, frame_max: int = 0,
                 max_body_size: int | None = None) -> None:
        self.channel = channel
        self.frame_max = frame_max
        self.max_body_size = MAX_BODY_SIZE if max_body_size is None else max_body_size
        self.delivered = 0
        self.pending_bytes = 0  # the bodies of the gathered deliveries
        self._carry = b""
        self._ready: list[Delivery] = []
        self._want = _METHOD
        self._head: tuple[int, bool, bytes, bytes] = (0, False, b"", b"")
        self._properties = b""
        self._size = 0
        self._body: list[bytes] = []
        self._got = 0

    @property
    def pending(self) -> int:
        """Deliveries gathered and not yet taken."""
        return len(self._ready)

    def feed(self, data: bytes) -> bytes:
        """Take the deliveries out of ``data`` (with what an earlier call left unfinished);
        the other whole frames, in order, for pika.

        :raises FrameError: a frame over ``frame_max``, without its end octet, a content frame
            out of place, or a body over ``max_body_size``
        """
        buf = self._carry + data if self._carry else data
        self._carry, passed = scan_frames(buf, self.channel, self._take, frame_max=self.frame_max)
        return passed

    def _take(self, ftype: int, buf: bytes, start: int, end: int) -> bool:
        if self._want == _METHOD:
            if ftype != FRAME_METHOD or method_id_of(buf, start, end) != (CLASS_BASIC,
                                                                           BASIC_DELIVER):
                return False  # a reply, a cancel, a close...: pika's
            self._head = basic_deliver_fields(buf, start, end)
            self._want = _HEADER
            return True
        if self._want == _HEADER:
            if ftype != FRAME_HEADER:
                raise FrameError(f"basic.deliver on channel {self.channel} without its content "
                                 f"header (frame type {ftype})")
            self._size = content_header_fields(buf, start, end, self.max_body_size)
            self._properties = bytes(buf[start + 12:end])
            self._body, self._got = [], 0
            if self._size == 0:
                self._done()
            else:
                self._want = _BODY
            return True
        if ftype != FRAME_BODY:
            raise FrameError(f"a message on channel {self.channel} cut short: {self._got} of "
                             f"{self._size} body bytes, then frame type {ftype}")
        self._got += end - start
        if self._got > self._size:
            raise FrameError(f"body frames on channel {self.channel} carry {self._got} bytes, "
                             f"more than the {self._size} its header announced")
        self._body.append(bytes(buf[start:end]))
        if self._got == self._size:
            self._done()
        return True

    def _done(self) -> None:
        tag, redelivered, exchange, routing_key = self._head
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._ready.append((tag, redelivered, exchange, routing_key, self._properties, body))
        self.delivered += 1
        self.pending_bytes += len(body)
        self._want = _METHOD

    def take(self, most: int, max_bytes: int = 0) -> list[Delivery]:
        """The first ``most`` gathered deliveries (fewer when fewer are), in order; with
        ``max_bytes``, no more once their bodies reach it (but always one, however large)."""
        n = min(most, len(self._ready))
        if max_bytes:
            size = 0
            for i in range(n):
                size += len(self._ready[i][5])
                if size >= max_bytes:
                    n = i + 1
                    break
        batch = self._ready[:n]
        del self._ready[:n]
        self.pending_bytes -= sum(len(d[5]) for d in batch)
        return batch

    def clear(self) -> None:
        """Forget what was gathered and any unfinished message (the connection is gone: the
        broker requeues them)."""
        self._ready.clear()
        self.pending_bytes = 0
        self._carry = b""
        self._want = _METHOD
