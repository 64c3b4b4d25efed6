"""Throughput of the pumpd daemon with 1, 2 and 4 workers on one shovel, and with 1, 2 and 4
separate shovels (each its own source queue), on a private RabbitMQ node.

Each run: a fresh vhost; the source queue(s) pre-filled with ``--messages`` messages in total
(split evenly between the queues of separate shovels) while nothing consumes them; then
``python -m pumpd --config ...`` is started and its ``/api/shovels`` polled every 50 ms for the
total of acked messages. The rate is taken between the moments 10 % and 90 % of the messages were
acked (interpolated between polls), so that worker start-up and the tail do not count; the time
from start to the last ack is recorded too. Medians over ``--reps`` runs are printed as a table;
every run is a JSON line in ``bench/results/workers-<time>.jsonl``. CPU per message (pumpd's
coordinator and workers, and the broker's Erlang VM, from ``/proc``) is measured over the same
window: it varies much less than the rate on a shared machine.

    python bench/workers.py                     # 200,000 x 64 B, 3 reps
    python bench/workers.py --messages 100000 --reps 5 --persistent

Source and destination are queues on the same node over network URIs, ack mode on_confirm,
prefetch 1000 per worker, durable queues. On a machine with few cores the broker is the
bottleneck: compare configurations run side by side, not with other machines.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pika
from pumpd.testing.localnode import LocalNode, find_free_port

from common import (
    bench_shovel,
    common_fields,
    crossing,
    find_descendant,
    prefill_round_robin,
    process_cpu_seconds,
    process_tree,
    tree_cpu_seconds,
)

RESULTS = Path(__file__).resolve().parent / "results"
LAYOUTS = [("one shovel", "workers", n) for n in (1, 2, 4)] + \
          [("separate shovels", "shovels", n) for n in (1, 2, 4)]


def depth(uri: str, queue: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        conn.close()


def pumpd_cpu_seconds(pid: int) -> float:
    """CPU seconds of pumpd's coordinator and every live process below it (the workers)."""
    return sum(tree_cpu_seconds(process_tree(pid)).values())


