"""The PySpark data source ``pumpd`` against what Spark users write by hand, on the same rows.

Systems (``case`` = ``local[2] 64 B transient``; one private RabbitMQ node, one queue):

- ``pumpd``: ``df.write.format("pumpd")`` (Arrow batches, confirms with a window of 5,000);
- ``pumpd-deterministic``: the same with ``messageId=deterministic`` (an id per row);
- ``pika-window``: ``foreachPartition`` + pika's SelectConnection with a window of 5,000 confirms
  (``PikaSelectRun`` of bench/publish_runs.py, as bench/confirms.py runs it);
- ``pika-individual``: ``foreachPartition`` + pika's BlockingChannel, a confirm per message (on
  ``--individual-rows`` rows: about 1,000 rows/s);
- ``publisher``: ``pumpd.Publisher`` (async, window 5,000) in the driver, outside Spark, on the
  same bodies collected beforehand.

The input is cached and counted before the clock starts; the session start and a warm-up write
(which starts Spark's Python workers) are excluded. After
each run the queue is counted (every row arrived, no duplicate on a clean run) and purged.
Results: JSON lines in bench/results/spark-<time>.jsonl with the common fields (``bench`` =
"spark", ``case``, ``system``, ``rep``, ``msg_s``), ``rows``, ``seconds``, ``delivered`` and the
peak RSS of Spark's Python workers so far (``worker_peak_rss_mb``).

    python bench/spark.py            # 1,000,000 rows (pika-individual: 5,000), 3 repetitions
    python bench/spark.py --quick    # 200,000 rows (2,000), 1 repetition
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
from pumpd import Publisher
from pumpd.testing.localnode import LocalNode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import publish_runs
from common import common_fields, process_tree

RESULTS_DIR = Path(__file__).resolve().parent / "results"
VHOST = "pumpd-bench-spark"
QUEUE = "bench"
CASE = "local[2] 64 B transient"
SYSTEMS = ("pumpd", "pumpd-deterministic", "pika-window", "pika-individual", "publisher")


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    cloudpickle.register_pickle_by_value(publish_runs)
    spark = (SparkSession.builder.master("local[2]").appName("pumpd-bench-spark")
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


def worker_peak_rss_mb() -> float:
    """The largest VmHWM among the Python processes under this one (Spark's workers)."""
    peak = 0
    for pid in process_tree(os.getpid()):
        if pid == os.getpid():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if "python" not in status.split("\n", 1)[0]:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]))
    return round(peak / 1024, 1)


def depth(uri: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        n = int(ch.queue_declare(QUEUE, passive=True).method.message_count)
        ch.queue_purge(QUEUE)
        return n
    finally:
        conn.close()


def run_system(spark: Any, system: str, df: Any, bodies: list[bytes], uri: str) -> None:
    if system.startswith("pumpd"):
        w = (df.write.format("pumpd").option("uri", uri).option("routingKey", QUEUE)
             .option("maxInFlight", "5000").mode("append"))
        if system == "pumpd-deterministic":
            w = w.option("messageId", "deterministic")
        w.save()
    elif system.startswith("pika"):
        strategy = "async" if system == "pika-window" else "individual"
        cls = publish_runs.PikaSelectRun if strategy == "async" else publish_runs.PikaBlockingRun

        def part(it: Any, cls: Any = cls, strategy: str = strategy) -> None:
            run = cls(uri, QUEUE, strategy, False, 5000, 100)
            run.open()
            run.publish([bytes(r.body) for r in it])
            run.close()

        df.foreachPartition(part)
    else:
        with Publisher(uri, routing_key=QUEUE, mode="async", window=5000,
                       client_name="bench spark publisher") as p:
            p.publish_many(bodies)
            p.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, help="rows per run (default 1,000,000; quick 200,000)")
    ap.add_argument("--individual-rows", type=int,
                    help="rows for pika-individual (default 5,000; quick 2,000)")
    ap.add_argument("--reps", type=int, help="repetitions (default 3; quick 1)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--output", type=Path)
    a = ap.parse_args(argv)
    n = a.rows or (200_000 if a.quick else 1_000_000)
    n_ind = a.individual_rows or (2_000 if a.quick else 5_000)
    reps = a.reps or (1 if a.quick else 3)
    systems = [s for s in a.systems.split(",") if s]
    out_path = a.output or RESULTS_DIR / f"spark-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}", flush=True)
    node = LocalNode(name=f"pumpd-bench-spark-{os.getpid()}")
    records: list[dict[str, Any]] = []
    try:
        node.start()
        node.add_vhost(VHOST)
        uri = node.uri(VHOST)
        conn = pika.BlockingConnection(pika.URLParameters(uri))
        conn.channel().queue_declare(QUEUE, durable=False)
        conn.close()
        spark = session()
        import pyspark

        host = {"nproc": os.cpu_count(), "python": platform.python_version(),
                "pyspark": pyspark.__version__, "rabbitmq_version": node.ctl("version").strip()}
        frames = {n: rows(spark, n), n_ind: rows(spark, n_ind)}
        bodies = {k: [bytes(r.body) for r in v.collect()] for k, v in frames.items()}
        # not timed: start the Python workers and import pumpd / pika in them
        for system in ("pumpd", "pika-window"):
            run_system(spark, system, frames[n_ind], bodies[n_ind], uri)
            depth(uri)
        with out_path.open("ab") as out:
            for rep in range(1, reps + 1):
                shift = (rep - 1) % len(systems)
                for system in systems[shift:] + systems[:shift]:
                    k = n_ind if system == "pika-individual" else n
                    t0 = time.perf_counter()
                    error = None
                    try:
                        run_system(spark, system, frames[k], bodies[k], uri)
                    except Exception as exc:
                        error = str(exc).splitlines()[0][:300]
                    seconds = time.perf_counter() - t0
                    delivered = depth(uri)
                    ok = error is None and delivered == k
                    rec = {**common_fields("spark", CASE, system, rep,
                                           k / seconds if ok else None),
                           "rows": k, "messages": k, "seconds": round(seconds, 3),
                           "delivered": delivered,
                           "duplicates": max(0, delivered - k), "ok": ok, "error": error,
                           "worker_peak_rss_mb": worker_peak_rss_mb(), "host": host}
                    records.append(rec)
                    out.write(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
                    out.flush()
                    print(f"rep {rep} {system:<20} {k:>9,} rows in {seconds:7.2f} s = "
                          f"{rec['msg_s'] or 0:>10,.0f} rows/s, delivered {delivered:,}"
                          + (f" FAILED: {error}" if error else ""), flush=True)
        spark.stop()
    finally:
        node.close(graceful=False)
    med = {s: statistics.median(r["msg_s"] for r in records if r["system"] == s and r["ok"])
           for s in systems if any(r["system"] == s and r["ok"] for r in records)}
    print("\nmedians (rows/s): " + ", ".join(f"{s} {v:,.0f}" for s, v in med.items()))
    if "pumpd" in med:
        for other in ("pika-window", "pika-individual", "publisher"):
            if other in med:
                print(f"pumpd / {other}: {med['pumpd'] / med[other]:.2f}")
    print(f"results: {out_path}")
    return 0 if records and all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
