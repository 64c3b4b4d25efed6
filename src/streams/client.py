"""pumpd's asyncio client of RabbitMQ's streams protocol, for publishing: connect (TCP or TLS),
peer properties, SASL PLAIN, tune, open a vhost, heartbeats; publishers (declare, query their
sequence, publish, delete), ``metadata`` (which node leads a stream: publishing goes to the
leader), ``partitions`` (a super stream's streams), close; and subscriptions, whose ``Deliver``
frames go whole to a callback (``streams/chunk_probe.py`` reads a chunk's header from them).

:func:`connect` returns an open :class:`StreamsClient`. Each step waits at most
``step_timeout`` and fails with a :class:`~pumpd.streams.errors.StreamsError` naming the broker,
the vhost and the step; a code the broker answered is given by its name
(:mod:`pumpd.streams.codes`). Once open, :attr:`StreamsClient.closed` is done, with such an
error, when the connection ends for any reason: the broker closed it, broke the protocol (a frame
larger than agreed, fields that do not fit their frame, an answer nobody asked for, a confirm or
error for a publisher this connection did not declare: :class:`~pumpd.streams.errors.PeerViolation`,
which names what the peer did), or was silent for two heartbeat intervals.

Publishes are batched: :meth:`StreamsClient.publish` queues messages, and once per event loop
iteration the queue is written in publish frames within the agreed frame size, in one
``transport.write``. Confirms and publish errors go to the publisher's callbacks as lists of
publishing ids (errors with their code), in the order the broker sent them.

Tune is honoured both ways: the frame size and the heartbeat are each the smaller of the two
sides' non-zero values, and no frame larger than the agreed size is written or accepted.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar, cast

from ..dataplane.read_holds import ReadHolds
from .codes import (
    CLOSE,
    CREDIT,
    DECLARE_PUBLISHER,
    DELETE_PUBLISHER,
    DELIVER,
    HEARTBEAT,
    METADATA,
    METADATA_UPDATE,
    OK,
    OPEN,
    PARTITIONS,
    PEER_PROPERTIES,
    PUBLISH_CONFIRM,
    PUBLISH_ERROR,
    QUERY_PUBLISHER_SEQUENCE,
    RESPONSE_BIT,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SUBSCRIBE,
    TUNE,
    UNSUBSCRIBE,
    code_name,
    command_name,
    refusal,
)
from .errors import PeerViolation, StreamsError
from .wire import (
    HEAD,
    PUBLISH_OVERHEAD,
    PUBLISHED_OVERHEAD,
    FrameReader,
    Malformed,
    bytes_field,
    frame,
    offset_specification,
    publish_frames,
    string,
)

__all__ = [
    "DEFAULT_FRAME_MAX",
    "DEFAULT_HEARTBEAT",
    "DELIVER_FRAME_MAX",
    "LOGIN_FRAME_MAX",
    "Broker",
    "StreamMetadata",
    "StreamsClient",
    "connect",
]

log = logging.getLogger("pumpd.streams")

#: the frame size pumpd proposes (bytes): RabbitMQ's default
DEFAULT_FRAME_MAX = 1 << 20
#: the heartbeat interval pumpd proposes (seconds): RabbitMQ's default
DEFAULT_HEARTBEAT = 60
#: the largest frame accepted before tune: the broker's answers until then are a few hundred
#: bytes, and a peer that is not a streams broker reads as a size of hundreds of megabytes
LOGIN_FRAME_MAX = 1 << 16
#: publisher ids are one byte
MAX_PUBLISHERS = 256
#: the longest close reason quoted from the broker, in characters
CLOSE_REASON_MAX = 500
#: subscription ids are one byte
MAX_SUBSCRIPTIONS = 256
#: the largest Deliver frame accepted while a subscription is live: the broker sends a chunk
#: whole, as large as its publishers' batches made it, whatever frame size was agreed
DELIVER_FRAME_MAX = 64 << 20

_T = TypeVar("_T")
_CORR = struct.Struct(">I")
_RESPONSE = struct.Struct(">IH")  # correlation id, response code


class Broker(NamedTuple):
    host: str
    port: int


class StreamMetadata(NamedTuple):
    """A stream as ``metadata`` describes it: its code (OK when it exists), its leader and
    replicas (None / empty when there is none)."""

    code: int
    leader: Broker | None
    replicas: tuple[Broker, ...]


class _Publisher(NamedTuple):
    stream: str
    on_confirm: Callable[[list[int]], None]
    on_error: Callable[[list[tuple[int, int]]], None]


class StreamsClient(asyncio.Protocol):
    """One streams protocol connection (see the module docstring)."""

    def __init__(self, *, address: str, vhost: str, username: str, step_timeout: float,
                 frame_max: int, heartbeat: int) -> None:
        self.address = address
        self.vhost = vhost
        self.username = username
        self.step_timeout = step_timeout
        self._want_frame_max = frame_max
        self._want_heartbeat = heartbeat
        #: the agreed frame size (0: none) and heartbeat (seconds, 0: none), after tune
        self.frame_max = 0
        self.heartbeat = 0
        # what the broker says of itself at login (``product``, ``version``, ...)
        self.server_properties: dict[str, str] = {}
        #: the node's address as its metadata names it (the open answer's advertised host and
        #: port), which tells whether this connection is on a stream's leader
        self.advertised: Broker | None = None
        self._loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[BaseException] = self._loop.create_future()
        self._transport: asyncio.Transport | None = None
        self._connected: asyncio.Future[None] = self._loop.create_future()
        self._tuned: asyncio.Future[tuple[int, int]] = self._loop.create_future()
        self._buffer = bytearray()
        self._limit = LOGIN_FRAME_MAX
        self._corr = 0
        self._waiting: dict[int, tuple[int, asyncio.Future[FrameReader]]] = {}
        self._publishers: dict[int, _Publisher] = {}
        self._declaring: set[int] = set()
        self._queued: dict[int, list[tuple[int, bytes]]] = {}
        # subscription id -> what its Deliver frames go to (the whole frame)
        self._subscriptions: dict[int, Callable[[bytes], None]] = {}
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._read_holds = ReadHolds()
        self._on_write_pressure: Callable[[bool], None] | None = None
        self._on_metadata_update: Callable[[str, int], None] | None = None
        self._heard = False
        self._silent = False  # nothing heard in the last heartbeat interval
        self._wrote = False
        self._timers: list[asyncio.TimerHandle] = []
        self.step = "connect"

    # -- what every error says --------------------------------------------------------------

    @property
    def where(self) -> str:
        return f"streams protocol {self.address} (vhost {self.vhost!r})"

    @property
    def is_open(self) -> bool:
        return not self.closed.done()

    # -- the transport ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self._transport = cast(asyncio.Transport, transport)
        if not self._connected.done():
            self._connected.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        why = f": {exc}" if exc is not None else ""
        self._finish(StreamsError(f"{self.where}: the connection was lost (at: {self.step})"
                                  f"{why}"))

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost says so

    def pause_writing(self) -> None:
        if self._on_write_pressure is not None:
            self._on_write_pressure(True)

    def resume_writing(self) -> None:
        if self._on_write_pressure is not None:
            self._on_write_pressure(False)

    def on_write_pressure(self, callback: Callable[[bool], None], high_water: int) -> None:
        """``callback(True)`` when more than ``high_water`` bytes wait to be sent, False once
        they drained below a quarter of it."""
        self._on_write_pressure = callback
        t = self._transport
        if t is not None and not t.is_closing():
            t.set_write_buffer_limits(high=high_water, low=high_water // 4)

    def pause_reading(self, paused: bool, reason: str = "write-pressure") -> None:
        """Stop reading for ``reason``, or drop that reason; reading resumes once none is left.
        The peer's silence is not held against it while reading is paused."""
        self._read_holds.hold(self._transport, paused, reason)

    def on_metadata_update(self, callback: Callable[[str, int], None]) -> None:
        """``callback(stream, code)`` when the broker says a stream changed (deleted, its leader
        moved): its publishers on this connection are gone."""
        self._on_metadata_update = callback

    # -- reading ----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._heard = True
        buf = self._buffer
        buf += data
        pos = 0
        try:
            while len(buf) - pos >= 4:
                (size,) = struct.unpack_from(">I", buf, pos)
                if size < 4 or (self._limit and size > self._limit
                                and not self._deliver_allowed(buf, pos, size)):
                    raise PeerViolation(f"{self.where}: the peer sent a frame of {size} bytes "
                                        f"(at: {self.step}; the agreed maximum is "
                                        f"{self._limit}): is it a streams protocol port?")
                if len(buf) - pos < 4 + size:
                    break
                data_frame = bytes(buf[pos:pos + 4 + size])
                pos += 4 + size
                self._on_frame(data_frame)
                if self.closed.done():
                    return
        except PeerViolation as exc:
            self._violated(exc)
            return
        except Malformed as exc:
            self._violated(PeerViolation(f"{self.where}: a malformed frame from the peer (at: "
                                         f"{self.step}): {exc}"))
            return
        del buf[:pos]

    def _deliver_allowed(self, buf: bytearray, pos: int, size: int) -> bool:
        """Whether a frame larger than agreed is a Deliver frame within
        :data:`DELIVER_FRAME_MAX` while a subscription is live (a chunk comes whole)."""
        if not self._subscriptions or size > DELIVER_FRAME_MAX:
            return False
        if len(buf) - pos < HEAD.size:
            return True  # its key is not here yet: the next read tells
        return int(struct.unpack_from(">H", buf, pos + 4)[0]) == DELIVER

    def _on_frame(self, data: bytes) -> None:
        _size, key, _version = HEAD.unpack_from(data)
        r = FrameReader(data, HEAD.size)
        if key == HEARTBEAT:
            return
        if key == DELIVER:
            subscription = r.u8("DELIVER subscription id")
            on_deliver = self._subscriptions.get(subscription)
            if on_deliver is None:
                raise PeerViolation(f"{self.where}: the peer sent DELIVER for subscription "
                                    f"{subscription}, which this connection does not have")
            on_deliver(data)
            return
        if key == CREDIT | RESPONSE_BIT:  # sent only when credit was refused
            code, subscription = r.u16("CREDIT code"), r.u8("CREDIT subscription id")
            log.info("%s: credit for subscription %d refused: %s", self.where, subscription,
                     code_name(code))
            return
        if key == PUBLISH_CONFIRM:
            self._on_confirm(r)
            return
        if key == PUBLISH_ERROR:
            self._on_publish_error(r)
            return
        if key == TUNE:
            frame_max, heartbeat = r.u32("tune frame max"), r.u32("tune heartbeat")
            if self._tuned.done():
                raise PeerViolation(f"{self.where}: the peer sent TUNE again (at: {self.step})")
            self._tuned.set_result((frame_max, heartbeat))
            return
        if key == METADATA_UPDATE:
            code, stream = r.u16("metadata update code"), r.string("metadata update stream")
            log.info("%s: stream %r changed (%s)", self.where, stream, code_name(code))
            if self._on_metadata_update is not None:
                self._on_metadata_update(stream or "", code)
            return
        if key == CLOSE:
            corr = r.u32("close correlation id")
            code = r.u16("close code")
            reason = (r.string("close reason") or "")[:CLOSE_REASON_MAX]
            self._write(frame(CLOSE | RESPONSE_BIT, _RESPONSE.pack(corr, OK)))
            self._flush()
            said = f"{code_name(code)} ({reason!r})" if reason else code_name(code)
            self._finish(StreamsError(f"{self.where}: the broker closed the connection (at: "
                                      f"{self.step}): {said}"))
            return
        # a response: RabbitMQ 3.10 answers partitions with the request's own key
        corr = r.u32(f"{command_name(key)} correlation id")
        pending = self._waiting.get(corr)
        if pending is None or key not in (pending[0] | RESPONSE_BIT, pending[0]):
            raise PeerViolation(f"{self.where}: the peer sent {command_name(key)} with "
                                f"correlation id {corr}, which answers no request of ours (at: "
                                f"{self.step})")
        del self._waiting[corr]
        if not pending[1].done():
            pending[1].set_result(r)

    def _publisher(self, r: FrameReader, what: str) -> tuple[int, _Publisher]:
        pid = r.u8(f"{what} publisher id")
        publisher = self._publishers.get(pid)
        if publisher is None:
            raise PeerViolation(f"{self.where}: the peer sent {what} for publisher {pid}, "
                                "which this connection did not declare")
        return pid, publisher

    def _on_confirm(self, r: FrameReader) -> None:
        _pid, publisher = self._publisher(r, "PUBLISH_CONFIRM")
        ids = [r.u64("confirmed publishing id")
               for _ in range(r.count("PUBLISH_CONFIRM ids", 8))]
        publisher.on_confirm(ids)

    def _on_publish_error(self, r: FrameReader) -> None:
        _pid, publisher = self._publisher(r, "PUBLISH_ERROR")
        errors = [(r.u64("refused publishing id"), r.u16("publish error code"))
                  for _ in range(r.count("PUBLISH_ERROR entries", 10))]
        publisher.on_error(errors)

    # -- writing ----------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        self._out.append(data)
        self._schedule()

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        for pid, messages in self._queued.items():
            if messages:
                out.extend(publish_frames(pid, messages, self.frame_max))
        self._queued = {}
        if not out:
            return
        self._out = []
        t = self._transport
        if t is None or t.is_closing():
            return
        t.write(out[0] if len(out) == 1 else b"".join(out))
        self._wrote = True

    async def _request(self, key: int, body: bytes, step: str) -> FrameReader:
        """Send a request, wait for its response and check its code; returns a reader at the
        response's fields after the code.

        :raises StreamsError: the broker refused (the code by name), the connection ended, or no
            answer came within the step timeout (the connection is then given up)
        """
        if self.closed.done():
            raise StreamsError(f"{self.where}: cannot {step}: the connection is closed "
                               f"({self.closed.result()})")
        self._corr = (self._corr + 1) & 0xFFFFFFFF
        corr = self._corr
        answer: asyncio.Future[FrameReader] = self._loop.create_future()
        self._waiting[corr] = (key, answer)
        self._write(frame(key, _CORR.pack(corr) + body))
        self.step = step
        r = await self._await(answer, step)
        code = r.u16(f"{command_name(key)} response code")
        if code != OK:
            raise StreamsError(f"{self.where}: {refusal(code, step, self.username)}")
        return r

    async def _await(self, answer: asyncio.Future[_T], step: str) -> _T:
        waiting: set[asyncio.Future[object]] = {answer, self.closed}  # type: ignore[arg-type]
        done, _ = await asyncio.wait(waiting, timeout=self.step_timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        # A lost connection cancels the answers it leaves waiting in the same step that it
        # completes ``closed``: both come back done, and the loss is the outcome to raise.
        if answer in done and not answer.cancelled():
            return answer.result()
        if self.closed.done():
            error = self.closed.result()
            raise StreamsError(f"{error} (while trying to {step})") from None
        error = StreamsError(f"{self.where}: no answer within {self.step_timeout:g} s (to "
                             f"{step}): the connection is given up")
        self._finish(error, abort=True)
        raise error

    # -- the connection's life --------------------------------------------------------------

    async def login(self, username: str, password: str, name: str) -> None:
        """Peer properties, SASL PLAIN, tune, open the vhost."""
        await self._await(self._connected, "connect")
        props = [("connection_name", name), ("product", "pumpd")]
        r = await self._request(PEER_PROPERTIES, struct.pack(">i", len(props))
                                + b"".join(string(k) + string(v) for k, v in props),
                                "exchange peer properties")
        self.server_properties = r.pairs("peer properties") if r.left else {}
        r = await self._request(SASL_HANDSHAKE, b"", "list the SASL mechanisms")
        if "PLAIN" not in r.strings("SASL mechanisms"):
            raise StreamsError(f"{self.where}: the broker does not offer SASL PLAIN")
        secret = b"\0" + username.encode() + b"\0" + password.encode()
        await self._request(SASL_AUTHENTICATE, string("PLAIN") + bytes_field(secret),
                            f"log in as user {username!r} with SASL PLAIN")
        self.step = "agree on the frame size and heartbeat (TUNE)"
        their_frame_max, their_heartbeat = await self._await(self._tuned, self.step)
        self.frame_max = _smaller(their_frame_max, self._want_frame_max)
        self.heartbeat = _smaller(their_heartbeat, self._want_heartbeat)
        if self.frame_max and self.frame_max < 64:
            raise PeerViolation(f"{self.where}: the broker proposes frames of {self.frame_max} "
                                "bytes, too small for any request")
        self._write(frame(TUNE, struct.pack(">II", self.frame_max, self.heartbeat)))
        self._limit = self.frame_max or self._want_frame_max or DEFAULT_FRAME_MAX
        r = await self._request(OPEN, string(self.vhost), f"open vhost {self.vhost!r}")
        # the broker's connection properties: where it says it is reached
        properties = r.pairs("open properties") if r.left else {}
        host, port = properties.get("advertised_host"), properties.get("advertised_port", "")
        if host and port.isdigit():
            self.advertised = Broker(host, int(port))
        if self.heartbeat:
            self._timers.append(self._loop.call_later(self.heartbeat, self._beat))
        self.step = "open"

    def _beat(self) -> None:
        """Every heartbeat interval: a heartbeat unless we wrote meanwhile; a peer that sent
        nothing for two intervals (while we read) is given up."""
        if self.closed.done():
            return
        if not self._heard and not self._read_holds and self._silent:
            self._finish(StreamsError(f"{self.where}: no frame from the broker for "
                                      f"{2 * self.heartbeat} s (two heartbeat intervals)"),
                         abort=True)
            return
        self._silent = not self._heard and not self._read_holds
        self._heard = False
        t = self._transport
        if not self._wrote and t is not None and not t.is_closing():
            t.write(frame(HEARTBEAT, b""))  # at once: a flush would count as our writing
        self._wrote = False
        self._timers = [self._loop.call_later(self.heartbeat, self._beat)]

    def fail(self, what: str) -> None:
        """The caller found the peer lying (``what`` it did): the connection is given up."""
        self._violated(PeerViolation(f"{self.where}: {what}"))

    def _violated(self, error: PeerViolation) -> None:
        log.warning("%s", error)
        self._finish(error, abort=True)

    def _finish(self, error: BaseException, *, abort: bool = False) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers = []
        if not self.closed.done():
            self.closed.set_result(error)
        for _key, fut in self._waiting.values():
            if not fut.done():
                fut.cancel()
        self._waiting.clear()
        t = self._transport
        if t is not None and not t.is_closing():
            if abort:
                t.abort()
            else:
                t.close()

    async def close(self) -> None:
        """Close politely: CLOSE and its answer, within the step timeout."""
        if self.closed.done():
            return
        try:
            await self._request(CLOSE, struct.pack(">H", OK) + string("OK"), "close")
        except StreamsError:
            pass
        self._finish(StreamsError(f"{self.where}: closed by pumpd"))

    def abort(self) -> None:
        self._finish(StreamsError(f"{self.where}: aborted by pumpd"), abort=True)

    # -- publishers -------------------------------------------------------------------------

    @property
    def max_message_size(self) -> int:
        """The largest encoded message one publish frame holds (0: no bound)."""
        if not self.frame_max:
            return 0
        return self.frame_max - PUBLISH_OVERHEAD - PUBLISHED_OVERHEAD

    async def declare_publisher(self, publisher: int, reference: str, stream: str, *,
                                on_confirm: Callable[[list[int]], None],
                                on_error: Callable[[list[tuple[int, int]]], None]) -> None:
        """Declare publisher ``publisher`` (0..255) on ``stream``; ``reference`` names a
        producer the broker remembers (its last publishing id: deduplication), "" none.

        :raises ValueError: for a publisher id out of range or already declared, a reference of
            more than 255 bytes
        """
        if not 0 <= publisher < MAX_PUBLISHERS:
            raise ValueError(f"publisher id {publisher}: 0 to {MAX_PUBLISHERS - 1}")
        if publisher in self._publishers or publisher in self._declaring:
            raise ValueError(f"publisher id {publisher} is declared already")
        if len(reference.encode()) > 255:
            raise ValueError(f"publisher reference {reference!r}: 255 bytes at most")
        self._declaring.add(publisher)
        # registered first: a confirm may follow the answer in the same read
        self._publishers[publisher] = _Publisher(stream, on_confirm, on_error)
        try:
            await self._request(DECLARE_PUBLISHER, struct.pack(">B", publisher)
                                + string(reference) + string(stream),
                                f"declare publisher {publisher} on stream {stream!r}")
        except BaseException:
            self._publishers.pop(publisher, None)
            raise
        finally:
            self._declaring.discard(publisher)

    async def query_publisher_sequence(self, reference: str, stream: str) -> int:
        """The last publishing id the broker stored for producer ``reference`` on ``stream``
        (0: none)."""
        r = await self._request(QUERY_PUBLISHER_SEQUENCE, string(reference) + string(stream),
                                f"query the sequence of producer {reference!r} on stream "
                                f"{stream!r}")
        try:
            return r.u64("publisher sequence")
        except Malformed as exc:
            error = PeerViolation(f"{self.where}: a malformed QUERY_PUBLISHER_SEQUENCE answer: "
                                  f"{exc}")
            self._violated(error)
            raise error from None

    def publish(self, publisher: int, messages: Sequence[tuple[int, bytes]]) -> None:
        """Queue ``messages`` (publishing id, encoded AMQP 1.0 message) for ``publisher``;
        written in this loop iteration's flush.

        :raises ValueError: an undeclared publisher, or a message larger than
            :attr:`max_message_size`
        """
        if publisher not in self._publishers:
            raise ValueError(f"publisher {publisher} is not declared")
        most = self.max_message_size
        if most:
            for pid, body in messages:
                if len(body) > most:
                    raise ValueError(f"a message of {len(body)} bytes (publishing id {pid}) "
                                     f"does not fit a frame of {self.frame_max} bytes")
        self._queued.setdefault(publisher, []).extend(messages)
        self._schedule()

    async def delete_publisher(self, publisher: int) -> None:
        await self._request(DELETE_PUBLISHER, struct.pack(">B", publisher),
                            f"delete publisher {publisher}")
        self._publishers.pop(publisher, None)

    # -- subscriptions ----------------------------------------------------------------------

    def free_subscription(self) -> int:
        """A subscription id this connection does not use.

        :raises StreamsError: all :data:`MAX_SUBSCRIPTIONS` are in use
        """
        for subscription in range(MAX_SUBSCRIPTIONS):
            if subscription not in self._subscriptions:
                return subscription
        raise StreamsError(f"{self.where}: all {MAX_SUBSCRIPTIONS} subscription ids are in use")

    async def subscribe(self, subscription: int, stream: str, kind: int, value: int = 0, *,
                        credit: int, on_deliver: Callable[[bytes], None]) -> None:
        """Subscribe ``subscription`` (0..255) to ``stream`` at an offset specification
        (``streams/wire.py``: ``kind`` and, for an offset or a timestamp, ``value``) with
        ``credit`` chunks; each Deliver frame goes whole to ``on_deliver``.

        :raises ValueError: a subscription id out of range or in use, a credit out of 0..65535
        :raises StreamsError: the broker refused (the stream missing, no member here: by code)
        """
        if not 0 <= subscription < MAX_SUBSCRIPTIONS:
            raise ValueError(f"subscription id {subscription}: 0 to {MAX_SUBSCRIPTIONS - 1}")
        if subscription in self._subscriptions:
            raise ValueError(f"subscription id {subscription} is in use already")
        if not 0 <= credit <= 0xFFFF:
            raise ValueError(f"credit {credit}: 0 to 65535 chunks")
        # registered first: a chunk may follow the answer in the same read
        self._subscriptions[subscription] = on_deliver
        try:
            await self._request(SUBSCRIBE, struct.pack(">B", subscription) + string(stream)
                                + offset_specification(kind, value)
                                + struct.pack(">Hi", credit, 0), f"read stream {stream!r}")
        except BaseException:
            self._subscriptions.pop(subscription, None)
            raise

    async def unsubscribe(self, subscription: int) -> None:
        """End ``subscription``; a chunk the broker sent before its answer is still handed over.
        """
        try:
            await self._request(UNSUBSCRIBE, struct.pack(">B", subscription),
                                f"end subscription {subscription}")
        finally:
            self._subscriptions.pop(subscription, None)

    async def metadata(self, streams: Sequence[str]) -> dict[str, StreamMetadata]:
        """Each stream's leader and replicas, by name."""
        step = f"read the metadata of {', '.join(repr(s) for s in streams)}"
        if self.closed.done():
            raise StreamsError(f"{self.where}: cannot {step}: the connection is closed")
        self._corr = (self._corr + 1) & 0xFFFFFFFF
        corr = self._corr
        answer: asyncio.Future[FrameReader] = self._loop.create_future()
        self._waiting[corr] = (METADATA, answer)
        self._write(frame(METADATA, _CORR.pack(corr) + struct.pack(">i", len(streams))
                          + b"".join(string(s) for s in streams)))
        self.step = step
        r = await self._await(answer, step)  # a metadata answer has no response code
        try:
            brokers: dict[int, Broker] = {}
            for _ in range(r.count("metadata brokers", 8)):
                ref = r.u16("broker reference")
                host = r.string("broker host") or ""
                brokers[ref] = Broker(host, r.u32("broker port"))
            out: dict[str, StreamMetadata] = {}
            for _ in range(r.count("metadata streams", 8)):
                name = r.string("stream name") or ""
                code = r.u16("stream code")
                leader = r.u16("leader reference")
                replicas = [r.u16("replica reference")
                            for _ in range(r.count("replica references", 2))]
                out[name] = StreamMetadata(code, brokers.get(leader) if code == OK else None,
                                           tuple(brokers[x] for x in replicas if x in brokers))
        except Malformed as exc:
            error = PeerViolation(f"{self.where}: a malformed METADATA answer: {exc}")
            self._violated(error)
            raise error from None
        return out

    async def partitions(self, super_stream: str) -> list[str]:
        """The streams of a super stream, in the order of its bindings."""
        r = await self._request(PARTITIONS, string(super_stream),
                                f"list the partitions of super stream {super_stream!r}")
        try:
            return r.strings("partitions")
        except Malformed as exc:
            error = PeerViolation(f"{self.where}: a malformed PARTITIONS answer: {exc}")
            self._violated(error)
            raise error from None


def _smaller(theirs: int, ours: int) -> int:
    """Tune's rule: the smaller of two values, where 0 means no bound."""
    if not theirs or not ours:
        return theirs or ours
    return min(theirs, ours)


async def connect(*, host: str, port: int, username: str, password: str, vhost: str,
                  tls: ssl_module.SSLContext | None = None, server_hostname: str | None = None,
                  name: str = "pumpd", step_timeout: float = 30.0,
                  frame_max: int = DEFAULT_FRAME_MAX, heartbeat: int = DEFAULT_HEARTBEAT
                  ) -> StreamsClient:
    """An open, logged-in connection to ``host:port``'s vhost.

    :raises StreamsError: naming the address and the step (never the password)
    """
    address = f"{host}:{port}"
    loop = asyncio.get_running_loop()
    holder: list[StreamsClient] = []

    def factory() -> StreamsClient:
        client = StreamsClient(address=address, vhost=vhost, username=username,
                               step_timeout=step_timeout, frame_max=frame_max,
                               heartbeat=heartbeat)
        holder.append(client)
        return client

    try:
        await asyncio.wait_for(loop.create_connection(
            factory, host, port, ssl=tls,
            server_hostname=server_hostname if tls is not None else None), step_timeout)
    except TimeoutError:
        raise StreamsError(f"streams protocol: cannot connect to {address}: timed out") from None
    except ssl_module.SSLError as exc:
        raise StreamsError(f"streams protocol: TLS handshake with {address} failed: "
                           f"{exc.reason or exc}") from None
    except OSError as exc:
        raise StreamsError(f"streams protocol: cannot connect to {address}: "
                           f"{exc.strerror or exc}") from None
    client = holder[0]
    try:
        await client.login(username, password, name)
    except BaseException:
        client.abort()
        raise
    return client
