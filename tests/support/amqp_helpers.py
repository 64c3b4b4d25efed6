"""Small synchronous AMQP helpers for tests, on ``pika.BlockingConnection``.

Every helper opens its own connection from an ``amqp://`` URI (e.g. ``node_a.uri(vhost_a)``)
and closes it before returning, so tests stay independent of connection state.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import pika
from pika import frame as amqp_frame
from pika import spec
from pika.adapters.blocking_connection import BlockingChannel


def naive(value: Any) -> Any:
    """pika 1.3 decodes AMQP timestamps without a timezone and 1.4 with UTC; tests compare
    decoded headers naive so they hold for every pika release pumpd supports."""
    if isinstance(value, dict):
        return {k: naive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [naive(v) for v in value]
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    return value


@dataclass(frozen=True)
class Message:
    """A message to publish: its body and (optionally) its properties."""

    body: bytes
    properties: pika.BasicProperties | None = None


class Delivery(NamedTuple):
    """A consumed message: ``(method, properties, body)``.

    ``method`` is a ``Basic.Deliver`` or ``Basic.GetOk`` frame; both have ``delivery_tag``,
    ``redelivered``, ``exchange`` and ``routing_key``.
    """

    method: Any
    properties: pika.BasicProperties
    body: bytes


@contextmanager
def blocking_connection(uri: str) -> Iterator[pika.BlockingConnection]:
    """A ``BlockingConnection`` to ``uri``, closed on exit."""
    connection = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        yield connection
    finally:
        if connection.is_open:
            connection.close()


@contextmanager
def _channel(uri: str) -> Iterator[BlockingChannel]:
    with blocking_connection(uri) as connection:
        yield connection.channel()


def super_stream(uri: str, name: str, partitions: int) -> list[str]:
    """A super stream as RabbitMQ 3.10 makes one (rabbitmq-streams add_super_stream): a direct
    exchange with ``x-super-stream``, bound to each partition stream ``{name}-{i}`` with the key
    ``i`` and ``x-stream-partition-order`` ``i``; returns the partitions in that order."""
    names = [f"{name}-{i}" for i in range(partitions)]
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.exchange_declare(name, "direct", durable=True, arguments={"x-super-stream": True})
        for i, s in enumerate(names):
            ch.queue_declare(s, durable=True, arguments={"x-queue-type": "stream"})
            ch.queue_bind(s, name, str(i), arguments={"x-stream-partition-order": i})
    return names


def publish_messages(
    uri: str,
    exchange: str,
    routing_key: str,
    messages: list[Message],
    confirm: bool = True,
) -> None:
    """Publish ``messages`` in order to ``exchange`` with ``routing_key``.

    With ``confirm`` the channel is in confirm mode: when this returns, the broker has confirmed
    every message (raises ``pika.exceptions.NackError`` on a nack). The confirms are awaited
    asynchronously, up to ``CONFIRM_WINDOW`` unconfirmed at a time, as RabbitMQ's
    publisher-confirms guide does it: a wait for each confirm of a persistent message costs
    about a millisecond, and tests publish tens of thousands.
    """
    if not confirm:
        with _channel(uri) as channel:
            for message in messages:
                channel.basic_publish(exchange=exchange, routing_key=routing_key,
                                      body=message.body, properties=message.properties)
        return
    _ConfirmedPublish(uri, exchange, routing_key, messages).run()


CONFIRM_WINDOW = 1000  # messages published and not yet confirmed, at most


class _ConfirmedPublish:
    """One run of pika's asynchronous publisher: publish while the window has room, count the
    broker's confirms (``multiple`` included), stop once every message is confirmed."""

    def __init__(self, uri: str, exchange: str, routing_key: str,
                 messages: list[Message]) -> None:
        self._params = pika.URLParameters(uri)
        self._exchange, self._routing_key, self._messages = exchange, routing_key, messages
        self._published = 0  # delivery tags 1..published are out
        self._unconfirmed: set[int] = set()
        self._nacked: list[Message] = []
        self._failure: BaseException | None = None
        self._channel: Any = None
        self._connection: Any = None

    def run(self) -> None:
        self._connection = pika.SelectConnection(
            self._params, on_open_callback=self._opened,
            on_open_error_callback=lambda _c, exc: self._fail(exc),
            on_close_callback=self._closed)
        self._connection.ioloop.start()
        if self._failure is not None:
            raise self._failure
        if self._nacked:
            raise pika.exceptions.NackError(self._nacked)
        assert self._published == len(self._messages) and not self._unconfirmed

    def _opened(self, connection: Any) -> None:
        connection.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._channel_closed)
        channel.confirm_delivery(self._confirmed)
        self._publish_more()

    def _publish_more(self) -> None:
        while (self._published < len(self._messages)
               and len(self._unconfirmed) < CONFIRM_WINDOW):
            message = self._messages[self._published]
            self._channel.basic_publish(self._exchange, self._routing_key, message.body,
                                        message.properties)
            self._published += 1
            self._unconfirmed.add(self._published)
        if self._published == len(self._messages) and not self._unconfirmed:
            self._connection.close()

    def _confirmed(self, frame: Any) -> None:
        method = frame.method
        tags = ({t for t in self._unconfirmed if t <= method.delivery_tag} if method.multiple
                else {method.delivery_tag})
        self._unconfirmed -= tags
        if isinstance(method, spec.Basic.Nack):
            self._nacked.extend(self._messages[t - 1] for t in sorted(tags))
        self._publish_more()

    def _fail(self, exc: BaseException) -> None:
        self._failure = self._failure or exc
        self._connection.ioloop.stop()

    def _closed_early(self, reason: BaseException) -> None:
        """A channel or connection closed: a failure unless every message was confirmed."""
        if self._unconfirmed or self._published < len(self._messages):
            self._failure = self._failure or reason

    def _channel_closed(self, _channel: Any, reason: BaseException) -> None:
        self._closed_early(reason)
        if self._connection.is_open:
            self._connection.close()

    def _closed(self, _connection: Any, reason: BaseException) -> None:
        self._closed_early(reason)
        self._connection.ioloop.stop()


