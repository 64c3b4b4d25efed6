"""Spark → RabbitMQ stream: the data source ``pumpd`` writing a stream against writing a queue, and
against rstream's producer in ``foreachPartition``, on the same rows.

Systems (``case`` = ``local[2] 64 B``; one private RabbitMQ node with the stream plugin):

- ``pumpd-stream``: ``df.write.format("pumpd").option("stream", ...)`` (streams protocol, a named
  producer per partition, effectively once, a window of 5,000 confirms);
- ``pumpd-queue``: ``df.write.format("pumpd").option("routingKey", ...)`` into a classic queue
  (AMQP 0-9-1, at-least-once, a window of 5,000 confirms);
- ``rstream``: ``foreachPartition`` with rstream's ``Producer.send_batch`` of AMQP 1.0 messages
  (1,000 a call, no deduplication, every confirm waited for before the task ends).

The input is cached and counted before the clock starts; the session start and a warm-up run of
each system are excluded. Each run writes to a fresh stream (or the purged queue), counted after
(every row, no more). Results: JSON lines in bench/results/spark-stream-write-<time>.jsonl with
the common fields (``bench`` = "spark-stream-write", ``case``, ``system``, ``rep``, ``msg_s``),
``rows``, ``seconds``, ``delivered``.

    python bench/spark_stream_write.py            # 1,000,000 rows, 3 repetitions
    python bench/spark_stream_write.py --quick    # 200,000 rows, 1 repetition
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pika
from pumpd.spark.read.streams.wire import LAST, StreamsConnection
from pumpd.testing.localnode import LocalNode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import common_fields

RESULTS_DIR = Path(__file__).resolve().parent / "results"
QUEUE = "bench"
CASE = "local[2] 64 B"
SYSTEMS = ("pumpd-stream", "pumpd-queue", "rstream")


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("pumpd-bench-spark-stream-write")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from pumpd.spark import register

    register(spark)
    return spark


def rows(spark: Any, n: int) -> Any:
    df = (spark.range(n, numPartitions=2)
          .selectExpr("CAST(lpad(CAST(id AS STRING), 64, '0') AS BINARY) AS body").cache())
    df.count()
    return df


def declare_stream(uri: str, name: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    finally:
        conn.close()


def delete_queue(uri: str, name: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        conn.channel().queue_delete(name)
    finally:
        conn.close()


def queue_depth(uri: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        n = int(ch.queue_declare(QUEUE, passive=True).method.message_count)
        ch.queue_purge(QUEUE)
        return n
    finally:
        conn.close()


def stream_length(port: int, stream: str) -> int:
    """The stream's next offset: after the last chunk, which a subscription at last gets first."""
    with StreamsConnection("127.0.0.1", port, "guest", "guest", "/", timeout=10) as conn:
        conn.sock.settimeout(2.0)
        conn.subscribe(stream, LAST, credit=1)
        try:
            c = conn.chunk()
        except TimeoutError:
            return 0
        return c.first + c.records


def rstream_partition(rows_: Any, port: int, stream: str) -> None:
    """One partition through rstream's producer: batches of 1,000 AMQP 1.0 messages, then a wait
    for every confirm."""
    import asyncio

    from rstream import AMQPMessage, Producer

    async def run() -> None:
        confirmed = 0

        def on_confirm(status: Any) -> None:
            nonlocal confirmed
            if not status.is_confirmed:
                raise RuntimeError(f"rstream: message refused ({status.response_code})")
            confirmed += 1

        sent = 0
        async with Producer("127.0.0.1", port, username="guest", password="guest") as p:
            batch: list[Any] = []
            for r in rows_:
                batch.append(AMQPMessage(body=bytes(r.body)))
                if len(batch) == 1000:
                    await p.send_batch(stream, batch, on_publish_confirm=on_confirm)
                    sent += len(batch)
                    batch = []
            if batch:
                await p.send_batch(stream, batch, on_publish_confirm=on_confirm)
                sent += len(batch)
            deadline = time.monotonic() + 60
            while confirmed < sent and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            if confirmed < sent:
                raise RuntimeError(f"rstream: {confirmed} of {sent} confirmed")

    asyncio.run(run())


