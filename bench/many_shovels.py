"""Many idle shovels in few processes: the cost of ``--shovels-per-process K``.

Idle case (default): ``--shovels N`` shovels (default 1,000), each with its own source and
destination queue on one private RabbitMQ node and its two connections, run by
``python -m pumpd --shovels-per-process K``. Reported: the seconds until ``/api/shovels`` shows
every shovel ``running``; pumpd's total RSS (coordinator, workers or hosts, resource tracker:
the sum of VmRSS, which counts shared pages once per process, and the sum of Pss, which does
not); pumpd's CPU over ``--idle-seconds`` (default 30) with nothing to move, as % of one core;
and the seconds from SIGTERM to pumpd's exit (every shovel drained).

    python bench/many_shovels.py                          # 1,000 idle shovels, K = 100
    python bench/many_shovels.py --shovels 20 --per-process 1   # today's cost, for comparison
    python bench/many_shovels.py --throughput             # 300 queues x 1,000 messages, packed
                                                          # (K = 100) vs one shovel x 300,000

Targets for 1,000 idle shovels on a 2-core machine: all running within 2 minutes, RSS under
2 GB, idle CPU under 10 % of a core, SIGTERM exit within 30 s. Throughput case: the total rate
of 300 packed shovels no lower than one shovel moving the same messages.

Every run is a JSON line in ``bench/results/many_shovels-<time>.jsonl``.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pumpd.testing.localnode import LocalNode

from common import (
    Pumpd,
    bench_shovel,
    common_fields,
    declare_durable_queues,
    memory_kib,
    prefill,
    process_tree,
    record,
    shovels_doc,
    tree_cpu_seconds,
)

RESULTS = Path(__file__).resolve().parent / "results"


def idle_run(node: LocalNode, n: int, k: int, idle_seconds: float, workdir: Path) -> dict[str, Any]:
    vhost = f"many-{n}-{k}-{os.getpid()}"
    node.add_vhost(vhost)
    uri = node.uri(vhost)
    try:
        shovels = {f"s{i:04d}": bench_shovel(uri, f"src{i:04d}", f"dst{i:04d}") for i in range(n)}
        pumpd = Pumpd(workdir, shovels, k)
        try:
            t_running = pumpd.poll("every shovel running", lambda docs: len(docs) == n and all(
                d["state"] == "running" for d in docs), 600)
            time.sleep(5)  # connections settle: the measure is of a steady idle state
            pids = [p for p in process_tree(pumpd.proc.pid)]
            rss, pss = memory_kib(pids)
            coord = pumpd.proc.pid
            before, t0 = tree_cpu_seconds(pids), time.monotonic()
            time.sleep(idle_seconds)
            after, t1 = tree_cpu_seconds(pids), time.monotonic()
            cpu0, cpu1 = sum(before.values()), sum(after.values())
            coord_cpu = after.get(coord, 0.0) - before.get(coord, 0.0)
            docs = shovels_doc(pumpd.port)
            assert all(d["state"] == "running" for d in docs), "a shovel left running while idle"
        finally:
            t_stop = pumpd.stop()
        return {
            "bench": "many_shovels", "case": "idle", "shovels": n, "per_process": k,
            "processes": len(pids), "seconds_to_all_running": round(t_running, 1),
            "rss_mib": round(rss / 1024), "pss_mib": round(pss / 1024),
            "idle_cpu_pct_of_core": round(100 * (cpu1 - cpu0) / (t1 - t0), 2),
            "coordinator_idle_cpu_pct": round(100 * coord_cpu / (t1 - t0), 2),
            "sigterm_exit_seconds": round(t_stop, 1),
        }
    finally:
        node.delete_vhost(vhost)


def throughput_run(node: LocalNode, queues: int, per_queue: int, k: int, packed: bool,
                   workdir: Path) -> dict[str, Any]:
    vhost = f"many-tp-{'packed' if packed else 'one'}-{os.getpid()}"
    node.add_vhost(vhost)
    uri = node.uri(vhost)
    total = queues * per_queue
    try:
        if packed:
            names = [f"q{i:03d}" for i in range(queues)]
            declare_durable_queues(uri, [f"src-{q}" for q in names] + [f"dst-{q}" for q in names])
            for q in names:
                prefill(uri, f"src-{q}", per_queue, 64, persistent=True)
            shovels = {q: bench_shovel(uri, f"src-{q}", f"dst-{q}") for q in names}
        else:
            declare_durable_queues(uri, ["src-all", "dst-all"])
            prefill(uri, "src-all", total, 64, persistent=True)
            shovels = {"all": bench_shovel(uri, "src-all", "dst-all")}
        pumpd = Pumpd(workdir, shovels, k if packed else 1)
        try:
            t_done = pumpd.poll("every message acked", lambda docs: sum(
                d["counters"]["acked"] for d in docs) >= total, 900)
        finally:
            pumpd.stop()
        return {
            "bench": "many_shovels", "case": "packed" if packed else "one shovel",
            "shovels": len(shovels), "per_process": k if packed else 1, "messages": total,
            "seconds_start_to_last_ack": round(t_done, 1),
            "msg_per_s": round(total / t_done),
        }
    finally:
        node.delete_vhost(vhost)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shovels", type=int, default=1000)
    p.add_argument("--per-process", type=int, default=100, metavar="K")
    p.add_argument("--idle-seconds", type=float, default=30.0)
    p.add_argument("--throughput", action="store_true",
                   help="300 queues x 1,000 messages packed vs one shovel x 300,000")
    p.add_argument("--queues", type=int, default=300)
    p.add_argument("--per-queue", type=int, default=1000)
    ns = p.parse_args()
    # 2 connections per shovel, each a socket here and in the broker
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * ns.shovels + 1024))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("many_shovels-%Y%m%dT%H%M%S.jsonl")
    with LocalNode(name=f"pumpd-bench-many-{os.getpid()}") as node, \
            tempfile.TemporaryDirectory() as tmp:
        version = node.ctl("version").strip()
        print(f"RabbitMQ {version} private node, {os.cpu_count()} CPUs", flush=True)
        results = []
        if ns.throughput:
            for packed in (False, True):
                results.append(throughput_run(node, ns.queues, ns.per_queue, ns.per_process,
                                              packed, Path(tmp)))
        else:
            results.append(idle_run(node, ns.shovels, ns.per_process, ns.idle_seconds,
                                    Path(tmp)))
        for r in results:
            r.update(common_fields("many_shovels", str(r["case"]), "pumpd", 1,
                                   r.get("msg_per_s")))
            record(out, r, version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
