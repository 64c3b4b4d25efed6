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

Queue (``--queue-messages`` bodies of 64 B in a classic queue; an untimed query of 10,000 first
warms Spark's Python workers, as the stream runs are warmed):

- ``pumpd-queue-reader``: ``readStream`` with option ``queue`` (a micro-batch acked once Spark
  is past it, its default bound of 250,000 rows, no ``basic.qos``) into ``noop``, timed from
  ``load()`` until Spark reported every row (the query's start-up included);
- ``pika-batch-ack``: pika's BlockingConnection consumer, prefetch 2,000, one
  ``basic.ack(multiple)`` per 1,000.

Super stream (``--partitions 1,2,4``: this mode alone, see ``bench/spark_read_curve.py``): for
each partition count P a super stream of P partitions holding ``--messages`` bodies of 64 B in
total, read whole by ``option("superStream", ...)`` into ``noop`` (``pumpd-superstream-noop``)
and by rstream subscribed to every partition in this process (``raw-rstream-all``); P alternates
within each repetition; a markdown table of the curve at the end.

Results: JSON lines in bench/results/spark_read-<time>.jsonl (``bench`` = "spark_read", the
common fields, ``rows``, ``seconds``) and a table on stdout. The machine is shared: figures
vary with what else runs.

    python bench/spark_read.py                      # 1,000,000 messages each, 1 repetition
    python bench/spark_read.py --messages 200000 --queue-messages 50000
    python bench/spark_read.py --reps 3 --systems raw-rstream,pumpd-stream-noop
    python bench/spark_read.py --messages 1000000 --partitions 1,2,4 --reps 3
    python bench/spark_read.py --queue-messages 1000000 --reps 3 \
        --systems pumpd-queue-reader,pika-batch-ack --max-records-per-trigger 100000

Systems run in turn within each repetition, so a ratio (printed for the stream reader against
raw rstream and the queue reader against pika) compares runs taken side by side; each line also
records the 1-minute load average before the run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pika
from pumpd.testing.localnode import LocalNode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spark_read_curve
import stream_clients
from common import common_fields

RESULTS_DIR = Path(__file__).resolve().parent / "results"
STREAM, QUEUE = stream_clients.STREAM, "bench-queue"


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pumpd.spark import register
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    # the executors' Python workers cannot import bench/ (pika-foreachPartition's reads)
    cloudpickle.register_pickle_by_value(stream_clients)
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
    stream_clients.publish(uri, QUEUE, n, b"q" * 64)


def empty_queue(uri: str) -> None:
    """Purge the queue once no consumer is left on it: a consumer's connection closes a moment
    after its run ends, and what it held unacknowledged comes back then (a purge before would
    leave those messages to the next run)."""
    with pika.BlockingConnection(pika.URLParameters(uri)) as c:
        ch = c.channel()
        deadline = time.monotonic() + 30
        while (ch.queue_declare(QUEUE, passive=True).method.consumer_count
               and time.monotonic() < deadline):
            time.sleep(0.05)
        ch.queue_purge(QUEUE)


# seconds from start() to the first micro-batch's progress report, per queue reader run: the
# query's start-up, which a long-lived query pays once (reported beside the rate)
QUEUE_STARTUP: list[float] = []


class RowsSeen:
    """The rows each query's micro-batches took, as Spark reports them: a listener, so that
    waiting for the last one costs the driver nothing (polling ``recentProgress`` every 20 ms
    cost it 2 ms of CPU a poll, taken from the broker and the reader on 2 cores)."""

    def __init__(self, spark: Any) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        self.rows: dict[str, int] = {}
        self.first: dict[str, float] = {}
        self.ended: set[str] = set()
        self.changed = threading.Condition()
        seen = self

        class Listener(StreamingQueryListener):  # type: ignore[misc]
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                run, rows = str(event.progress.runId), int(event.progress.numInputRows)
                with seen.changed:
                    seen.rows[run] = seen.rows.get(run, 0) + rows
                    seen.first.setdefault(run, time.perf_counter())
                    seen.changed.notify_all()

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                with seen.changed:
                    seen.ended.add(str(event.runId))
                    seen.changed.notify_all()

        spark.streams.addListener(Listener())

    def wait(self, query: Any, n: int) -> int:
        """Until ``query`` reported ``n`` rows (or ended: its exception is raised)."""
        run = str(query.runId)
        with self.changed:
            while self.rows.get(run, 0) < n:
                if run in self.ended:
                    raise RuntimeError(f"the query ended after {self.rows.get(run, 0)} rows: "
                                       f"{query.exception()}")
                self.changed.wait(1.0)
            return self.rows[run]


def queue_reader(spark: Any, seen: RowsSeen, uri: str, n: int, batch_max: int = 0) -> int:
    """``batch_max``: the reader's ``maxRecordsPerTrigger`` (0: its default)."""
    t0 = time.perf_counter()
    reader = spark.readStream.format("pumpd").option("uri", uri).option("queue", QUEUE)
    if batch_max:
        reader = reader.option("maxRecordsPerTrigger", str(batch_max))
    q = (reader.load().writeStream.format("noop").trigger(processingTime="0 seconds").start())
    try:
        rows = seen.wait(q, n)
        QUEUE_STARTUP.append(seen.first[str(q.runId)] - t0)
        return rows
    finally:
        q.stop()


def _warm(_: Any) -> None:
    import pumpd.spark.read.queue.queue_reader  # noqa: F401
    import pyarrow  # noqa: F401  (a read task's first batch imports it)

    time.sleep(1)  # both tasks at once: two workers, not one taking both in turn


def warm_workers(spark: Any) -> None:
    """Two Python workers with the queue reader imported, as a long-lived application has:
    a micro-batch goes to two read tasks, and a worker's first import of pyspark's data
    source modules, pyarrow and pumpd takes about a second."""
    spark.sparkContext.parallelize(range(2), 2).foreach(_warm)


def run_partitions(args: argparse.Namespace, out: Path) -> None:
    """``--partitions``: the super-stream curve alone, on a node of its own."""
    counts = spark_read_curve.parse_counts(args.partitions)
    with LocalNode(plugins=["rabbitmq_stream"]) as node:
        assert node.stream_port is not None
        spark = session()
        try:
            spark_read_curve.run_curve(spark, node.uri(), node.stream_port, args.messages,
                                       counts, args.reps, args.min_partitions,
                                       not args.no_raw, out, node.pid)
        finally:
            spark.stop()
    print(f"\nresults: {out}")


# what each pumpd reader is compared with: (pumpd system, its yardstick)
RATIOS = (("pumpd-stream-noop", "raw-rstream"), ("pumpd-queue-reader", "pika-batch-ack"))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--queue-messages", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--max-records-per-trigger", type=int, default=0,
                    help="the queue reader's maxRecordsPerTrigger, its micro-batch bound "
                         "(default: the reader's own)")
    ap.add_argument("--systems", default="",
                    help="comma-separated systems to run (default: all), e.g. "
                         "raw-rstream,pumpd-stream-noop")
    ap.add_argument("--partitions", default="",
                    help="comma-separated partition counts, e.g. 1,2,4: only the super-stream "
                         "curve, --messages in total per super stream")
    ap.add_argument("--min-partitions", type=int, default=1,
                    help="with --partitions: the reader's minPartitions (ranges per partition)")
    ap.add_argument("--no-raw", action="store_true",
                    help="with --partitions: leave out rstream's one-process ceiling")
    return ap.parse_args()


def print_summary(rates: dict[str, list[float]], reps: int) -> None:
    """Each system's median and runs, and each pumpd reader against its yardstick."""
    print(f"\n| system | rows/s (median of {reps}) | each run |\n|---|---|---|")
    for system, r in rates.items():
        print(f"| {system} | {statistics.median(r):,.0f} | "
              f"{', '.join(f'{x:,.0f}' for x in r)} |")
    for mine, yardstick in RATIOS:
        if mine in rates and yardstick in rates:
            each = [a / b for a, b in zip(rates[mine], rates[yardstick], strict=True)]
            of_medians = statistics.median(rates[mine]) / statistics.median(rates[yardstick])
            print(f"{mine} / {yardstick}: {of_medians:.0%} of the medians; per rep "
                  f"{', '.join(f'{x:.0%}' for x in each)} (median {statistics.median(each):.0%})")


def main() -> None:
    args = parse_args()
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"spark_read-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    if args.partitions:
        run_partitions(args, out)
        return
    n, qn = args.messages, args.queue_messages
    wanted = {x.strip() for x in args.systems.split(",") if x.strip()}
    rates: dict[str, list[float]] = {}
    with LocalNode(plugins=["rabbitmq_stream"]) as node, \
            tempfile.TemporaryDirectory(prefix="pumpd-bench-read-") as tmp:
        uri, port = node.uri(), node.stream_port
        assert port is not None
        spark = session()
        seen = RowsSeen(spark)

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
                lambda r: stream_clients.read_pika(uri, STREAM, r[1] - r[0],
                                                   {"x-stream-offset": r[0]})).collect()
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
        queue_runs: dict[str, Callable[[], int]] = {
            "pumpd-queue-reader": lambda: queue_reader(spark, seen, uri, qn,
                                                       args.max_records_per_trigger),
            "pika-batch-ack": lambda: stream_clients.read_pika(uri, QUEUE, qn),
        }
        if wanted:
            stream_runs = {k: v for k, v in stream_runs.items() if k in wanted}
            queue_runs = {k: v for k, v in queue_runs.items() if k in wanted}
        if stream_runs:
            print(f"filling stream {STREAM!r} with {n:,} messages ...", flush=True)
            stream_clients.fill(uri, n)
            spark_noop(minPartitions=2, endingOffsets="10000")  # warm the Python workers
        if queue_runs:  # the query's Python workers warm too, as for the stream runs
            warm_workers(spark)
            fill_queue(uri, 10_000)
            queue_reader(spark, seen, uri, 10_000)
            QUEUE_STARTUP.clear()
            # its last micro-batch was never acked (no next one committed it): requeued
            empty_queue(uri)
        for rep in range(1, args.reps + 1):
            for case, runs, size in ((f"stream {n} x 64 B", stream_runs, n),
                                     (f"queue {qn} x 64 B", queue_runs, qn)):
                for system, run in runs.items():
                    if runs is queue_runs:
                        fill_queue(uri, qn)
                    load = os.getloadavg()[0]
                    t0 = time.perf_counter()
                    rows = run()
                    seconds = time.perf_counter() - t0
                    if rows < size:
                        print(f"{system}: only {rows} of {size} rows", flush=True)
                    # every system is done at the same point, ``size`` rows: a consumer that
                    # took a few more in its last read (pika's prefetch) gets no credit for them
                    rate = min(rows, size) / seconds
                    rates.setdefault(system, []).append(rate)
                    line = {**common_fields("spark_read", case, system, rep, rate),
                            "rows": rows, "seconds": round(seconds, 3),
                            "loadavg_1min": round(load, 2)}
                    if system == "pumpd-queue-reader":
                        line["first_batch_seconds"] = round(QUEUE_STARTUP[-1], 3)
                        if args.max_records_per_trigger:
                            line["max_records_per_trigger"] = args.max_records_per_trigger
                    print(orjson.dumps(line).decode(), flush=True)
                    with out.open("ab") as f:
                        f.write(orjson.dumps(line) + b"\n")
                    if runs is queue_runs:
                        empty_queue(uri)
        spark.stop()
    print_summary(rates, args.reps)
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