def run_system(system: str, df: Any, uri: str, port: int, stream: str) -> None:
    if system == "pumpd-stream":
        (df.write.format("pumpd").option("uri", uri).option("stream", stream)
         .option("streamPort", port).option("maxInFlight", "5000").mode("append").save())
    elif system == "pumpd-queue":
        (df.write.format("pumpd").option("uri", uri).option("routingKey", QUEUE)
         .option("maxInFlight", "5000").mode("append").save())
    else:
        df.foreachPartition(lambda it: rstream_partition(it, port, stream))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, help="rows per run (default 1,000,000; quick 200,000)")
    ap.add_argument("--reps", type=int, help="repetitions (default 3; quick 1)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--output", type=Path)
    a = ap.parse_args(argv)
    n = a.rows or (200_000 if a.quick else 1_000_000)
    reps = a.reps or (1 if a.quick else 3)
    systems = [s for s in a.systems.split(",") if s]
    out_path = a.output or RESULTS_DIR / f"spark-stream-write-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}", flush=True)
    node = LocalNode(["rabbitmq_stream"], name=f"pumpd-bench-spark-stream-{os.getpid()}")
    records: list[dict[str, Any]] = []
    try:
        node.start()
        uri = node.uri()
        port = node.stream_port
        assert port is not None
        conn = pika.BlockingConnection(pika.URLParameters(uri))
        conn.channel().queue_declare(QUEUE, durable=False)
        conn.close()
        spark = session()
        import pyspark

        host = {"nproc": os.cpu_count(), "python": platform.python_version(),
                "pyspark": pyspark.__version__, "rabbitmq_version": node.ctl("version").strip(),
                "loadavg_start": os.getloadavg()[0]}
        df = rows(spark, n)
        warm = rows(spark, 2_000)
        for system in systems:  # not timed: Python workers started, modules imported
            declare_stream(uri, "warm-up")
            run_system(system, warm, uri, port, "warm-up")
            delete_queue(uri, "warm-up")
        queue_depth(uri)
        with out_path.open("ab") as out:
            for rep in range(1, reps + 1):
                shift = (rep - 1) % len(systems)
                for system in systems[shift:] + systems[:shift]:
                    stream = f"bench-{system}-{rep}"
                    declare_stream(uri, stream)
                    t0 = time.perf_counter()
                    error = None
                    try:
                        run_system(system, df, uri, port, stream)
                    except Exception as exc:
                        error = str(exc).splitlines()[0][:300]
                    seconds = time.perf_counter() - t0
                    delivered = (queue_depth(uri) if system == "pumpd-queue"
                                 else stream_length(port, stream))
                    delete_queue(uri, stream)
                    ok = error is None and delivered == n
                    rec = {**common_fields("spark-stream-write", CASE, system, rep,
                                           n / seconds if ok else None),
                           "rows": n, "messages": n, "seconds": round(seconds, 3),
                           "delivered": delivered, "ok": ok, "error": error,
                           "loadavg": os.getloadavg()[0], "host": host}
                    records.append(rec)
                    out.write(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
                    out.flush()
                    print(f"rep {rep} {system:<14} {n:>9,} rows in {seconds:7.2f} s = "
                          f"{rec['msg_s'] or 0:>10,.0f} rows/s, delivered {delivered:,}"
                          + (f" FAILED: {error}" if error else ""), flush=True)
        spark.stop()
    finally:
        node.close(graceful=False)
    med = {s: statistics.median(r["msg_s"] for r in records if r["system"] == s and r["ok"])
           for s in systems if any(r["system"] == s and r["ok"] for r in records)}
    print("\nmedians (rows/s): " + ", ".join(f"{s} {v:,.0f}" for s, v in med.items()))
    print(f"results: {out_path}")
    return 0 if records and all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