def drain_queue(
    uri: str,
    queue: str,
    expected: int | None = None,
    timeout: float = 10.0,
) -> list[Delivery]:
    """Consume (and ack) messages from ``queue``; returns them in delivery order.

    :param expected: stop after this many messages, waiting up to ``timeout`` seconds for them
        to arrive (fewer are returned on timeout; the caller asserts the count). ``None``: what
        the queue holds now (its ready count), however long they take to come, as long as none
        takes ``timeout`` (a deadline on the whole cut large queues short on a slow machine).
    """
    deliveries: list[Delivery] = []
    deadline = time.monotonic() + timeout
    with _channel(uri) as channel:
        until_quiet = expected is None
        if expected is None:
            expected = int(channel.queue_declare(queue, passive=True).method.message_count)
        if expected <= 0:
            return deliveries
        # A prefetch of exactly the remaining count: nothing beyond it is taken off the queue.
        channel.basic_qos(prefetch_count=min(expected, 65535))
        while len(deliveries) < expected and time.monotonic() < deadline:
            # The same arguments each time: pika resumes its consumer generator.
            for method, properties, body in channel.consume(
                queue, auto_ack=False, inactivity_timeout=0.25
            ):
                if method is None:  # inactivity timeout: re-check the deadline
                    break
                channel.basic_ack(method.delivery_tag)
                deliveries.append(Delivery(method, properties, body))
                if until_quiet:
                    deadline = time.monotonic() + timeout
                if len(deliveries) >= expected or time.monotonic() >= deadline:
                    break
        channel.cancel()
    return deliveries


def queue_depth(uri: str, queue: str) -> tuple[int, int]:
    """``(messages_ready, consumers)`` of ``queue``, by a passive declare.

    Raises ``pika.exceptions.ChannelClosedByBroker`` (404) if the queue does not exist.
    """
    with _channel(uri) as channel:
        frame = channel.queue_declare(queue, passive=True)
        return int(frame.method.message_count), int(frame.method.consumer_count)


