"""A stream read over AMQP 0-9-1: ``basic.consume`` with ``x-stream-offset`` and a prefetch.

Every delivery of a stream carries its offset in the header ``x-stream-offset``; the broker
starts a consumer at the offset asked for (3.10 skips the earlier messages of the first chunk)
and gives credit back on ``basic.ack``, so the reader acknowledges every ``prefetch / 2``
deliveries (``multiple``). Where the streams protocol is not enabled this is the only way in,
and it is also how the driver probes a stream's first and next offsets:

- first: the first delivery of a consumer at ``first``; none within ``pollTimeoutMs``: empty;
- next (the tail): a consumer at ``last`` is given the stream's last chunk at once; the tail is
  its greatest offset + 1, read until the deliveries pause. Any offset seen is committed, so a
  tail read early is only older, never wrong; an empty stream costs ``pollTimeoutMs``.

Rows are tuples in :data:`pumpd.spark.read.schema.COLUMNS` order. Nothing here imports pyspark.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pika

from ....config.uri import parse_uri
from ....engine.parameters import to_pika_parameters
from ..arrow import deliveries_batch, properties_of
from ..queue.consumer import QueueConsumer
from ..read_options import ReadOptions

# how long the deliveries of the last chunk may pause before the tail probe stops reading
_TAIL_PAUSE = 0.05
# a probe reads no longer than this (a stream written fast never pauses)
_TAIL_MAX = 0.5
# a read task waits this long for the next offset of its range before it gives up
STALL_SECONDS = 60.0


def connect(uri: str, client_name: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(to_pika_parameters(parse_uri(uri), client_name=client_name))


def _offset(props: Any) -> int:
    return int((props.headers or {})["x-stream-offset"])


class AmqpStreams:
    """One connection to the broker; probes and reads streams over AMQP 0-9-1."""

    def __init__(self, options: ReadOptions, client_name: str = "pumpd spark read") -> None:
        self.options = options
        self.conn = connect(options.uri, client_name)

    def alive(self) -> bool:
        """Whether the connection is still open (a trigger interval longer than the heartbeat
        timeout closes it: nothing reads it in between)."""
        try:
            self.conn.process_data_events(time_limit=0)
        except Exception:  # closed by the broker or the network
            return False
        return bool(self.conn.is_open)

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # already closed by the broker or the network
            pass

    def _consume(self, stream: str, at: Any, prefetch: int,
                 timeout: float) -> Iterator[tuple[Any, Any, bytes] | None]:
        """Deliveries from ``at`` (an x-stream-offset value); None after ``timeout`` idle.

        A callback consumer rather than pika's ``consume()`` generator, whose cancel nacks what
        is pending: stream queues refuse nack and close the connection.
        """
        ch = self.conn.channel()
        arrived: deque[tuple[Any, Any, bytes]] = deque()
        try:
            ch.basic_qos(prefetch_count=prefetch)
            ch.basic_consume(stream, lambda _c, m, p, b: arrived.append((m, p, b)),
                             arguments={"x-stream-offset": at})
            unacked = 0
            every = max(prefetch // 2, 1)
            while True:
                if not arrived:
                    self.conn.process_data_events(time_limit=timeout)
                    if not arrived:
                        yield None
                        continue
                method, props, body = arrived.popleft()
                unacked += 1
                if unacked >= every:
                    ch.basic_ack(method.delivery_tag, multiple=True)
                    unacked = 0
                yield method, props, body
        finally:
            self._drop(ch)

    def _drop(self, ch: Any) -> None:
        """Close a channel without cancelling its consumer first: pika's cancel rejects what
        is pending, and a stream queue answers a reject by closing the connection."""
        impl = ch._impl
        if not (impl.is_open and self.conn.is_open):
            return
        impl.close()
        deadline = time.monotonic() + 5
        while not impl.is_closed and self.conn.is_open and time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=0.05)

    def first_offset(self, stream: str) -> int | None:
        """The stream's first available offset, or None when it holds nothing."""
        for d in self._consume(stream, "first", 1, self.options.poll_timeout):
            return None if d is None else _offset(d[1])
        return None

    def next_offset(self, stream: str) -> int | None:
        """The offset the next message will have, as far as seen; None for an empty stream."""
        best: int | None = None
        began = time.monotonic()
        for d in self._consume(stream, "last", 1000, _TAIL_PAUSE):
            if d is None:
                if best is not None or time.monotonic() - began >= self.options.poll_timeout:
                    break
                continue
            best = max(best or 0, _offset(d[1]) + 1)
            if time.monotonic() - began > _TAIL_MAX:
                break
        return best

    def last_offset(self, stream: str) -> int | None:
        """The first offset of the stream's last chunk (RabbitMQ's ``last``); None: empty."""
        for d in self._consume(stream, "last", 1, self.options.poll_timeout):
            return None if d is None else _offset(d[1])
        return None

    def offset_at(self, stream: str, millis: int) -> int | None:
        """The first offset of the chunk written at or after ``millis``; None: none yet."""
        at = datetime.fromtimestamp(millis / 1000, tz=timezone.utc)
        for d in self._consume(stream, at, 1, self.options.poll_timeout):
            return None if d is None else _offset(d[1])
        return None


def read_batches(options: ReadOptions, stream: str, start: int, end: int) -> Iterator[Any]:
    """A read task's Arrow record batches: offsets ``start`` to ``end - 1`` of ``stream``
    (those the retention left), read by the queue reader's consumer (pumpd's delivery reader on
    a thread, :class:`~pumpd.spark.read.queue.consumer.QueueConsumer`) at ``x-stream-offset``
    ``start``, acknowledging each half prefetch (the stream's credit).

    :raises RuntimeError: when no message comes for :data:`STALL_SECONDS`, or the connection
        fails (Spark then retries the task)
    """
    if start >= end:
        return
    every = max(options.prefetch // 2, 1)
    consumer = QueueConsumer(options.uri, stream, prefetch=options.prefetch,
                             client_name=f"pumpd spark read {stream}",
                             arguments={"x-stream-offset": start})
    try:
        idle_since: float | None = None
        while True:
            consumer.wait(every, _TAIL_PAUSE, 1.0)
            batch = consumer.take(every)
            if not batch:
                if consumer.error is not None:
                    raise RuntimeError(f"pumpd: stream {stream!r}: reading offsets {start} to "
                                       f"{end - 1} failed: {consumer.error}")
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > STALL_SECONDS:
                    raise RuntimeError(f"pumpd: stream {stream!r}: no message at offset {start} "
                                       f"or later for {STALL_SECONDS:.0f} s (range ends at {end})")
                continue
            idle_since = None
            consumer.ack(batch[-1][0])
            props = properties_of(batch) or []  # a stream's deliveries carry their offset
            offsets = [_offset(p) for p in props]
            keep = [i for i, o in enumerate(offsets) if start <= o < end]
            if keep:
                yield deliveries_batch([batch[i] for i in keep], stream, [props[i] for i in keep],
                                       [offsets[i] for i in keep])
            if offsets[-1] >= end - 1:
                return
    finally:
        consumer.close()
