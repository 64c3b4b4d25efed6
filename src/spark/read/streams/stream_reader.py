"""The stream reader: ``spark.readStream`` / ``spark.read`` of RabbitMQ streams; imports pyspark.

Offsets are the streams' own: Spark's offset is ``{stream: next offset to read}``, one entry per
stream (several streams read together are the partitions of one source). On the driver,
:meth:`PumpdStreamReader.latestOffset` probes each stream's tail (admission control:
``maxRecordsPerTrigger`` caps a micro-batch, shared evenly over the streams) and
:meth:`~PumpdStreamReader.partitions` cuts ``[start, end)`` of each stream into ranges of offsets
(``minPartitions`` per stream); the tasks read their ranges on the executors and stop at the end
of the range. Nothing but the checkpoint remembers where a query is: replaying a micro-batch reads
the same offsets again, so a query is exactly-once up to an idempotent or transactional sink.

Retention may remove what a checkpoint points at: :meth:`~PumpdStreamReader.partitions` compares
the start with the stream's first offset and, with ``failOnDataLoss=true`` (the default), fails
naming both; with ``false`` it warns and reads from the first available offset.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from ..read_options import ReadOptions
from .amqp091 import AmqpStreams, read_batches

log = logging.getLogger("pumpd.spark")

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # Spark 4.0, 4.1: every micro-batch reads all there is
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]


@dataclass(frozen=True)
class OffsetRange(InputPartition):  # type: ignore[misc]
    """One task's share: offsets ``start`` to ``end - 1`` of ``stream``."""

    stream: str
    start: int
    end: int


class Probe(Protocol):
    """What the driver asks of a stream: :class:`AmqpStreams` or, over the streams protocol,
    :class:`pumpd.spark.read.streams.protocol.StreamProbe`."""

    def first_offset(self, stream: str) -> int | None: ...
    def next_offset(self, stream: str) -> int | None: ...
    def last_offset(self, stream: str) -> int | None: ...
    def offset_at(self, stream: str, millis: int) -> int | None: ...
    def alive(self) -> bool: ...
    def close(self) -> None: ...


def probe(options: ReadOptions) -> Probe:
    if options.protocol == "stream":
        from .protocol import StreamProbe

        return StreamProbe(options)
    return AmqpStreams(options, client_name="pumpd spark read (driver)")


def _say(line: str, warn: bool = False) -> None:
    if log.hasHandlers():
        (log.warning if warn else log.info)(line)
    else:  # the Python worker that runs the reader on the driver has no logging set up
        print(line, file=sys.stderr, flush=True)


def start_offset(client: Probe, options: ReadOptions, stream: str) -> int:
    """``startingOffsets`` / ``startingTimestamp`` as an offset of ``stream``."""
    if options.starting_timestamp is not None:
        at = client.offset_at(stream, options.starting_timestamp)
        return at if at is not None else client.next_offset(stream) or 0
    if options.starting == "first":
        return client.first_offset(stream) or 0
    if options.starting == "last":
        return client.last_offset(stream) or 0
    if options.starting == "next":
        return client.next_offset(stream) or 0
    # an offset before the first one (retention, or a stream that begins with a non-message
    # entry) starts at the first: a query's own start is no data loss
    return max(int(options.starting), client.first_offset(stream) or 0)


def split(options: ReadOptions, starts: dict[str, int], ends: dict[str, int],
          client: Probe) -> list[OffsetRange]:
    """Ranges for the tasks, after the data-loss check (see the module docstring)."""
    out: list[OffsetRange] = []
    for stream in options.streams:
        a, b = int(starts.get(stream, 0)), int(ends.get(stream, 0))
        if a >= b:
            continue
        first = client.first_offset(stream)
        if first is not None and a < first:
            lost = f"offsets {a} to {first - 1}" if first - 1 > a else f"offset {a}"
            text = (f"pumpd: stream {stream!r}: {lost} no longer exist (retention removed them; "
                    f"the first available offset is {first})")
            if options.fail_on_data_loss:
                raise RuntimeError(f"{text}; failOnDataLoss=true: the query stops (set it to "
                                   "false to go on from the first available offset)")
            _say(f"{text}; failOnDataLoss=false: reading from offset {first}", warn=True)
            a = first
            if a >= b:
                continue
        n = max(1, min(options.min_partitions, b - a))
        step, extra = divmod(b - a, n)
        lo = a
        for i in range(n):
            hi = lo + step + (1 if i < extra else 0)
            out.append(OffsetRange(stream, lo, hi))
            lo = hi
    return out


def read_range(options: ReadOptions, part: OffsetRange) -> Iterator[Any]:
    """A task's rows, as Arrow record batches: Spark takes them without converting a row."""
    if options.protocol == "stream":
        from .protocol import read

        return read(options, part.stream, part.start, part.end)
    return read_batches(options, part.stream, part.start, part.end)


class PumpdStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """``spark.readStream.format("pumpd").option("stream", ...)``: see the module docstring."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._client: Probe | None = None
        self._target: dict[str, int] | None = None  # Trigger.AvailableNow: where to stop

    @property
    def client(self) -> Probe:
        """The driver's connection for probes, opened again when it may be lost."""
        if self._client is not None and not self._client.alive():
            self._client.close()
            self._client = None
        if self._client is None:
            self._client = probe(self.options)
        return self._client

    def initialOffset(self) -> dict[str, int]:
        return {s: start_offset(self.client, self.options, s) for s in self.options.streams}

    def _tails(self) -> dict[str, int]:
        return {s: self.client.next_offset(s) or 0 for s in self.options.streams}

    def getDefaultReadLimit(self) -> Any:  # called by Spark >= 4.2 only
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        n = self.options.max_records_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None
                     ) -> dict[str, int]:
        tails = self._target if self._target is not None else self._tails()
        start = start or {}
        out: dict[str, int] = {}
        cap: int | None = getattr(limit, "max_rows", None)  # ReadMaxRows (Spark >= 4.2)
        share = None if cap is None else max(1, cap // len(self.options.streams))
        for s in self.options.streams:
            a = int(start.get(s, 0))
            end = max(a, tails.get(s, a))
            out[s] = end if share is None else min(end, a + share)
        return out

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._tails()

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[OffsetRange]:
        return split(self.options, start, end, self.client)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        pass  # the checkpoint is the record of what was read; the streams keep everything

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class PumpdBatchReader(DataSourceReader):  # type: ignore[misc]
    """``spark.read.format("pumpd").option("stream", ...)``: ``startingOffsets`` to
    ``endingOffsets`` (``next``: the tail when the query is planned)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[OffsetRange]:
        client = probe(self.options)
        try:
            starts = {s: start_offset(client, self.options, s) for s in self.options.streams}
            if self.options.ending == "next":
                ends = {s: client.next_offset(s) or 0 for s in self.options.streams}
            else:
                ends = dict.fromkeys(self.options.streams, int(self.options.ending))
            parts = split(self.options, starts, ends, client)
        finally:
            client.close()
        return parts or [OffsetRange(self.options.streams[0], 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.options, partition)
