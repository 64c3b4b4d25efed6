"""The publishing clients the confirm-strategy benchmark compares, one class per way of publishing
with confirms: ``pumpd.Publisher``, pika's BlockingConnection and SelectConnection, aio-pika.

A module shared by ``bench/confirms.py`` and ``bench/spark.py`` (which runs pika's publishers inside
Spark's ``foreachPartition``), so that neither script imports the other.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pika
import pika.exceptions
from pumpd import Publisher

CLIENTS = ("pumpd", "pika", "aio-pika")


class Run:
    """What a client does for one run: ``open`` (connect, not timed), ``publish`` (timed: every
    message published and confirmed), ``close``."""

    def __init__(self, uri: str, queue: str, strategy: str, persistent: bool, window: int,
                 batch_size: int) -> None:
        self.uri, self.queue, self.strategy = uri, queue, strategy
        self.persistent, self.window, self.batch_size = persistent, window, batch_size

    def open(self) -> None: ...
    def publish(self, bodies: list[bytes]) -> None: ...
    def close(self) -> None: ...


class PumpdRun(Run):
    def open(self) -> None:
        self.p = Publisher(self.uri, routing_key=self.queue, mode=self.strategy,  # type: ignore[arg-type]
                           window=self.window, batch_size=self.batch_size,
                           client_name="bench pumpd")

    def publish(self, bodies: list[bytes]) -> None:
        self.p.publish_many(bodies, properties={"delivery_mode": 2 if self.persistent else 1})
        self.p.flush()

    def close(self) -> None:
        self.p.close()


class PikaBlockingRun(Run):
    """``individual``: BlockingChannel in confirm mode; each basic_publish waits."""

    def open(self) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(self.uri))
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()

    def publish(self, bodies: list[bytes]) -> None:
        props = pika.BasicProperties(delivery_mode=2 if self.persistent else 1)
        for body in bodies:
            self.ch.basic_publish("", self.queue, body, props)

    def close(self) -> None:
        self.conn.close()


class PikaSelectRun(Run):
    """``batch`` / ``async``: SelectConnection with a delivery-confirmation callback."""

    def open(self) -> None:
        self.error: str | None = None
        self.conn = pika.SelectConnection(
            pika.URLParameters(self.uri), on_open_callback=self._opened,
            on_open_error_callback=self._failed, on_close_callback=self._failed)
        self.conn.ioloop.start()  # stopped once confirm.select-ok arrives
        if self.error:
            raise RuntimeError(self.error)

    def _failed(self, _conn: Any, exc: BaseException) -> None:
        self.error = f"pika: {exc!r}"
        self.conn.ioloop.stop()

    def _opened(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._channel)

    def _channel(self, ch: Any) -> None:
        self.ch = ch
        ch.confirm_delivery(self._on_confirm, callback=lambda _f: self.conn.ioloop.stop())

    def publish(self, bodies: list[bytes]) -> None:
        self.bodies, self.sent, self.next_tag = bodies, 0, 1
        self.deliveries: collections.deque[int] = collections.deque()
        self.singles: set[int] = set()
        self.props = pika.BasicProperties(delivery_mode=2 if self.persistent else 1)
        self.conn.ioloop.add_callback_threadsafe(self._pump)
        self.conn.ioloop.start()
        if self.error:
            raise RuntimeError(self.error)

    def _outstanding(self) -> int:
        return len(self.deliveries) - len(self.singles)

    def _pump(self) -> None:
        limit = self.batch_size if self.strategy == "batch" else self.window
        if self.strategy == "batch" and self._outstanding():
            return
        n = len(self.bodies)
        while self.sent < n and self._outstanding() < limit:
            self.ch.basic_publish("", self.queue, self.bodies[self.sent], self.props)
            self.deliveries.append(self.next_tag)
            self.next_tag += 1
            self.sent += 1
        if self.sent >= n and not self._outstanding():
            self.conn.ioloop.stop()

    def _on_confirm(self, frame: Any) -> None:
        m = frame.method
        if isinstance(m, pika.spec.Basic.Nack):
            self.error = f"pika: nack {m.delivery_tag}"
        d = self.deliveries
        if m.multiple:
            while d and d[0] <= m.delivery_tag:
                self.singles.discard(d.popleft())
        else:
            self.singles.add(m.delivery_tag)
            while d and d[0] in self.singles:
                self.singles.discard(d.popleft())
        if (self.strategy == "async" and self._outstanding() <= self.window // 2) \
                or not self._outstanding():
            self._pump()

    def close(self) -> None:
        self.conn.close()
        self.conn.ioloop.start()  # until closed (the close callback stops it)


class AioPikaRun(Run):
    def open(self) -> None:
        import aio_pika

        self.aio_pika = aio_pika
        self.loop = asyncio.new_event_loop()

        async def connect() -> None:
            self.conn = await aio_pika.connect(self.uri)
            self.ch = await self.conn.channel(publisher_confirms=True)

        self.loop.run_until_complete(connect())

    def publish(self, bodies: list[bytes]) -> None:
        self.loop.run_until_complete(self._publish(bodies))

    async def _publish(self, bodies: list[bytes]) -> None:
        aio_pika, ex, q = self.aio_pika, self.ch.default_exchange, self.queue
        mode = (aio_pika.DeliveryMode.PERSISTENT if self.persistent
                else aio_pika.DeliveryMode.NOT_PERSISTENT)
        if self.strategy == "individual":
            for body in bodies:
                await ex.publish(aio_pika.Message(body, delivery_mode=mode), routing_key=q)
        elif self.strategy == "batch":
            for i in range(0, len(bodies), self.batch_size):
                await asyncio.gather(*(
                    ex.publish(aio_pika.Message(b, delivery_mode=mode), routing_key=q)
                    for b in bodies[i : i + self.batch_size]))
        else:
            # a task per publish, at most `window` of them unconfirmed
            room = asyncio.Semaphore(self.window)
            tasks = []
            for body in bodies:
                await room.acquire()
                task = asyncio.ensure_future(
                    ex.publish(aio_pika.Message(body, delivery_mode=mode), routing_key=q))
                task.add_done_callback(lambda _t: room.release())
                tasks.append(task)
            await asyncio.gather(*tasks)

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


def make_run(client: str, strategy: str, **kw: Any) -> Run:
    if client == "pumpd":
        return PumpdRun(strategy=strategy, **kw)
    if client == "pika":
        return (PikaBlockingRun if strategy == "individual" else PikaSelectRun)(
            strategy=strategy, **kw)
    if client == "aio-pika":
        return AioPikaRun(strategy=strategy, **kw)
    raise SystemExit(f"unknown client {client!r} (clients: {', '.join(CLIENTS)})")
