"""A group of daemons ("even spread"): what the spread rule gives and moves, and how
fast members see each other come and go on a real coordination broker.

``spread`` (no broker): 3 members x 30 positions over ``--trials`` random member-id sets: the
loads (always 10/10/10 under the bound); what plain rendezvous hashing would give (max - min);
positions moved when a fourth member joins (7.5 at least for any even rule) and when one of the
three leaves (10 must move), with the members' records (the sticky rule) and without them; the
time of one ``assign`` for 3 x 30 and 64 x 1,000.

``membership`` (a private RabbitMQ node): two observer members in this process, a victim
member in a subprocess, all polling every ``--poll`` seconds. Reported per repetition: seconds
from the victim's start until both observers have its record; seconds from its ``kill -9``
until both observers dropped it; and, idle, the CPU of the observers' process (two groups) and
of the broker, as % of one core.

    python bench/group.py spread
    python bench/group.py membership --reps 5

Every run is a JSON line in ``bench/results/group-<time>.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import uvloop
from pumpd.config.uri import parse_uri
from pumpd.group.members import Group
from pumpd.group.spread import PositionKey, assign, loads, moved, weight
from pumpd.group.view import MemberInfo
from pumpd.testing.localnode import LocalNode

from common import find_descendant, process_cpu_seconds

RESULTS = Path(__file__).resolve().parent / "results"

VICTIM = """
import asyncio, os, sys
import uvloop
from pumpd.config.uri import parse_uri
from pumpd.group.members import Group
from pumpd.group.view import MemberInfo

async def main():
    g = Group([parse_uri(sys.argv[1])], "bench", MemberInfo("victim", "h", os.getpid()),
              poll_interval=float(sys.argv[2]))
    g.start()
    await g.wait_joined(60)
    print("joined", flush=True)
    await asyncio.sleep(3600)

uvloop.run(main())
"""


def spread(trials: int) -> dict[str, Any]:
    rnd = random.Random(23)
    positions = [PositionKey(f"shovel-{i}", 0) for i in range(30)]
    load_sets: dict[str, int] = {}
    plain_spread, joins, leaves, cold_joins, cold_leaves = [], [], [], [], []
    for _ in range(trials):
        members = [f"host-{rnd.getrandbits(40):010x}:8080" for _ in range(3)]
        before = assign(members, positions)
        key = "/".join(map(str, sorted(loads(before, members).values())))
        load_sets[key] = load_sets.get(key, 0) + 1
        plain = {p: max(members, key=lambda m, p=p: weight(m, p)) for p in positions}
        n = loads(plain, members).values()
        plain_spread.append(max(n) - min(n))
        held = {m: [p for p, who in before.items() if who == m] for m in members}
        joins.append(len(moved(before, assign([*members, "newcomer"], positions, held))))
        leaves.append(len(moved(before, assign(members[1:], positions, held))))
        # without the records (the rule alone, as every member computed it before the
        # spread became sticky): what that would move
        cold_joins.append(len(moved(before, assign([*members, "newcomer"], positions))))
        cold_leaves.append(len(moved(before, assign(members[1:], positions))))
    big_members = [f"m{i}" for i in range(64)]
    big_positions = [PositionKey(f"s{i}", 0) for i in range(1000)]
    t = time.perf_counter()
    for _ in range(100):
        assign(["a", "b", "c"], positions)
    small_ms = (time.perf_counter() - t) * 10
    t = time.perf_counter()
    assign(big_members, big_positions)
    big_ms = (time.perf_counter() - t) * 1000
    return {
        "case": "spread", "trials": trials, "loads": load_sets,
        "plain_hrw_spread_mean": round(statistics.mean(plain_spread), 2),
        "plain_hrw_spread_max": max(plain_spread),
        "join_moved_mean": round(statistics.mean(joins), 2), "join_moved_max": max(joins),
        "leave_moved_mean": round(statistics.mean(leaves), 2), "leave_moved_max": max(leaves),
        "join_moved_without_records_mean": round(statistics.mean(cold_joins), 2),
        "leave_moved_without_records_mean": round(statistics.mean(cold_leaves), 2),
        "assign_3x30_ms": round(small_ms, 3), "assign_64x1000_ms": round(big_ms, 1),
    }


async def membership(node: LocalNode, vhost: str, reps: int, poll: float,
                     idle: float) -> list[dict[str, Any]]:
    url = node.uri(vhost)
    uri = parse_uri(url)
    observers = [Group([uri], "bench", MemberInfo(f"observer-{i}", "h", os.getpid()),
                       poll_interval=poll) for i in range(2)]
    out = []
    try:
        for g in observers:
            g.start()
            await g.wait_joined(60)
        # idle cost first: two members, nothing changing
        beam = find_descendant(node.pid or 0, "beam.smp")
        cpu0, beam0, t0 = process_cpu_seconds(os.getpid()), process_cpu_seconds(beam or 0), \
            time.monotonic()
        await asyncio.sleep(idle)
        wall = time.monotonic() - t0
        out.append({"case": "idle", "poll_s": poll, "seconds": round(wall, 1),
                    "observers_cpu_pct": round(
                        100 * (process_cpu_seconds(os.getpid()) - cpu0) / wall, 2),
                    "broker_cpu_pct": round(
                        100 * (process_cpu_seconds(beam or 0) - beam0) / wall, 2)})
        print(json.dumps(out[-1]), flush=True)
        for rep in range(1, reps + 1):
            started = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-c", VICTIM, url, str(poll)],
                                    stdout=subprocess.PIPE, text=True, start_new_session=True)
            try:
                assert proc.stdout is not None
                await asyncio.to_thread(proc.stdout.readline)
                joined = time.monotonic() - started
                while not all("victim" in g.view.ids() for g in observers):
                    await asyncio.sleep(0.01)
                seen = time.monotonic() - started
                # at a random phase of the observers' polls: the figure is not the phase's
                await asyncio.sleep(poll * (2 + random.random()))
                killed = time.monotonic()
                os.kill(proc.pid, signal.SIGKILL)
                while any("victim" in g.view.ids() for g in observers):
                    await asyncio.sleep(0.01)
                gone = time.monotonic() - killed
            finally:
                proc.kill()
                proc.wait()
            out.append({"case": "kill-9", "rep": rep, "poll_s": poll,
                        "victim_joined_s": round(joined, 2), "seen_by_both_s": round(seen, 2),
                        "gone_from_both_after_kill_s": round(gone, 2)})
            print(json.dumps(out[-1]), flush=True)
    finally:
        for g in observers:
            await g.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=["spread", "membership"])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    results = RESULTS / f"group-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    rows: list[dict[str, Any]]
    if args.case == "spread":
        rows = [spread(args.trials)]
        print(json.dumps(rows[0]))
    else:
        with LocalNode(name=f"pumpd-bench-group-{os.getpid()}") as node:
            node.add_vhost("bench")
            loop = uvloop.new_event_loop()
            try:
                rows = loop.run_until_complete(membership(node, "bench", args.reps,
                                                          args.poll, args.idle_seconds))
            finally:
                loop.close()
        kills = [r["gone_from_both_after_kill_s"] for r in rows if r["case"] == "kill-9"]
        if kills:
            print(f"kill -9 to gone from both views: median {statistics.median(kills)} s, "
                  f"max {max(kills)} s (poll {args.poll} s)")
    with results.open("a") as f:
        for row in rows:
            f.write(json.dumps({"bench": "group", **row}) + "\n")
    print(f"results: {results}")


if __name__ == "__main__":
    main()
