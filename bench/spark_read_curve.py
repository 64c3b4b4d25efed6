"""The rows/s curve against a super stream's partition count: ``bench/spark_read.py --partitions``.

For each count P of ``--partitions`` a super stream ``bench-super-P`` (a direct exchange with
``x-super-stream``, P streams bound by routing keys ``0`` .. ``P-1`` with
``x-stream-partition-order``, as ``rabbitmq-streams add_super_stream`` makes one) holds
``--messages`` bodies of 64 B in total, spread evenly over its partitions. Each repetition then
reads every super stream in turn (P alternating within the repetition, so the curve compares
runs taken side by side):

- ``pumpd-superstream-noop``: ``spark.read.format("pumpd").option("superStream", name)`` into the
  ``noop`` sink; the reader makes ``minPartitions`` (``--min-partitions``, default 1) offset
  ranges per partition stream, so P tasks over ``local[2]``'s two slots;
- ``raw-rstream-all``: rstream in the benchmark's own process, one consumer subscribed to every
  partition at once, counting messages (no rows made): one process's ceiling, as
  ``raw-rstream`` is for the single stream.

Each line carries ``partitions`` and ``tasks`` beside the common fields and the load average,
and where the CPU went during the run: ``client_us_per_msg`` (this process and everything below
it but the node: Spark's JVM and its Python workers, or rstream), ``broker_us_per_msg`` (the node's
``beam.smp``) and ``host_busy_cores`` (every process of the machine, other people's included).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pika

import stream_clients
from common import (
    common_fields,
    find_descendant,
    host_busy_seconds,
    process_cpu_seconds,
    process_tree,
    tree_cpu_seconds,
)

PUMPD, RAW = "pumpd-superstream-noop", "raw-rstream-all"
BODY = b"s" * 64


def super_stream_name(partitions: int) -> str:
    return f"bench-super-{partitions}"


def declare_super_stream(uri: str, name: str, partitions: int) -> list[str]:
    """The super stream ``name`` with ``partitions`` streams; returns them in partition order."""
    streams = [f"{name}-{i}" for i in range(partitions)]
    with pika.BlockingConnection(pika.URLParameters(uri)) as c:
        ch = c.channel()
        ch.exchange_declare(name, "direct", durable=True, arguments={"x-super-stream": True})
        for i, s in enumerate(streams):
            ch.queue_declare(s, durable=True, arguments={"x-queue-type": "stream"})
            ch.queue_bind(s, name, str(i), arguments={"x-stream-partition-order": i})
    return streams


def shares(n: int, partitions: int) -> list[int]:
    """``n`` spread evenly: the first ``n % partitions`` partitions hold one more."""
    step, extra = divmod(n, partitions)
    return [step + (1 if i < extra else 0) for i in range(partitions)]


def fill_super_stream(uri: str, partitions: int, n: int) -> list[str]:
    """Declare ``bench-super-P`` and publish its share to each partition straight to the
    stream (confirmed, in batches): the same spread a hash router gives, with no routing cost
    in the fill."""
    streams = declare_super_stream(uri, super_stream_name(partitions), partitions)
    for stream, count in zip(streams, shares(n, partitions), strict=True):
        stream_clients.publish(uri, stream, count, BODY)
    return streams


def super_stream_frame(spark: Any, uri: str, port: int, partitions: int,
                       min_partitions: int) -> Any:
    return (spark.read.format("pumpd").option("uri", uri)
            .option("superStream", super_stream_name(partitions)).option("streamPort", port)
            .option("minPartitions", min_partitions).load())


class CpuMeter:
    """CPU seconds of this process's tree (the node's processes left out), of the broker and of
    the whole host, between :meth:`start` and :meth:`stop`."""

    def __init__(self, node_pid: int | None) -> None:
        # LocalNode starts the broker below this process: its tree is not the client's
        self.node = set(process_tree(node_pid)) if node_pid else set()
        self.broker_pid = find_descendant(node_pid, "beam.smp") if node_pid else None
        self.began: tuple[dict[int, float], float, float] = ({}, 0.0, 0.0)

    def _broker(self) -> float:
        return 0.0 if self.broker_pid is None else process_cpu_seconds(self.broker_pid)

    def _client(self) -> dict[int, float]:
        return tree_cpu_seconds([p for p in process_tree(os.getpid()) if p not in self.node])

    def start(self) -> None:
        self.began = (self._client(), self._broker(), host_busy_seconds())

    def stop(self, rows: int, seconds: float) -> dict[str, float]:
        tree0, broker0, host0 = self.began
        tree1 = self._client()
        # a process started during the run (a new Python worker) counts from zero
        client = sum(t - tree0.get(pid, 0.0) for pid, t in tree1.items())
        return {"client_us_per_msg": round(client / rows * 1e6, 2),
                "broker_us_per_msg": round((self._broker() - broker0) / rows * 1e6, 2),
                "host_busy_cores": round((host_busy_seconds() - host0) / seconds, 2)}


class Curve:
    """The runs of one ``--partitions`` benchmark: each is timed, printed and appended to
    ``out`` as one JSON line."""

    def __init__(self, spark: Any, uri: str, port: int, n: int, min_partitions: int,
                 out: Path, node_pid: int | None) -> None:
        self.spark, self.uri, self.port, self.n = spark, uri, port, n
        self.cpu = CpuMeter(node_pid)
        self.min_partitions, self.out = min_partitions, out
        self.streams: dict[int, list[str]] = {}
        # (system, P) -> rows/s of each repetition; P -> the load average before each run
        self.rates: dict[tuple[str, int], list[float]] = {}
        self.loads: dict[int, list[float]] = {}

    def fill(self, counts: Sequence[int]) -> None:
        for p in counts:
            t0 = time.perf_counter()
            self.streams[p] = fill_super_stream(self.uri, p, self.n)
            print(f"super stream {super_stream_name(p)!r}: {p} partitions, {self.n:,} "
                  f"messages in {time.perf_counter() - t0:.1f} s", flush=True)
        # The timed runs go to noop, which counts nothing: one count per super stream here
        # proves each is read whole. It also starts Spark's Python workers before any timing.
        for p in counts:
            rows = self.frame(p).count()
            if rows != self.n:
                raise RuntimeError(f"super stream of {p} partitions: {rows} rows read, "
                                   f"{self.n} published")

    def frame(self, p: int) -> Any:
        return super_stream_frame(self.spark, self.uri, self.port, p, self.min_partitions)

    def systems(self, p: int, raw: bool) -> dict[str, Callable[[], int]]:
        def pumpd() -> int:
            self.frame(p).write.format("noop").mode("overwrite").save()
            return self.n  # the reader stops at each partition's tail: fill() counted them

        runs: dict[str, Callable[[], int]] = {PUMPD: pumpd}
        if raw:
            runs[RAW] = lambda: stream_clients.read_rstream(
                "127.0.0.1", self.port, self.n, streams=self.streams[p])
        return runs

    def run(self, rep: int, p: int, raw: bool) -> None:
        for system, run in self.systems(p, raw).items():
            load = os.getloadavg()[0]
            self.cpu.start()
            t0 = time.perf_counter()
            rows = run()
            seconds = time.perf_counter() - t0
            cpu = self.cpu.stop(rows, seconds)
            rate = rows / seconds
            self.rates.setdefault((system, p), []).append(rate)
            if system == PUMPD:
                self.loads.setdefault(p, []).append(load)
            tasks = p * self.min_partitions if system == PUMPD else None
            line = {**common_fields("spark_read", f"super stream {p} x 64 B", system, rep, rate),
                    "partitions": p, "tasks": tasks, "messages": self.n, "rows": rows,
                    "seconds": round(seconds, 3), "loadavg_1min": round(load, 2), **cpu}
            print(orjson.dumps(line).decode(), flush=True)
            with self.out.open("ab") as f:
                f.write(orjson.dumps(line) + b"\n")

    def table(self, counts: Sequence[int], reps: int) -> str:
        """The markdown table: P, the reader's median and each run, the speed-up over the
        smallest P, the raw ceiling and the ratio to it, the load averages."""
        base = statistics.median(self.rates[(PUMPD, counts[0])])
        head = (f"| P | tasks | `{PUMPD}` rows/s (median of {reps}) | each run | "
                f"x P={counts[0]} | `{RAW}` median | reader / raw | load 1 min |")
        lines = [head, "|---|---|---|---|---|---|---|---|"]
        for p in counts:
            mine = self.rates[(PUMPD, p)]
            raw = self.rates.get((RAW, p))
            med = statistics.median(mine)
            raw_cells = (f"{statistics.median(raw):,.0f} | {med / statistics.median(raw):.0%}"
                         if raw else "- | -")
            lines.append(f"| {p} | {p * self.min_partitions} | {med:,.0f} | "
                         f"{' / '.join(f'{x:,.0f}' for x in mine)} | {med / base:.2f} | "
                         f"{raw_cells} | {' / '.join(f'{x:.1f}' for x in self.loads[p])} |")
        return "\n".join(lines)


def run_curve(spark: Any, uri: str, port: int, n: int, counts: Sequence[int], reps: int,
              min_partitions: int, raw: bool, out: Path, node_pid: int | None) -> None:
    curve = Curve(spark, uri, port, n, min_partitions, out, node_pid)
    curve.fill(counts)
    for rep in range(1, reps + 1):
        for p in counts:
            curve.run(rep, p, raw)
    print()
    print(curve.table(counts, reps))


def parse_counts(text: str) -> list[int]:
    counts = sorted({int(x) for x in text.split(",") if x.strip()})
    if not counts or counts[0] < 1:
        raise ValueError(f"--partitions: partition counts of at least 1, got {text!r}")
    return counts
