"""A vhost moved with ``pumpd plan-migration``'s plan (one shovel per queue) against one shovel
moving the same number of messages out of one queue (the target: the plan is not slower).

Each run, on a private RabbitMQ node with the management plugin: a fresh source and destination
vhost; ``--queues`` source queues of ``--messages-per-queue`` messages each (case ``plan``), or
one queue holding all of them (case ``one shovel``); for ``plan`` the configuration is made by
``python -m pumpd plan-migration`` from the source's management API, as a user would, and run
unchanged; ``one shovel`` is a hand-written shovel (prefetch 1000, on_confirm, like the plan's).
``python -m pumpd --config ...`` is started and its ``/api/shovels`` polled for the total of
acked messages. Two rates: **total** (every message over the time from starting pumpd to the last
ack: what a user waits for, worker start-up included) and **10-90** (between the moments 10 % and
90 % were acked). Every run is a JSON line in ``bench/results/migration-<time>.jsonl``; the
medians are printed. The processes pumpd ran and their RSS are recorded at the end of each run.

    python bench/migration.py                                # 300 queues x 1,000, 2 reps
    python bench/migration.py --queues 60 --messages-per-queue 5000 --reps 3

The plan packs its shovels into a few worker processes (its ``"shovels_per_process"``;
``--shovels-per-process K`` passes another K to plan-migration). Each run also records the CPU
of pumpd's processes and of the broker per message, from the start to the last ack.
"""

from __future__ import annotations

import argparse
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

from pumpd.testing.localnode import LocalNode, find_free_port

from common import (
    bench_shovel,
    common_fields,
    crossing,
    declare_durable_queues,
    find_descendant,
    memory_kib,
    prefill_round_robin,
    process_cpu_seconds,
    process_tree,
    tree_cpu_seconds,
)

RESULTS = Path(__file__).resolve().parent / "results"
CASES = ("plan", "one shovel")