def acked(port: int) -> tuple[int, list[int]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/shovels", timeout=5) as r:
        docs = json.loads(r.read())
    return (sum(d["counters"]["acked"] for d in docs),
            [len(d["workers"]) for d in docs])



def at(times: list[float], values: list[float], t: float) -> float:
    """``values`` (sampled at ``times``) at time ``t``, interpolated."""
    for (t0, v0), (t1, v1) in itertools.pairwise(zip(times, values, strict=True)):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
    raise ValueError(f"{t} is outside the samples")


def one_run(node: LocalNode, layout: str, n: int, messages: int, size: int,
            persistent: bool, rep: int, workdir: Path) -> dict[str, Any]:
    vhost = f"bench-{layout.replace(' ', '-')}-{n}-{rep}-{os.getpid()}"
    node.add_vhost(vhost)
    uri = node.uri(vhost)
    try:
        count = n if layout == "separate shovels" else 1
        shovels = {f"s{i}": bench_shovel(uri, f"src{i}", f"dst{i}") for i in range(count)}
        conn = pika.BlockingConnection(pika.URLParameters(uri))
        ch = conn.channel()
        for i in range(count):
            ch.queue_declare(f"src{i}", durable=True)
            ch.queue_declare(f"dst{i}", durable=True)
        conn.close()
        prefill_round_robin(uri, [f"src{i}" for i in range(count)], messages, size, persistent)
        config = workdir / f"{vhost}.json"
        config.write_text(json.dumps({"shovels": shovels}))
        port = find_free_port()
        args = [sys.executable, "-m", "pumpd", "--config", str(config), "--http-open-reads", "--http",
                f"127.0.0.1:{port}", "--log-level", "warning",
                "--state-file", str(workdir / f"{vhost}.state.json")]
        if layout == "one shovel":
            args += ["--workers", str(n)]
        beam = find_descendant(node.pid or 0, "beam.smp")
        if beam is None:
            raise RuntimeError("cannot find the node's beam.smp process")
        t_start = time.monotonic()
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        samples: list[tuple[float, int]] = []
        cpu: list[tuple[float, float]] = []  # (pumpd, broker) CPU seconds at each sample
        workers: list[int] = []
        try:
            deadline = t_start + 600
            while time.monotonic() < deadline:
                try:
                    total, workers = acked(port)
                except OSError:
                    total = 0
                cpu.append((pumpd_cpu_seconds(proc.pid), process_cpu_seconds(beam)))
                samples.append((time.monotonic(), total))
                if total >= messages:
                    break
                if proc.poll() is not None:
                    raise RuntimeError(f"pumpd exited {proc.returncode}")
                time.sleep(0.05)
            else:
                raise RuntimeError("timed out")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        t10, t90 = crossing(samples, 0.1 * messages), crossing(samples, 0.9 * messages)
        times = [t for t, _ in samples]
        window = 0.8 * messages
        pumpd_cpu = at(times, [c[0] for c in cpu], t90) - at(times, [c[0] for c in cpu], t10)
        beam_cpu = at(times, [c[1] for c in cpu], t90) - at(times, [c[1] for c in cpu], t10)
        t_first = next(t for t, v in samples if v > 0)
        moved = sum(depth(uri, f"dst{i}") for i in range(count))
        assert moved == messages, f"{moved} of {messages} at the destination"
        return {
            "bench": "workers", "layout": layout, "workers_per_shovel": n if count == 1 else 1,
            "shovels": count, "processes": n, "rep": rep, "messages": messages,
            "body_bytes": size, "persistent": persistent, "ack_mode": "on_confirm",
            "prefetch": 1000,
            "msg_per_s": round(0.8 * messages / (t90 - t10)),
            # CPU per message over the same window, in microseconds (CPU times tick at 10 ms)
            "pumpd_cpu_us_per_msg": round(pumpd_cpu / window * 1e6, 1),
            "broker_cpu_us_per_msg": round(beam_cpu / window * 1e6, 1),
            "seconds_10_to_90": round(t90 - t10, 3),
            "seconds_start_to_last_ack": round(samples[-1][0] - t_start, 3),
            "seconds_first_to_last_ack": round(samples[-1][0] - t_first, 3),
            "workers_seen": workers,
        }
    finally:
        node.delete_vhost(vhost)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=64, help="body bytes (default 64)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--persistent", action="store_true", help="delivery mode 2 (default 1)")
    ns = p.parse_args()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("workers-%Y%m%dT%H%M%S.jsonl")
    cpus = os.cpu_count()
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with LocalNode(name=f"pumpd-bench-workers-{os.getpid()}") as node, \
            tempfile.TemporaryDirectory() as tmp:
        version = node.ctl("version").strip()
        print(f"RabbitMQ {version} private node, {cpus} CPUs; {ns.messages:,} x {ns.size} B "
              f"{'persistent' if ns.persistent else 'transient'}, {ns.reps} reps", flush=True)
        # Interleave the configurations rep by rep, so a slow phase of the machine is shared.
        for rep in range(ns.reps):
            for layout, _what, n in LAYOUTS:
                result = one_run(node, layout, n, ns.messages, ns.size, ns.persistent, rep,
                                 Path(tmp))
                result.update({"rabbitmq": version, "cpus": cpus,
                               "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
                result.update(common_fields("workers", f"{layout} x{n}", "pumpd", rep + 1,
                                            result["msg_per_s"]))
                with out.open("a") as f:
                    f.write(json.dumps(result) + "\n")
                rows.setdefault((layout, n), []).append(result)
                print(f"  rep {rep}: {layout}, {n}: {result['msg_per_s']:,} msg/s, CPU/msg "
                      f"pumpd {result['pumpd_cpu_us_per_msg']} us, broker "
                      f"{result['broker_cpu_us_per_msg']} us", flush=True)
    print(f"\nmedians over {ns.reps} reps ({out.relative_to(RESULTS.parent.parent)}):")
    print(f"{'layout':<18}{'processes':>10}{'msg/s':>10}{'pumpd us/msg':>14}"
          f"{'broker us/msg':>15}   msg/s of each rep")
    for (layout, n), results in rows.items():
        def med(key: str, rs: list[dict[str, Any]] = results) -> float:
            return float(statistics.median(r[key] for r in rs))
        print(f"{layout:<18}{n:>10}{med('msg_per_s'):>10,.0f}"
              f"{med('pumpd_cpu_us_per_msg'):>14.1f}{med('broker_cpu_us_per_msg'):>15.1f}   "
              + ", ".join(f"{r['msg_per_s']:,}" for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
