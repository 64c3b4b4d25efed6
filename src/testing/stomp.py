"""A small blocking STOMP 1.2 client, for looking into a private ActiveMQ broker from tests.

ActiveMQ speaks STOMP on a connector of its own (:class:`~pumpd.testing.activemq.LocalActiveMQ`
opens one); a test uses it to put messages into a queue, take them out, and count a queue's
messages with a queue browser (ActiveMQ's ``browser:true`` subscription, which delivers every
message of the queue, acknowledged or in flight, then one that carries ``browser:end``). It is
an inspection tool for tests, not a client for pumpd: one connection, one thread, no heart-beats.

Frames follow STOMP 1.2: header values are escaped (``\\\\``, ``\\c``, ``\\n``, ``\\r``), a body
with a ``content-length`` header is read by length (so it may hold NUL bytes), any other up to
the NUL that ends the frame. Every frame read is bounded (:data:`MAX_FRAME_BYTES`).
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from .node_errors import LocalNodeError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["MAX_FRAME_BYTES", "FrameReader", "StompClient", "StompError", "StompFrame",
           "encode_frame"]

#: The largest frame (command, headers and body) a :class:`FrameReader` accepts.
MAX_FRAME_BYTES = 16 * 1024 * 1024
# The largest command-and-headers part of a frame.
_MAX_HEAD_BYTES = 64 * 1024

_ESCAPES = {"\\": "\\\\", ":": "\\c", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", "c": ":", "n": "\n", "r": "\r"}


class StompError(LocalNodeError):
    """The broker answered with an ERROR frame, broke the protocol, or did not answer in time."""


class StompClosed(StompError):
    """The broker closed the connection with no frame left to read."""


@dataclass(frozen=True)
class StompFrame:
    """One STOMP frame: its command, its headers (the first of a repeated header wins, as the
    spec says) and its body."""

    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def _escape(value: str) -> str:
    return "".join(_ESCAPES.get(ch, ch) for ch in value)


def _unescape(value: str, line: str) -> str:
    out: list[str] = []
    chars = iter(value)
    for ch in chars:
        if ch != "\\":
            out.append(ch)
            continue
        nxt = next(chars, "")
        if nxt not in _UNESCAPES:
            raise StompError(f"bad escape \\{nxt} in STOMP header line {line!r}")
        out.append(_UNESCAPES[nxt])
    return "".join(out)


def encode_frame(command: str, headers: Mapping[str, str] | None = None,
                 body: bytes = b"") -> bytes:
    """The bytes of a frame; a body gets a ``content-length`` header (unless given)."""
    if not command or not command.isalpha():
        raise ValueError(f"bad STOMP command {command!r}")
    hdrs = dict(headers or {})
    if body and "content-length" not in hdrs:
        hdrs["content-length"] = str(len(body))
    head = command + "\n" + "".join(f"{_escape(k)}:{_escape(v)}\n" for k, v in hdrs.items())
    return head.encode() + b"\n" + body + b"\0"


class FrameReader:
    """Splits a byte stream into frames; :meth:`feed` bytes in, :meth:`next_frame` frames out.

    Blank lines between frames (heart-beats, the end-of-line a broker may send after a NUL)
    are skipped.
    """

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> StompFrame | None:
        """The next complete frame, or ``None`` until more bytes come.

        :raises StompError: a malformed frame, or one larger than the limit.
        """
        start = 0
        while start < len(self._buf) and self._buf[start] in b"\r\n":
            start += 1
        del self._buf[:start]
        if not self._buf:
            return None
        # The head ends at the first empty line: an end of line ("\n" or "\r\n") right
        # after the one that ends the last header line (or the command).
        head_end, sep = self._buf.find(b"\n\n"), 2
        crlf_end = self._buf.find(b"\n\r\n")
        if crlf_end >= 0 and (head_end < 0 or crlf_end < head_end):
            head_end, sep = crlf_end, 3
        if head_end < 0:
            if len(self._buf) > _MAX_HEAD_BYTES:
                raise StompError(f"STOMP frame head longer than {_MAX_HEAD_BYTES} bytes")
            return None
        head = bytes(self._buf[:head_end]).decode("utf-8", errors="replace")
        # STOMP 1.2 ends a line with "\r\n" or "\n", and a peer may mix them
        lines = [ln[:-1] if ln.endswith("\r") else ln for ln in head.split("\n")]
        command = lines[0]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            key, colon, value = line.partition(":")
            if not colon:
                raise StompError(f"STOMP header line without a colon: {line!r}")
            headers.setdefault(_unescape(key, line), _unescape(value, line))
        body_start = head_end + sep
        if "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise StompError(f"bad content-length {headers['content-length']!r}") from None
            if length < 0 or body_start + length + 1 > self._max:
                raise StompError(f"STOMP frame of {body_start + length + 1} bytes exceeds "
                                 f"the limit of {self._max}")
            if len(self._buf) < body_start + length + 1:
                return None
            if self._buf[body_start + length] != 0:
                raise StompError(f"STOMP {command} frame: no NUL after its {length}-byte body")
            body_end = body_start + length
        else:
            body_end = self._buf.find(b"\0", body_start)
            if body_end < 0:
                if len(self._buf) > self._max:
                    raise StompError(f"STOMP frame exceeds the limit of {self._max} bytes")
                return None
        body = bytes(self._buf[body_start:body_end])
        del self._buf[: body_end + 1]
        return StompFrame(command, headers, body)


class StompClient:
    """One STOMP 1.2 connection to a broker, logged in (``CONNECT``) when made.

    :raises StompError: the broker refused the login (an ``ERROR`` frame) or did not answer.
    """

    def __init__(self, host: str, port: int, login: str | None, passcode: str | None,
                 *, timeout: float = 10.0, virtual_host: str = "localhost") -> None:
        self.timeout = timeout
        self._reader = FrameReader()
        self._receipts = 0
        # MESSAGE frames that came while a receipt was awaited (a broker may dispatch to a
        # new subscription before it sends the SUBSCRIBE's receipt)
        self._pending: deque[StompFrame] = deque()
        self._sock = socket.create_connection((host, port), timeout=timeout)
        try:
            headers = {"accept-version": "1.2", "host": virtual_host, "heart-beat": "0,0"}
            if login is not None:
                headers["login"] = login
            if passcode is not None:
                headers["passcode"] = passcode
            self._sock.sendall(encode_frame("CONNECT", headers))
            try:
                answer = self._from_wire(time.monotonic() + timeout)
            except StompClosed:
                # ActiveMQ refuses a login with an ERROR frame and closes the connection, and
                # now and then the close overtakes the frame: a refusal without its reason
                raise StompError(f"STOMP login as {login!r} refused: the broker closed the "
                                 "connection without saying why") from None
            if answer.command != "CONNECTED":
                raise StompError(f"STOMP login as {login!r} refused: {_describe(answer)}")
        except BaseException:
            self._sock.close()
            raise

    # ------------------------------------------------------------------------------ frames

    def _read_frame(self, deadline: float) -> StompFrame:
        """The next frame: one set aside while a receipt was awaited, or from the wire."""
        if self._pending:
            return self._pending.popleft()
        return self._from_wire(deadline)

    def _from_wire(self, deadline: float) -> StompFrame:
        while True:
            frame = self._reader.next_frame()
            if frame is not None:
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StompError("no STOMP frame from the broker in time")
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                raise StompError("no STOMP frame from the broker in time") from None
            if not data:
                raise StompClosed("the broker closed the STOMP connection")
            self._reader.feed(data)

    def _send_with_receipt(self, command: str, headers: dict[str, str],
                           body: bytes = b"") -> None:
        self._receipts += 1
        receipt = f"r{self._receipts}"
        self._sock.sendall(encode_frame(command, {**headers, "receipt": receipt}, body))
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._from_wire(deadline)
            if answer.command == "MESSAGE":
                self._pending.append(answer)
                continue
            if answer.command != "RECEIPT" or answer.headers.get("receipt-id") != receipt:
                raise StompError(f"STOMP {command} {headers.get('destination', '')}: expected "
                                 f"RECEIPT {receipt}, got {_describe(answer)}")
            return

    # ---------------------------------------------------------------------------- messages

    def send(self, queue: str, body: bytes, headers: Mapping[str, str] | None = None, *,
             persistent: bool = True) -> None:
        """Put a message into ``queue`` and wait for the broker's receipt (ActiveMQ sends it
        once a persistent message is in its store)."""
        hdrs = {"destination": f"/queue/{queue}", "persistent": str(persistent).lower()}
        hdrs.update(headers or {})
        self._send_with_receipt("SEND", hdrs, body)

    def subscribe(self, queue: str, subscription: str = "s", *, ack: str = "client-individual",
                  headers: Mapping[str, str] | None = None) -> None:
        """Subscribe to ``queue``; messages come from :meth:`receive`."""
        hdrs = {"destination": f"/queue/{queue}", "id": subscription, "ack": ack}
        hdrs.update(headers or {})
        self._send_with_receipt("SUBSCRIBE", hdrs)

    def unsubscribe(self, subscription: str = "s") -> None:
        """End a subscription; its messages not yet received go back to the queue."""
        self._send_with_receipt("UNSUBSCRIBE", {"id": subscription})
        self._pending = deque(f for f in self._pending
                              if f.headers.get("subscription") != subscription)

    def receive(self, timeout: float | None = None) -> StompFrame:
        """The next MESSAGE frame.

        :raises StompError: an ERROR frame, another frame, or none within ``timeout``
            seconds (the client's timeout by default).
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        frame = self._read_frame(deadline)
        if frame.command != "MESSAGE":
            raise StompError(f"expected a STOMP MESSAGE, got {_describe(frame)}")
        return frame

    def ack(self, message: StompFrame) -> None:
        """Acknowledge ``message`` (a ``client`` or ``client-individual`` subscription's)."""
        try:
            ack_id = message.headers["ack"]
        except KeyError:
            raise StompError(f"message without an ack header: {message.headers}") from None
        self._send_with_receipt("ACK", {"id": ack_id})

    def take(self, queue: str, count: int, timeout: float | None = None) -> list[StompFrame]:
        """Consume ``count`` messages from ``queue``, acknowledging each, then unsubscribe.

        :raises StompError: fewer came within ``timeout`` seconds (the client's by default).
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        taken: list[StompFrame] = []
        self.subscribe(queue, "take", headers={"activemq.prefetchSize": "1"})
        try:
            while len(taken) < count:
                remaining = deadline - time.monotonic()
                try:
                    message = self.receive(max(remaining, 0.0))
                except StompError as exc:
                    raise StompError(f"{queue}: took {len(taken)} of {count} messages: "
                                     f"{exc}") from exc
                self.ack(message)
                taken.append(message)
        finally:
            self.unsubscribe("take")
        return taken

    def browse_count(self, queue: str, timeout: float | None = None) -> int:
        """How many messages ``queue`` holds, ready or delivered and not yet acknowledged,
        counted with a queue browser; nothing is consumed. A queue that does not exist is
        created empty (and counts 0)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self.subscribe(queue, "browse", ack="auto", headers={"browser": "true"})
        count = 0
        while True:
            frame = self._read_frame(deadline)
            if frame.command != "MESSAGE" or frame.headers.get("subscription") != "browse":
                raise StompError(f"browsing {queue}: expected a MESSAGE of the browser, got "
                                 f"{_describe(frame)} (browse on a client without other "
                                 "subscriptions)")
            if frame.headers.get("browser") == "end":
                self.unsubscribe("browse")
                return count
            count += 1

    # ------------------------------------------------------------------------------- close

    def close(self) -> None:
        """Disconnect (waiting for the broker's receipt when it still answers) and close."""
        try:
            self._send_with_receipt("DISCONNECT", {})
        except (OSError, StompError):
            pass
        finally:
            self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _describe(frame: StompFrame) -> str:
    if frame.command == "ERROR":
        detail = frame.headers.get("message") or frame.body[:500].decode("utf-8", "replace")
        return f"ERROR {detail!r}"
    return f"{frame.command} {frame.headers}"
