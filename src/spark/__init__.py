"""pumpd in Spark: the data source ``pumpd`` and a ``foreachPartition`` helper.

    df.write.format("pumpd").option("uri", "amqp://guest:guest@localhost/%2F") \
        .option("routingKey", "orders").mode("append").save()

The data source needs Spark >= 4.0 (its Python Data Source API) and pyarrow (``pip install
'pumpd[spark]'``); installed, the top-level module ``pyspark_pumpd`` registers it by itself, and
:func:`register` does so explicitly. On Spark 3.x, :func:`publish_partition` in
``foreachPartition`` gives the same semantics. pyspark is imported only by :func:`register`,
:mod:`pumpd.spark.source` and the readers and writers it picks; this package and
:mod:`pumpd.spark.write.partition` do not need it.

At-least-once: a task returns only when every row it published is confirmed; otherwise it
fails, saying how many rows were confirmed, and Spark retries the whole partition, so the rows
confirmed by the failed attempt arrive again (``messageId=deterministic`` gives them the same
message id). See docs/spark.md.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..config.redaction import RedactingFilter
from .redacted import redacting

if TYPE_CHECKING:
    from .write.partition import PartitionCounts, PartitionFailed
    from .write.write_options import WriteOptions, parse_options

__all__ = ["PartitionCounts", "PartitionFailed", "WriteOptions", "parse_options",
           "publish_partition", "register"]

log = logging.getLogger("pumpd.spark")


def __getattr__(name: str) -> Any:
    # The write side is imported when first named: Spark starts a Python process for each
    # streaming query's reader, which needs none of it.
    if name in ("PartitionCounts", "PartitionFailed"):
        from .write import partition

        return getattr(partition, name)
    if name in ("WriteOptions", "parse_options"):
        from .write import write_options

        return getattr(write_options, name)
    raise AttributeError(f"module 'pumpd.spark' has no attribute {name!r}")
# Spark's driver and executors log with their own handlers, not pumpd's redacting formatters.
for _name in ("pumpd.spark", "pumpd.amqp_link"):
    logging.getLogger(_name).addFilter(RedactingFilter())


def register(spark: Any) -> None:
    """Register the data source ``pumpd`` with a SparkSession (Spark >= 4.0); warns when
    speculative execution is on, since a speculative copy of a task publishes its rows again."""
    from .source import PumpdDataSource

    spark.dataSource.register(PumpdDataSource)
    warn_if_speculative(spark)


def warn_if_speculative(spark: Any) -> bool:
    """Warn (and return True) when ``spark.speculation`` is on."""
    try:
        on = str(spark.conf.get("spark.speculation", "false")).lower() == "true"
    except Exception:
        return False
    if on:
        warnings.warn("pumpd: spark.speculation is on: a speculative task attempt publishes its "
                      "whole partition a second time (duplicates; use messageId=deterministic "
                      "to recognise them, or turn speculation off)", stacklevel=2)
    return on


@redacting
def publish_partition(rows: Iterable[Any], **options: Any) -> PartitionCounts:
    """Publish one partition's rows with confirms, for ``df.foreachPartition`` (Spark 3.x).

    ``options`` are the data source's (``uri=..., routingKey=..., messageId="deterministic"``,
    any case). Deterministic ids are ``{writeId}:0:{partition}:{row}`` with ``writeId`` from the
    option ``writeId`` (pass the same value for the whole job; default ``"job"``)::

        df.foreachPartition(lambda rows: publish_partition(rows, uri=URI, routingKey="q"))

    :raises PartitionFailed: when a row was not confirmed (Spark retries the partition)
    :raises ValueError: for a bad option or column
    """
    from .write.partition import PartitionPublisher
    from .write.write_options import parse_options

    write_id = str(options.pop("writeId", options.pop("writeid", "job")))
    parsed = parse_options(options)
    if parsed.to_streams:
        raise ValueError("pumpd options stream and superStream: not for publish_partition, which "
                         "publishes over AMQP 0-9-1 (a stream write needs Spark 4.0's data source)")
    partition, attempt = 0, 0
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None:
            partition, attempt = ctx.partitionId(), ctx.attemptNumber()
    except ImportError:
        pass
    pub = PartitionPublisher(parsed, partition=partition, attempt=attempt,
                             id_prefix=f"{write_id}:0:{partition}:")
    try:
        pub.publish_rows(rows)
        return pub.finish()
    except BaseException:
        pub.close(abort=True)
        raise
