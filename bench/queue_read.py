"""The Spark queue reader's consumer alone, without Spark, against pika's consumer: msg/s and the
reading process's CPU per message, reading the same classic queue of 64 B bodies in turn.

- ``pika``: pika's BlockingConnection consumer, prefetch 2,000, one ``basic.ack(multiple)``
  per 1,000 (``stream_clients.read_pika``, the yardstick of ``spark_read.py``);
- ``pumpd-consumer``: :class:`pumpd.spark.read.queue.consumer.QueueConsumer` (engine link + the
  data plane's delivery reader on a thread), no ``basic.qos`` and a read-ahead of 100,000,
  taking up to 100,000 at a time and acking each take, as the queue reader does by default;
- ``pumpd-consumer-arrow``: the same, each take turned into an Arrow record batch.

CPU is this process's (``time.process_time``: both threads), not the broker's. Results: JSON
lines in bench/results/queue_read-<time>.jsonl and a table on stdout.

    python bench/queue_read.py --messages 200000 --reps 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pika
from pumpd.spark.read.arrow import deliveries_batch
from pumpd.spark.read.queue.consumer import QueueConsumer
from pumpd.spark.read.read_options import QUEUE_BATCH_DEFAULT
from pumpd.testing.localnode import LocalNode

import stream_clients
from common import common_fields

QUEUE = "bench-queue-read"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
TAKE = QUEUE_BATCH_DEFAULT


def fill(uri: str, n: int) -> None:
    with pika.BlockingConnection(pika.URLParameters(uri)) as c:
        c.channel().queue_declare(QUEUE, durable=False)
    stream_clients.publish(uri, QUEUE, n, b"q" * 64)


def consumer(uri: str, n: int, arrow: bool) -> int:
    c = QueueConsumer(uri, QUEUE, prefetch=0, read_ahead=TAKE)
    got = 0
    try:
        while got < n:
            c.wait(TAKE, 0.25, 30.0)
            batch = c.take(TAKE)
            if not batch:
                raise RuntimeError(f"nothing for 30 s after {got} of {n}")
            if arrow:
                deliveries_batch(batch, QUEUE)
            got += len(batch)
            c.ack(batch[-1][0])
    finally:
        c.close()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    n = args.messages
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"queue_read-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    rates: dict[str, list[tuple[float, float]]] = {}
    with LocalNode() as node:
        uri = node.uri()
        systems: dict[str, Callable[[], int]] = {
            "pika": lambda: stream_clients.read_pika(uri, QUEUE, n),
            "pumpd-consumer": lambda: consumer(uri, n, arrow=False),
            "pumpd-consumer-arrow": lambda: consumer(uri, n, arrow=True),
        }
        for rep in range(1, args.reps + 1):
            for system, run in systems.items():
                fill(uri, n)
                load = os.getloadavg()[0]
                t0, c0 = time.perf_counter(), time.process_time()
                got = run()
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
                rate, us = got / seconds, cpu / got * 1e6
                rates.setdefault(system, []).append((rate, us))
                line = {**common_fields("queue_read", f"queue {n} x 64 B", system, rep, rate),
                        "cpu_us_per_msg": round(us, 2), "loadavg_1min": round(load, 2)}
                print(orjson.dumps(line).decode(), flush=True)
                with out.open("ab") as f:
                    f.write(orjson.dumps(line) + b"\n")
                with pika.BlockingConnection(pika.URLParameters(uri)) as c:
                    c.channel().queue_purge(QUEUE)
    print(f"\n| system | msg/s (median of {args.reps}) | CPU µs/msg (median) |\n|---|---|---|")
    for system, r in rates.items():
        print(f"| {system} | {statistics.median(x for x, _ in r):,.0f} | "
              f"{statistics.median(u for _, u in r):.1f} |")
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
