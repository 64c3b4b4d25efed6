"""The data source's writers: the batch writer and the streaming writer, the test connection
a write makes on the driver before any task runs, and one task's write and commit message.

Driver: :func:`prepared` checks the options and the schema and opens a test connection
(declarations, then a passive declare of the target exchange, or of the queue a
default-exchange routing key names; with the option ``stream``, a publisher declared and deleted
on the stream; with ``superStream``, on each of its partitions), so a typo, a bad password or a
missing exchange or stream fails ``save()`` / ``start()`` before any task runs. The writer Spark
pickles holds options only, never a connection.

Executors: ``write()`` gets Arrow record batches, publishes them through a
:class:`~pumpd.spark.write.partition.PartitionPublisher` (or, to a stream, a
:class:`~pumpd.spark.write.stream_partition.StreamPartitionPublisher`) and returns once every row
is confirmed, with the counts as its commit message; ``commit()`` / ``abort()`` on the driver
log the totals.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ...config.model import Declaration
from ...publishing.publisher import LinkError, Publisher
from ..redacted import redacting
from .partition import PartitionCounts, PartitionPublisher, check_schema
from .stream_partition import StreamPartitionPublisher, check_stream
from .write_options import WriteOptions, parse_options

log = logging.getLogger("pumpd.spark")

try:  # Spark >= 4.1: the streaming writer on Arrow batches
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # Spark 4.0: rows (slower, same semantics)
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment]


@dataclass
class PartitionCommit(WriterCommitMessage):  # type: ignore[misc]
    """One task's commit message: its partition, attempt and counts."""

    counts: PartitionCounts


