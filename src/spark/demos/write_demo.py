"""``make spark-demo`` / ``python -m pumpd.spark.demos.write_demo``: a generated DataFrame published through
the data source ``pumpd`` into a queue, with the rate and a count of what arrived.

Starts a private RabbitMQ node (``--local``: the broker on 127.0.0.1:5672 as guest, vhost /) and
a SparkSession ``local[2]``; generates ``--rows`` rows (64-byte bodies), caches them, writes them
with ``df.write.format("pumpd")`` and checks that the queue holds exactly that many messages.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pika

from ...testing.localnode import LocalNode

QUEUE = "pumpd-spark-demo"


def say(text: str) -> None:
    print(f"[spark-demo] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--local", action="store_true",
                    help="use the broker on 127.0.0.1:5672 instead of a private node")
    args = ap.parse_args(argv)
    node: LocalNode | None = None
    try:
        if args.local:
            uri = "amqp://guest:guest@127.0.0.1:5672/%2F"
        else:
            say("starting a private RabbitMQ node ...")
            node = LocalNode(name=f"pumpd-spark-demo-{os.getpid()}").start()
            uri = node.uri("/")
        conn = pika.BlockingConnection(pika.URLParameters(uri))
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=False)
        ch.queue_purge(QUEUE)

        say("starting Spark (local[2]) ...")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        from .. import register

        spark = (SparkSession.builder.master("local[2]").appName("pumpd-spark-demo")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        df = (spark.range(args.rows, numPartitions=2)
              .selectExpr("CAST(lpad(CAST(id AS STRING), 64, '0') AS BINARY) AS body").cache())
        df.count()
        say(f"publishing {args.rows:,} rows to queue {QUEUE!r} ...")
        t0 = time.perf_counter()
        # the three lines a user writes:
        (df.write.format("pumpd").option("uri", uri).option("routingKey", QUEUE)
         .mode("append").save())
        seconds = time.perf_counter() - t0
        spark.stop()
        count = int(ch.queue_declare(QUEUE, passive=True).method.message_count)
        ch.queue_purge(QUEUE)
        conn.close()
        say(f"{args.rows:,} rows confirmed in {seconds:.2f} s = {args.rows / seconds:,.0f} rows/s")
        say(f"the queue holds {count:,} messages: "
            + ("every row, once" if count == args.rows else "MISMATCH"))
        return 0 if count == args.rows else 1
    finally:
        if node is not None:
            node.close(graceful=False)


if __name__ == "__main__":
    raise SystemExit(main())
