"""The queue reader (classic and quorum queues): at-least-once, acknowledged on ``commit()``.

Where the consumer lives: a queue, unlike a stream, has no offsets to hand to executors; what
Spark replays must be what this consumer holds unacknowledged. So the reader is Spark's *simple*
stream reader, which runs in one Python process beside the driver for the life of the query:
it holds one connection and one consumer, which reads on its own thread
(:class:`~pumpd.spark.read.queue.consumer.QueueConsumer`) while Spark works. ``read()`` takes the
deliveries that arrived (up to ``maxRecordsPerTrigger``, or ``prefetch``; it waits up to
``pollTimeoutMs`` for the first) and returns them as the micro-batch, one Arrow record batch,
its offset being the count of deliveries handed to Spark so far; ``commit(end)`` runs after
Spark has committed the micro-batch to the sink and checkpoint, and sends one
``basic.ack(multiple=true)`` for its last delivery tag. A crash, a failed batch or ``query.stop()`` before that closes the connection with
the deliveries unacknowledged: the broker requeues them (``redelivered`` is then true), and the
next run reads them again (at-least-once; a batch replayed from the checkpoint by a new process
is empty, since its messages are back in the queue).

Limits: one consumer, so one core's worth of reading (pika's parsing), and every row passes
through the driver's Python worker; order is the queue's, except that requeued messages come back ahead of newer ones
(classic) or behind them (quorum). Spark commits a micro-batch only when it plans the next one
with data, so ``basic.qos`` is twice the micro-batch's bound (room for the next one while this
one waits for its ack), and the last micro-batch before a quiet spell stays unacknowledged until
more messages come: stopping the query then requeues it (read twice: at-least-once).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import SimpleDataSourceStreamReader

from ..arrow import deliveries_batch
from ..read_options import ReadOptions
from .consumer import QueueConsumer

# after the first delivery of a micro-batch, stop waiting for more once they pause this long
# (longer than the broker's own hiccups under load, 50 to 100 ms here: each micro-batch costs
# Spark a few hundred ms whatever its size, so a batch cut at a hiccup is expensive)
_PAUSE = 0.25
# how long the reader tries to connect again after its connection failed, before the query fails
RECONNECT_SECONDS = 60.0


class PumpdQueueReader(SimpleDataSourceStreamReader):  # type: ignore[misc]
    """``spark.readStream.format("pumpd").option("queue", ...)``: see the module docstring."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.batch_max = options.max_records_per_trigger or options.prefetch
        self._consumer: QueueConsumer | None = None
        self._failing_since: float | None = None  # when reconnecting began to fail
        # end offset (deliveries handed to Spark) -> the last delivery tag of that batch
        self._tags: dict[int, int] = {}

    def _consuming(self) -> QueueConsumer | None:
        """The consumer, opened again if its connection failed. The first connection's failure
        fails the query (a wrong URI, password or queue is said at once); a later one is tried
        again at each trigger for ``RECONNECT_SECONDS`` (a broker restarting, a network
        blip), with a line on stderr, and then fails the query."""
        if self._consumer is not None and self._consumer.alive:
            return self._consumer
        had_one = self._consumer is not None or self._failing_since is not None
        self._close()
        self._tags.clear()  # the old connection's deliveries are back in the queue
        try:
            # Spark commits a micro-batch when it plans the next one: the prefetch must leave
            # room for that next one while this one waits for its ack
            self._consumer = QueueConsumer(self.options.uri, self.options.queue,
                                           prefetch=2 * self.batch_max)
        except Exception as exc:
            now = time.monotonic()
            self._failing_since = self._failing_since or now
            if not had_one or now - self._failing_since > RECONNECT_SECONDS:
                raise
            print(f"pumpd: the queue reader's connection to {self.options.queue!r} failed "
                  f"({exc}); trying again at the next trigger", file=sys.stderr, flush=True)
            return None
        self._failing_since = None
        return self._consumer

    def initialOffset(self) -> dict[str, int]:
        # the consumer starts now, so the first micro-batch arrives while Spark plans it
        self._consuming()
        return {"delivered": 0}

    def read(self, start: dict[str, int]) -> tuple[Iterator[Any], dict[str, int]]:
        a = int(start["delivered"])
        consumer = self._consuming()
        if consumer is None:
            time.sleep(self.options.poll_timeout)  # not a busy loop of connection attempts
            return iter(()), start
        consumer.wait(self.batch_max, _PAUSE, self.options.poll_timeout)
        batch = consumer.take(self.batch_max)
        if not batch:  # a consumer whose connection failed is opened again at the next trigger
            return iter(()), start
        end = a + len(batch)
        self._tags[end] = batch[-1][0]
        # a list's iterator: Spark copies it (copy.copy) to replay its cache; a generator
        # could not be copied
        return iter([deliveries_batch(batch, self.options.queue)]), {"delivered": end}

    def readBetweenOffsets(self, start: dict[str, int], end: dict[str, int]
                           ) -> Iterator[Any]:
        # A batch replayed after a restart: its messages went back to the queue when the old
        # connection closed, and later batches read them again.
        return iter(())

    def commit(self, end: dict[str, int]) -> None:
        e = int(end["delivered"])
        tag = self._tags.pop(e, None)
        for k in [k for k in self._tags if k < e]:
            del self._tags[k]
        if tag is not None and self._consumer is not None:
            self._consumer.ack(tag)

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        self._consumer = None

    def stop(self) -> None:
        self._close()
