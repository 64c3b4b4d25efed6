"""One Spark read task's read path without Spark, against rstream, over one stream: where it waits.

    python bench/stream_task.py [--messages 1000000] [--reps 3] [--credit 20]
    python bench/stream_task.py --reps 3 --systems raw-rstream,pumpd-task-ipc,pumpd-task-ipc-fixed
    python bench/stream_task.py --metadata varied --systems raw-rstream,pumpd-task

One private node with ``rabbitmq_stream``; one stream filled with ``--messages`` bodies of 64 B
(``stream_clients.fill``, as ``spark_read.py`` does), their metadata ``--metadata identical``
(the exchange and routing key alone, the same in every message) or ``varied`` (a message id and
four headers of different types per message); then, alternating within each repetition,
in this one process:

- ``raw-rstream``: rstream reading the stream from ``first`` (``stream_clients.read_rstream``,
  the yardstick of ``spark_read.py``);
- ``pumpd-task``: :func:`pumpd.spark.read.streams.protocol.read` over the whole range, the function a
  Spark task runs, its record batches dropped; ``pumpd-task-fixed``: the same with a fixed
  credit of ``CREDIT`` chunks (``AHEAD_ROWS`` 0: the reader before its credit was sized in
  messages);
- ``pumpd-task-ipc`` / ``pumpd-task-ipc-fixed``: the same, each batch also written as an Arrow
  IPC stream in memory, as a Spark Python worker does (the task's pause between batches);
- ``pumpd-wire``: the same connection's chunks only (subscribe, ``chunk()``, credit), no Arrow:
  what the socket side alone costs and how fast the broker serves it.

``--systems`` picks them (default: rstream, pumpd-task, pumpd-task-fixed, pumpd-wire);
``--credit`` sets :data:`pumpd.spark.read.streams.protocol.CREDIT`. Each line: msg/s,
this process's CPU per message (``time.process_time``), the broker's (its ``beam.smp``), the
host's busy cores over the run (``/proc/stat``: the other load on the machine included) and the
1-minute load average before the run. The chunks' sizes are printed once. Results: JSON lines in
bench/results/stream_task-<time>.jsonl and a table of medians on stdout.
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
from pumpd.spark.read.read_options import parse_read_options
from pumpd.spark.read.streams import protocol as stream_protocol
from pumpd.spark.read.streams.wire import FIRST
from pumpd.testing.localnode import LocalNode

import stream_clients
from common import common_fields, find_descendant, host_busy_seconds, process_cpu_seconds

RESULTS_DIR = Path(__file__).resolve().parent / "results"
STREAM = stream_clients.STREAM


def task(uri: str, port: int, n: int, ahead: int, ipc: bool = False) -> int:
    """``ahead``: :data:`~pumpd.spark.read.streams.protocol.AHEAD_ROWS` for this run (0: a fixed
    credit of ``CREDIT`` chunks, the reader before it sized its credit in messages); ``ipc``:
    each batch written as an Arrow IPC stream in memory, as a Spark Python worker does before
    the JVM reads it (the task's pause between batches, without Spark)."""
    import pyarrow as pa

    options = parse_read_options({"uri": uri, "stream": STREAM, "streamPort": str(port)})
    saved, stream_protocol.AHEAD_ROWS = stream_protocol.AHEAD_ROWS, ahead
    rows = 0
    try:
        for b in stream_protocol.read(options, STREAM, 0, n):
            rows += b.num_rows
            if ipc:
                with pa.ipc.new_stream(pa.BufferOutputStream(), b.schema) as w:
                    w.write_batch(b)
    finally:
        stream_protocol.AHEAD_ROWS = saved
    return rows


def wire(uri: str, port: int, n: int) -> int:
    """The chunks alone, credit as the task gives it."""
    options = parse_read_options({"uri": uri, "stream": STREAM, "streamPort": str(port)})
    got = 0
    with stream_protocol.connect(options, "pumpd bench wire") as conn:
        conn.subscribe(STREAM, FIRST, credit=stream_protocol.CREDIT)
        credit = stream_protocol.Credit(conn)
        while got < n:
            c = conn.chunk()
            credit.delivered(c.records)
            got += c.records
    return got


def chunk_sizes(uri: str, port: int, n: int) -> str:
    """How the publisher's batching cut the stream into chunks."""
    options = parse_read_options({"uri": uri, "stream": STREAM, "streamPort": str(port)})
    records, sizes = 0, []
    with stream_protocol.connect(options, "pumpd bench chunks") as conn:
        conn.subscribe(STREAM, FIRST, credit=20)
        for c in conn.chunks(credit_every=10):
            records += c.records
            sizes.append((c.records, len(c.frame)))
            if records >= n:
                break
    recs = [r for r, _ in sizes]
    return (f"{len(sizes)} chunks; records per chunk median {statistics.median(recs):.0f}, "
            f"min {min(recs)}, max {max(recs)}; bytes per chunk median "
            f"{statistics.median(b for _, b in sizes):,.0f}")


def measure(run: Callable[[], int], beam: int) -> dict[str, float]:
    load = os.getloadavg()[0]
    b0, h0 = process_cpu_seconds(beam), host_busy_seconds()
    t0, c0 = time.perf_counter(), time.process_time()
    got = run()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    broker, host = process_cpu_seconds(beam) - b0, host_busy_seconds() - h0
    return {"msg_s": got / seconds, "cpu_us_per_msg": cpu / got * 1e6,
            "broker_us_per_msg": broker / got * 1e6, "host_busy_cores": host / seconds,
            "loadavg_1min": load}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--credit", type=int, default=stream_protocol.CREDIT)
    ap.add_argument("--systems", default="raw-rstream,pumpd-task,pumpd-task-fixed,pumpd-wire")
    ap.add_argument("--metadata", choices=stream_clients.METADATA, default="identical")
    args = ap.parse_args()
    n = args.messages
    stream_protocol.CREDIT = args.credit
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"stream_task-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    results: dict[str, list[dict[str, float]]] = {}
    with LocalNode(plugins=["rabbitmq_stream"]) as node:
        uri, port = node.uri(), node.stream_port
        assert port is not None
        beam = find_descendant(node.pid, "beam.smp")
        assert beam is not None
        stream_clients.fill(uri, n, args.metadata)
        print(chunk_sizes(uri, port, n), flush=True)
        ahead = stream_protocol.AHEAD_ROWS
        every: dict[str, Callable[[], int]] = {
            "raw-rstream": lambda: stream_clients.read_rstream("127.0.0.1", port, n),
            "pumpd-task": lambda: task(uri, port, n, ahead),
            "pumpd-task-fixed": lambda: task(uri, port, n, 0),
            "pumpd-task-ipc": lambda: task(uri, port, n, ahead, ipc=True),
            "pumpd-task-ipc-fixed": lambda: task(uri, port, n, 0, ipc=True),
            "pumpd-wire": lambda: wire(uri, port, n),
        }
        systems = {k: every[k] for k in args.systems.split(",")}
        for rep in range(1, args.reps + 1):
            for system, run in systems.items():
                m = measure(run, beam)
                results.setdefault(system, []).append(m)
                line = {**common_fields("stream_task", f"stream {n} x 64 B", system, rep,
                                        m["msg_s"]), "credit": args.credit,
                        "metadata": args.metadata,
                        **{k: round(v, 2) for k, v in m.items() if k != "msg_s"}}
                print(orjson.dumps(line).decode(), flush=True)
                with out.open("ab") as f:
                    f.write(orjson.dumps(line) + b"\n")
    print(f"\n| system | msg/s | CPU µs/msg | broker µs/msg | busy cores |  (medians of "
          f"{args.reps}, {args.metadata} metadata)\n|---|---|---|---|---|")
    for system, ms in results.items():
        med = {k: statistics.median(m[k] for m in ms) for k in ms[0]}
        print(f"| {system} | {med['msg_s']:,.0f} | {med['cpu_us_per_msg']:.2f} | "
              f"{med['broker_us_per_msg']:.2f} | {med['host_busy_cores']:.2f} |")
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