def _fields(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def check_connection(options: WriteOptions, schema_names: list[str]) -> None:
    """Connect, run the declarations, and passively declare the target, as a task would.

    :raises ValueError: with the broker's reason (refused, bad credentials, NOT_FOUND, ...)
    """
    checks: list[Declaration] = []
    names = [n.lower() for n in schema_names]
    if options.check_target:
        if options.exchange:
            checks.append(Declaration("exchange.declare",
                                      {"exchange": options.exchange, "passive": True}))
        elif options.routing_key and "routing_key" not in names and "exchange" not in names:
            checks.append(Declaration("queue.declare",
                                      {"queue": options.routing_key, "passive": True}))
    try:
        p = Publisher(options.connect_uris(), mode="none",
                      declarations=[*options.declarations, *checks],
                      confirm_timeout=options.confirm_timeout, client_name="pumpd spark check")
    except (LinkError, OSError) as exc:
        target = (f"exchange {options.exchange!r}" if options.exchange else
                  f"queue {options.routing_key!r} (default exchange)" if checks else "the broker")
        raise ValueError(f"pumpd: the test connection for {target} failed: {exc}") from None
    p.close()


def _log_totals(what: str, messages: list[Any], batch: str = "") -> None:
    counts = [m.counts for m in messages if isinstance(m, PartitionCommit)]
    rows = sum(c.rows for c in counts)
    confirmed = sum(c.confirmed for c in counts)
    skipped = sum(c.skipped for c in counts)
    retried = sum(1 for c in counts if c.attempt > 0 and not c.deduplicated)
    line = (f"pumpd: {what}{batch}: {len(counts)} of {len(messages)} partitions reported, "
            f"{rows} rows published, {confirmed} confirmed"
            + (f", {skipped} already in the stream (not sent again)" if skipped else "")
            + (f", {retried} partitions retried (their first attempts' confirmed rows are "
               "duplicates)" if retried else ""))
    if log.hasHandlers():
        (log.info if what == "commit" else log.warning)(line)
    else:  # Spark runs commit() in a Python worker with no logging set up: its stderr shows
        print(line, file=sys.stderr, flush=True)


def _task() -> tuple[int, int, Any]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, 0, None
    return ctx.partitionId(), ctx.attemptNumber(), ctx


def _micro_batch(ctx: Any) -> tuple[str, int]:
    """The streaming query's id and the micro-batch's, which a restart from the checkpoint
    keeps (a replayed micro-batch has its id again)."""
    query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
    batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    if not query or batch is None:
        raise RuntimeError("pumpd: a streaming write to a stream needs the query id and the "
                           "micro-batch id (a micro-batch query; continuous processing has "
                           "no micro-batch id)")
    return query, int(batch)


def _publish_all(pub: PartitionPublisher | StreamPartitionPublisher, batches: Iterator[Any]
                 ) -> PartitionCommit:
    """A task's Arrow batches (or, from Spark 4.0's streaming writer, rows) through ``pub``,
    confirmed; on any failure the publisher is closed as aborted."""
    try:
        for batch in batches:
            if hasattr(batch, "num_rows"):
                pub.publish_arrow(batch)
            else:  # a Row (Spark 4.0 streaming writer)
                pub.publish_rows([batch, *batches])
        return PartitionCommit(pub.finish())
    except BaseException:
        pub.close(abort=True)
        raise


def _write_stream(options: WriteOptions, batches: Iterator[Any], producer: str | None
                  ) -> PartitionCommit:
    """A task of a write to a stream: a batch write's ``producer`` made on the driver (or given
    by the option producerName), a streaming write's (None) the query id."""
    partition, attempt, ctx = _task()
    batch = 0
    if producer is None:
        query, batch = _micro_batch(ctx)
        producer = f"pumpd-{query}"
    pub = StreamPartitionPublisher(options, producer=producer, batch=batch,
                                   partition=partition, attempt=attempt)
    return _publish_all(pub, batches)


def _write(options: WriteOptions, batches: Iterator[Any], id_prefix: str, streaming: bool,
           ) -> PartitionCommit:
    partition, attempt, ctx = _task()
    if streaming and ctx is not None:
        query = ctx.getLocalProperty("sql.streaming.queryId") or "query"
        batch_id = ctx.getLocalProperty("streaming.sql.batchId") or "0"
        id_prefix = f"{query}:{batch_id}:"
    if attempt > 0:
        log.warning("pumpd: partition %d attempt %d: a retry or a speculative copy; rows the "
                    "earlier attempt had confirmed are published again", partition, attempt)
    pub = PartitionPublisher(options, partition=partition, attempt=attempt,
                             id_prefix=f"{id_prefix}{partition}:")
    return _publish_all(pub, batches)


class PumpdWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """The batch writer: Arrow record batches in, confirmed publishes out."""

    def __init__(self, options: WriteOptions, write_id: str) -> None:
        self.options = options
        self.write_id = write_id

    @redacting
    def write(self, iterator: Iterator[Any]) -> PartitionCommit:
        if self.options.to_streams:
            return _write_stream(self.options, iterator,
                                 self.options.producer_name or f"pumpd-{self.write_id}")
        return _write(self.options, iterator, f"{self.write_id}:0:", streaming=False)

    def commit(self, messages: list[Any]) -> None:
        _log_totals("commit", messages)

    def abort(self, messages: list[Any]) -> None:
        _log_totals("abort", messages)


class PumpdStreamWriter(_StreamWriterBase):  # type: ignore[misc,valid-type]
    """The streaming writer: ids from the query id and the micro-batch id, which a restart from
    the checkpoint keeps, so a replayed micro-batch repeats its message ids."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    @redacting
    def write(self, iterator: Iterator[Any]) -> PartitionCommit:
        if self.options.to_streams:
            return _write_stream(self.options, iterator, None)
        return _write(self.options, iterator, "", streaming=True)

    def commit(self, messages: list[Any], batchId: int) -> None:
        _log_totals("commit", messages, f" of micro-batch {batchId}")

    def abort(self, messages: list[Any], batchId: int) -> None:
        _log_totals("abort", messages, f" of micro-batch {batchId}")


def prepared(options: dict[str, str], schema: StructType, overwrite: bool) -> WriteOptions:
    """A write's options, checked with the schema and a test connection (see the module)."""
    if overwrite:
        raise ValueError('pumpd: save mode "overwrite" is not supported: a queue cannot be '
                         'overwritten; use mode("append")')
    parsed = parse_options(options)
    check_schema(_fields(schema), parsed)
    if parsed.to_streams:
        check_stream(parsed)
    else:
        check_connection(parsed, schema.names)
    return parsed