def unacked(node: Any, vhost: str, queue: str) -> int:
    """``queue``'s messages delivered and not yet acknowledged, as the broker counts them
    (``node``: a LocalNode; rabbitmqctl, since AMQP 0-9-1 reports only the ready ones)."""
    out = node.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost, "name",
                   "messages_unacknowledged")
    counts = dict(line.split() for line in out.splitlines() if line.strip())
    return int(counts.get(queue, 0))


def declare_queue(
    uri: str,
    name: str,
    durable: bool = True,
    arguments: dict[str, Any] | None = None,
) -> None:
    """Declare queue ``name`` (durable by default; pass ``arguments`` for e.g. quorum)."""
    with _channel(uri) as channel:
        channel.queue_declare(name, durable=durable, arguments=arguments)


def raw_get(port: int, vhost: str, queue: str, n: int) -> list[tuple[bytes, bytes]]:
    """``n`` messages taken with basic.get on a raw socket: (raw property list, body). pika's
    decoder would not do: it turns a double in a header table into an int."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    buf = b""

    def frame() -> tuple[int, bytes]:
        nonlocal buf
        while len(buf) < 7 or len(buf) < 8 + struct.unpack_from(">I", buf, 3)[0]:
            buf += sock.recv(65536)
        size = struct.unpack_from(">I", buf, 3)[0]
        ftype, payload, buf = buf[0], buf[7 : 7 + size], buf[8 + size :]
        return ftype, payload

    def send(channel: int, method: object) -> None:
        sock.sendall(amqp_frame.Method(channel, method).marshal())

    try:
        sock.sendall(amqp_frame.ProtocolHeader().marshal())
        frame()
        send(0, spec.Connection.StartOk(client_properties={}, mechanism="PLAIN",
                                        response="\0guest\0guest"))
        frame()
        send(0, spec.Connection.TuneOk(channel_max=16, frame_max=131072, heartbeat=0))
        send(0, spec.Connection.Open(virtual_host=vhost))
        frame()
        send(1, spec.Channel.Open())
        frame()
        out = []
        for _ in range(n):
            send(1, spec.Basic.Get(queue=queue, no_ack=True))
            _, method = frame()
            assert struct.unpack_from(">HH", method) == (60, 71), "basic.get-ok expected"
            _, header = frame()
            size = struct.unpack_from(">Q", header, 4)[0]
            body = b""
            while len(body) < size:
                body += frame()[1]
            out.append((header[12:], body))
        return out
    finally:
        sock.close()


class SteadyPublisher:
    """Numbered messages (``b"0"``, ``b"1"``, ...) at a steady pace, round robin over
    ``queues``, persistent and confirmed, from a thread, until stopped (``with`` or
    :meth:`stop`, which returns how many were sent and raises what the thread raised). With
    ``declare`` the queues are declared durable first."""

    def __init__(self, uri: str, queues: list[str], per_second: int = 200, *,
                 declare: bool = False) -> None:
        self.uri, self.queues, self.per_second, self.declare = uri, queues, per_second, declare
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.uri))
            ch = conn.channel()
            for queue in self.queues if self.declare else ():
                ch.queue_declare(queue, durable=True)
            ch.confirm_delivery()
            props = pika.BasicProperties(delivery_mode=2)
            start = time.monotonic()
            while not self._stop.is_set():
                due = int((time.monotonic() - start) * self.per_second)
                while self.sent < due:
                    queue = self.queues[self.sent % len(self.queues)]
                    ch.basic_publish("", queue, b"%d" % self.sent, props)
                    self.sent += 1
                conn.sleep(0.01)
            conn.close()
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> SteadyPublisher:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        if self.error is not None:
            raise self.error
        return self.sent


def via(node: Any, vhost: str, proxy: Any, query: str = "") -> str:
    """``node``'s URI for ``vhost``, through ``proxy`` (a :class:`pumpd.testing.TcpProxy`)."""
    return node.uri(vhost).replace(f":{node.amqp_port}/", f":{proxy.port}/") + query


