"""The queue reader (classic and quorum queues): at-least-once, each micro-batch acknowledged
once Spark is past it.

Where the consumer lives: a queue, unlike a stream, has no offsets a read task could start
from; what Spark replays must be what this consumer holds unacknowledged. So the consumer runs in
the one Python process Spark keeps beside the driver for a stream reader's offsets and commits,
for the life of the query: one connection, one consumer, reading on its own thread
(:class:`~pumpd.spark.read.queue.consumer.QueueConsumer`) while Spark works.
``latestOffset()`` takes the deliveries that arrive, up to the micro-batch's bound (see
:data:`~pumpd.spark.read.read_options.QUEUE_BATCH_DEFAULT`; it waits up to ``pollTimeoutMs``
for the first), building their Arrow record batches a chunk at a time while the next chunk
arrives, and answers the count of deliveries handed to Spark so far. The consumer counts the
messages ready in the queue when it starts (the backlog): a micro-batch ends as soon as the
backlog's last message is in, and a pause of the broker's within the backlog must last
``BACKLOG_PAUSE`` to end one early. ``partitions()`` hands those batches to the read tasks
inside their partitions, as LZ4-compressed Arrow IPC streams (each at most :data:`PART_BYTES`
before compression), joined into :data:`READ_TASKS` partitions of at most :data:`PART_BYTES`
each;
a micro-batch is acknowledged with one ``basic.ack(multiple=true)`` for its last delivery tag
once Spark is past it: at the next ``latestOffset()`` (Spark asks for a micro-batch only after
the sink and the checkpoint have the one before), or at its ``commit(end)`` if that comes first.
A crash, a failed batch or ``query.stop()`` before that closes the connection with the
deliveries unacknowledged: the broker requeues them (``redelivered`` is then true), and the
next run reads them again (at-least-once; a batch replayed from the checkpoint by a new process
is empty, since its messages are back in the queue).

Why the rows travel in the partitions rather than through Spark's simple stream reader, whose
rows the driver stores in its block manager: that store serialises and copies every row, which
cost Spark more per row than reading the queue did; a read task's Arrow batches go to the JVM as
columns.

Why no ``basic.qos`` by default: a micro-batch can be acknowledged only once Spark is past it,
so a prefetch of a batch or two kept the broker waiting for acks while Spark worked, and
``basic.qos`` cannot exceed 65,535. Instead the consumer stops reading its socket while a
micro-batch's bound of deliveries (or ``READ_AHEAD_BYTES`` of bodies) waits untaken, and TCP
holds the broker back. What is unacknowledged at once is then at most two micro-batches: the
one Spark runs and the read-ahead. With the option ``prefetch``, it is ``basic.qos`` (twice the
micro-batch's bound), as before.

Limits: one consumer, so one core's worth of reading, and every delivery passes through that
one process; order is the queue's, except that requeued messages come back ahead of newer ones
(classic) or behind them (quorum).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from ....dataplane.api import Delivery
from ..arrow import deliveries_batch
from ..read_options import QUEUE_BATCH_DEFAULT, ReadOptions
from .consumer import BATCH_BYTES, QueueConsumer

# After the first delivery of a micro-batch, stop waiting for more once they pause this long
# (longer than the broker's own hiccups under load: a batch cut at a hiccup costs Spark a
# micro-batch's fixed cost). With a backlog the wait ends at the bound: the consumer goes on
# reading while Spark runs the batch, so Spark's time hides behind the reading's.
_PAUSE = 0.25
# Within the backlog counted at the start, more is known to come: a micro-batch ends early only
# after a pause this long (a loaded broker stalls for most of a second; another consumer of the
# queue may have taken the rest).
BACKLOG_PAUSE = 1.0
# a micro-batch is taken and built into Arrow in chunks of this many deliveries while the rest
# arrive, so only its last chunk's building is left when it is complete
CHUNK = 50_000
# the most Arrow IPC bytes one partition carries to its read task (Spark sends a task whole;
# a cluster refuses tasks over spark.rpc.message.maxSize, 128 MiB by default)
PART_BYTES = 16 * 1024 * 1024
# A micro-batch's chunks are joined into this many read tasks, or more when the bytes need it:
# each task costs Spark a fixed few tens of ms, and a task unpacks on one core, so two let two
# cores unpack at once.
READ_TASKS = 2
# how long the reader tries to connect again after its connection failed, before the query fails
RECONNECT_SECONDS = 60.0


@dataclass(frozen=True)
class QueueRows(InputPartition):  # type: ignore[misc]
    """A read task's share of a micro-batch: its rows as Arrow IPC streams one after the
    other (empty: none)."""

    arrow: bytes


def arrow_parts(batch: Any, most_bytes: int = PART_BYTES) -> list[QueueRows]:
    """``batch`` (an Arrow record batch) as partitions of about ``most_bytes`` or less each
    before compression (at least one row each, however large). LZ4-compressed when pyarrow
    has it: the columns a queue leaves null shrink to nearly nothing on their way to a task."""
    import pyarrow as pa

    n = batch.num_rows
    parts = max(1, min(n, -(-batch.nbytes // most_bytes)))
    options = pa.ipc.IpcWriteOptions(compression="lz4" if pa.Codec.is_available("lz4") else None)
    out: list[QueueRows] = []
    for i in range(parts):
        first, last = i * n // parts, (i + 1) * n // parts
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
            writer.write_batch(batch.slice(first, last - first))
        out.append(QueueRows(sink.getvalue().to_pybytes()))
    return out


def joined(parts: Sequence[QueueRows], tasks: int = READ_TASKS,
           most_bytes: int = PART_BYTES) -> list[QueueRows]:
    """Consecutive ``parts`` joined into ``tasks`` partitions (fewer when there are fewer
    parts), in order; more when joining would take one over ``most_bytes`` (a part over it
    alone stays alone)."""
    per = -(-len(parts) // max(1, tasks))  # parts per partition, rounded up
    out: list[QueueRows] = []
    streams: list[bytes] = []
    size = 0
    for part in parts:
        if streams and (len(streams) >= per or size + len(part.arrow) > most_bytes):
            out.append(QueueRows(b"".join(streams)))
            streams, size = [], 0
        streams.append(part.arrow)
        size += len(part.arrow)
    if streams:
        out.append(QueueRows(b"".join(streams)))
    return out


def rows_of(part: QueueRows) -> Iterator[Any]:
    """A partition's Arrow record batches, as the read task hands them to Spark."""
    if not part.arrow:
        return iter(())
    import pyarrow as pa

    source = pa.BufferReader(part.arrow)
    batches: list[Any] = []
    while source.tell() < len(part.arrow):  # each stream ends where the next begins
        batches += pa.ipc.open_stream(source)
    return iter(batches)


