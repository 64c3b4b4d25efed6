"""Shovel benchmark: pumpd side by side with RabbitMQ's Shovel plugin and a plain pika shovel.

``python bench/shovel.py`` (``make bench``) starts one private RabbitMQ node (management and shovel
plugins) and, for every case and repetition, moves the same pre-filled source queue to a
destination queue on that node, over network URIs, with each system in turn:

* ``pumpd``: ``python -m pumpd --config FILE --status-interval 0`` (one worker), a subprocess;
* ``plugin``: a dynamic shovel of RabbitMQ's Shovel plugin, created through the management API
  and deleted after the run;
* ``pika``: ``bench/pika_shovel.py``, the plain pika shovel on uvloop, a subprocess.

Per run it polls the destination queue's depth every 20 ms and reports the steady-state rate
(messages between 5 % and 95 % arrived / time between those instants), the CPU time per message
of the pump process and of the broker (``beam.smp``) over the same interval, from ``/proc``, and
the rate relative to the plugin's in the same repetition. A run during which other processes
competed for the CPU (more than ``--max-other-cores``) is run again. Results go to
``bench/results/shovel-<timestamp>.jsonl`` (one line per run) and a table of medians is printed
at the end. See ``docs/bench.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pika
from pumpd.testing.localnode import LocalNode

from common import (
    common_fields,
)
from shovel_run import (
    ALL_CASES,
    CASES,
    DEFAULT_ROUTE,
    EXTRA_CASES,
    MAX_OTHER_CORES,
    QUIET_WAIT,
    RETRIES,
    ROUTES,
    SYSTEMS,
    BenchNode,
    Case,
    results_file,
)


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def progress_line(i: int, total: int, rec: dict[str, Any]) -> str:
    head = f"[{i:>3}/{total}] {rec['case']:<27} rep {rec['rep']} {rec['system']:<6}"
    if not rec["used"]:
        head = f"[  -/{total}] {rec['case']:<27} rep {rec['rep']} {rec['system']:<6}"
    if not rec["ok"]:
        return f"{head} FAILED: {rec['error']}"
    pump = fmt(rec["pump_cpu_us_per_msg"], ".1f") if rec["system"] != "plugin" else "n/a"
    waited = rec["quiet_wait_s"]
    return (
        f"{head} {rec['msg_per_s']:>9,.0f} msg/s  pump {pump:>5} us/msg  "
        f"broker {rec['broker_cpu_us_per_msg']:>5.1f} us/msg  (wall {rec['wall']:.1f} s, "
        f"pre-fill {rec['prefill_s']:.1f} s, other procs {rec['other_cpu_cores']:.2f} cores"
        + (f", waited {waited:.0f} s for a quiet host" if waited > 1 else "")
        + ")"
        + (" NOISY, run again" if not rec["used"] else " noisy" if rec["noisy"] else "")
    )


def median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def total_cpu(rec: dict[str, Any]) -> float | None:
    """Pump + broker CPU per message (the plugin's pump work is in the broker already)."""
    broker: float | None = rec["broker_cpu_us_per_msg"]
    pump: float | None = rec["pump_cpu_us_per_msg"]
    return None if broker is None else broker + (pump or 0.0)


def summary_table(records: list[dict[str, Any]], cases: list[Case], systems: list[str]) -> str:
    header = (
        f"{'case':<27} {'system':<7} {'runs':>5} {'msg/s':>9} {'pump us/msg':>12} "
        f"{'broker us/msg':>14} {'total us/msg':>13} {'vs plugin':>10} {'other cores':>12} "
        f"{'rerun':>6}"
    )
    lines = [header, "-" * len(header)]
    for case in cases:
        for system in systems:
            recs = [r for r in records if r["case"] == case.name and r["system"] == system]
            used = [r for r in recs if r["used"]]
            ok = [r for r in used if r["ok"]]
            rerun = len(recs) - len(used)
            pump = median([r["pump_cpu_us_per_msg"] for r in ok]) if system != "plugin" else None
            lines.append(
                f"{case.name:<27} {system:<7} {f'{len(ok)}/{len(used)}':>5} "
                f"{fmt(median([r['msg_per_s'] for r in ok]), ',.0f'):>9} {fmt(pump, '.1f'):>12} "
                f"{fmt(median([r['broker_cpu_us_per_msg'] for r in ok]), '.1f'):>14} "
                f"{fmt(median([total_cpu(r) for r in ok]), '.1f'):>13} "
                f"{fmt(median([r['ratio_to_plugin'] for r in ok]), '.2f'):>10} "
                f"{fmt(median([r['other_cpu_cores'] for r in ok]), '.2f'):>12} {rerun:>6}"
            )
    lines.append(
        "medians over the successful runs; msg/s between 5 % and 95 % arrived; CPU per message "
        "over the same interval;\nthe plugin's pump work is inside the broker (its broker figure "
        "includes it); total = pump + broker; 'vs plugin' = median of per-repetition ratios;\n"
        "other cores = CPU used meanwhile by every other process on the host (noise); rerun = "
        "runs repeated because other cores exceeded --max-other-cores"
    )
    return "\n".join(lines)


def host_info(node: LocalNode) -> dict[str, Any]:
    overview = node.management_request("GET", "/api/overview")
    from pumpd.dataplane.implementation import IMPLEMENTATION

    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "pika": pika.__version__,
        "rabbitmq_version": overview.get("rabbitmq_version"),
        "erlang_version": overview.get("erlang_version"),
        "pumpd_data_plane": IMPLEMENTATION,
    }


