"""A blocking publisher with publisher confirms, on pumpd's data plane.

    from pumpd import Publisher

    with Publisher("amqp://guest:guest@localhost/%2F", routing_key="orders", mode="async") as p:
        p.publish_many([b"one", b"two"], properties={"delivery_mode": 2})
        p.flush()   # returns once every message is confirmed, or raises PublishError

RabbitMQ's three publisher-confirm strategies are modes of one publisher (``individual``: each publish
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
import random
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple

import uvloop

from ..config.model import BrokerURI, Declaration
from ..config.uri import parse_uri
from ..dataplane.api import PublishPlane
from ..dataplane.implementation import publish_plane_class
from ..dataplane.properties import (
    PROPERTY_NAMES,
    IdSplice,
    encode_properties,
    encode_rows,
    message_id_text,
)
from ..engine.link import Link, LinkError, open_link
from ..engine.parameters import to_pika_parameters
from .confirming import MODES, ConfirmingChannel, Mode
from .publish_errors import PublishError, ReturnedMessage

__all__ = ["MODES", "LinkError", "MessageIds", "Mode", "PublishError",
           "Publisher", "ReturnedMessage"]

Properties = Mapping[str, Any] | bytes | Any  # a dict, raw encoded bytes, or pika.BasicProperties


class MessageIds(NamedTuple):
    """A deterministic message id per message of a call: message ``i`` gets ``prefix`` followed
    by the decimal digits of ``rows[i]`` (``rows`` a ``range`` for consecutive numbers). The
    same rows give the same ids again, so a consumer can drop what a retry sends twice."""

    prefix: bytes
    rows: Sequence[int]

    def ids(self) -> list[bytes]:
        prefix = self.prefix
        return [prefix + str(r).encode() for r in self.rows]


def _raw_properties(properties: Properties | None) -> bytes:
    if properties is None:
        return b"\x00\x00"
    if isinstance(properties, (bytes, bytearray)):
        return bytes(properties)
    if not isinstance(properties, Mapping):  # pika.BasicProperties and the like
        properties = {n: getattr(properties, n, None) for n in PROPERTY_NAMES}
    return encode_properties(properties)


def _declaration(item: Declaration | tuple[str, Mapping[str, Any]]) -> Declaration:
    if isinstance(item, Declaration):
        return item
    method, arguments = item
    return Declaration(method, dict(arguments))


class Publisher(ConfirmingChannel):
    """A confirming publisher; see the module docstring.

    :param uri: a pumpd broker URI (``amqp://`` or ``amqps://``, with its query parameters), or
        several: one is picked at random
    :param exchange: the exchange every message goes to (``""``: the default exchange)
    :param routing_key: the default routing key
    :param mode: ``individual``, ``batch``, ``async`` or ``none``
    :param batch_size: messages per confirm wait in ``batch`` mode (RabbitMQ's confirm guide uses 100)
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
        mid = message_id_text(raw)
        if mid is not None and items:
            self._ids.append((first, first + len(items) - 1, mid))
        self._run(self._publish_chunks(items, rk, raw))
        return first

    def publish_messages(
        self, messages: Iterable[tuple[bytes, str | None, Properties | None]]
    ) -> int:
        """Publish ``(body, routing_key, properties)`` items (None: the default routing key / no
        properties). Returns the sequence number of the first message."""
        self._check()
        first = self._plane.next_seq
        encoded: list[tuple[bytes, bytes, bytes]] = []
        for body, rk, props in messages:
            raw = _raw_properties(props)
            mid = message_id_text(raw) if props is not None else None
            if mid is not None:
                seq = first + len(encoded)
                self._ids.append((seq, seq, mid))
            encoded.append((body, self._routing_key if rk is None else rk.encode(), raw))
        self._run(self._publish_each(encoded))
        return first

    def publish_rows(self, bodies: Sequence[bytes], *,
                     routing_keys: Sequence[str | None] | None = None,
                     properties: Mapping[str, Any] | None = None,
                     columns: Mapping[str, Sequence[Any]] | None = None,
                     message_ids: MessageIds | None = None) -> int:
        """Publish ``bodies[i]`` with ``routing_keys[i]`` (None: the default routing key), the
        basic ``properties`` every row shares, overridden by row ``i`` of each of ``columns``
        (a property name → one value per row; None keeps the shared value), and the id
        ``message_ids`` gives row ``i``. Without columns, the shared properties are encoded once
        and only the id differs per row. Returns the first sequence number.

        :raises KeyError: for a column that is not a basic property
        """
        n = len(bodies)
        ids = message_ids.ids() if message_ids is not None else None
        if not columns and ids is None and routing_keys is None:
            return self.publish_many(list(bodies), properties=properties)
        self._check()
        raws = encode_rows(n, properties, columns or {}, ids)
        first = self._plane.next_seq
        default = self._routing_key
        rks = [default if rk is None else rk.encode() for rk in routing_keys] \
            if routing_keys is not None else [default] * n
        if ids is not None:
            self._ids.extend((first + i, first + i, mid.decode(errors="replace"))
                             for i, mid in enumerate(ids))
        elif columns:
            self._record_ids(first, raws)
        elif n and (mid := message_id_text(raws[0])) is not None:  # one encoding, shared
            self._ids.append((first, first + n - 1, mid))
        self._run(self._publish_each(list(zip(bodies, rks, raws, strict=True))))
        return first

    def _record_ids(self, first: int, raws: list[bytes]) -> None:
        for i, raw in enumerate(raws):
            mid = message_id_text(raw)
            if mid is not None:
                self._ids.append((first + i, first + i, mid))

    def publish_arrow(self, column: Any, routing_key: str | None = None,
                      properties: Properties | None = None, *,
                      message_ids: MessageIds | None = None) -> int:
        """Publish every element of a ``pyarrow`` binary (or large_binary) array as a body,
        encoded from the array's buffers without a Python object per row; nulls are empty
        bodies. ``message_ids`` (its rows a ``range`` of step 1, one per element) gives each
        element its message_id, replacing one in ``properties``: spliced natively into
        property bytes encoded once. Returns the first sequence number. (For
        :mod:`pumpd.spark`; ``PublishError`` lists these messages without their ids.)"""
        self._check()
        if message_ids is not None:
            if properties is not None and not isinstance(properties, Mapping):
                raise TypeError("with message_ids, properties must be a dict")
            rows = message_ids.rows
            if not isinstance(rows, range) or rows.step != 1 or len(rows) != len(column):
                raise ValueError("publish_arrow's message_ids need a range of step 1, one row "
                                 "per element")
            splice = IdSplice(properties)
            raw, tail = splice.head, splice.tail
            ids: tuple[bytes, int] | None = (message_ids.prefix, rows.start)
        else:
            raw, tail, ids = _raw_properties(properties), b"", None
        rk = self._routing_key if routing_key is None else routing_key.encode()
        if len(column) == 0:  # an empty array may have no offsets buffer at all
            return self._plane.next_seq
        _validity, offsets, data = column.buffers()[:3]
        large = str(column.type) == "large_binary"
        first = self._plane.next_seq
        self._run(self._publish_arrow(offsets, data, int(column.offset), len(column), large, rk,
                                      raw, tail, ids))
        return first

    async def _publish_arrow(self, offsets: Any, data: Any, offset: int, n: int, large: bool,
                             rk: bytes, raw: bytes, tail: bytes,
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