def batch_goal(batch_max: int, backlog: int, taken: int) -> tuple[int, float]:
    """A micro-batch's most deliveries and the pause in their arrival that ends it early,
    given the bound, the backlog counted when the consumer started and the deliveries taken
    since: within the backlog, the rest of it (up to the bound), as it is known to come; past
    it, the bound, ended by a pause of ``_PAUSE``."""
    rest = backlog - taken
    if rest > 0:
        return min(batch_max, rest), BACKLOG_PAUSE
    return batch_max, _PAUSE


class PumpdQueueReader(DataSourceStreamReader):  # type: ignore[misc]
    """``spark.readStream.format("pumpd").option("queue", ...)``: see the module docstring.

    Spark makes one in the process beside the driver (offsets, partitions, commits: it holds
    the consumer) and pickles another into each read task, which only unpacks its partition."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.batch_max = (options.max_records_per_trigger or options.prefetch
                          or QUEUE_BATCH_DEFAULT)
        # basic.qos: the option prefetch's, else none (the read-ahead bounds what waits here)
        self.qos = 2 * self.batch_max if options.prefetch else 0
        self._consumer: QueueConsumer | None = None
        self._failing_since: float | None = None  # when reconnecting began to fail
        self._delivered = 0  # the offset: deliveries handed to Spark
        # end offset -> (start offset, the batch's partitions, its last delivery tag)
        self._batches: dict[int, tuple[int, list[QueueRows], int]] = {}

    def __getstate__(self) -> dict[str, Any]:
        # a read task needs none of the driver's state (a consumer's thread cannot be pickled)
        return {"options": self.options, "batch_max": self.batch_max, "qos": self.qos,
                "_consumer": None, "_failing_since": None, "_delivered": 0, "_batches": {}}

    def _consuming(self) -> QueueConsumer | None:
        """The consumer, opened again if its connection failed. The first connection's failure
        fails the query (a wrong URI, password or queue is said at once); a later one is tried
        again at each trigger for ``RECONNECT_SECONDS`` (a broker restarting, a network
        blip), with a line on stderr, and then fails the query."""
        if self._consumer is not None and self._consumer.alive:
            return self._consumer
        had_one = self._consumer is not None or self._failing_since is not None
        self._close()
        self._forget()  # the old connection's deliveries are back in the queue
        try:
            self._consumer = QueueConsumer(self.options.uri, self.options.queue,
                                           prefetch=self.qos, read_ahead=self.batch_max,
                                           count_backlog=True)
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

    def _forget(self) -> None:
        """Drop the batches not yet committed: their rows stay readable by the tasks that
        were planned (they are in their partitions), and nothing will acknowledge them."""
        self._batches = {e: (s, parts, 0) for e, (s, parts, _) in self._batches.items()}

    def initialOffset(self) -> dict[str, int]:
        # the consumer starts now, so the first micro-batch arrives while Spark plans it
        self._consuming()
        return {"delivered": 0}

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None
                     ) -> dict[str, int]:
        """The micro-batch: whatever arrived, up to its bound (Spark >= 4.2 gives ``start``;
        before, the offset it restarted from comes through ``partitions(at, at)``)."""
        if start is not None:
            self._delivered = max(self._delivered, int(start["delivered"]))
        a = self._delivered
        # Spark asks for a micro-batch only once the one before has gone through the sink, so
        # that one's deliveries can be acknowledged now rather than at commit(), which comes
        # after this call has gathered a whole micro-batch: the broker holds a micro-batch
        # fewer unacknowledged, and a large set of unacknowledged deliveries costs a classic
        # queue CPU for each one.
        self._ack_through(a)
        consumer = self._consuming()
        if consumer is None:
            time.sleep(self.options.poll_timeout)  # not a busy loop of connection attempts
            return {"delivered": a}
        parts, count, tag = self._gather(consumer)
        if not count:  # a consumer whose connection failed is opened again at the next trigger
            return {"delivered": a}
        end = a + count
        self._batches[end] = (a, parts, tag)
        self._delivered = end
        return {"delivered": end}

    def _gather(self, consumer: QueueConsumer) -> tuple[list[QueueRows], int, int]:
        """A micro-batch's partitions, its count of deliveries and its last delivery tag: up
        to ``batch_max`` deliveries and ``BATCH_BYTES`` of bodies, each chunk built while the
        next arrives; it ends at once when the rest of the backlog is in, and early once
        deliveries pause (see :func:`batch_goal`)."""
        parts: list[QueueRows] = []
        count = size = tag = 0
        goal, pause = batch_goal(self.batch_max, consumer.backlog, consumer.taken)
        while count < goal and size < BATCH_BYTES:
            most = min(CHUNK, goal - count)
            consumer.wait(most, pause, pause if count else self.options.poll_timeout)
            chunk: list[Delivery] = consumer.take(most, BATCH_BYTES - size)
            if not chunk:
                break
            parts += arrow_parts(deliveries_batch(chunk, self.options.queue))
            count += len(chunk)
            size += sum(len(d[5]) for d in chunk)
            tag = chunk[-1][0]
            if len(chunk) < most:  # they paused, or the bytes are reached
                break
        return joined(parts), count, tag

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[QueueRows]:
        a, e = int(start["delivered"]), int(end["delivered"])
        if a == e:  # Spark restarting from its checkpoint says where it is
            self._delivered = max(self._delivered, e)
            return []
        held = self._batches.get(e)
        if held is None or held[0] != a:
            # a batch replayed after a restart: its messages went back to the queue when the
            # old connection closed, and later batches read them again
            return [QueueRows(b"")]
        return held[1]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueueRows)
        return rows_of(partition)

    def commit(self, end: dict[str, int]) -> None:
        self._ack_through(int(end["delivered"]))

    def _ack_through(self, end: int) -> None:
        """One ``basic.ack(multiple=true)`` for the batches that end at or before ``end``
        (nothing when they are acked already), and forget them."""
        done = [e for e in self._batches if e <= end]
        tag = max((self._batches[e][2] for e in done), default=0)
        for e in done:
            del self._batches[e]
        if tag and self._consumer is not None:
            self._consumer.ack(tag)

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        self._consumer = None

    def stop(self) -> None:
        self._close()
