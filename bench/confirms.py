"""Confirm-strategy benchmark: the three ways of publishing with confirms of RabbitMQ's publisher-confirms tutorial, per client.

``python bench/confirms.py`` (part of ``make bench``) starts one private RabbitMQ node and, for
every RTT, body kind, strategy and repetition, publishes the same messages with each client in
turn (the order rotates every repetition):

* ``pumpd``: :class:`pumpd.Publisher` (native data plane), ``publish_many`` of the bodies with
  the strategy as its ``mode``, then ``flush()``;
* ``pika``: the way pika's documentation writes each strategy: ``individual`` on a
  ``BlockingConnection`` with ``confirm_delivery()`` (each ``basic_publish`` waits for its
  confirm); ``batch`` and ``async`` on a ``SelectConnection`` with a delivery-confirmation
  callback (pika's asynchronous publisher example): publish, count confirms (``multiple``
  included), and publish more when the batch is confirmed / the window has room;
* ``aio-pika``: ``channel(publisher_confirms=True)``: ``individual`` awaits each
  ``exchange.publish``; ``batch`` gathers 100 publishes; ``async`` keeps up to ``--window``
  publish tasks in flight (the aio-pika tutorial's strategies), on asyncio's default loop.

The strategies: ``individual`` (wait for each confirm), ``batch`` (wait after every
``--batch-size``, 100 as in the tutorial), ``async`` (at most ``--window`` unconfirmed, 5,000). The
"remote broker" of the tutorial is the same node behind ``python -m pumpd.testing.proxy`` (a process
of its own) adding half the RTT in each direction. Every run publishes to a purged queue on the
default exchange; 64 B bodies, transient to a non-durable queue as in the tutorial, and with
``--persistent`` also persistent (delivery mode 2) to a durable queue.

Measured per run, from the first publish to the last confirm: seconds, msg/s, the client's own
CPU per message (its thread's CPU time: every client runs in this process's main thread) and the
broker's (``beam.smp`` from ``/proc``). One JSON line per run goes to
``bench/results/confirms-<time>.jsonl``; medians are printed at the end, and ``bench/analyse.py``
makes the report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pika
import pika.exceptions
from pumpd.dataplane import implementation as pumpd_implementation
from pumpd.testing.localnode import LocalNode

from common import QueueProbe, common_fields, find_descendant, process_cpu_seconds
from publish_runs import CLIENTS, make_run

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
VHOST = "bench"
STRATEGIES = ("individual", "batch", "async")
BODY_BYTES = 64
# The tutorial's Java figures for 50,000 messages (ms): (local, remote) per strategy.
TUTORIAL_MS = {"individual": (5_549, 231_541), "batch": (2_331, 7_232), "async": (4_054, 6_332)}


class LatencyProxy:
    """``python -m pumpd.testing.proxy`` in a process of its own, half the RTT each way."""

    def __init__(self, port: int, rtt_ms: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-W", "ignore::RuntimeWarning", "-m", "pumpd.testing.proxy", f"127.0.0.1:{port}",
             "--delay-ms", str(rtt_ms / 2)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def one_run(uri: str, probe: QueueProbe, beam_pid: int, client: str, strategy: str,
            rtt_ms: float, persistent: bool, messages: int, rep: int,
            args: argparse.Namespace) -> dict[str, Any]:
    queue = "bench.confirms.durable" if persistent else "bench.confirms"
    probe.declare(queue, durable=persistent)
    probe.purge(queue)
    kind = "persistent" if persistent else "transient"
    rec: dict[str, Any] = {
        **common_fields("confirms", f"{BODY_BYTES}B-{kind}-rtt{rtt_ms:g}ms-{strategy}", client,
                        rep, None),
        "client": client, "strategy": strategy, "rtt_ms": rtt_ms, "body_bytes": BODY_BYTES,
        "persistent": persistent, "messages": messages, "window": args.window,
        "batch_size": args.batch_size, "seconds": None, "client_us_per_msg": None,
        "broker_us_per_msg": None, "ok": False, "error": None,
        "started_at": dt.datetime.now().isoformat(timespec="seconds"),
    }
    bodies = [(b"%010d" % i + b"-" * BODY_BYTES)[:BODY_BYTES] for i in range(messages)]
    run = make_run(client, strategy, uri=uri, queue=queue, persistent=persistent,
                   window=args.window, batch_size=args.batch_size)
    try:
        run.open()
        try:
            cpu0, beam0, t0 = time.thread_time(), process_cpu_seconds(beam_pid), time.perf_counter()
            run.publish(bodies)
            t1, cpu1, beam1 = time.perf_counter(), time.thread_time(), process_cpu_seconds(beam_pid)
        finally:
            run.close()
        depth, _ = probe.depth(queue)
        if depth != messages:
            raise RuntimeError(f"{depth} messages in the queue, expected {messages}")
        seconds = t1 - t0
        rec.update(msg_s=round(messages / seconds, 1), seconds=round(seconds, 4),
                   client_us_per_msg=round((cpu1 - cpu0) / messages * 1e6, 2),
                   broker_us_per_msg=round((beam1 - beam0) / messages * 1e6, 2),
                   ms_per_50k=round(seconds / messages * 50_000 * 1000, 1), ok=True)
    except Exception as exc:  # recorded, and the benchmark goes on
        rec["error"] = f"{type(exc).__name__}: {exc}"
    probe.purge(queue)
    return rec


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, help="messages per run (default 50,000)")
    p.add_argument("--individual-messages", type=int,
                   help="messages per `individual` run over a remote RTT or with persistent "
                   "messages (default 1,000; the report scales every run to 50,000)")
    p.add_argument("--reps", type=int, help="repetitions (default 3)")
    p.add_argument("--clients", default=",".join(CLIENTS))
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--rtt-ms", default="0,5", help="round-trip times to run at (default 0,5)")
    p.add_argument("--persistent", action="store_true",
                   help="also persistent messages to a durable queue")
    p.add_argument("--window", type=int, default=5000, help="async window (default 5,000)")
    p.add_argument("--batch-size", type=int, default=100, help="batch size (default 100)")
    p.add_argument("--quick", action="store_true",
                   help="10,000 messages (200 individual remote), 1 repetition")
    p.add_argument("--output", type=Path,
                   help="JSON-lines file (default bench/results/confirms-<time>.jsonl)")
    ns = p.parse_args(argv)
    ns.messages = ns.messages or (10_000 if ns.quick else 50_000)
    ns.individual_messages = ns.individual_messages or (200 if ns.quick else 1_000)
    ns.reps = ns.reps or (1 if ns.quick else 3)
    ns.client_list = [c for c in ns.clients.split(",") if c]
    ns.strategy_list = [s for s in ns.strategies.split(",") if s]
    ns.rtt_list = [float(r) for r in ns.rtt_ms.split(",") if r]
    for c in ns.client_list:
        if c not in CLIENTS:
            p.error(f"unknown client {c!r}")
    for s in ns.strategy_list:
        if s not in STRATEGIES:
            p.error(f"unknown strategy {s!r}")
    return ns


def summary(records: list[dict[str, Any]]) -> str:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in records:
        if r["ok"]:
            key = (r["rtt_ms"], r["persistent"], r["strategy"], r["client"])
            groups.setdefault(key, []).append(r)
    lines = [f"{'rtt ms':>6} {'kind':<10} {'strategy':<10} {'client':<9} {'msg/s':>9} "
             f"{'ms/50k':>9} {'client us':>9} {'broker us':>9}  (medians)"]
    for (rtt, persistent, strategy, client), rs in sorted(groups.items()):
        def med(k: str, rs: list[dict[str, Any]] = rs) -> float:
            return float(statistics.median(r[k] for r in rs))
        lines.append(f"{rtt:>6g} {'persistent' if persistent else 'transient':<10} "
                     f"{strategy:<10} {client:<9} {med('msg_s'):>9,.0f} {med('ms_per_50k'):>9,.0f}"
                     f" {med('client_us_per_msg'):>9.1f} {med('broker_us_per_msg'):>9.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_path = args.output or RESULTS_DIR / f"confirms-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    kinds = [False, True] if args.persistent else [False]
    plan = [(rep, rtt, persistent, strategy)
            for rep in range(1, args.reps + 1) for rtt in args.rtt_list for persistent in kinds
            for strategy in args.strategy_list]
    total = len(plan) * len(args.client_list)
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}", flush=True)
    print("starting a private RabbitMQ node ...", flush=True)
    node = LocalNode(name=f"pumpd-bench-confirms-{os.getpid()}")
    records: list[dict[str, Any]] = []
    proxies: dict[float, LatencyProxy] = {}
    probe: QueueProbe | None = None
    try:
        node.start()
        node.add_vhost(VHOST)
        beam_pid = find_descendant(node.pid or 0, "beam.smp")
        if beam_pid is None:
            raise SystemExit("cannot find the node's beam.smp process")
        version = node.ctl("version").strip()
        host = {"nproc": os.cpu_count(), "python": platform.python_version(),
                "pika": pika.__version__, "rabbitmq_version": version,
                "pumpd_data_plane": pumpd_implementation.IMPLEMENTATION}
        print(f"RabbitMQ {version}, {host['nproc']} CPUs, pumpd data plane "
              f"{host['pumpd_data_plane']}; {total} runs -> {out_path}", flush=True)
        probe = QueueProbe(node.uri(VHOST))
        for rtt in args.rtt_list:
            if rtt > 0:
                proxies[rtt] = LatencyProxy(node.amqp_port, rtt)
        done = 0
        with out_path.open("ab") as out:
            for rep, rtt, persistent, strategy in plan:
                uri = node.uri(VHOST)
                if rtt > 0:
                    uri = uri.replace(f":{node.amqp_port}/", f":{proxies[rtt].port}/")
                # one confirm round trip per message: over an RTT, or a disk sync for
                # persistent messages, 50,000 would take minutes for the same figure
                messages = (args.individual_messages
                            if strategy == "individual" and (rtt > 0 or persistent)
                            else args.messages)
                shift = (rep - 1) % len(args.client_list)
                order = args.client_list[shift:] + args.client_list[:shift]
                for client in order:
                    rec = one_run(uri, probe, beam_pid, client, strategy, rtt, persistent,
                                  messages, rep, args)
                    rec["host"] = host
                    done += 1
                    records.append(rec)
                    out.write(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
                    out.flush()
                    print(progress(done, total, rec), flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    finally:
        for proxy in proxies.values():
            proxy.stop()
        if probe is not None:
            probe.close()
        node.close(graceful=False)
    print()
    print(summary(records))
    print(f"\nresults: {out_path}")
    return 0 if records and all(r["ok"] for r in records) else 1


def progress(done: int, total: int, rec: dict[str, Any]) -> str:
    head = (f"[{done}/{total}] rep {rec['rep']} rtt {rec['rtt_ms']:g} ms "
            f"{'persistent' if rec['persistent'] else 'transient'} {rec['strategy']:<10} "
            f"{rec['client']:<9}")
    if not rec["ok"]:
        return f"{head} FAILED: {rec['error']}"
    return (f"{head} {rec['messages']:>6,} in {rec['seconds']:7.3f} s = {rec['msg_s']:>9,.0f} "
            f"msg/s, client {rec['client_us_per_msg']:6.1f} us/msg, broker "
            f"{rec['broker_us_per_msg']:6.1f} us/msg")


if __name__ == "__main__":
    sys.exit(main())