# ------------------------------------------------------------------------------------ main


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME:CLAUSE=VALUE[;CLAUSE=VALUE]`` -> (NAME, {CLAUSE: VALUE}); VALUE is read as JSON
    when it is JSON, else taken as a string."""
    name, sep, rest = text.partition(":")
    if not sep or not name or name in SYSTEMS or not rest:
        raise ValueError(f"{text!r}: expected NAME:CLAUSE=VALUE with a NAME other than "
                         f"{', '.join(SYSTEMS)}")
    clauses: dict[str, Any] = {}
    for item in rest.split(";"):
        clause, eq, value = item.partition("=")
        if not eq or not clause:
            raise ValueError(f"{text!r}: {item!r} is not CLAUSE=VALUE")
        try:
            clauses[clause] = json.loads(value)
        except json.JSONDecodeError:
            clauses[clause] = value
    return name, clauses


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="pumpd vs RabbitMQ's Shovel plugin vs a plain pika shovel, on one private "
        "RabbitMQ node.",
        epilog="cases: " + ", ".join(c.name for c in CASES) + "; only with --cases: "
        + ", ".join(c.name for c in EXTRA_CASES),
    )
    p.add_argument("--messages", type=int, help="messages per run (default: 150,000 for 64 B "
                   "cases, 50,000 for 1 KiB; 20,000 with --quick)")
    p.add_argument("--reps", type=int, help="repetitions (default 3; 1 with --quick)")
    p.add_argument("--cases", help="comma-separated case names (default: the five of the epilog"
                   "'s first list)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated, from {','.join(SYSTEMS)} and the --pumpd-variant "
                   "names (default: pumpd,plugin,pika)")
    p.add_argument("--pumpd-variant", action="append", default=[],
                   metavar="NAME:CLAUSE=VALUE[;CLAUSE=VALUE]",
                   help="one more system: pumpd with these shovel clauses (VALUE as JSON, else a "
                   "string), e.g. nohold:source_read_hold_ms=0; name it in --systems")
    p.add_argument("--routes", default=DEFAULT_ROUTE,
                   help="comma-separated protocols of the two sides, from "
                   f"{', '.join(ROUTES)} (default {DEFAULT_ROUTE}; AMQP 1.0 sides use RabbitMQ's "
                   "rabbitmq_amqp1_0 on the same node); the pika system runs only 091-091")
    p.add_argument("--quick", action="store_true", help="smoke run: 20,000 messages, 1 rep")
    p.add_argument("--quiet-wait", type=float, default=QUIET_WAIT, metavar="SECONDS",
                   help="before each run, wait up to this long for the host to be nearly idle "
                   f"(below 0.3 busy cores; default {QUIET_WAIT:g})")
    p.add_argument("--max-other-cores", type=float, default=MAX_OTHER_CORES, metavar="CORES",
                   help="a run during which other processes used more CPU than this is noisy and "
                   f"is run again (default {MAX_OTHER_CORES:g})")
    p.add_argument("--retries", type=int, default=RETRIES, metavar="N",
                   help=f"how often a noisy run is run again (default {RETRIES}; 0: never)")
    p.add_argument("--output", type=Path, help="JSON-lines file (default: bench/results/"
                   "shovel-<timestamp>.jsonl)")
    args = p.parse_args(argv)
    if args.messages is None and args.quick:
        args.messages = 20_000
    if args.reps is None:
        args.reps = 1 if args.quick else 3
    names = {c.name: c for c in ALL_CASES}
    if args.cases:
        wanted = [n.strip() for n in args.cases.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            p.error(f"unknown case(s) {unknown}; known: {', '.join(names)}")
        args.case_list = [names[n] for n in wanted]
    else:
        args.case_list = list(CASES)
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    bad_routes = [r for r in routes if r not in ROUTES]
    if bad_routes or not routes:
        p.error(f"unknown route(s) {bad_routes}; known: {', '.join(ROUTES)}")
    args.case_list = [c if r == DEFAULT_ROUTE else dataclasses.replace(c, route=r,
                                                                       name=f"{c.name}@{r}")
                      for r in routes for c in args.case_list]
    try:
        args.variants = dict(parse_variant(v) for v in args.pumpd_variant)
    except ValueError as exc:
        p.error(f"--pumpd-variant: {exc}")
    known = (*SYSTEMS, *args.variants)
    args.system_list = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in args.system_list if s not in known]
    if bad or not args.system_list:
        p.error(f"unknown system(s) {bad}; known: {', '.join(known)}")
    if "pika" in args.system_list and routes != [DEFAULT_ROUTE]:
        p.error("the pika shovel speaks AMQP 0-9-1 only: with --routes, leave it out of "
                "--systems (e.g. --systems pumpd,plugin)")
    if args.messages is not None and args.messages < 100:
        p.error("--messages must be at least 100")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases: list[Case] = args.case_list
    systems: list[str] = args.system_list
    out_path = results_file("shovel", args.output)
    total = len(cases) * len(systems) * args.reps
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}", flush=True)
    records: list[dict[str, Any]] = []
    with BenchNode() as bench:
        node = bench.node
        host = host_info(node)
        print(
            f"node {node.nodename} (RabbitMQ {host['rabbitmq_version']}, beam.smp pid "
            f"{bench.beam_pid}"
            f"), {host['nproc']} CPUs, pumpd data plane: {host['pumpd_data_plane']}\n"
            f"{total} runs: {len(cases)} cases x {len(systems)} systems x {args.reps} reps; "
            f"results -> {out_path}",
            flush=True,
        )
        done = 0
        with tempfile.TemporaryDirectory(prefix="pumpd-bench-") as tmp, out_path.open("ab") as out:
            for rep in range(1, args.reps + 1):
                # rotate the order every repetition: rep 1 pumpd, plugin, pika; rep 2 plugin, ...
                shift = (rep - 1) % len(systems)
                order = systems[shift:] + systems[:shift]
                for case in cases:
                    messages = args.messages or case.default_messages
                    batch = []
                    for system in order:
                        for attempt in range(1, args.retries + 2):
                            rec = bench.run(case, system, messages, rep, Path(tmp),
                                            args.quiet_wait, args.variants.get(system))
                            other = rec.get("other_cpu_cores")
                            rec["noisy"] = other is not None and other > args.max_other_cores
                            rec["attempt"] = attempt
                            # a noisy run is run again (up to --retries times); the last one
                            # counts in the table, the others stay in the file
                            rec["used"] = not (rec["ok"] and rec["noisy"]) or attempt > args.retries
                            rec["host"] = host
                            if rec["used"]:
                                done += 1
                            print(progress_line(done, total, rec), flush=True)
                            batch.append(rec)
                            if rec["used"]:
                                break
                    plugin = next(
                        (r for r in batch if r["system"] == "plugin" and r["ok"] and r["used"]),
                        None,
                    )
                    for rec in batch:
                        if rec["ok"] and plugin is not None:
                            ratio = rec["msg_per_s"] / plugin["msg_per_s"]
                            rec["ratio_to_plugin"] = round(ratio, 3)
                        rec.update(common_fields("shovel", rec["case"], rec["system"],
                                                 rec["rep"], rec["msg_per_s"]))
                        out.write(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
                    out.flush()
                    records.extend(batch)
    print()
    print(summary_table(records, cases, systems))
    print(f"\nresults: {out_path}")
    failed = [r for r in records if r["used"] and not r["ok"]]
    return 1 if failed or sum(r["used"] for r in records) < total else 0


if __name__ == "__main__":
    sys.exit(main())
