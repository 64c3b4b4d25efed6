"""One consumer of a queue on its own thread, for the queue reader: it reads the socket while
Spark works between two ``read()`` calls, so a micro-batch is waiting when Spark asks for it.
A read task of a stream over AMQP 0-9-1 uses it too (a consumer at an ``x-stream-offset``).

Why a thread: Spark calls the reader only at the start of each micro-batch and spends most of the
micro-batch in the JVM (planning, the sink, the offset and commit logs). With the consumer on
Spark's thread, the deliveries waited in the socket all that time and were parsed afterwards;
here they are parsed while the JVM works on the other core, and heartbeats are answered however
long a trigger interval is. What may arrive unacknowledged is bounded by ``basic.qos`` (the
broker sends no more), so the deliveries gathered here are too.

Why not pika's consumer: pika builds a method object, a properties object and three callback
frames per message, which made the reading slower than Spark itself. The connection is pumpd's
engine link (pika for the handshake, replies and heartbeats, on a uvloop loop of its own), and
the deliveries are taken out of the bytes read before pika sees them by the data plane's
:class:`~pumpd.dataplane.implementation.DeliveryReader` (native when built), as the shovel's
relay does. Acks are written as raw ``basic.ack`` frames on the loop's thread. Nothing here
imports pyspark.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

import uvloop

from ....config.uri import parse_uri
from ....dataplane.api import Delivery
from ....dataplane.frames import basic_ack_frame
from ....dataplane.implementation import DeliveryReader
from ....engine.link import Link, open_link
from ....engine.parameters import to_pika_parameters

# how long the consumer waits for the connection to open before read() reports it failed
_OPEN_TIMEOUT = 60.0
# Memory bounds, as the prefetch (a count of messages) does not bound bytes: a micro-batch
# takes bodies up to BATCH_BYTES (at least one message, however large), and the consumer stops
# reading its socket while more than READ_AHEAD_BYTES of bodies wait (TCP holds the broker
# back), reading again below half of it.
BATCH_BYTES = 128 * 1024 * 1024
READ_AHEAD_BYTES = 256 * 1024 * 1024
_HOLD = "spark-read-ahead"


class QueueConsumer:
    """Deliveries of ``queue`` gathered on a thread; :meth:`take` hands them over in order."""

    def __init__(self, uri: str, queue: str, prefetch: int,
                 client_name: str = "pumpd spark queue reader",
                 arguments: Mapping[str, Any] | None = None,
                 read_ahead: int | None = None, count_backlog: bool = False) -> None:
        """:param prefetch: basic.qos's prefetch count; 0 sets none (then bound ``read_ahead``)
        :param arguments: basic.consume's (``x-stream-offset`` for a stream)
        :param read_ahead: the most deliveries gathered and not yet taken: past it the socket is
            not read (TCP holds the broker back) until half of them are taken
        :param count_backlog: count the messages ready in ``queue`` just before consuming
            (:attr:`backlog`; a passive ``queue.declare``)"""
        self.queue = queue
        self._read_ahead = read_ahead
        self._arguments = dict(arguments) if arguments else None
        self._count_backlog = count_backlog
        # the messages ready in the queue just before basic.consume (0 when not counted): as
        # the only consumer, this one receives them all, whatever else is published after
        self.backlog = 0
        self.taken = 0  # deliveries handed out by take()
        self._lock = threading.Lock()
        self._reader: Any = None  # a DeliveryReader once the channel is open
        self._opened = threading.Event()
        self.error: BaseException | None = None
        self._link: Link | None = None
        self._loop = uvloop.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, args=(uri, prefetch, client_name),
                                        name=f"pumpd-queue-{queue}", daemon=True)
        self._thread.start()
        if not self._opened.wait(_OPEN_TIMEOUT) and self.error is None:
            self.error = TimeoutError(f"no connection within {_OPEN_TIMEOUT:.0f} s")
        if self.error is not None:
            self.close()
            raise self.error

    def _run(self, uri: str, prefetch: int, client_name: str) -> None:
        try:
            self._loop.run_until_complete(self._consume(uri, prefetch, client_name))
        except BaseException as exc:  # the connection failed or was closed: read() reports it
            self.error = exc
        finally:
            self._opened.set()
            self._loop.close()

    async def _consume(self, uri: str, prefetch: int, client_name: str) -> None:
        self._stop = asyncio.Event()
        parsed = parse_uri(uri)
        link = await open_link(parsed, to_pika_parameters(parsed, client_name=client_name))
        self._link = link
        try:
            self._reader = DeliveryReader(link.channel_number, link.frame_max)
            link.intercept(self._feed)
            if prefetch:
                await link.qos(prefetch)
            if self._count_backlog:
                self.backlog = await link.queue_length(self.queue)
            await link.consume(self.queue, no_ack=False, arguments=self._arguments)
            self._opened.set()
            stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
            closed: asyncio.Future[Any] = link.closed
            await asyncio.wait({stop, closed}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if link.closed.done():
                raise link.closed.result()
        finally:
            # unacknowledged deliveries go back to the queue with the connection
            await link.close()

    def _feed(self, data: bytes) -> bytes:
        with self._lock:
            rest: bytes = self._reader.feed(data)
            full = self._reader.pending_bytes > READ_AHEAD_BYTES or (
                self._read_ahead is not None and self._reader.pending > self._read_ahead)
        if full and self._link is not None and not self._link.reading_paused:
            self._link.pause_reading(True, _HOLD)
        return rest

    def _read_again(self) -> None:
        """On the loop's thread: read the socket again once the read-ahead has room."""
        link = self._link
        reader = self._reader
        if link is not None and link.reading_paused and \
                reader.pending_bytes <= READ_AHEAD_BYTES // 2 and \
                (self._read_ahead is None or reader.pending <= self._read_ahead // 2):
            link.pause_reading(False, _HOLD)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def pending(self) -> int:
        reader = self._reader
        return int(reader.pending) if reader is not None else 0

    def take(self, most: int, max_bytes: int | None = None) -> list[Delivery]:
        """The first ``most`` deliveries that arrived (fewer when fewer did), in order, no more
        once their bodies reach ``max_bytes`` (default ``BATCH_BYTES``; but always one, however
        large)."""
        if self._reader is None:
            return []
        bound = BATCH_BYTES if max_bytes is None else max(max_bytes, 1)
        with self._lock:
            batch: list[Delivery] = self._reader.take(most, bound)
            self.taken += len(batch)
        # whether there is room now is decided on the loop's thread, which reads the socket
        if self._link is not None and self._link.reading_paused:
            try:
                self._loop.call_soon_threadsafe(self._read_again)
            except RuntimeError:  # the loop ended: the connection is gone
                pass
        return batch

    def wait(self, most: int, pause: float, timeout: float) -> None:
        """Until ``most`` deliveries wait, or some wait and no more came for ``pause`` seconds,
        or none came within ``timeout``, or the consumer stopped."""
        began = time.monotonic()
        seen, since = -1, began
        while self.alive:
            n = self.pending()
            now = time.monotonic()
            if n >= most or (self._reader is not None
                             and self._reader.pending_bytes >= BATCH_BYTES):
                return
            if n != seen:
                seen, since = n, now
            elif n and now - since >= pause:
                return
            if not n and now - began >= timeout:
                return
            time.sleep(0.002 if n else 0.01)

    def ack(self, delivery_tag: int) -> None:
        """Acknowledge every delivery up to ``delivery_tag`` (``multiple``); returns once the
        frame is handed to the connection, so a stop() right after cannot drop it. Nothing when
        the connection is gone (the broker requeued them already)."""
        link = self._link
        if link is None or not self.alive:
            return

        async def write() -> None:
            link.write(basic_ack_frame(link.channel_number, delivery_tag, True))

        try:
            asyncio.run_coroutine_threadsafe(write(), self._loop).result(_OPEN_TIMEOUT)
        except Exception:  # closed meanwhile: the broker requeues what was unacknowledged
            pass

    def close(self) -> None:
        """Stop the consumer and close its connection: what was not acknowledged is requeued."""
        stop = self._stop
        if stop is not None and self._thread.is_alive():
            try:
                self._loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop ended meanwhile
                pass
        if self._thread is not threading.current_thread():
            self._thread.join(_OPEN_TIMEOUT)
        if self._reader is not None:
            with self._lock:
                self._reader.clear()
