"""A hostile AMQP 0-9-1 peer: just enough of a broker to bring a client to its consume or publish
path, then the frames a test crafts (standard library only).

:class:`HostilePeer` listens on a loopback port. Each connection gets the handshake a pika client
needs (connection.start with the capabilities pika checks, tune, open-ok), then answers
channel.open, confirm.select, basic.qos, queue.declare, exchange.declare, queue.bind,
basic.consume and basic.cancel, unless ``instead_of`` names the client's method: then it sends
those frames in place of the answer (none: it never answers, e.g. channel.open; a
:func:`connection_close`: it refuses, as a broker at a limit does). After ``basic.consume-ok``
it sends ``after_consume`` (a shovel source); after the first complete ``basic.publish`` it sends ``after_publish`` (a shovel
destination, or a :class:`pumpd.Publisher`). Either may be followed by ``flood`` bytes of zeros,
sent in 64 KiB writes until the client closes the connection: the "payload" an oversized frame
header announced. What the client sends back (its ``connection.close`` reply code and text) and
when the connection ended are recorded per connection in :attr:`HostilePeer.connections`.

The frame builders (:func:`frame`, :func:`method`, :func:`basic_deliver`, ...) write valid or
deliberately broken frames for those scripts; they check nothing.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "Connection",
    "Crafted",
    "HostilePeer",
    "basic_ack",
    "basic_deliver",
    "basic_return",
    "body",
    "connection_close",
    "connection_open_ok",
    "content_header",
    "frame",
    "longstr",
    "method",
    "shortstr",
]

FRAME_END = b"\xce"
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
# Crafted frames: bytes, or bytes made for the channel the client used.
Crafted = bytes | Callable[[int], bytes]


# -- frame builders ------------------------------------------------------------------------------


def frame(ftype: int, channel: int, payload: bytes, *, size: int | None = None,
          end: bytes = FRAME_END) -> bytes:
    """A frame; ``size`` overrides the size field (a lie), ``end`` the end octet."""
    n = len(payload) if size is None else size
    return struct.pack(">BHI", ftype, channel, n) + payload + end


def shortstr(value: bytes | str, *, length: int | None = None) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return bytes((len(data) if length is None else length,)) + data


def longstr(value: bytes | str, *, length: int | None = None) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return struct.pack(">I", len(data) if length is None else length) + data


def _table(entries: dict[str, bool | str | dict[str, bool]]) -> bytes:
    out = b""
    for key, value in entries.items():
        out += shortstr(key)
        if isinstance(value, bool):
            out += b"t" + bytes((int(value),))
        elif isinstance(value, str):
            out += b"S" + longstr(value)
        else:
            out += b"F" + _table(dict(value))
    return longstr(out)


def method(channel: int, class_id: int, method_id: int, arguments: bytes = b"") -> bytes:
    return frame(1, channel, struct.pack(">HH", class_id, method_id) + arguments)


def content_header(channel: int, body_size: int, properties: bytes = b"\x00\x00") -> bytes:
    return frame(2, channel, struct.pack(">HHQ", 60, 0, body_size) + properties)


def body(channel: int, data: bytes) -> bytes:
    return frame(3, channel, data)


def basic_deliver(channel: int, delivery_tag: int, *, consumer_tag: str = "ctag",
                  exchange: str = "", routing_key: str = "rk") -> bytes:
    return method(channel, 60, 60, shortstr(consumer_tag) + struct.pack(">QB", delivery_tag, 0)
                  + shortstr(exchange) + shortstr(routing_key))


def basic_return(channel: int, reply_code: int, reply_text: bytes, exchange: bytes,
                 routing_key: bytes) -> bytes:
    """``reply_text`` etc. are the encoded short strings (length octet first): a test may lie."""
    return method(channel, 60, 50, struct.pack(">H", reply_code) + reply_text + exchange
                  + routing_key)


def basic_ack(channel: int, delivery_tag: int, multiple: bool = False) -> bytes:
    return method(channel, 60, 80, struct.pack(">QB", delivery_tag, int(multiple)))


def connection_open_ok() -> bytes:
    return method(0, 10, 41, shortstr(""))


def connection_close(reply_code: int, reply_text: str, class_id: int = 0,
                     method_id: int = 0) -> bytes:
    """connection.close, as a broker sends it to refuse (``530``, ``"NOT_ALLOWED - ..."``)."""
    return method(0, 10, 50, struct.pack(">H", reply_code) + shortstr(reply_text)
                  + struct.pack(">HH", class_id, method_id))


# -- the server ----------------------------------------------------------------------------------


@dataclass
class Connection:
    """What one client connection did. Times are ``time.monotonic()``."""

    crafted_at: float | None = None  # the crafted frames' first byte was written
    ended_at: float | None = None  # end of stream or reset from the client
    close: tuple[int, str] | None = None  # the client's connection.close (reply code, text)
    flooded: int = 0  # flood bytes written
    methods: list[tuple[int, int]] = field(default_factory=list)  # (class, method) received


def _start_arguments() -> bytes:
    capabilities = {"publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True,
                    "connection.blocked": True, "authentication_failure_close": True,
                    "exchange_exchange_bindings": True, "per_consumer_qos": True}
    properties = _table({"product": "hostile-peer", "version": "0",
                         "capabilities": capabilities})
    return b"\x00\x09" + properties + longstr("PLAIN AMQPLAIN") + longstr("en_US")


class _Session:
    """One client connection: the handshake and the answers, read on one thread."""

    def __init__(self, peer: HostilePeer, sock: socket.socket) -> None:
        self.peer = peer
        self.sock = sock
        self.record = Connection()
        self.buf = b""
        self.lock = threading.Lock()
        self.content_left: int | None = None  # body bytes of the publish being received
        self.published = False

    def send(self, data: bytes) -> None:
        with self.lock:
            self.sock.sendall(data)

    def read_frame(self) -> tuple[int, int, bytes] | None:
        while True:
            if len(self.buf) >= 7:
                ftype, channel, size = struct.unpack_from(">BHI", self.buf)
                if len(self.buf) >= 8 + size:
                    payload = self.buf[7 : 7 + size]
                    self.buf = self.buf[8 + size :]
                    return ftype, channel, payload
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data

    def run(self) -> None:
        try:
            header = b""
            while len(header) < 8:
                data = self.sock.recv(8 - len(header))
                if not data:
                    return
                header += data
            if header != PROTOCOL_HEADER:
                self.send(PROTOCOL_HEADER)
                return
            if self.peer.instead_of_start is not None:
                self.craft(0, self.peer.instead_of_start)
            else:
                self.send(method(0, 10, 10, _start_arguments()))
            while (got := self.read_frame()) is not None:
                if not self.answer(*got):
                    break
        except OSError:
            pass
        finally:
            self.record.ended_at = time.monotonic()
            self.sock.close()

    def answer(self, ftype: int, channel: int, payload: bytes) -> bool:
        """Reply to one frame; False once the connection is over."""
        if ftype == 1 and len(payload) >= 4:
            class_id, method_id = struct.unpack_from(">HH", payload)
            self.record.methods.append((class_id, method_id))
            return self.answer_method(channel, class_id, method_id, payload[4:])
        if ftype == 2 and self.content_left is not None and len(payload) >= 12:
            self.content_left = struct.unpack_from(">Q", payload, 4)[0]
        elif ftype == 3 and self.content_left is not None:
            self.content_left -= len(payload)
        if self.content_left == 0:
            self.content_left = None
            if not self.published:
                self.published = True
                self.craft(channel, self.peer.after_publish)
        return True

    def answer_method(self, channel: int, class_id: int, method_id: int, args: bytes) -> bool:
        replies: dict[tuple[int, int], bytes] = {
            (10, 11): method(0, 10, 30, struct.pack(">HIH", 2047, self.peer.frame_max,
                                                    self.peer.heartbeat)),
            (10, 40): method(0, 10, 41, shortstr("")),
            (20, 10): method(channel, 20, 11, longstr("")),
            (20, 40): method(channel, 20, 41),
            (60, 10): method(channel, 60, 11),
            (40, 10): method(channel, 40, 11),
            (50, 20): method(channel, 50, 21),
        }
        key = (class_id, method_id)
        if key in self.peer.instead_of:
            self.craft(channel, self.peer.instead_of[key])
        elif key in replies:
            self.send(replies[key])
        elif key == (10, 50):  # connection.close: record why, answer, done
            code = struct.unpack_from(">H", args)[0] if len(args) >= 2 else 0
            text = args[3 : 3 + args[2]].decode("utf-8", "replace") if len(args) >= 3 else ""
            self.record.close = (code, text)
            self.send(method(0, 10, 51))
            return False
        elif key == (10, 51):
            return False
        elif key == (85, 10):  # confirm.select, unless nowait
            if not (args[:1] and args[0] & 1):
                self.send(method(channel, 85, 11))
        elif key == (50, 10):  # queue.declare: the name asked for, empty
            name = args[3 : 3 + args[2]] if len(args) >= 3 else b""
            self.send(method(channel, 50, 11, shortstr(name or b"amq.gen-hostile")
                             + struct.pack(">II", 0, 0)))
        elif key == (60, 20):  # basic.consume: its tag back, then the crafted frames
            pos = 2 + 1 + args[2]
            tag = args[pos + 1 : pos + 1 + args[pos]] or b"amq.ctag-hostile"
            self.send(method(channel, 60, 21, shortstr(tag)))
            self.craft(channel, self.peer.after_consume)
        elif key == (60, 30):  # basic.cancel
            self.send(method(channel, 60, 31, args[: 1 + args[0]] if args else shortstr("")))
        elif key == (60, 40):  # basic.publish: its content follows
            self.content_left = -1
        return True

    def craft(self, channel: int, crafted: Crafted) -> None:
        data = crafted(channel) if callable(crafted) else crafted
        if not data and not self.peer.flood:
            return
        self.record.crafted_at = time.monotonic()
        self.send(data)
        if self.peer.flood:
            threading.Thread(target=self.flood, daemon=True).start()

    def flood(self) -> None:
        chunk = bytes(65536)
        try:
            while self.record.flooded < self.peer.flood and self.record.ended_at is None:
                self.send(chunk)
                self.record.flooded += len(chunk)
        except OSError:
            pass


class HostilePeer:
    """See the module docstring. Use as a context manager, or :meth:`start` / :meth:`stop`.

    :param after_consume: frames sent after basic.consume-ok
    :param after_publish: frames sent after the first complete basic.publish
    :param flood: zero bytes sent after the crafted frames (64 KiB at a time) until the client
        closes the connection or this many were sent
    :param instead_of_start: frames sent instead of connection.start (then ``flood``)
    :param frame_max: the frame_max proposed in connection.tune
    :param heartbeat: the heartbeat proposed in connection.tune (0: none)
    :param instead_of: for a client's method ``(class_id, method_id)`` (``(20, 10)``
        channel.open, ``(10, 40)`` connection.open, ...), the frames sent instead of its
        answer; ``b""`` sends nothing
    """

    def __init__(self, *, after_consume: Crafted = b"", after_publish: Crafted = b"",
                 flood: int = 0, instead_of_start: Crafted | None = None,
                 frame_max: int = 131072, heartbeat: int = 0,
                 instead_of: Mapping[tuple[int, int], Crafted] | None = None) -> None:
        self.instead_of_start = instead_of_start
        self.instead_of = dict(instead_of or {})
        self.after_consume = after_consume
        self.after_publish = after_publish
        self.flood = flood
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self.connections: list[Connection] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # accept() wakes up to see stop()
        self.port: int = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self._sessions: list[_Session] = []
        self._thread = threading.Thread(target=self._accept, name="hostile-peer", daemon=True)

    def uri(self, vhost: str = "%2F") -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/{vhost}"

    def start(self) -> HostilePeer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        self._listener.close()
        for session in self._sessions:
            try:
                session.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> HostilePeer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def wait_for(self, predicate: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"hostile peer: timed out waiting for {what}; connections: "
                                   f"{self.connections}")
            time.sleep(0.02)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                sock, _addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(None)
            session = _Session(self, sock)
            self._sessions.append(session)
            self.connections.append(session.record)
            threading.Thread(target=session.run, name="hostile-peer-conn", daemon=True).start()
