"""The queue reader (classic and quorum queues): at-least-once, acknowledged on ``commit()``.

Where the consumer lives: a queue, unlike a stream, has no offsets to hand to executors; what
Spark replays must be what this consumer holds unacknowledged. So the reader is Spark's *simple*
stream reader, which runs in one Python process beside the driver for the life of the query:
it holds one connection and one consumer. ``read()`` takes the deliveries that arrived (up to
``maxRecordsPerTrigger``, or ``prefetch``; it waits up to ``pollTimeoutMs`` for the first) and returns them as the micro-batch, its offset being the count
of deliveries handed to Spark so far; ``commit(end)`` runs after Spark has committed the
micro-batch to the sink and checkpoint, and sends one ``basic.ack(multiple=true)`` for its last
delivery tag. A crash, a failed batch or ``query.stop()`` before that closes the connection with
the deliveries unacknowledged: the broker requeues them (``redelivered`` is then true), and the
next run reads them again (at-least-once; a batch replayed from the checkpoint by a new process
is empty, since its messages are back in the queue).

Limits: one consumer, so one core's worth of reading, and every row passes through the driver's
Python worker; order is the queue's, except that requeued messages come back ahead of newer ones
(classic) or behind them (quorum). Spark commits a micro-batch only when it plans the next one
with data, so ``basic.qos`` is twice the micro-batch's bound (room for the next one while this
one waits for its ack), and the last micro-batch before a quiet spell stays unacknowledged until
more messages come: stopping the query then requeues it (read twice: at-least-once).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import SimpleDataSourceStreamReader

from .read_options import ReadOptions
from .read_schema import row_of
from .stream_amqp import connect

# after the first delivery of a micro-batch, stop taking more once they pause this long
_PAUSE = 0.05


class PumpdQueueReader(SimpleDataSourceStreamReader):  # type: ignore[misc]
    """``spark.readStream.format("pumpd").option("queue", ...)``: see the module docstring."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.batch_max = options.max_records_per_trigger or options.prefetch
        self._conn: Any = None
        self._ch: Any = None
        self._arrived: list[tuple[Any, Any, bytes]] = []
        # end offset (deliveries handed to Spark) -> the last delivery tag of that batch
        self._tags: dict[int, int] = {}
        self._base = 0  # deliveries of this connection count from this offset

    def _channel(self, start: int) -> Any:
        if self._ch is None or not self._ch.is_open:
            self._close()
            self._conn = connect(self.options.uri, "pumpd spark queue reader")
            self._ch = self._conn.channel()
            # Spark commits a micro-batch when it plans the next one: the prefetch must leave
            # room for that next one while this one waits for its ack
            self._ch.basic_qos(prefetch_count=2 * self.batch_max)
            self._ch.basic_consume(self.options.queue, self._on_delivery)
            self._base = start
            self._tags.clear()
        return self._ch

    def _on_delivery(self, _ch: Any, method: Any, props: Any, body: bytes) -> None:
        self._arrived.append((method, props, body))

    def initialOffset(self) -> dict[str, int]:
        return {"delivered": 0}

    def read(self, start: dict[str, int]) -> tuple[Iterator[tuple[Any, ...]], dict[str, int]]:
        a = int(start["delivered"])
        self._channel(a)
        began = time.monotonic()
        seen = -1
        while len(self._arrived) < self.batch_max:
            if self._arrived and len(self._arrived) == seen:
                break  # the deliveries paused: take what came
            seen = len(self._arrived)
            if not self._arrived and time.monotonic() - began >= self.options.poll_timeout:
                break
            self._conn.process_data_events(time_limit=_PAUSE)
        batch, self._arrived = self._arrived[:self.batch_max], self._arrived[self.batch_max:]
        if not batch:
            return iter(()), start
        end = a + len(batch)
        self._tags[end] = batch[-1][0].delivery_tag
        rows = [row_of(m, p, b, None, self.options.queue) for m, p, b in batch]
        return iter(rows), {"delivered": end}

    def readBetweenOffsets(self, start: dict[str, int], end: dict[str, int]
                           ) -> Iterator[tuple[Any, ...]]:
        # A batch replayed after a restart: its messages went back to the queue when the old
        # connection closed, and later batches read them again.
        return iter(())

    def commit(self, end: dict[str, int]) -> None:
        e = int(end["delivered"])
        tag = self._tags.pop(e, None)
        for k in [k for k in self._tags if k < e]:
            del self._tags[k]
        if tag is not None and self._ch is not None and self._ch.is_open:
            self._ch.basic_ack(tag, multiple=True)
            self._conn.process_data_events(time_limit=0)

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # closed already: the broker requeued what was unacknowledged
                pass
        self._conn = self._ch = None
        self._arrived.clear()

    def stop(self) -> None:
        self._close()
