"""RabbitMQ → Spark → RabbitMQ: a stream read, transformed, and published to an exchange.

``python -m pumpd.spark.pipeline --uri URI --stream orders --exchange enriched --checkpoint DIR``

The transformation: each body is a JSON order ``{"n": 7, "kind": "order", "amount": 12.5,
"customer": "c3"}``; rows that do not parse or are not orders are dropped (filter); the rest
get the amount in cents, a size class and the stream and offset they came from (enrich), and go
out as JSON with ``content_type`` set, routed by customer (nothing in a row depends on when it
was computed, so a replayed row is the same bytes).

Its guarantees come from the two sides: the stream reader replays a micro-batch from the offsets
in the checkpoint, and the writer (``messageId=deterministic``) names every message
``{queryId}:{batchId}:{partition}:{row}``, so a micro-batch replayed after a crash publishes
the same messages under the same ids: nothing lost, and what arrives twice carries one id
twice (a consumer that remembers ids, or a deduplicating exchange, drops it).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

ORDER_SCHEMA = "n long, kind string, amount double, customer string"


def transform(df: Any) -> Any:
    """Parse, filter, enrich (see the module docstring); returns the writer's columns."""
    from pyspark.sql import functions as F

    parsed = df.select(F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("o"),
                       "offset", "stream")
    orders = parsed.where((F.col("o.kind") == "order") & F.col("o.amount").isNotNull())
    enriched = orders.select(
        F.col("o.n").alias("n"), F.col("o.customer").alias("customer"),
        F.round(F.col("o.amount") * 100).cast("long").alias("amount_cents"),
        F.when(F.col("o.amount") >= 100, "large").otherwise("small").alias("size"),
        F.col("stream").alias("source_stream"), F.col("offset").alias("source_offset"))
    return enriched.select(
        F.to_json(F.struct(*enriched.columns)).cast("binary").alias("body"),
        F.concat(F.lit("customer."), F.col("customer")).alias("routing_key"),
        F.lit("application/json").alias("content_type"))


def start(spark: Any, *, uri: str, stream: str, exchange: str, checkpoint: str,
          max_records: int = 10_000, available_now: bool = False,
          out_uri: str | None = None, stream_port: int | None = None) -> Any:
    """Start the pipeline's streaming query; returns it."""
    reader = (spark.readStream.format("pumpd").option("uri", uri).option("stream", stream)
              .option("startingOffsets", "first").option("maxRecordsPerTrigger", max_records))
    if stream_port is not None:
        reader = reader.option("streamPort", stream_port)
    source = reader.load()
    writer = (transform(source).writeStream.format("pumpd")
              .option("uri", out_uri or uri).option("exchange", exchange)
              .option("messageId", "deterministic")
              .option("checkpointLocation", checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
        processingTime="200 milliseconds")
    return writer.start()


def session(app: str = "pumpd-spark-pipeline") -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from . import register

    spark = (SparkSession.builder.master("local[2]").appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri", required=True, help="the broker holding the stream")
    ap.add_argument("--out-uri", help="the broker holding the exchange (default: --uri)")
    ap.add_argument("--stream", required=True)
    ap.add_argument("--exchange", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--stream-port", type=int,
                    help="the streams protocol's port (default 5552, 5551 for amqps; read over "
                         "AMQP 0-9-1 when it does not answer)")
    ap.add_argument("--max-records-per-trigger", type=int, default=10_000)
    ap.add_argument("--available-now", action="store_true",
                    help="read what the stream holds now, then stop (Trigger.AvailableNow)")
    args = ap.parse_args(argv)
    spark = session()
    query = start(spark, uri=args.uri, stream=args.stream, exchange=args.exchange,
                  checkpoint=args.checkpoint, max_records=args.max_records_per_trigger,
                  available_now=args.available_now, out_uri=args.out_uri,
                  stream_port=args.stream_port)
    print(f"[pipeline] query {query.id} running", flush=True)
    query.awaitTermination()
    failed = query.exception()
    spark.stop()
    if failed is not None:
        print(f"[pipeline] failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
