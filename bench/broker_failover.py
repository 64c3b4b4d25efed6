"""A broker list that fails over at once: how long shovels listing several brokers
take to run again when one of them is down or dies.

Two private RabbitMQ nodes, A and B (not clustered: each shovel declares its own source and
destination queues wherever it lands), and a port nobody listens on ("dead"). ``--shovels N``
shovels (default 24) list ``[dead, A, B]`` on both sides, in that order; pumpd picks a random
start in the list and, after a failure, tries the brokers not yet tried in that round before
any backoff (``engine/brokers.py``). Measured, per repetition:

- ``start``: from the moment pumpd's API first lists every shovel (its worker processes are
  spawned; spawning them is not what is measured) until each shovel is first ``running`` (a
  third of the shovels start at the dead port and must move on at once);
- ``kill A`` / ``kill B``: that node is SIGKILLed while every shovel runs; for each shovel
  whose connections it held, the seconds from the kill until the shovel is ``running`` again
  with its reconnect counter moved. The node is restarted before the next kill.

Reported: median, 90th percentile and maximum seconds per event, and how many shovels took
longer than 3 s (the target: every shovel running again within 3 s).

    python bench/broker_failover.py                     # 24 shovels, 3 repetitions
    python bench/broker_failover.py --shovels 24 --reps 1 --per-process 4

Every event is a JSON line in ``bench/results/broker_failover-<time>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pumpd.testing.localnode import LocalNode, find_free_port

from common import Pumpd, common_fields, shovels_doc

RESULTS = Path(__file__).resolve().parent / "results"
POLL = 0.05  # seconds between reads of /api/shovels
TARGET = 3.0  # seconds: the target for one broker of three down


def shovel(brokers: list[str], i: int) -> dict[str, Any]:
    src, dst = f"failover-src{i:02d}", f"failover-dst{i:02d}"
    return {
        "sources": {"brokers": brokers, "declarations": [
            {"queue.declare": {"queue": src, "durable": True}}]},
        "destinations": {"brokers": brokers, "declarations": [
            {"queue.declare": {"queue": dst, "durable": True}}]},
        "queue": src,
        "publish_fields": {"exchange": "", "routing_key": dst},
        "ack_mode": "on_confirm",
        "prefetch_count": 100,
        # a short, fixed delay: what is measured is the broker list, not the backoff's first step
        "reconnect_delay": 1,
    }


def reconnects(doc: dict[str, Any]) -> int:
    return int(doc["counters"].get("reconnects", 0))


def wait_running(pumpd: Pumpd, n: int, since: float, before: dict[str, int] | None,
                 timeout: float) -> dict[str, float]:
    """Seconds from ``since`` until each shovel was first seen running; with ``before`` (the
    reconnect counters before a kill), only shovels whose counter moved are waited for and
    counted, and those still running on the node that lived are left out."""
    seen: dict[str, float] = {}
    moved: set[str] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            docs = shovels_doc(pumpd.port)
        except OSError:
            time.sleep(POLL)
            continue
        now = time.monotonic() - since
        for d in docs:
            name = d["name"]
            if before is not None and (reconnects(d) > before[name] or d["state"] != "running"):
                moved.add(name)
            counted = before is None or name in moved
            if counted and name not in seen and d["state"] == "running" \
                    and (before is None or reconnects(d) > before[name]):
                seen[name] = round(now, 3)
        all_running = len(docs) == n and all(d["state"] == "running" for d in docs)
        # after a kill, a second's grace: a shovel on the dead node may not have noticed yet
        done = len(seen) == n if before is None else (moved <= set(seen) and now > 1.0)
        if all_running and done:
            return seen
        time.sleep(POLL)
    raise RuntimeError(f"not every shovel running again within {timeout} s "
                       f"(log {pumpd.log.name})")


def summary(event: str, rep: int, times: dict[str, float]) -> dict[str, Any]:
    values = sorted(times.values())
    p90 = values[max(0, round(0.9 * len(values)) - 1)] if values else 0.0
    return {
        "event": event, "rep": rep, "shovels_measured": len(values),
        "median_s": round(statistics.median(values), 3) if values else 0.0,
        "p90_s": p90, "max_s": max(values, default=0.0),
        "over_target": sum(v > TARGET for v in values), "target_s": TARGET,
    }


def one_rep(nodes: dict[str, LocalNode], n: int, per_process: int, rep: int,
            workdir: Path) -> list[dict[str, Any]]:
    dead = f"amqp://guest:guest@127.0.0.1:{find_free_port()}/%2F"
    brokers = [dead, nodes["A"].uri(), nodes["B"].uri()]
    shovels = {f"f{i:02d}": shovel(brokers, i) for i in range(n)}
    out = []
    pumpd = Pumpd(workdir, shovels, per_process)
    try:
        pumpd.poll("every shovel listed", lambda docs: len(docs) == n, 120)
        out.append(summary("start", rep, wait_running(pumpd, n, time.monotonic(), None, 120)))
        print(json.dumps(out[-1]), flush=True)
        for victim in ("A", "B"):
            before = {d["name"]: reconnects(d) for d in shovels_doc(pumpd.port)}
            killed = time.monotonic()
            nodes[victim].kill()
            times = wait_running(pumpd, n, killed, before, 120)
            out.append(summary(f"kill {victim}", rep, times))
            print(json.dumps(out[-1]), flush=True)
            nodes[victim].restart()
    finally:
        pumpd.stop()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shovels", type=int, default=24)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--per-process", type=int, default=1, metavar="K",
                   help="shovels per worker process (pumpd's --shovels-per-process)")
    ns = p.parse_args()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("broker_failover-%Y%m%dT%H%M%S.jsonl")
    with LocalNode(name=f"pumpd-bench-fa-{os.getpid()}") as a, \
            LocalNode(name=f"pumpd-bench-fb-{os.getpid()}") as b, \
            tempfile.TemporaryDirectory() as tmp:
        version = a.ctl("version").strip()
        print(f"RabbitMQ {version}, two private nodes, {os.cpu_count()} CPUs", flush=True)
        results: list[dict[str, Any]] = []
        for rep in range(1, ns.reps + 1):
            results.extend(one_rep({"A": a, "B": b}, ns.shovels, ns.per_process, rep, Path(tmp)))
        for r in results:
            r.update(common_fields("broker_failover", r["event"], "pumpd", r["rep"], None))
            r.update({"shovels": ns.shovels, "per_process": ns.per_process, "rabbitmq": version,
                      "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
            with out.open("a") as f:
                f.write(json.dumps(r) + "\n")
        for event in ("start", "kill A", "kill B"):
            rows = [r for r in results if r["event"] == event]
            print(f"{event:7s}: median of medians {statistics.median(r['median_s'] for r in rows):.2f} s, "
                  f"worst p90 {max(r['p90_s'] for r in rows):.2f} s, worst max "
                  f"{max(r['max_s'] for r in rows):.2f} s, over {TARGET:.0f} s: "
                  f"{sum(r['over_target'] for r in rows)} of "
                  f"{sum(r['shovels_measured'] for r in rows)}", flush=True)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
