"""Stream to stream: pumpd's stream destination, with and without deduplication, side by side with
RabbitMQ's Shovel plugin on the same streams.

    python bench/stream_shovel.py [--messages 200000] [--reps 3] [--systems pumpd-dedup,pumpd,plugin]

One private node (management, shovel and stream plugins). One source stream is filled once with
``--messages`` bodies of ``--body-size`` bytes (AMQP 0-9-1 publishes, confirmed). Then, in every
repetition, each system in turn (the order rotates from one repetition to the next) copies the
whole source stream into a destination stream of its own, declared empty for the run:

- ``pumpd-dedup``: ``pumpd --config`` with a stream destination whose publishing ids are the
  source offsets (``publishing_id: source-offset``, the default for a stream source);
- ``pumpd``: the same with ``publishing_id: none`` (a stream destination without deduplication);
- ``plugin``: a dynamic shovel of the Shovel plugin, consuming the source with
  ``x-stream-offset: first`` and publishing over AMQP 0-9-1 into the destination stream.

Every system consumes with a prefetch of ``--prefetch`` and acknowledges on confirm. The
destination's length is read over the streams protocol (the tail of its last chunk) every
``POLL_INTERVAL``; the rate is the steady state between 5 % and 95 % arrived (as
``bench/shovel.py``), with the pump's own CPU per message (pumpd's processes; the plugin's work is
inside the broker's) and the broker's. After each run the destination must hold exactly
``--messages`` messages. Results: JSON lines in ``bench/results/stream_shovel-<time>.jsonl`` and a
table of medians on stdout.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pika
from pumpd.spark.read.read_options import parse_read_options
from pumpd.spark.read.streams.protocol import StreamProbe
from pumpd.testing.localnode import LocalNode, find_free_port

from common import (
    common_fields,
    find_descendant,
    host_busy_seconds,
    prefill,
    process_cpu_seconds,
    process_tree,
    tree_cpu_seconds,
)
from shovel_run import (
    PumpProcess,
    RunFailed,
    Sample,
    metrics,
    pumpd_source_digest,
    results_file,
    steady_marks,
    wait_for_quiet,
)

SYSTEMS = ("pumpd-dedup", "pumpd", "plugin")
PLUGINS = ("rabbitmq_management", "rabbitmq_shovel", "rabbitmq_stream")
SOURCE = "bench-source-stream"
POLL_INTERVAL = 0.05
STALL_TIMEOUT = 60.0


def declare_stream(uri: str, name: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})


def delete_queue(uri: str, name: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        conn.channel().queue_delete(name)


class StreamLength:
    """The number of messages in a stream whose offsets start at 0 without gaps (a stream that
    was never truncated): the tail of its last chunk, read over the streams protocol."""

    def __init__(self, node: LocalNode) -> None:
        assert node.stream_port is not None
        self.options = parse_read_options({"uri": node.uri(), "stream": SOURCE,
                                           "streamPort": str(node.stream_port),
                                           "pollTimeoutMs": "100"})
        self.probe = StreamProbe(self.options)

    def __call__(self, stream: str) -> int:
        if not self.probe.alive():
            self.probe.close()
            self.probe = StreamProbe(self.options)
        tail = self.probe.next_offset(stream)
        return 0 if tail is None else tail

    def close(self) -> None:
        self.probe.close()


def pumpd_argv(node: LocalNode, name: str, destination: str, dedup: bool, prefetch: int,
               workdir: Path, http_port: int) -> list[str]:
    uri = node.uri()
    shovel = {
        "sources": {"broker": uri}, "queue": SOURCE,
        "consumer_args": {"x-stream-offset": "first"},
        "prefetch_count": prefetch, "ack_mode": "on_confirm",
        "destinations": {"protocol": "stream", "broker": uri, "stream": destination,
                         "stream_port": node.stream_port},
        "publishing_id": "source-offset" if dedup else "none",
    }
    path = workdir / f"{name}.json"
    path.write_text(json.dumps({"shovels": {name: shovel}}, indent=2))
    return [sys.executable, "-m", "pumpd", "--config", str(path), "--status-interval", "0",
            "--http", f"127.0.0.1:{http_port}", "--http-open-reads"]


def plugin_value(node: LocalNode, destination: str, prefetch: int) -> dict[str, Any]:
    uri = node.uri()
    return {"src-protocol": "amqp091", "src-uri": uri, "src-queue": SOURCE,
            "src-consumer-args": {"x-stream-offset": "first"}, "src-prefetch-count": prefetch,
            "dest-protocol": "amqp091", "dest-uri": uri, "dest-queue": destination,
            "ack-mode": "on-confirm"}


def run_once(node: LocalNode, beam_pid: int, length: StreamLength, system: str, messages: int,
             rep: int, prefetch: int, workdir: Path, quiet_wait: float) -> dict[str, Any]:
    name = f"bench-{system}-{rep}"
    destination = f"bench-dest-{system}-{rep}"
    rec: dict[str, Any] = {"system": system, "rep": rep, "messages": messages,
                           "prefetch": prefetch, "ok": False, "error": None}
    pump: PumpProcess | None = None
    samples: list[Sample] = []
    uri = node.uri()
    try:
        declare_stream(uri, destination)
        waited, load = wait_for_quiet(quiet_wait)
        rec["quiet_wait_s"], rec["host_load_before"] = round(waited, 2), round(load, 3)
        began = time.monotonic()
        if system == "plugin":
            node.management_request("PUT", f"/api/parameters/shovel/%2F/{name}",
                                    {"value": plugin_value(node, destination, prefetch)})
        else:
            rec["pumpd_source"] = pumpd_source_digest()
            pump = PumpProcess(pumpd_argv(node, name, destination, system == "pumpd-dedup",
                                          prefetch, workdir, find_free_port()),
                               workdir / f"{name}.log")
        lo_mark, hi_mark = steady_marks(messages)
        last_change, last_count = time.monotonic(), -1
        pump_pids: list[int] = []
        for i in itertools.count():
            arrived = length(destination)
            now = time.monotonic()
            if pump is not None:
                crossing = last_count < lo_mark <= arrived or last_count < hi_mark <= arrived
                if arrived == 0 or crossing or i % 25 == 0:
                    pump_pids = process_tree(pump.pid)
            samples.append(Sample(now, arrived, tree_cpu_seconds(pump_pids),
                                  process_cpu_seconds(beam_pid), host_busy_seconds()))
            if arrived >= messages:
                break
            if arrived != last_count:
                last_change, last_count = now, arrived
            elif now - last_change > STALL_TIMEOUT:
                raise RunFailed(f"stalled at {arrived}/{messages} for {STALL_TIMEOUT:.0f} s")
            if pump is not None and not pump.alive():
                raise RunFailed(f"{system} exited at {arrived}/{messages}:\n{pump.log_tail()}")
            time.sleep(POLL_INTERVAL)
        rec["wall"] = round(samples[-1].t - began, 3)
        if pump is not None:
            code, _ = pump.stop()
            if code != 0:
                raise RunFailed(f"{system} exited with status {code} after SIGTERM")
        else:
            node.management_request("DELETE", f"/api/parameters/shovel/%2F/{name}")
        time.sleep(0.5)  # whatever was still in flight lands before the count
        final = length(destination)
        rec["arrived"] = final
        if final != messages:
            raise RunFailed(f"the destination holds {final} messages, not {messages}")
        rec.update(metrics(samples, messages))
        rec["ok"] = True
    except (RunFailed, OSError, pika.exceptions.AMQPError) as exc:
        rec["error"] = str(exc) if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {exc}"
        if samples:
            rec.update(metrics(samples, messages))
    finally:
        if pump is not None:
            pump.kill()
        try:
            delete_queue(uri, destination)
        except Exception:
            pass
    return rec


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--body-size", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--prefetch", type=int, default=1000)
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated, of {', '.join(SYSTEMS)}")
    p.add_argument("--quiet-wait", type=float, default=20.0,
                   help="seconds to wait at most for a quiet host before each run")
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not systems or any(s not in SYSTEMS for s in systems):
        p.error(f"--systems: pick from {', '.join(SYSTEMS)}")
    if not 1 <= args.messages <= 100_000_000 or not 1 <= args.reps <= 100:
        p.error("--messages 1..100,000,000 and --reps 1..100")
    out = results_file("stream_shovel", args.output)
    node = LocalNode(plugins=PLUGINS)
    print("starting a private RabbitMQ node (management, shovel, stream) ...", flush=True)
    node.start()
    records: list[dict[str, Any]] = []
    try:
        beam_pid = find_descendant(node.pid or 0, "beam.smp")
        if beam_pid is None:
            raise SystemExit("cannot find the node's beam.smp process")
        declare_stream(node.uri(), SOURCE)
        seconds = prefill(node.uri(), SOURCE, args.messages, args.body_size, persistent=True)
        print(f"filled {SOURCE} with {args.messages} messages in {seconds:.1f} s", flush=True)
        length = StreamLength(node)
        with tempfile.TemporaryDirectory(prefix="pumpd-stream-bench-") as tmp:
            for rep in range(1, args.reps + 1):
                shift = (rep - 1) % len(systems)
                for system in systems[shift:] + systems[:shift]:
                    rec = run_once(node, beam_pid, length, system, args.messages, rep,
                                   args.prefetch, Path(tmp), args.quiet_wait)
                    rec |= common_fields("stream_shovel", f"{args.body_size}B-stream-stream",
                                         system, rep, rec.get("msg_per_s"))
                    records.append(rec)
                    with out.open("a") as f:
                        f.write(json.dumps(rec) + "\n")
                    print(f"rep {rep} {system:12} "
                          + (f"{rec['msg_per_s']:>10,.0f} msg/s  pump "
                             f"{rec.get('pump_cpu_us_per_msg')} µs/msg  broker "
                             f"{rec.get('broker_cpu_us_per_msg')} µs/msg"
                             if rec["ok"] else f"FAILED: {rec['error']}"), flush=True)
        length.close()
    finally:
        node.close(graceful=False)
    print(f"\nmedians over {args.reps} repetitions ({out}):")
    plugin = [r["msg_per_s"] for r in records if r["system"] == "plugin" and r["ok"]]
    for system in systems:
        rates = [r["msg_per_s"] for r in records if r["system"] == system and r["ok"]]
        if not rates:
            print(f"  {system:12} no successful run")
            continue
        cpu = [r["pump_cpu_us_per_msg"] for r in records
               if r["system"] == system and r["ok"] and r.get("pump_cpu_us_per_msg")]
        ratio = (f"  {statistics.median(rates) / statistics.median(plugin):.2f}x the plugin"
                 if plugin else "")
        print(f"  {system:12} {statistics.median(rates):>10,.0f} msg/s"
              + (f"  pump {statistics.median(cpu):.2f} µs/msg" if cpu else "") + ratio)
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
