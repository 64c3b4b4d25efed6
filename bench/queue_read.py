"""The Spark queue reader's consumer alone, without Spark, against pika's consumer: msg/s and the
reading process's CPU per message, reading the same classic queue of 64 B bodies in turn.

- ``pika``: pika's BlockingConnection consumer, prefetch 2,000, one ``basic.ack(multiple)``
  per 1,000 (``stream_clients.read_pika``, the yardstick of ``spark_read.py``);
- ``pumpd-consumer``: :class:`pumpd.spark.read.queue.consumer.QueueConsumer` (engine link + the
  data plane's delivery reader on a thread), no ``basic.qos`` and a read-ahead of 100,000,
  taking up to 100,000 at a time and acking each take, as the queue reader does by default;
- ``pumpd-consumer-arrow``: the same, each take turned into an Arrow record batch;
- ``pumpd-consumer-ack1000``: as ``pumpd-consumer``, but one ``basic.ack(multiple)`` per 1,000
  of each take (the acknowledgement's size alone changed);
- ``pumpd-consumer-qos2000``: as ``pika``: ``basic.qos`` 2,000, taking 1,000 at a time and
  acking each take (the consumer alone changed).

``--take`` sets the take and the read-ahead (the queue reader's micro-batch bound). Two CPU
figures per run, in µs per message: this process's (``time.process_time``: both threads) and
the broker's (its Erlang VM, read from ``/proc``): what each way of consuming costs the broker.
Results: JSON lines in bench/results/queue_read-<time>.jsonl and a table on stdout.

    python bench/queue_read.py --messages 200000 --reps 3
    python bench/queue_read.py --messages 1000000 --reps 2 --take 50000
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
from common import common_fields, find_descendant, process_cpu_seconds

QUEUE = "bench-queue-read"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
TAKE = QUEUE_BATCH_DEFAULT


def fill(uri: str, n: int) -> None:
    with pika.BlockingConnection(pika.URLParameters(uri)) as c:
        c.channel().queue_declare(QUEUE, durable=False)
    stream_clients.publish(uri, QUEUE, n, b"q" * 64)


def consumer(uri: str, n: int, take: int, *, arrow: bool = False, prefetch: int = 0,
             ack_every: int = 0) -> int:
    """``take`` at a time (also the read-ahead), acked at the end of each take, or every
    ``ack_every`` deliveries of it."""
    c = QueueConsumer(uri, QUEUE, prefetch=prefetch, read_ahead=take)
    got = 0
    try:
        while got < n:
            c.wait(take, 0.25, 30.0)
            batch = c.take(take)
            if not batch:
                raise RuntimeError(f"nothing for 30 s after {got} of {n}")
            if arrow:
                deliveries_batch(batch, QUEUE)
            got += len(batch)
            if ack_every:
                for i in range(ack_every - 1, len(batch) - 1, ack_every):
                    c.ack(batch[i][0])
            c.ack(batch[-1][0])
    finally:
        c.close()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--take", type=int, default=TAKE,
                    help="the pumpd consumers' take and read-ahead (default: the queue "
                         "reader's micro-batch bound)")
    args = ap.parse_args()
    n, take = args.messages, args.take
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"queue_read-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    rates: dict[str, list[tuple[float, float, float]]] = {}
    with LocalNode() as node:
        uri = node.uri()
        assert node.pid is not None
        beam = find_descendant(node.pid, "beam.smp")
        assert beam is not None, "the node's Erlang VM is not found"
        systems: dict[str, Callable[[], int]] = {
            "pika": lambda: stream_clients.read_pika(uri, QUEUE, n),
            "pumpd-consumer": lambda: consumer(uri, n, take),
            "pumpd-consumer-arrow": lambda: consumer(uri, n, take, arrow=True),
            "pumpd-consumer-ack1000": lambda: consumer(uri, n, take, ack_every=1000),
            # 1,000 at a time: a take larger than the prefetch would wait for deliveries the
            # broker holds back until an ack
            "pumpd-consumer-qos2000": lambda: consumer(uri, n, 1000, prefetch=2000),
        }
        for rep in range(1, args.reps + 1):
            for system, run in systems.items():
                fill(uri, n)
                load = os.getloadavg()[0]
                b0 = process_cpu_seconds(beam)
                t0, c0 = time.perf_counter(), time.process_time()
                got = run()
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
                broker = process_cpu_seconds(beam) - b0
                rate, us, broker_us = got / seconds, cpu / got * 1e6, broker / got * 1e6
                rates.setdefault(system, []).append((rate, us, broker_us))
                line = {**common_fields("queue_read", f"queue {n} x 64 B", system, rep, rate),
                        "cpu_us_per_msg": round(us, 2), "broker_cpu_us_per_msg":
                        round(broker_us, 2), "take": take, "loadavg_1min": round(load, 2)}
                print(orjson.dumps(line).decode(), flush=True)
                with out.open("ab") as f:
                    f.write(orjson.dumps(line) + b"\n")
                with pika.BlockingConnection(pika.URLParameters(uri)) as c:
                    c.channel().queue_purge(QUEUE)
    print(f"\n| system | msg/s (median of {args.reps}) | CPU µs/msg (median) | broker CPU "
          f"µs/msg (median) |\n|---|---|---|---|")
    for system, r in rates.items():
        print(f"| {system} | {statistics.median(x for x, _, _ in r):,.0f} | "
              f"{statistics.median(u for _, u, _ in r):.1f} | "
              f"{statistics.median(b for _, _, b in r):.1f} |")
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
