"""A blocking publisher with publisher confirms, on pumpd's data plane.

    from pumpd import Publisher

    with Publisher("amqp://guest:guest@localhost/%2F", routing_key="orders", mode="async") as p:
        p.publish_many([b"one", b"two"], properties={"delivery_mode": 2})
        p.flush()   # returns once every message is confirmed, or raises PublishError

The seeds' three confirm strategies are modes of one publisher (``individual``: each publish
waits for its confirm; ``batch``: a wait after every ``batch_size`` messages; ``async``: up to
``window`` messages unconfirmed, waiting only when the window is full), plus ``none`` (no
confirms at all).

Shape, and why:

- **Blocking, without an event loop of the caller's.** The publisher owns a private uvloop loop
  and runs it (``run_until_complete``) for the length of each call: a whole ``publish_many`` is
  one coroutine, so its waits for confirms are awaits inside one loop run, not one loop run per
  message. A caller needs no thread and no loop (a Spark executor has neither), and nothing
  runs between calls. The one cost: pika's heartbeats are only sent during calls, so a caller
  that idles longer than twice the negotiated heartbeat should close, or set ``heartbeat=0`` in
  the URI.
- **The connection is pumpd's** :func:`~pumpd.engine.link.open_link` (pika for the control plane:
  TLS, the URI query parameters, declarations, confirm.select, connection.blocked); the data
  plane (:class:`~pumpd.dataplane.implementation.PublishPlane`, native or reference) encodes publish frames of a
  whole list of bodies into one buffer, written with one transport write, and takes
  ``basic.ack`` / ``basic.nack`` / ``basic.return`` off the socket before pika sees them. With
  several URIs one is picked at random, as a shovel does.
- **Exact about what was confirmed.** Every message has the channel's confirm sequence number
  (1, 2, ...; ``publish`` returns it, ``publish_many`` returns the first). :class:`PublishError`
  lists the nacked, returned and unconfirmed sequence numbers, with their ``message_id`` where one
  was set. There is no automatic reconnect: after a lost connection the publisher is closed, and
  republishing what was unconfirmed (at-least-once) is the caller's decision.
- **Never a hang.** A blocked broker (``connection.blocked``) holds writes and the publisher
  waits; a wait that sees no confirm for ``confirm_timeout`` seconds fails with
  :class:`PublishError` (saying the broker had blocked the connection, when it had).

A publisher is not thread-safe: one per thread (or per Spark task).

Nacks and returns are raised when a call ends: by every publishing call in ``individual`` and
``batch`` modes (after all its messages were published and confirmed), by ``flush()`` in
``async`` mode. A lost connection or a timeout is raised at once by whichever call meets it.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import uvloop

from ..config.model import BrokerURI, Declaration
from ..config.uri import parse_uri
from ..dataplane import publish_ref
from ..dataplane.api import PublishPlane
from ..dataplane.frames import PROPERTY_NAMES, basic_ack_frame
from ..dataplane.implementation import publish_plane_class
from ..engine.link import Link, LinkError, open_link
from ..engine.parameters import to_pika_parameters

__all__ = ["MODES", "LinkError", "Mode", "PublishError", "Publisher", "ReturnedMessage"]

Mode = Literal["individual", "batch", "async", "none"]
MODES: tuple[Mode, ...] = ("individual", "batch", "async", "none")

Properties = Mapping[str, Any] | bytes | Any  # a dict, raw encoded bytes, or pika.BasicProperties

# Messages encoded per write when nothing else bounds a chunk (mode none, a large window).
_CHUNK = 10_000
# Bytes waiting in the transport beyond which mode ``none`` lets the loop drain them.
_HIGH_WATER = 4 << 20


@dataclass(frozen=True)
class ReturnedMessage:
    """An unroutable ``mandatory`` message the broker sent back (``basic.return``).

    ``seq`` is attributed from the broker's next confirm (see :mod:`pumpd.dataplane.publish_ref`);
    ``message_id`` comes from the returned message itself and identifies it exactly.
    """

    seq: int
    reply_code: int
    reply_text: str
    exchange: str
    routing_key: str
    message_id: str | None


@dataclass
class PublishError(Exception):
    """Some messages were not confirmed. ``confirmed`` counts those that were (since the
    publisher opened); the lists hold confirm sequence numbers, oldest first. ``published`` is
    the last sequence number sent: when a lost connection or a timeout cut a call short, the
    messages of that call after it were never published."""

    reason: str
    nacked: list[int] = field(default_factory=list)
    returned: list[ReturnedMessage] = field(default_factory=list)
    unconfirmed: list[int] = field(default_factory=list)
    message_ids: dict[int, str] = field(default_factory=dict)
    confirmed: int = 0
    published: int = 0  # the last sequence number sent: what a call had after it was not

    def __post_init__(self) -> None:
        super().__init__(self.reason)

    def __str__(self) -> str:
        parts = [self.reason]
        for name, seqs in (("nacked", self.nacked), ("unconfirmed", self.unconfirmed)):
            if seqs:
                parts.append(f"{len(seqs)} {name} (seq {_ranges(seqs)})")
        if self.returned:
            parts.append(f"{len(self.returned)} returned unroutable "
                         f"(seq {_ranges([r.seq for r in self.returned])})")
        return "; ".join(parts)


def _ranges(seqs: list[int], limit: int = 6) -> str:
    out: list[str] = []
    start = prev = seqs[0]
    for s in [*seqs[1:], -1]:
        if s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = s
    return ", ".join(out[:limit]) + (", ..." if len(out) > limit else "")


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _wake_on(fut: asyncio.Future[None], _done: object) -> None:
    _wake(fut)


def _raw_properties(properties: Properties | None) -> bytes:
    if properties is None:
        return b"\x00\x00"
    if isinstance(properties, (bytes, bytearray)):
        return bytes(properties)
    if not isinstance(properties, Mapping):  # pika.BasicProperties and the like
        properties = {n: getattr(properties, n, None) for n in PROPERTY_NAMES}
    return publish_ref.encode_properties(properties)


def _declaration(item: Declaration | tuple[str, Mapping[str, Any]]) -> Declaration:
    if isinstance(item, Declaration):
        return item
    method, arguments = item
    return Declaration(method, dict(arguments))


class Publisher:
    """A confirming publisher; see the module docstring.

    :param uri: a pumpd broker URI (``amqp://`` or ``amqps://``, with its query parameters), or
        several: one is picked at random
    :param exchange: the exchange every message goes to (``""``: the default exchange)
    :param routing_key: the default routing key
    :param mode: ``individual``, ``batch``, ``async`` or ``none``
    :param batch_size: messages per confirm wait in ``batch`` mode (the seeds use 100)
    :param window: unconfirmed messages allowed in ``async`` mode; a full window waits until
        half of it is confirmed
    :param mandatory: publish with mandatory set: unroutable messages are reported as returned
    :param declarations: issued in order once connected, as a shovel's ``declarations``
        (:class:`~pumpd.config.model.Declaration` or ``(method, arguments)``)
    :param confirm_timeout: seconds a wait may go without any confirm before it fails
    :param implementation: ``native`` or ``reference`` data plane (default: pumpd's choice)
    :raises LinkError: when no connection can be made or a declaration fails
    """

    def __init__(
        self,
        uri: str | Sequence[str],
        *,
        exchange: str = "",
        routing_key: str = "",
        mode: Mode = "async",
        batch_size: int = 100,
        window: int = 5000,
        mandatory: bool = False,
        declarations: Sequence[Declaration | tuple[str, Mapping[str, Any]]] = (),
        confirm_timeout: float = 30.0,
        client_name: str = "pumpd publisher",
        implementation: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if batch_size < 1 or window < 1:
            raise ValueError("batch_size and window must be at least 1")
        uris = [uri] if isinstance(uri, str) else list(uri)
        if not uris:
            raise ValueError("no broker URI given")
        self.broker: BrokerURI = parse_uri(random.choice(uris))
        self.mode: Mode = mode
        self.batch_size = batch_size
        self.window = window
        self.confirm_timeout = confirm_timeout
        self._routing_key = routing_key.encode()
        self._blocked = False
        self._waiter: tuple[asyncio.Future[None], int] | None = None
        self._failure: PublishError | None = None
        self._nacked: list[int] = []
        self._returned: list[ReturnedMessage] = []
        # (first seq, last seq, message_id) per call that set one: a range, not an entry per
        # message, for publish_many's shared properties
        self._ids: list[tuple[int, int, str]] = []
        plane_cls, self.implementation = publish_plane_class(implementation)
        self._loop = uvloop.new_event_loop()
        try:
            self._link: Link = self._loop.run_until_complete(
                self._open(declarations, client_name))
        except BaseException:
            self._loop.close()
            raise
        self._plane: PublishPlane = plane_cls(channel=self._link.channel_number,
                                     frame_max=self._link.frame_max,
                                     exchange=exchange.encode(), mandatory=mandatory)
        self._link.intercept(self._on_data)
        self._link.on_blocked(self._on_blocked)

    async def _open(self, declarations: Sequence[Any], client_name: str) -> Link:
        link = await open_link(self.broker, to_pika_parameters(self.broker, client_name=client_name))
        try:
            await link.declare([_declaration(d) for d in declarations])
            if self.mode != "none":
                await link.confirm_select()
        except BaseException:
            await link.close()
            raise
        return link

    # -- counters ----------------------------------------------------------------------------

    @property
    def published(self) -> int:
        return self._plane.published

    @property
    def confirmed(self) -> int:
        """Messages the broker acked (in mode ``none``: written to the socket)."""
        return self._plane.confirmed

    @property
    def outstanding(self) -> int:
        return self._plane.outstanding

    @property
    def blocked(self) -> bool:
        return self._blocked

    # -- publishing --------------------------------------------------------------------------

    def publish(self, body: bytes, routing_key: str | None = None,
                properties: Properties | None = None) -> int:
        """Publish one message; returns its sequence number."""
        return self.publish_messages([(body, routing_key, properties)])

    def publish_many(self, bodies: Iterable[bytes], routing_key: str | None = None,
                     properties: Properties | None = None) -> int:
        """Publish every body with one routing key and one set of properties (encoded once).
        Returns the sequence number of the first message."""
        self._check()
        items = bodies if isinstance(bodies, list) else list(bodies)
        rk = self._routing_key if routing_key is None else routing_key.encode()
        raw = _raw_properties(properties)
        first = self._plane.next_seq
        mid = publish_ref.message_id_of(raw)
        if mid is not None and items:
            self._ids.append((first, first + len(items) - 1, mid.decode(errors="replace")))
        self._run(self._publish_chunks(items, rk, raw))
        return first

    def publish_messages(
        self, messages: Iterable[tuple[bytes, str | None, Properties | None]]
    ) -> int:
        """Publish ``(body, routing_key, properties)`` items (None: the default routing key / no
        properties). Returns the sequence number of the first message."""
        self._check()
        plane = self._plane
        first = int(plane.next_seq)
        encoded: list[tuple[bytes, bytes, bytes]] = []
        for body, rk, props in messages:
            raw = _raw_properties(props)
            mid = publish_ref.message_id_of(raw) if props is not None else None
            if mid is not None:
                seq = first + len(encoded)
                self._ids.append((seq, seq, mid.decode(errors="replace")))
            encoded.append((body, self._routing_key if rk is None else rk.encode(), raw))
        self._run(self._publish_each(encoded))
        return first

    def publish_arrow(self, column: Any, routing_key: str | None = None,
                      properties: Properties | None = None, *,
                      message_ids: tuple[bytes, int] | None = None) -> int:
        """Publish every element of a ``pyarrow`` binary (or large_binary) array as a body,
        encoded from the array's buffers without a Python object per row; nulls are empty
        bodies. ``message_ids=(prefix, start)`` gives element ``i`` the message_id ``prefix +
        str(start + i)`` (replacing one in ``properties``). Returns the first sequence number.
        (For :mod:`pumpd.spark`; ``PublishError`` lists these messages without their ids.)"""
        self._check()
        props = dict(properties) if isinstance(properties, Mapping) else None
        if message_ids is not None and properties is not None and props is None:
            raise TypeError("with message_ids, properties must be a dict")
        if message_ids is not None:
            base = props if props is not None else {}
            mid = PROPERTY_NAMES.index("message_id")
            head = {k: v for k, v in base.items() if PROPERTY_NAMES.index(k) < mid}
            tail_props = {k: v for k, v in base.items() if PROPERTY_NAMES.index(k) > mid}
            flags = 1 << (15 - mid)
            for k, v in base.items():
                if v is not None and k != "message_id":
                    flags |= 1 << (15 - PROPERTY_NAMES.index(k))
            raw = flags.to_bytes(2, "big") + publish_ref.encode_properties(head)[2:]
            tail: bytes | None = publish_ref.encode_properties(tail_props)[2:]
        else:
            raw, tail = _raw_properties(properties), None
        rk = self._routing_key if routing_key is None else routing_key.encode()
        if len(column) == 0:  # an empty array may have no offsets buffer at all
            return self._plane.next_seq
        _validity, offsets, data = column.buffers()[:3]
        large = str(column.type) == "large_binary"
        first = self._plane.next_seq
        self._run(self._publish_arrow(offsets, data, int(column.offset), len(column), large, rk,
                                      raw, tail, message_ids))
        return first

    async def _publish_arrow(self, offsets: Any, data: Any, offset: int, n: int, large: bool,
                             rk: bytes, raw: bytes, tail: bytes | None,
                             ids: tuple[bytes, int] | None) -> None:
        plane = self._plane

        def encode(i: int, k: int) -> None:
            if ids is None:
                plane.publish_arrow(offsets, data, offset + i, k, rk, raw, large=large)
            else:
                plane.publish_arrow(offsets, data, offset + i, k, rk, raw, large=large,
                                    properties_tail=tail, id_prefix=ids[0], id_start=ids[1] + i)

        await self._publish_in_chunks(n, encode)

    def flush(self) -> None:
        """Return once everything published is confirmed (in mode ``none``: written).

        :raises PublishError: listing what was nacked or returned since the last flush, or what
            is unconfirmed when the connection was lost or no confirm came in time
        """
        self._check()
        self._run(self._flush())

    def close(self) -> None:
        """Close the connection (without waiting for confirms: call :meth:`flush` first)."""
        if self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(self._link.close())
        finally:
            self._loop.close()

    def abort(self) -> None:
        """Drop the connection without the closing handshake: after a failure, where a blocked
        broker would not read a ``connection.close`` (``close()`` would wait 5 s for it)."""
        if self._loop.is_closed():
            return
        try:
            if self._link.frame_error is not None:  # closing already, within a second
                self._loop.run_until_complete(self._link.close())
            self._link.abort()
            self._loop.run_until_complete(asyncio.sleep(0))  # let the transport go
        finally:
            self._loop.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._loop.is_closed():
            raise PublishError("the publisher is closed")

    def _run(self, coro: Any) -> None:
        try:
            self._loop.run_until_complete(coro)
        except PublishError as exc:
            if not self._link.is_open:
                self._failure = exc
            raise

    def _on_data(self, data: bytes) -> bytes:
        rest: bytes = self._plane.feed(data)
        w = self._waiter
        if w is not None and self._plane.outstanding <= w[1] and not w[0].done():
            w[0].set_result(None)
        return rest

    def _on_blocked(self, blocked: bool) -> None:
        self._blocked = blocked
        if not blocked:
            self._write()

    def _write(self) -> None:
        if self._blocked:
            return  # held in the plane's buffer until connection.unblocked
        self._link.write(self._plane.take_output())
        if self.mode == "none":
            # nothing will confirm: settle what was written, so the bitmap does not grow
            seq = self._plane.next_seq - 1
            if seq >= 1 and self._plane.outstanding:
                self._plane.feed(basic_ack_frame(self._link.channel_number, seq, True))

    async def _publish_chunks(self, items: list[bytes], rk: bytes, raw: bytes) -> None:
        plane, n = self._plane, len(items)

        def encode(i: int, k: int) -> None:
            plane.publish_many(items[i : i + k] if (i or k < n) else items, rk, raw)

        await self._publish_in_chunks(n, encode)

    async def _publish_in_chunks(self, n: int, encode: Callable[[int, int], None]) -> None:
        """Publish ``n`` messages, ``encode(i, k)`` putting messages i .. i+k-1 into the data
        plane, in chunks the mode allows (one per confirm, a batch, the room left in the async
        window); nacks and returns are raised once the call is done (individual, batch)."""
        plane, i = self._plane, 0
        while i < n:
            if self.mode == "individual":
                k = 1
            elif self.mode == "batch":
                k = self.batch_size
            elif self.mode == "async":
                room = self.window - int(plane.outstanding)
                if room <= 0:
                    await self._wait(self.window // 2)
                    continue
                k = min(room, _CHUNK)
            else:
                k = _CHUNK
            k = min(k, n - i)
            encode(i, k)
            i += k
            self._write()
            await self._after_write()
        if self.mode in ("individual", "batch"):
            self._raise_refused()

    async def _publish_each(self, encoded: list[tuple[bytes, bytes, bytes]]) -> None:
        plane, since_wait = self._plane, 0
        for body, rk, raw in encoded:
            if self.mode == "async" and plane.outstanding >= self.window:
                self._write()
                await self._wait(self.window // 2)
            plane.publish(body, rk, raw)
            since_wait += 1
            if self.mode == "individual" or (self.mode == "batch" and since_wait >= self.batch_size):
                since_wait = 0
                self._write()
                await self._wait(0)
            elif since_wait >= _CHUNK:
                since_wait = 0
                self._write()
                await self._after_write()
        self._write()
        await self._after_write()
        if self.mode in ("individual", "batch"):
            self._raise_refused()

    async def _after_write(self) -> None:
        if self.mode in ("individual", "batch"):
            await self._wait(0)
        elif self.mode == "none" and self._link.write_buffer_size() > _HIGH_WATER:
            await self._drain()
        else:
            await asyncio.sleep(0)  # one loop pass: read what confirms have arrived

    async def _drain(self) -> None:
        while self._link.write_buffer_size() > 0 and self._link.is_open:
            await asyncio.sleep(0.001)
        if not self._link.is_open:
            raise self._error("the connection was lost")

    async def _flush(self) -> None:
        self._write()
        if self.mode == "none":
            await self._drain()
        else:
            await self._wait(0)
        self._raise_refused()
        self._ids.clear()

    async def _wait(self, target: int) -> None:
        """Until at most ``target`` messages are unconfirmed."""
        plane = self._plane
        while plane.outstanding > target:
            if not self._link.is_open:
                raise self._error(f"the connection was lost ({self._link.closed.result()})")
            # One future, woken by the interceptor (enough confirms), the link closing or the
            # timer: cheaper than asyncio.wait, and individual mode waits once per message.
            fut: asyncio.Future[None] = self._loop.create_future()
            self._waiter = (fut, target)
            before = int(plane.outstanding)
            timer = self._loop.call_later(self.confirm_timeout, _wake, fut)
            self._link.closed.add_done_callback(fut_waker := functools.partial(_wake_on, fut))
            try:
                await fut
            finally:
                self._waiter = None
                timer.cancel()
                self._link.closed.remove_done_callback(fut_waker)
            if plane.outstanding > target and plane.outstanding >= before and self._link.is_open:
                blocked = (" while the broker had blocked the connection (connection.blocked: "
                           "a resource alarm)") if self._blocked else ""
                raise self._error(f"no confirm for {self.confirm_timeout:g} s{blocked}")

    def _raise_refused(self) -> None:
        self._collect()
        if self._nacked or self._returned:
            raise self._error("the broker refused messages")

    def _collect(self) -> None:
        self._nacked.extend(self._plane.take_nacked())
        for seq, code, text, exchange, rk, raw in self._plane.take_returns():
            mid = publish_ref.message_id_of(raw)
            self._returned.append(ReturnedMessage(
                seq, code, text.decode(errors="replace"), exchange.decode(errors="replace"),
                rk.decode(errors="replace"), None if mid is None else mid.decode(errors="replace")))

    def _error(self, reason: str) -> PublishError:
        self._collect()
        nacked, returned = self._nacked, self._returned
        self._nacked, self._returned = [], []
        unconfirmed = self._plane.unconfirmed()
        return PublishError(reason, nacked, returned, unconfirmed,
                            self._message_ids([*nacked, *unconfirmed]),
                            self._plane.confirmed, self._plane.next_seq - 1)

    def _message_ids(self, seqs: list[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        if not self._ids:
            return out
        firsts = [first for first, _, _ in self._ids]
        for s in seqs:
            k = bisect.bisect_right(firsts, s) - 1
            if k >= 0 and self._ids[k][0] <= s <= self._ids[k][1]:
                out[s] = self._ids[k][2]
        return out