def acked_total(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/shovels", timeout=10) as r:
        return sum(d["counters"]["acked"] for d in json.loads(r.read()))


def one_run(node: LocalNode, case: str, queues: int, per_queue: int, size: int,
            persistent: bool, rep: int, workdir: Path,
            shovels_per_process: int | None = None) -> dict[str, Any]:
    tag = f"{case.replace(' ', '-')}-{rep}-{os.getpid()}"
    src_vhost, dst_vhost = f"mig-src-{tag}", f"mig-dst-{tag}"
    for v in (src_vhost, dst_vhost):
        node.add_vhost(v)
    src, dst = node.uri(src_vhost), node.uri(dst_vhost)
    messages = queues * per_queue
    config = workdir / f"{tag}.json"
    try:
        names = [f"q{i:04d}" for i in range(queues)] if case == "plan" else ["all"]
        declare_durable_queues(src, names)
        prefill_round_robin(src, names, messages, size, persistent)
        plan_seconds = None
        if case == "plan":
            per_process = (("--shovels-per-process", str(shovels_per_process))
                           if shovels_per_process else ())
            t0 = time.monotonic()
            made = subprocess.run(
                [sys.executable, "-m", "pumpd", "plan-migration", "--source", src,
                 "--destination", dst, "--management-port", str(node.management_port),
                 "--management-insecure-http",  # the private node's plugin listens on http
                 "-o", str(config), *per_process], capture_output=True, text=True, check=False)
            plan_seconds = round(time.monotonic() - t0, 3)
            if made.returncode != 0:
                raise RuntimeError(f"plan-migration failed: {made.stderr}")
        else:
            declare_durable_queues(dst, ["all"])
            config.write_text(json.dumps({"shovels": {"all": bench_shovel(src, "all", "all") | {
                "destinations": {"broker": dst, "declarations": [
                    {"queue.declare": {"queue": "all", "durable": True}}]}}}}))
        plan_doc = json.loads(config.read_text())
        port = find_free_port()
        args = [sys.executable, "-m", "pumpd", "--config", str(config), "--http-open-reads", "--http",
                f"127.0.0.1:{port}", "--log-level", "warning",
                "--state-file", str(workdir / f"{tag}.state.json")]
        beam = find_descendant(node.pid or 0, "beam.smp")
        if beam is None:
            raise RuntimeError("cannot find the node's beam.smp process")
        beam_cpu0 = process_cpu_seconds(beam)
        t_start = time.monotonic()
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        samples: list[tuple[float, int]] = []
        processes, rss, pump_cpu, beam_cpu = 0, 0.0, 0.0, 0.0
        try:
            deadline = t_start + 900
            while time.monotonic() < deadline:
                try:
                    total = acked_total(port)
                except OSError:
                    total = 0
                samples.append((time.monotonic(), total))
                if total >= messages:
                    break
                if proc.poll() is not None:
                    raise RuntimeError(f"pumpd exited {proc.returncode}")
                time.sleep(0.1)
            else:
                raise RuntimeError("timed out")
            tree = process_tree(proc.pid)
            processes, rss = len(tree), round(memory_kib(tree)[0] / 1024, 1)
            # CPU from the start to the last ack, worker start-up included: where the time went
            pump_cpu = sum(tree_cpu_seconds(tree).values())
            beam_cpu = process_cpu_seconds(beam) - beam_cpu0
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        t_last = samples[-1][0]
        t10, t90 = crossing(samples, 0.1 * messages), crossing(samples, 0.9 * messages)
        t_first = next(t for t, v in samples if v > 0)
        return {
            "bench": "migration", "case": case, "queues": queues, "messages": messages,
            "messages_per_queue": per_queue if case == "plan" else messages,
            "body_bytes": size, "persistent": persistent, "rep": rep,
            "shovels": len(plan_doc["shovels"]),
            "shovels_per_process": plan_doc.get("shovels_per_process"),
            "pump_cpu_us_per_msg": round(pump_cpu / messages * 1e6, 1),
            "broker_cpu_us_per_msg": round(beam_cpu / messages * 1e6, 1),
            "processes": processes,  # coordinator, workers, multiprocessing's resource tracker
            "rss_mib": rss,
            "plan_seconds": plan_seconds,
            "total_msg_per_s": round(messages / (t_last - t_start)),
            "msg_per_s_10_90": round(0.8 * messages / (t90 - t10)),
            "seconds_start_to_first_ack": round(t_first - t_start, 3),
            "seconds_start_to_last_ack": round(t_last - t_start, 3),
        }
    finally:
        for v in (src_vhost, dst_vhost):
            node.delete_vhost(v)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queues", type=int, default=300)
    p.add_argument("--messages-per-queue", type=int, default=1000)
    p.add_argument("--size", type=int, default=64, help="body bytes (default 64)")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--persistent", action="store_true", help="delivery mode 2 (default 1)")
    p.add_argument("--shovels-per-process", type=int, metavar="K",
                   help="passed to plan-migration (default: the plan's own choice)")
    ns = p.parse_args()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("migration-%Y%m%dT%H%M%S.jsonl")
    cpus = os.cpu_count()
    rows: dict[str, list[dict[str, Any]]] = {}
    total = ns.queues * ns.messages_per_queue
    with LocalNode(plugins=["rabbitmq_management"],
                   name=f"pumpd-bench-migration-{os.getpid()}") as node, \
            tempfile.TemporaryDirectory() as tmp:
        version = node.ctl("version").strip()
        print(f"RabbitMQ {version} private node, {cpus} CPUs; {ns.queues} queues x "
              f"{ns.messages_per_queue:,} ({total:,}) x {ns.size} B "
              f"{'persistent' if ns.persistent else 'transient'}, {ns.reps} reps", flush=True)
        for rep in range(ns.reps):  # interleaved: a slow phase of the machine is shared
            for case in CASES:
                r = one_run(node, case, ns.queues, ns.messages_per_queue, ns.size,
                            ns.persistent, rep, Path(tmp), ns.shovels_per_process)
                r.update({"rabbitmq": version, "cpus": cpus,
                          "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
                r.update(common_fields("migration", case, "pumpd", rep + 1, r["total_msg_per_s"]))
                with out.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                rows.setdefault(case, []).append(r)
                print(f"  rep {rep}: {case}: total {r['total_msg_per_s']:,} msg/s "
                      f"(10-90 {r['msg_per_s_10_90']:,}), {r['shovels']} shovels in "
                      f"{r['processes']} processes, {r['rss_mib']:,} MiB, last ack after "
                      f"{r['seconds_start_to_last_ack']} s; CPU µs/msg pumpd "
                      f"{r['pump_cpu_us_per_msg']}, broker {r['broker_cpu_us_per_msg']}",
                      flush=True)
    print(f"\nmedians over {ns.reps} reps ({out.relative_to(RESULTS.parent.parent)}):")
    print(f"{'case':<12}{'shovels':>8}{'processes':>10}{'total msg/s':>13}{'10-90 msg/s':>13}"
          f"{'RSS MiB':>9}")
    for case, rs in rows.items():
        def med(key: str, rs: list[dict[str, Any]] = rs) -> float:
            return float(statistics.median(r[key] for r in rs))
        print(f"{case:<12}{rs[0]['shovels']:>8}{med('processes'):>10.0f}"
              f"{med('total_msg_per_s'):>13,.0f}{med('msg_per_s_10_90'):>13,.0f}"
              f"{med('rss_mib'):>9,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
