"""pumpd's asyncio AMQP 1.0 client connection: TCP or TLS, the protocol headers, SASL, open,
idle time-outs, sessions (:mod:`pumpd.amqp10.session`) and links (:mod:`pumpd.amqp10.link`).

:func:`connect` returns an open :class:`Connection`. Every step waits at most ``step_timeout``
and fails with an :class:`~pumpd.amqp10.errors.Amqp10Error` that names it ("connect", "tls",
"sasl", "open", "begin", "attach ADDRESS", ...). Once open, :attr:`Connection.closed` is done,
with such an error, when the connection ends for any reason: the peer closed it, ended a
session or detached a link unasked (one failure ends the connection: pumpd's endpoints use one
session and one link per connection), broke the protocol (the connection is closed with
amqp:connection:framing-error, amqp:not-allowed or a session or link error, naming what the
peer did), or was silent beyond our idle-time-out (amqp:resource-limit-exceeded). A step
without an answer within ``step_timeout`` ends the connection too: a late answer could not be
told from a lie.

Writes are batched: frames are appended to one buffer and written once per event loop
iteration in one ``transport.write``; a sender's transfer frames are written by the data
plane's transfer writer and taken ahead of the next frame written after them; credit for
receivers is granted in the same flush. Reads go straight from ``data_received`` to the links'
callbacks, with no task per frame: the data plane's frame scanner takes whole deliveries and
dispositions of the first session out of the bytes (see :meth:`Connection._on_frame_bytes`
for how the wire's order is kept), every other frame goes through the Python codec. Flow control toward the caller: :meth:`Connection.pause_reading` (by reason)
and :meth:`Connection.on_write_pressure`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl as ssl_module
import struct
from collections.abc import Callable
from typing import Any

from ..dataplane.amqp10_frames_ref import PROTOCOL_HEADER
from ..dataplane.amqp10_frames_ref import FramingError as ScanError
from ..dataplane.api import FrameScanner, TransferWriter
from ..dataplane.implementation import FrameScanner as FrameScannerImpl
from ..dataplane.read_holds import ReadHolds
from .codec import DecodeError
from .errors import (
    DECODE_ERROR,
    FRAMING_ERROR,
    MESSAGE_SIZE_EXCEEDED,
    NOT_ALLOWED,
    RESOURCE_LIMIT_EXCEEDED,
    Amqp10Error,
    PeerViolation,
)
from .framing import (
    AMQP_HEADER,
    HEARTBEAT,
    MIN_MAX_FRAME_SIZE,
    SASL_HEADER,
    TYPE_AMQP,
    TYPE_SASL,
    Frame,
    FrameReader,
    FramingError,
    encode_frame,
)
from .link import DEFAULT_MAX_MESSAGE_SIZE
from .performatives import (
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Open,
    Transfer,
    decode_performative,
    decode_transfer_fields,
    encode_performative,
)
from .sasl import SaslExchange
from .serials import MASK
from .session import DEFAULT_HANDLE_MAX, DEFAULT_INCOMING_WINDOW, Session, TransferEvent
from .values import Symbol, UInt, UShort

__all__ = ["DEFAULT_CHANNEL_MAX", "DEFAULT_MAX_FRAME_SIZE", "Connection", "connect"]

log = logging.getLogger("pumpd.amqp10")

#: our max-frame-size unless told otherwise (the peer's frames larger than it are refused at
#: their header)
DEFAULT_MAX_FRAME_SIZE = 256 * 1024
#: the highest channel (session) number we accept
DEFAULT_CHANNEL_MAX = 255

# where the byte stream is: the protocol headers, SASL frames, AMQP frames, or over
_SASL_HEADER, _SASL, _AMQP_HEADER, _FRAMES, _DONE = range(5)

_FRAME_HEAD = struct.Struct(">IBBH")
# a protocol header ("AMQP" and its version) read as a frame header's size
_PROTOCOL_HEADER_SIZE = int.from_bytes(b"AMQP", "big")
# the descriptor codes the scanner takes out (transfer, disposition); a symbolic descriptor
# ends a run like any other frame, and the scanner still takes it out
_SCANNED = (0x14, 0x15)
_ALL = 1 << 62  # take_transfers: every one
# the scanner's faults (pumpd.dataplane.amqp10_frames_ref: field_error's texts) that are the
# peer breaking the rules of deliveries rather than of encoding
_NOT_ALLOWED_FAULTS = ("missing on handle", " continues delivery ", " is unfinished",
                       "delivery-tag of ")

# performatives a session handles, by type: the method of Session
_SESSION_FRAMES: dict[type, str] = {
    Flow: "on_flow", Disposition: "on_disposition", Attach: "on_attach", Detach: "on_detach",
}


async def connect(*, host: str, port: int, ssl: ssl_module.SSLContext | None = None,
                  sasl: str = "anonymous", username: str | None = None,
                  password: str | None = None, hostname: str | None = None,
                  container_id: str, idle_time_out: float | None = 60.0,
                  max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, step_timeout: float = 30.0,
                  properties: dict[Any, Any] | None = None,
                  channel_max: int = DEFAULT_CHANNEL_MAX) -> Connection:
    """Connect, authenticate and open; returns the open :class:`Connection`.

    :param ssl: TLS with this context (the server's name checked against ``host``), else TCP
    :param sasl: "anonymous", "plain" (``username`` and ``password``, empty authorization
        identity), "external" (the TLS client certificate), or "none" (no SASL layer)
    :param hostname: open's hostname: the virtual host (RabbitMQ 3.x: "vhost:NAME")
    :param container_id: our container-id
    :param idle_time_out: seconds: the peer is to send something at least this often (a peer
        silent for longer is given up: amqp:resource-limit-exceeded); None: no limit
    :param max_frame_size: the largest frame we accept (at least 512)
    :param step_timeout: seconds each step (and each later begin, attach, detach, close) waits
    :param properties: open's connection properties (keys become symbols)
    :param channel_max: the highest channel number the peer may use
    :raises Amqp10Error: a step failed (``step`` says which)
    :raises ValueError: a bad argument
    """
    if not MIN_MAX_FRAME_SIZE <= max_frame_size <= MASK:
        raise ValueError(f"max_frame_size {max_frame_size}: expected {MIN_MAX_FRAME_SIZE} .. "
                         f"{MASK}")
    if idle_time_out is not None and not 0.001 <= idle_time_out <= MASK / 1000:
        raise ValueError(f"idle_time_out {idle_time_out}: expected seconds from 0.001 to "
                         f"{MASK / 1000:g}, or None")
    if not step_timeout > 0:
        raise ValueError(f"step_timeout {step_timeout}: expected seconds above 0")
    if not 0 <= channel_max <= 0xFFFF:
        raise ValueError(f"channel_max {channel_max}: expected 0 .. 65535")
    peer = f"{host}:{port}"
    exchange = None if sasl == "none" else SaslExchange(sasl, username, password, host, peer)
    conn = Connection(peer=peer, sasl=exchange, container_id=container_id, hostname=hostname,
                      idle_time_out=idle_time_out, max_frame_size=max_frame_size,
                      step_timeout=step_timeout, properties=properties, channel_max=channel_max)
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.create_connection(
            lambda: conn, host, port, ssl=ssl, server_hostname=host if ssl else None),
            step_timeout)
    except asyncio.TimeoutError:
        step = "connect" if ssl is None else "connect and TLS handshake"
        raise Amqp10Error("connect", f"no connection within {step_timeout:g}s ({step})",
                          peer=peer) from None
    except ssl_module.SSLError as exc:
        raise Amqp10Error("tls", f"the TLS handshake failed: {exc}", peer=peer) from None
    except OSError as exc:
        raise Amqp10Error("connect", _describe(exc), peer=peer) from None
    try:
        await conn.handshake()
    except BaseException:
        conn.abort()
        raise
    return conn


class Connection(asyncio.Protocol):
    """One AMQP 1.0 connection (made by :func:`connect`); see the module docstring.

    :attr:`closed` is done, with an :class:`~pumpd.amqp10.errors.Amqp10Error`, once the
    connection ended, whoever ended it.
    """

    def __init__(self, *, peer: str, sasl: SaslExchange | None, container_id: str,
                 hostname: str | None, idle_time_out: float | None, max_frame_size: int,
                 step_timeout: float, properties: dict[Any, Any] | None,
                 channel_max: int) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        #: host:port
        self.peer = peer
        self.closed: asyncio.Future[BaseException] = loop.create_future()
        self._sasl = sasl
        self._container_id = container_id
        self._hostname = hostname
        self._idle_time_out = idle_time_out
        self.max_frame_size = max_frame_size
        self._step_timeout = step_timeout
        self._properties = properties
        self._channel_max = channel_max
        self._transport: Any = None  # asyncio.Transport, or uvloop's TCPTransport
        self._phase = _SASL_HEADER if sasl is not None else _AMQP_HEADER
        self._buffer = bytearray()  # handshake bytes not yet used
        self._sasl_reader = FrameReader(max_frame_size)
        # the frames after the handshake: one session's transfers and dispositions read by the
        # data plane's scanner (the first session the peer begins; until then channel 0), the
        # rest by the codec; _carry holds the start of a frame not yet whole
        self._scanner: FrameScanner = FrameScannerImpl(max_frame_size, 0,
                                                       DEFAULT_MAX_MESSAGE_SIZE)
        self._carry = b""
        self._sasl_done: asyncio.Future[None] = loop.create_future()
        self._opened: asyncio.Future[Open] = loop.create_future()
        self._open_sent = False
        self._close_answer: asyncio.Future[Close] | None = None
        #: the peer's open, once it came
        self.remote_open: Open | None = None
        self._remote_max_frame = MIN_MAX_FRAME_SIZE
        self._remote_channel_max = 0xFFFF
        # writing: one buffer, flushed once per loop iteration
        self._out: list[bytes] = []
        self._writer: TransferWriter | None = None  # transfers to take before the next write
        self._flush_scheduled = False
        self._flush_sessions: list[Session] = []
        self._muted = False  # after our close: nothing more is written
        self._wrote = False  # since the last heartbeat tick
        # reading
        self._heard = False  # since the last idle tick
        self._silent_ticks = 0
        self._read_holds = ReadHolds()
        self._on_write_pressure: Callable[[bool], None] | None = None
        self._timers: list[asyncio.TimerHandle] = []
        # sessions: by our channel, by the peer's
        self._sessions: dict[int, Session] = {}
        self._remote_sessions: dict[int, Session] = {}
        self._steps: list[str] = []

    # -- state ------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return (self._phase == _FRAMES and self.remote_open is not None
                and self._close_answer is None and not self.closed.done())

    @property
    def idle_time_out(self) -> float:
        """The peer's idle-time-out in seconds (0: none): it may give up on us after twice as
        long without a frame; we send one at least every half of it."""
        remote = self.remote_open
        if remote is None or remote.idle_time_out is None:
            return 0.0
        return int(remote.idle_time_out) / 1000

    @property
    def remote_max_frame_size(self) -> int:
        """The largest frame the peer accepts."""
        return self._remote_max_frame

    # -- the handshake ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if self._sasl is not None:
            transport.write(SASL_HEADER)  # type: ignore[attr-defined]
        else:
            self._send_open()

    def _send_open(self) -> None:
        idle = self._idle_time_out
        open_ = Open(container_id=self._container_id, hostname=self._hostname,
                     max_frame_size=UInt(self.max_frame_size),
                     channel_max=UShort(self._channel_max),
                     idle_time_out=None if idle is None else UInt(round(idle * 1000)),
                     properties=self._properties)
        self._open_sent = True
        self._transport.write(AMQP_HEADER + encode_frame(0, encode_performative(open_)))

    async def handshake(self) -> None:
        """Wait for the SASL outcome (when there is a SASL layer) and the peer's open."""
        if self._sasl is not None:
            await self.await_step("sasl", self._sasl_done, self.closed)
        await self.await_step("open", self._opened, self.closed)

    def _on_handshake_bytes(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        while True:
            phase = self._phase
            if phase in (_SASL_HEADER, _AMQP_HEADER):
                if len(buf) < 8:
                    return
                header = bytes(buf[:8])
                del buf[:8]
                self._check_header(header)
                if phase == _SASL_HEADER:
                    self._phase = _SASL
                    continue
                self._phase = _FRAMES
                rest = bytes(buf)
                buf.clear()
                if rest:
                    self._on_frame_bytes(rest)
                return
            if phase != _SASL:
                return
            # one SASL frame at a time: what follows the outcome is the AMQP header
            if len(buf) < 4:
                return
            size = int.from_bytes(buf[:4], "big")
            if not 8 <= size <= self.max_frame_size:
                raise Amqp10Error("sasl", f"a SASL frame of {size} bytes (expected 8 .. "
                                  f"{self.max_frame_size})", peer=self.peer)
            if len(buf) < size:
                return
            frames = self._sasl_reader.feed(bytes(buf[:size]))
            del buf[:size]
            for frame in frames:
                self._on_sasl_frame(frame)

    def _check_header(self, header: bytes) -> None:
        sasl = self._phase == _SASL_HEADER
        expected = SASL_HEADER if sasl else AMQP_HEADER
        if header == expected:
            return
        step = "sasl" if sasl else "open"
        if header == AMQP_HEADER:
            what = "the peer has no SASL layer (it answered with the AMQP header): use sasl none"
        elif header == SASL_HEADER:
            what = "the peer requires SASL (it answered with the SASL header)"
        elif header.startswith(b"AMQP"):
            what = (f"the peer does not speak AMQP 1.0: it answered with protocol header "
                    f"{header!r} (AMQP {'-'.join(str(b) for b in header[5:])})")
        else:
            what = f"the peer is not an AMQP peer: it answered {header!r}"
        raise Amqp10Error(step, what, peer=self.peer)

    def _on_sasl_frame(self, frame: Frame) -> None:
        if frame.type != TYPE_SASL:
            raise Amqp10Error("sasl", f"a frame of type {frame.type} during the SASL exchange",
                              peer=self.peer)
        if not frame.body:
            return
        assert self._sasl is not None
        performative, _ = decode_performative(frame.body)
        reply = self._sasl.on_frame(performative)
        if reply is not None:
            self._transport.write(encode_frame(0, encode_performative(reply), type=TYPE_SASL))
        if self._sasl.done:
            self._phase = _AMQP_HEADER
            self._send_open()
            self._sasl_done.set_result(None)

    # -- reading ----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._heard = True
        if self._phase == _FRAMES:
            self._on_frame_bytes(data)
        elif self._phase != _DONE:
            try:
                self._on_handshake_bytes(data)
            except Amqp10Error as exc:
                self._finish(exc)
            except (FramingError, DecodeError) as exc:
                self._finish(Amqp10Error("sasl", f"a malformed SASL frame: {exc}",
                                         peer=self.peer))

    def _on_frame_bytes(self, data: bytes) -> None:
        """Cut the bytes read into runs of frames that each end at the first frame that may be
        neither a transfer nor a disposition of the scanned session, and scan run by run.

        The scanner hands out its transfers, dispositions and other frames as three lists, each
        in order but with no order across them; within a run every frame but the last is a
        transfer or a disposition, so handling the run's transfers, then its dispositions, then
        its last frame keeps the wire's order wherever it matters (a disposition from the peer
        only ever names deliveries transferred before it, and the peer's dispositions of our
        own deliveries do not depend on its transfers). Only whole frames are fed; a frame's
        header is judged as soon as it is here (a bad one is fed at once: the scanner names
        the fault), so no more than one frame of the peer's bytes is held.
        """
        buf = self._carry + data if self._carry else data
        n = len(buf)
        pos = start = 0
        channel = self._scanner.channel
        maximum = self.max_frame_size
        unpack = _FRAME_HEAD.unpack_from
        while n - pos >= 8:
            size, doff, ftype, ch = unpack(buf, pos)
            if (size > maximum or size < 8 or doff < 2 or doff * 4 > size
                    or size == _PROTOCOL_HEADER_SIZE):
                # a protocol header or a header the scanner refuses: it says what is wrong
                self._carry = b""
                self._scan(buf[start:])
                return
            end = pos + size
            if end > n:
                break
            body = pos + doff * 4
            pos = end
            if (ftype == TYPE_AMQP and ch == channel and end - body > 3 and buf[body] == 0
                    and buf[body + 1] == 0x53 and buf[body + 2] in _SCANNED):
                continue
            if not self._scan(buf[start:pos]):
                return
            start = pos
            channel = self._scanner.channel  # a begin may have moved the scanner
        if pos > start and not self._scan(buf[start:pos]):
            return
        self._carry = buf[pos:]

    def _scan(self, frames: bytes) -> bool:
        """Scan whole ``frames`` and handle them; False once the connection is over."""
        scanner = self._scanner
        session = self._remote_sessions.get(scanner.channel)
        bound = DEFAULT_MAX_MESSAGE_SIZE if session is None else session.receive_bound
        if scanner.max_message_size != bound:
            scanner.max_message_size = bound
        counted = scanner.transfer_frames
        aborted = scanner.aborted
        try:
            scanner.feed(frames)
        except ScanError as exc:
            description = str(exc)
            self._violated(_scan_fault(description), description)
            return False
        transfer_frames = scanner.transfer_frames - counted
        transfers = scanner.take_transfers(_ALL) if scanner.pending else []
        dispositions = scanner.take_dispositions()
        others = scanner.take_other()
        try:
            if (transfer_frames or dispositions) and self._close_answer is None:
                if session is None:
                    what = "transfer" if transfer_frames else "disposition"
                    raise PeerViolation(NOT_ALLOWED, f"{what} on channel {scanner.channel}, "
                                                     "which no session has begun")
                if transfer_frames:
                    events = None
                    if scanner.aborted != aborted:
                        events = _transfer_events(frames, scanner.channel)
                    session.on_transfers(transfer_frames, transfers, events)
                if dispositions:
                    session.on_dispositions(dispositions)
            for ftype, channel, body in others:
                if self._phase != _FRAMES:
                    return False
                if not body:
                    continue  # a heartbeat
                if ftype != TYPE_AMQP:
                    what = ("a protocol header" if ftype == PROTOCOL_HEADER
                            else f"a frame of type {ftype}")
                    raise PeerViolation(FRAMING_ERROR, f"{what} after the SASL exchange")
                try:
                    if len(body) > 3 and body[2] == 0x14 and body[1] == 0x53 and body[0] == 0:
                        performative, pos = decode_transfer_fields(body)  # another session's
                    else:
                        performative, pos = decode_performative(body)
                except DecodeError as exc:
                    raise PeerViolation(DECODE_ERROR, str(exc)) from None
                self._on_performative(channel, performative, body, pos)
        except PeerViolation as exc:
            self._violated(exc.condition, exc.description)
        except Exception as exc:  # ours or a callback's: the stream cannot be trusted now
            log.exception("AMQP 1.0 %s: failed on a frame from the peer", self.peer)
            self._finish(Amqp10Error(self.step_or("connection"),
                                     f"the client failed on a frame from the peer: {exc!r}",
                                     peer=self.peer), abort=True)
        return self._phase == _FRAMES

    def _on_performative(self, channel: int, performative: Any, body: bytes, pos: int) -> None:
        kind = type(performative)
        if self._close_answer is not None:  # closing: only the peer's close matters
            if kind is Close:
                self._on_close(performative)
            return
        if kind is Transfer:
            session = self._remote_sessions.get(channel)
            if session is None:
                raise self._no_session(channel, performative)
            session.on_transfer(performative, body, pos)
            return
        if self.remote_open is None:
            if kind is Open:
                self._on_open(channel, performative)
            elif kind is Close:
                self._on_close(performative)
            else:
                raise PeerViolation(NOT_ALLOWED, f"{kind.__name__.lower()} before open")
            return
        method = _SESSION_FRAMES.get(kind)
        if method is not None:
            session = self._remote_sessions.get(channel)
            if session is None:
                raise self._no_session(channel, performative)
            getattr(session, method)(performative)
        elif kind is Begin:
            self._on_begin(channel, performative)
        elif kind is End:
            session = self._remote_sessions.pop(channel, None)
            if session is None:
                raise self._no_session(channel, performative)
            if self._sessions.get(session.channel) is session:
                del self._sessions[session.channel]
            session.on_end(performative)
        elif kind is Close:
            self._on_close(performative)
        else:
            raise PeerViolation(NOT_ALLOWED, f"{kind.__name__.lower()} on channel {channel} "
                                             "of an open connection")

    def _no_session(self, channel: int, performative: Any) -> PeerViolation:
        return PeerViolation(NOT_ALLOWED, f"{type(performative).__name__.lower()} on channel "
                                          f"{channel}, which no session has begun")

    def _on_open(self, channel: int, open_: Open) -> None:
        if channel != 0:
            raise PeerViolation(NOT_ALLOWED, f"open on channel {channel} (expected 0)")
        size = MASK if open_.max_frame_size is None else int(open_.max_frame_size)
        if size < MIN_MAX_FRAME_SIZE:
            raise PeerViolation(NOT_ALLOWED, f"open with max-frame-size {size} (at least "
                                             f"{MIN_MAX_FRAME_SIZE})")
        self.remote_open = open_
        self._remote_max_frame = size
        if open_.channel_max is not None:
            self._remote_channel_max = int(open_.channel_max)
        self._start_timers()
        self._opened.set_result(open_)

    def _on_begin(self, channel: int, begin: Begin) -> None:
        if begin.remote_channel is None:
            raise PeerViolation(NOT_ALLOWED, f"begin on channel {channel} from the peer "
                                             "(sessions from the peer are not accepted)")
        session = self._sessions.get(int(begin.remote_channel))
        if session is None or session.remote_channel is not None:
            raise PeerViolation(NOT_ALLOWED, f"begin answering channel {int(begin.remote_channel)}"
                                             ", which we have not begun")
        if channel in self._remote_sessions or channel > self._channel_max:
            raise PeerViolation(NOT_ALLOWED, f"begin on channel {channel}, which is in use or "
                                             f"above our channel-max {self._channel_max}")
        if self._scanner.channel not in self._remote_sessions:
            # the first session (or the scanned one ended): scan this one's frames. The
            # scanner holds nothing here: begin ended the run it was fed
            self._scanner = FrameScannerImpl(self.max_frame_size, channel,
                                             DEFAULT_MAX_MESSAGE_SIZE)
        self._remote_sessions[channel] = session
        session.on_begin(channel, begin)

    def _on_close(self, close: Close) -> None:
        if self._close_answer is not None:
            if not self._close_answer.done():
                self._close_answer.set_result(close)
            return
        self.write(encode_frame(0, encode_performative(Close())))
        err = close.error
        self._finish(Amqp10Error(self.step_or("connection"), "the peer closed the connection",
                                 condition=None if err is None else str(err.condition),
                                 description=None if err is None or err.description is None
                                 else str(err.description), peer=self.peer))

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost says so

    def connection_lost(self, exc: Exception | None) -> None:
        what = ("the connection was lost" if exc is None
                else f"the connection was lost: {exc.strerror or exc!s}"
                if isinstance(exc, OSError) else f"the connection was lost: {exc!r}")
        if exc is None and self._phase != _DONE:
            what = "the peer closed the TCP connection"
        self._finish(Amqp10Error(self.step_or("connection"), what, peer=self.peer))
        self._transport = None

    # -- writing ----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue ``data`` (whole frames) for the next flush."""
        if self._muted:
            return
        writer = self._writer
        if writer is not None:
            self._writer = None
            if writer.buffered:
                self._out.append(writer.take())
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def write_from(self, writer: TransferWriter) -> None:
        """Queue the transfer frames ``writer`` holds, and those it will hold until the next
        write or flush, ahead of whatever is written after them (one take per run of
        transfers: the wire's order is the order of the calls)."""
        if self._muted:
            writer.take()
            return
        held = self._writer
        if held is not writer:
            if held is not None and held.buffered:
                self._out.append(held.take())
            self._writer = writer
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def wants_flush(self, session: Session) -> None:
        self._flush_sessions.append(session)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        sessions, self._flush_sessions = self._flush_sessions, []
        for session in sessions:
            session.before_flush()
        self._flush_scheduled = False
        writer = self._writer
        if writer is not None:
            self._writer = None
            if writer.buffered:
                self._out.append(writer.take())
        out = self._out
        if not out:
            return
        self._out = []
        t = self._transport
        if t is None or t.is_closing() or self._muted:
            return
        t.write(out[0] if len(out) == 1 else b"".join(out))
        self._wrote = True

    def pause_writing(self) -> None:
        if self._on_write_pressure is not None:
            self._on_write_pressure(True)

    def resume_writing(self) -> None:
        if self._on_write_pressure is not None:
            self._on_write_pressure(False)

    # -- flow control toward the caller ----------------------------------------------------

    def on_write_pressure(self, callback: Callable[[bool], None], high_water: int) -> None:
        """``callback(True)`` when more than ``high_water`` bytes wait to be sent on this
        connection, ``callback(False)`` once they drained below a quarter of it."""
        self._on_write_pressure = callback
        t = self._transport
        if t is not None and not t.is_closing():
            t.set_write_buffer_limits(high=high_water, low=high_water // 4)

    def pause_reading(self, paused: bool, reason: str = "write-pressure") -> None:
        """Stop reading this connection for ``reason`` (``paused``), or drop that reason; the
        transport reads again once no reason is left. Our idle-time-out does not count while
        reading is paused."""
        if self._read_holds.hold(self._transport, paused, reason):
            self._silent_ticks = 0

    @property
    def reading_paused(self) -> bool:
        return bool(self._read_holds)

    # -- idle time-outs ---------------------------------------------------------------------

    def _start_timers(self) -> None:
        interval = self.idle_time_out / 2
        if interval > 0:
            self._timers.append(self._loop.call_later(interval, self._heartbeat, interval))
        if self._idle_time_out is not None:
            tick = self._idle_time_out / 4
            self._timers.append(self._loop.call_later(tick, self._idle_tick, tick))

    def _heartbeat(self, interval: float) -> None:
        """Every half of the peer's idle-time-out: an empty frame, unless we wrote meanwhile."""
        if self._phase == _DONE:
            return
        if not self._wrote and self._transport is not None and not self._muted:
            self._transport.write(HEARTBEAT)
        self._wrote = False
        self._timers.append(self._loop.call_later(interval, self._heartbeat, interval))
        del self._timers[:-2]

    def _idle_tick(self, tick: float) -> None:
        """Four times per idle-time-out: a peer silent for four ticks in a row is given up."""
        if self._phase == _DONE:
            return
        if self._heard or self._read_holds:
            self._heard = False
            self._silent_ticks = 0
        else:
            self._silent_ticks += 1
            if self._silent_ticks >= 4:
                self._close_with(RESOURCE_LIMIT_EXCEEDED,
                                 f"no frame from the peer for {self._idle_time_out:g}s, our "
                                 "idle-time-out", "the peer was silent for too long")
                return
        self._timers.append(self._loop.call_later(tick, self._idle_tick, tick))
        del self._timers[:-2]

    # -- sessions ---------------------------------------------------------------------------

    async def begin(self, *, incoming_window: int = DEFAULT_INCOMING_WINDOW,
                    handle_max: int = DEFAULT_HANDLE_MAX) -> Session:
        """Begin a session (step "begin").

        :param incoming_window: transfer frames the peer may send before we reopen the window
        :param handle_max: the highest link handle the peer may use
        :raises Amqp10Error: refused, timed out, or the connection ended
        """
        if not self.is_open:
            raise self._not_open("begin")
        limit = min(self._channel_max, self._remote_channel_max)
        channel = next((c for c in range(limit + 1) if c not in self._sessions), None)
        if channel is None:
            raise ValueError(f"no free channel on this connection (channel-max {limit})")
        session = Session(self, channel, incoming_window=incoming_window, handle_max=handle_max)
        self._sessions[channel] = session
        try:
            await session.begin()
        except BaseException:
            if self._sessions.get(channel) is session:
                del self._sessions[channel]
            raise
        return session

    def _not_open(self, step: str) -> Amqp10Error:
        if self.closed.done():
            cause = self.closed.result()
            if isinstance(cause, Amqp10Error):
                return cause.at(step)
        return Amqp10Error(step, "the connection is not open", peer=self.peer)

    def fail(self, error: Amqp10Error) -> None:
        """A session or link ended unasked: close the connection (politely: the fault is not a
        protocol violation) with ``error`` as the reason."""
        if self._phase == _DONE:
            return
        self.write(encode_frame(0, encode_performative(Close())))
        self._finish(error)

    # -- steps ------------------------------------------------------------------------------

    async def await_step(self, step: str, answer: asyncio.Future[Any],
                         ender: asyncio.Future[BaseException]) -> Any:
        """``answer``'s result; or the error that ``ender`` (the connection's, a session's or a
        link's ``closed``) got first, seen from ``step``. No answer within the step timeout
        ends the connection: the peer is not answering, or its answer would come too late.

        :raises Amqp10Error: step ``step``
        """
        self._steps.append(step)
        try:
            done, _ = await asyncio.wait({answer, ender}, timeout=self._step_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._steps.remove(step)
        if answer in done:
            return answer.result()
        if not done:
            error = Amqp10Error(step, f"no answer from the peer within {self._step_timeout:g}s",
                                peer=self.peer)
            self._finish(error, abort=True)
            raise error
        cause = ender.result()
        if isinstance(cause, Amqp10Error):
            raise cause.at(step)
        raise Amqp10Error(step, str(cause), peer=self.peer)

    def step_or(self, default: str) -> str:
        return self._steps[-1] if self._steps else default

    # -- the end ----------------------------------------------------------------------------

    async def close(self, error: Error | None = None) -> None:
        """Close the connection (with ``error``, when closing on a fault) and wait for the
        peer's close, at most the step timeout. Never raises for the peer's sake."""
        if self._phase == _DONE:
            return
        if self._close_answer is not None:
            await asyncio.wait({self.closed}, timeout=self._step_timeout)
            return
        self._close_answer = self._loop.create_future()
        self.write(encode_frame(0, encode_performative(Close(error=error))))
        self._flush()
        self._muted = True
        try:
            waits: set[asyncio.Future[Any]] = {self._close_answer, self.closed}
            await asyncio.wait(waits, timeout=self._step_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._finish(Amqp10Error("close", "closed by the client", peer=self.peer))

    def abort(self) -> None:
        """Drop the connection at once (no close frame)."""
        self._finish(Amqp10Error(self.step_or("connection"), "aborted by the client",
                                 peer=self.peer), abort=True)

    def _violated(self, condition: str, description: str) -> None:
        """The peer broke the protocol: close with ``condition`` and ``description``."""
        self._close_with(condition, description, "the peer broke the protocol")

    def _close_with(self, condition: str, description: str, what: str) -> None:
        if self._phase == _DONE:
            return
        if self._open_sent and not self._muted:
            self.write(encode_frame(0, encode_performative(
                Close(error=Error(condition=Symbol(condition), description=description)))))
        self._finish(Amqp10Error(self.step_or("connection"), what, condition=condition,
                                 description=description, peer=self.peer))

    def _finish(self, error: Amqp10Error, *, abort: bool = False) -> None:
        """The connection is over: ``closed`` says why; what is queued (a close) is written,
        then the transport closed (or dropped: ``abort``, or one second later)."""
        if self._phase == _DONE:
            return
        self._phase = _DONE
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if not self.closed.done():
            self.closed.set_result(error)
        for session in list(self._sessions.values()):
            session.end_all(error)
        if not abort:
            self._flush()
        self._muted = True
        t = self._transport
        if t is None:
            return
        if abort:
            t.abort()
        elif not t.is_closing():
            t.close()
            self._loop.call_later(1.0, t.abort)


def _describe(exc: OSError) -> str:
    """An OS error in words (asyncio's own text for a refused connect names no reason)."""
    if exc.errno is not None and exc.errno > 0:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc) or type(exc).__name__


def _scan_fault(description: str) -> str:
    """The condition to close with for a fault the frame scanner raised, by what it says: a
    frame header is a framing error, a message over our bound exceeds the message size, a
    delivery continued or begun against the rules is not allowed, and any other fault of a
    transfer's or a disposition's fields is a decode error."""
    if not description.startswith(("transfer on channel ", "disposition on channel ")):
        return FRAMING_ERROR
    if "over max-message-size" in description:
        return MESSAGE_SIZE_EXCEEDED
    if any(fault in description for fault in _NOT_ALLOWED_FAULTS):
        return NOT_ALLOWED
    return DECODE_ERROR


def _transfer_events(frames: bytes, channel: int) -> list[TransferEvent]:
    """The ends of the deliveries in ``frames`` (whole frames the scanner took), in order:
    None for a delivery completed (the scanner's next transfer), (handle, delivery-id or None)
    for one the peer aborted. Only read when the scanner counted an abort: it drops an aborted
    delivery without saying whose it was, and its link's credit and the delivery-ids count
    it."""
    events: list[TransferEvent] = []
    pos, n = 0, len(frames)
    while n - pos >= 8:
        size, doff, ftype, ch = _FRAME_HEAD.unpack_from(frames, pos)
        body, end = pos + doff * 4, pos + size
        pos = end
        if ftype != TYPE_AMQP or ch != channel or end <= body:
            continue
        try:
            transfer, _ = decode_transfer_fields(frames, body, end)
        except DecodeError:
            continue  # not a transfer (the scanner took the frame, so it is a disposition)
        if transfer.aborted:
            events.append((int(transfer.handle), None if transfer.delivery_id is None
                           else int(transfer.delivery_id)))
        elif not transfer.more:
            events.append(None)
    return events
