"""``make spark-pipeline-demo``: the pipeline of :mod:`pumpd.spark.pipeline` killed mid-way and
restarted from its checkpoint; counts what arrived, what twice, and what was lost.

On a private node: a stream ``orders`` gets ``--rows`` JSON orders (one in four is noise, one in
fifty does not parse); the pipeline runs in a process of its own (its own SparkSession) and is
SIGKILLed, with its JVM, once a third of the expected output has arrived; a second run with
``Trigger.AvailableNow`` finishes from the checkpoint. Every message in the queue bound to the
output exchange is then read: the distinct ids must be exactly the expected orders, and every
id that arrived twice must carry the same body both times.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

import pika

from ...testing.localnode import LocalNode

STREAM, EXCHANGE, QUEUE = "orders", "enriched", "enriched-all"


def say(text: str) -> None:
    print(f"[spark-pipeline-demo] {text}", flush=True)


def order(i: int) -> bytes:
    if i % 50 == 49:
        return b"{not json"
    kind = "noise" if i % 4 == 3 else "order"
    return json.dumps({"n": i, "kind": kind, "amount": (i % 300) + 0.25,
                       "customer": f"c{i % 7}"}).encode()


def expected(rows: int) -> set[int]:
    return {i for i in range(rows) if i % 50 != 49 and i % 4 != 3}


def prepare(uri: str, rows: int) -> None:
    """The stream with ``rows`` orders; the output exchange and a queue that takes it all."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    ch.exchange_declare(EXCHANGE, "topic", durable=True)
    ch.queue_declare(QUEUE, durable=True)
    ch.queue_bind(QUEUE, EXCHANGE, "customer.#")
    ch.confirm_delivery()
    for i in range(rows):
        ch.basic_publish("", STREAM, order(i))
    conn.close()


def depth(uri: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        return int(conn.channel().queue_declare(QUEUE, passive=True).method.message_count)
    finally:
        conn.close()


def run_pipeline(uri: str, checkpoint: str, *, per_trigger: int, available_now: bool,
                 kill_at: int | None = None, timeout: float = 600,
                 stream_port: int | None = None) -> int:
    """Run ``python -m pumpd.spark.pipeline`` in a process group of its own; with ``kill_at``,
    SIGKILL the group (Python and its JVM) once the output queue holds that many."""
    cmd = [sys.executable, "-m", "pumpd.spark.pipeline", "--uri", uri, "--stream", STREAM,
           "--exchange", EXCHANGE, "--checkpoint", checkpoint,
           "--max-records-per-trigger", str(per_trigger)]
    if available_now:
        cmd.append("--available-now")
    if stream_port is not None:
        cmd += ["--stream-port", str(stream_port)]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if kill_at is not None and depth(uri) >= kill_at:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return -9
            time.sleep(0.2)
        if proc.poll() is None:
            raise RuntimeError(f"the pipeline did not finish within {timeout:.0f} s")
        return int(proc.returncode)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class Outcome:
    expected: int
    delivered: int
    distinct: int
    lost: int
    unexpected: int
    duplicates: int
    duplicates_differ: int  # ids seen twice with different bodies (must be 0)


def collect(uri: str, rows: int) -> Outcome:
    """Read (and ack) everything in the output queue; compare with the expected orders."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ids: Counter[str] = Counter()
    bodies: dict[str, bytes] = {}
    differ = 0
    numbers: set[int] = set()
    while True:
        method, props, body = ch.basic_get(QUEUE, auto_ack=True)
        if method is None:
            break
        mid = props.message_id or ""
        ids[mid] += 1
        if mid in bodies and bodies[mid] != body:
            differ += 1
        bodies.setdefault(mid, body)
        numbers.add(int(json.loads(body)["n"]))
    conn.close()
    want = expected(rows)
    return Outcome(expected=len(want), delivered=sum(ids.values()), distinct=len(ids),
                   lost=len(want - numbers), unexpected=len(numbers - want),
                   duplicates=sum(n - 1 for n in ids.values()), duplicates_differ=differ)


def kill_and_restart(uri: str, rows: int, checkpoint: str, per_trigger: int,
                     stream_port: int | None = None) -> Outcome:
    want = len(expected(rows))
    code = run_pipeline(uri, checkpoint, per_trigger=per_trigger, available_now=False,
                        kill_at=want // 3, stream_port=stream_port)
    if code != -9:
        raise RuntimeError(f"the first run ended by itself (exit {code}) before it was killed")
    say(f"killed the pipeline (SIGKILL, with its JVM) with {depth(uri):,} of {want:,} out")
    code = run_pipeline(uri, checkpoint, per_trigger=per_trigger, available_now=True,
                        stream_port=stream_port)
    if code != 0:
        raise RuntimeError(f"the restarted pipeline failed (exit {code})")
    return collect(uri, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--per-trigger", type=int, default=5_000)
    args = ap.parse_args(argv)
    say("starting a private RabbitMQ node ...")
    with LocalNode(["rabbitmq_stream"], name=f"pumpd-pipeline-demo-{os.getpid()}") as node, \
            tempfile.TemporaryDirectory(prefix="pumpd-pipeline-") as tmp:
        uri = node.uri("/")
        prepare(uri, args.rows)
        say(f"{args.rows:,} orders in stream {STREAM!r}; running the pipeline ...")
        t0 = time.perf_counter()
        out = kill_and_restart(uri, args.rows, os.path.join(tmp, "checkpoint"),
                               args.per_trigger, stream_port=node.stream_port)
        seconds = time.perf_counter() - t0
    say(f"expected {out.expected:,} orders; delivered {out.delivered:,} messages with "
        f"{out.distinct:,} distinct ids in {seconds:.1f} s (two runs, Spark start-up included)")
    say(f"lost {out.lost}, unexpected {out.unexpected}, duplicates {out.duplicates:,} "
        f"(same id, {'same body' if not out.duplicates_differ else 'DIFFERENT BODIES'})")
    ok = (out.lost == 0 and out.unexpected == 0 and out.duplicates_differ == 0
          and out.distinct == out.expected)
    say("nothing lost; every duplicate carries its original's id" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
