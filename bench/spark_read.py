"""Reading RabbitMQ from Spark with the data source ``pumpd``, against what reads it without.

Stream (``--messages`` bodies of 64 B in one stream on a private node with ``rabbitmq_stream``;
``spark.read`` batch reads of the whole stream, ``local[2]``, Spark and its Python workers warm):

- ``raw-rstream``: rstream reading the stream in this one process (the ceiling);
- ``pumpd-stream-noop`` / ``pumpd-stream-parquet``: ``format("pumpd")`` over the streams
  protocol (``minPartitions`` 2) into the ``noop`` sink / Parquet files;
- ``pumpd-amqp-noop``: the same over AMQP 0-9-1 (``protocol=amqp``);
- ``pika-foreachPartition``: what one writes by hand: two offset ranges in
  ``foreachPartition``, each read with pika's ``x-stream-offset`` consumer (rows not returned);
- ``pumpd-stream-noop-tasksN``: the tasks curve, 1, 2 and 4 offset ranges per read.

Queue (``--queue-messages`` bodies of 64 B in a classic queue):

- ``pumpd-queue-reader``: ``readStream`` with option ``queue`` (acks on commit,
  ``maxRecordsPerTrigger`` 30,000) into ``noop``, timed until every row went through;
- ``pika-batch-ack``: pika's BlockingConnection consumer, prefetch 2,000, one
  ``basic.ack(multiple)`` per 1,000.

Results: JSON lines in bench/results/spark_read-<time>.jsonl (``bench`` = "spark_read", the
common fields, ``rows``, ``seconds``) and a table on stdout. The machine is shared: figures
vary with what else runs.

    python bench/spark_read.py                      # 1,000,000 / 200,000 messages, 1 repetition
    python bench/spark_read.py --messages 200000 --queue-messages 50000
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pika
from pumpd import Publisher
from pumpd.testing.localnode import LocalNode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stream_clients
from common import common_fields

RESULTS_DIR = Path(__file__).resolve().parent / "results"
STREAM, QUEUE = stream_clients.STREAM, "bench-queue"


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pumpd.spark import register
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("pumpd-bench-spark-read")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def fill_queue(uri: str, n: int) -> None:
    with pika.BlockingConnection(pika.URLParameters(uri)) as c:
        c.channel().queue_declare(QUEUE, durable=False)
    with Publisher(uri, routing_key=QUEUE, window=5000) as p:
        for start in range(0, n, 10_000):
            p.publish_many([b"q" * 64] * min(10_000, n - start))
        p.flush()


def pika_range(uri: str, start: int, end: int) -> int:
    """One foreachPartition task: offsets [start, end) of the stream with pika."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=2000)
    got, last = 0, -1

    def take(_c: Any, m: Any, p: Any, _b: bytes) -> None:
        nonlocal got, last
        last = p.headers["x-stream-offset"]
        if last < end:
            got += 1
        if got % 1000 == 0:
            ch.basic_ack(m.delivery_tag, multiple=True)

    ch.basic_consume(STREAM, take, arguments={"x-stream-offset": start})
    while last < end - 1:
        conn.process_data_events(time_limit=0.1)
    conn._impl.close()  # no cancel: pika's cancel rejects, which a stream refuses
    return got


def pika_queue(uri: str, n: int) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=2000)
    got = 0

    def take(_c: Any, m: Any, _p: Any, _b: bytes) -> None:
        nonlocal got
        got += 1
        if got % 1000 == 0 or got == n:
            ch.basic_ack(m.delivery_tag, multiple=True)

    ch.basic_consume(QUEUE, take)
    while got < n:
        conn.process_data_events(time_limit=0.1)
    conn.close()
    return got


def queue_reader(spark: Any, uri: str, n: int) -> int:
    q = (spark.readStream.format("pumpd").option("uri", uri).option("queue", QUEUE)
         .option("maxRecordsPerTrigger", 30_000).load()
         .writeStream.format("noop").trigger(processingTime="0 seconds").start())
    try:
        while sum(p["numInputRows"] for p in q.recentProgress) < n:
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            time.sleep(0.05)
        return int(sum(p["numInputRows"] for p in q.recentProgress))
    finally:
        q.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--queue-messages", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"spark_read-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    n, qn = args.messages, args.queue_messages
    rates: dict[str, list[float]] = {}
    with LocalNode(plugins=["rabbitmq_stream"]) as node, \
            tempfile.TemporaryDirectory(prefix="pumpd-bench-read-") as tmp:
        uri, port = node.uri(), node.stream_port
        assert port is not None
        print(f"filling stream {STREAM!r} with {n:,} messages ...", flush=True)
        stream_clients.fill(uri, n)
        spark = session()

        def read(**options: Any) -> Any:
            r = (spark.read.format("pumpd").option("uri", uri).option("stream", STREAM)
                 .option("streamPort", port))
            for k, v in options.items():
                r = r.option(k, v)
            return r.load()

        def spark_noop(**options: Any) -> int:
            read(**options).write.format("noop").mode("overwrite").save()
            return n

        def spark_parquet() -> int:
            path = os.path.join(tmp, f"p{time.monotonic_ns()}")
            read(minPartitions=2).write.parquet(path)
            return n

        def by_hand() -> int:
            half = n // 2
            ranges = [(0, half), (half, n)]
            counts = spark.sparkContext.parallelize(ranges, 2).map(
                lambda r: pika_range(uri, r[0], r[1])).collect()
            return int(sum(counts))

        stream_runs: dict[str, Callable[[], int]] = {
            "raw-rstream": lambda: stream_clients.read_rstream("127.0.0.1", port, n),
            "pumpd-stream-noop": lambda: spark_noop(minPartitions=2),
            "pumpd-stream-parquet": spark_parquet,
            "pumpd-amqp-noop": lambda: spark_noop(minPartitions=2, protocol="amqp"),
            "pika-foreachPartition": by_hand,
            "pumpd-stream-noop-tasks1": lambda: spark_noop(minPartitions=1),
            "pumpd-stream-noop-tasks4": lambda: spark_noop(minPartitions=4),
        }
        spark_noop(minPartitions=2, endingOffsets="10000")  # warm the Python workers
        queue_runs: dict[str, Callable[[], int]] = {
            "pumpd-queue-reader": lambda: queue_reader(spark, uri, qn),
            "pika-batch-ack": lambda: pika_queue(uri, qn),
        }
        for rep in range(1, args.reps + 1):
            for case, runs, size in ((f"stream {n} x 64 B", stream_runs, n),
                                     (f"queue {qn} x 64 B", queue_runs, qn)):
                for system, run in runs.items():
                    if runs is queue_runs:
                        fill_queue(uri, qn)
                    t0 = time.perf_counter()
                    rows = run()
                    seconds = time.perf_counter() - t0
                    if rows < size:
                        print(f"{system}: only {rows} of {size} rows", flush=True)
                    rate = rows / seconds
                    rates.setdefault(system, []).append(rate)
                    line = {**common_fields("spark_read", case, system, rep, rate),
                            "rows": rows, "seconds": round(seconds, 3)}
                    print(orjson.dumps(line).decode(), flush=True)
                    with out.open("ab") as f:
                        f.write(orjson.dumps(line) + b"\n")
                    if runs is queue_runs:
                        with pika.BlockingConnection(pika.URLParameters(uri)) as c:
                            c.channel().queue_purge(QUEUE)
        spark.stop()
    print(f"\n| system | rows/s (median of {args.reps}) |\n|---|---|")
    for system, r in rates.items():
        print(f"| {system} | {statistics.median(r):,.0f} |")
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
