"""Latency benchmark: what a shovel adds to a message's time from publisher to consumer, for no
shovel, RabbitMQ's Shovel plugin and pumpd, side by side on one private node.

``python bench/latency.py`` (``make bench``) starts one private node (management and shovel
plugins). For each rate and repetition, and each system in turn (the order alternates between
repetitions), a paced publisher process writes stamped 64-byte transient messages for
``--seconds`` and a stamping consumer process reads them (``bench/latency_clients.py``):

* ``none``: the publisher writes straight to the destination queue (the floor);
* ``plugin``: to the source queue, moved by a dynamic shovel of the plugin (on-confirm,
  prefetch 1000), created through the management API and deleted after the run;
* ``pumpd``: to the source queue, moved by ``python -m pumpd`` (on_confirm, prefetch 1000).

Each run starts once the last run's shovel no longer consumes. Each run records p50 / p90 / p99 /
p99.9 / max of the latency (the first ``--skip`` of the messages are left out: connection warm-up),
the rate the consumer saw, and the CPU seconds per message of the pump's processes and of the broker
over the run, and the busy CPU of the whole host and of everything else on it (the clients' few %
each included), as a share of the run's whole time. A run that comes up short also records where the
missing messages are (each queue's ready, unacknowledged and consumers, before and after the system
stopped) and the end of pumpd's log. A rate is *sustained* when every message arrived and the p99
stayed under ``SUSTAINED_P99_MS`` (a system that falls behind builds a backlog, and its latency
grows with the length of the run). The rates above ``--rates`` in ``--ramp`` find the highest rate
each system sustains. Results go to ``bench/results/latency-<timestamp>.jsonl``; the medians over
repetitions go to a table on the terminal and to ``bench/report/latency.md`` with a plot,
``bench/report/latency.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pumpd.testing.localnode import find_free_port

from common import (
    common_fields,
    host_busy_seconds,
    process_cpu_seconds,
    process_tree,
    tree_cpu_seconds,
)
from shovel_run import (
    BENCH_DIR,
    VHOST,
    BenchNode,
    Case,
    PumpProcess,
    plugin_value,
    pumpd_argv,
    results_file,
)

CLIENTS = BENCH_DIR / "latency_clients.py"
REPORT_DIR = BENCH_DIR / "report"
SRC, DST = "bench.src", "bench.dst"
SYSTEMS = ("none", "plugin", "pumpd")
CASE = Case("64B-transient-on_confirm", 64, False, "on_confirm", 0)
START_TIMEOUT = 30.0
SUSTAINED_P99_MS = 50.0


def wait_consumers(bench: BenchNode, queue: str, want: int, timeout: float = START_TIMEOUT) -> None:
    probe = bench._probe
    assert probe is not None
    deadline = time.monotonic() + timeout
    while probe.depth(queue)[1] < want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no consumer on {queue} after {timeout:.0f} s")
        time.sleep(0.05)


def start_system(bench: BenchNode, system: str, workdir: Path) -> PumpProcess | None:
    """Start the shovel of ``system`` and wait until it consumes from the source queue."""
    node = bench.node
    if system == "none":
        return None
    if system == "plugin":
        node.management_request("PUT", f"/api/parameters/shovel/{VHOST}/latency",
                                {"value": plugin_value(node, CASE)})
        wait_consumers(bench, SRC, 1)
        return None
    argv = pumpd_argv(node, CASE, workdir, find_free_port())
    pump = PumpProcess(argv, workdir / "pumpd.log")
    try:
        wait_consumers(bench, SRC, 1)
    except RuntimeError:
        pump.kill()
        raise RuntimeError(f"pumpd did not start:\n{pump.log_tail()}") from None
    return pump


def stop_system(bench: BenchNode, system: str, pump: PumpProcess | None) -> None:
    if pump is not None:
        pump.stop()
    if system == "plugin":
        bench.node.management_request("DELETE", f"/api/parameters/shovel/{VHOST}/latency")


def clients_argv(role: str, uri: str, queue: str, *extra: str) -> list[str]:
    return [sys.executable, str(CLIENTS), role, "--uri", uri, "--queue", queue, *extra]


def wait_no_consumers(bench: BenchNode, timeout: float = START_TIMEOUT) -> None:
    """The last run's system is gone: a shovel still consuming would compete with this run's."""
    probe = bench._probe
    assert probe is not None
    deadline = time.monotonic() + timeout
    while probe.depth(SRC)[1] or probe.depth(DST)[1]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the last run's consumers still on {SRC} / {DST} after "
                               f"{timeout:.0f} s")
        time.sleep(0.05)


def where_messages_are(bench: BenchNode) -> dict[str, Any]:
    """Per queue: ready, unacknowledged (delivered to a consumer that has not acked), consumers,
    from the broker itself: for a run that came up short, where the missing messages are."""
    try:
        out = bench.node.ctl("list_queues", "-q", "--no-table-headers", "-p", VHOST, "name",
                             "messages_ready", "messages_unacknowledged", "consumers")
    except RuntimeError as exc:  # LocalNodeError: recorded, the run's record goes on
        return {"error": str(exc)}
    rows = (line.split() for line in out.splitlines() if line.strip())
    return {row[0]: [int(v) for v in row[1:]] for row in rows if row[0] in (SRC, DST)}


def run_once(bench: BenchNode, system: str, rate: float, seconds: float, skip: float, rep: int,
             workdir: Path) -> dict[str, Any]:
    node = bench.node
    probe = bench._probe
    assert probe is not None
    uri = node.uri(VHOST)
    rec: dict[str, Any] = {**common_fields("latency", CASE.name, system, rep, None), "rate": rate,
                           "seconds": seconds, "ok": False, "error": None}
    for q in (SRC, DST):
        probe.declare(q, durable=False)
    wait_no_consumers(bench)
    for q in (SRC, DST):
        probe.purge(q)
    pump = None
    try:
        pump = start_system(bench, system, workdir)
        total = int(rate * seconds)
        consumer = subprocess.Popen(
            clients_argv("consume", uri, DST, "--expected", str(total), "--skip",
                         str(int(total * skip)), "--timeout", "10"),
            stdout=subprocess.PIPE, text=True)
        assert consumer.stdout is not None
        if consumer.stdout.readline().strip() != "ready":
            raise RuntimeError("the consumer did not start")
        pump_pids = process_tree(pump.pid) if pump is not None else []
        cpu0 = tree_cpu_seconds(pump_pids)
        beam0 = process_cpu_seconds(bench.beam_pid)
        host0 = host_busy_seconds()
        began = time.monotonic()
        publisher = subprocess.run(
            clients_argv("publish", uri, DST if system == "none" else SRC, "--rate", str(rate),
                         "--seconds", str(seconds)),
            capture_output=True, text=True, check=True)
        published_for = time.monotonic() - began
        out, _ = consumer.communicate(timeout=seconds + 60)
        cpu1 = tree_cpu_seconds(pump_pids)
        beam1 = process_cpu_seconds(bench.beam_pid)
        host1 = host_busy_seconds()
        measured_for = time.monotonic() - began  # the publishing and the consumer's wait
        got = json.loads(out.strip().splitlines()[-1])
        sent = json.loads(publisher.stdout.strip().splitlines()[-1])["sent"]
        received = got["received"]
        span = got["last"] - got["first"] if received else 0.0
        rec.update({k: v for k, v in got.items() if k.endswith("_ms")})
        rec.update({
            "sent": sent, "received": received,
            "received_rate": received / span if span > 0 else None,
            "msg_s": round(received / span, 1) if span > 0 else None,
            "sustained": received == sent and got.get("p99_ms", math.inf) < SUSTAINED_P99_MS,
            "pump_cpu_us_per_msg": (sum(cpu1.values()) - sum(cpu0.values())) / max(1, received)
            * 1e6 if pump is not None else None,
            "pump_cpu_pct": (sum(cpu1.values()) - sum(cpu0.values())) / published_for * 100
            if pump is not None else None,
            "broker_cpu_pct": (beam1 - beam0) / published_for * 100,
            # every process of the host, over the whole run (not only the publishing: the host
            # has at most 100 % per core): a shared machine's other work shows here, and a run
            # that falls behind while the rest of the host was busy says little of the shovel
            "host_cpu_pct": (host1 - host0) / measured_for * 100,
            "others_cpu_pct": ((host1 - host0) - (beam1 - beam0)
                               - (sum(cpu1.values()) - sum(cpu0.values())))
            / measured_for * 100,
            "ok": received == sent,
        })
        if received != sent:
            rec["error"] = f"received {received} of {sent}"
            # [ready, unacked, consumers] per queue, with the system still running and after
            # it stopped (a shovel's drain publishes what it held), and what pumpd logged
            rec["missing_before_stop"] = where_messages_are(bench)
            if pump is not None:
                rec["pump_log_tail"] = pump.log_tail(40)
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        stop_system(bench, system, pump)
    if "missing_before_stop" in rec:
        rec["missing_after_stop"] = where_messages_are(bench)
    return rec


def median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def medians(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (rate, system): medians over the repetitions that completed."""
    rows = []
    keys = ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "pump_cpu_pct",
            "pump_cpu_us_per_msg", "broker_cpu_pct", "received_rate")
    for rate in sorted({r["rate"] for r in records}):
        floor = None
        for system in SYSTEMS:
            runs = [r for r in records if r["rate"] == rate and r["system"] == system and r["ok"]]
            row: dict[str, Any] = {"rate": rate, "system": system, "runs": len(runs),
                                   "sustained": sum(bool(r["sustained"]) for r in runs)}
            row.update({k: median([r.get(k) for r in runs]) for k in keys})
            if system == "none":
                floor = row["p99_ms"]
            row["added_p99_ms"] = (row["p99_ms"] - floor
                                   if row["p99_ms"] is not None and floor is not None else None)
            rows.append(row)
    return rows


def fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| rate (msg/s) | system | p50 | p90 | p99 | p99.9 | max | added p99 | sustained | "
             "pump CPU % | pump µs/msg | broker CPU % |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['rate']:,.0f} | {r['system']} | {fmt(r['p50_ms'])} | {fmt(r['p90_ms'])} | "
            f"{fmt(r['p99_ms'])} | {fmt(r['p999_ms'])} | {fmt(r['max_ms'])} | "
            f"{fmt(r['added_p99_ms'], '+.2f')} | {r['sustained']}/{r['runs']} | "
            f"{fmt(r['pump_cpu_pct'], '.1f')} | {fmt(r['pump_cpu_us_per_msg'], '.1f')} | "
            f"{fmt(r['broker_cpu_pct'], '.1f')} |")
    return "\n".join(lines)


def highest_sustained(records: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per system: the highest rate at which most repetitions were sustained."""
    best: dict[str, float | None] = {}
    for system in SYSTEMS:
        ok = []
        for rate in sorted({r["rate"] for r in records}):
            runs = [r for r in records if r["rate"] == rate and r["system"] == system]
            if runs and sum(bool(r.get("sustained")) for r in runs) * 2 > len(runs):
                ok.append(rate)
        best[system] = max(ok) if ok else None
    return best


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for system, style in zip(SYSTEMS, ("k:", "C1-", "C0-"), strict=True):
        pts = [(r["rate"], r["p99_ms"], r["p50_ms"]) for r in rows
               if r["system"] == system and r["p99_ms"] is not None]
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=f"{system} p99")
        ax.plot([p[0] for p in pts], [p[2] for p in pts], style, marker="x", alpha=0.5,
                label=f"{system} p50")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("publish rate (msg/s)")
    ax.set_ylabel("latency, publisher write to consumer read (ms)")
    ax.set_title("64 B transient, on_confirm, prefetch 1000, one node")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def write_report(rows: list[dict[str, Any]], best: dict[str, float | None], results: Path,
                 argv: list[str]) -> Path:
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    png = REPORT_DIR / "latency.png"
    plotted = plot(rows, png)
    md = REPORT_DIR / "latency.md"
    shown = (results.relative_to(BENCH_DIR.parent) if results.is_relative_to(BENCH_DIR.parent)
             else results)
    text = [
        "# Latency: what a shovel adds (bench/latency.py)", "",
        f"`python bench/latency.py {' '.join(argv)}`, results in `{shown}`.",
        "Medians over the repetitions; latency in ms from the publisher's write to the "
        "consumer's read; *added p99* is over the same publisher and consumer with no shovel.", "",
        table(rows), "",
        f"Highest rate sustained (every message arrived, p99 under {SUSTAINED_P99_MS:.0f} ms): " + ", ".join(f"{s} {fmt(v, ',.0f')} msg/s" for s, v in best.items()),
        "",
    ]
    if plotted:
        text += ["![latency against rate](latency.png)", ""]
    md.write_text("\n".join(text))
    return md


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rates", default="1000,10000,30000",
                    help="paced rates in msg/s (default: %(default)s)")
    ap.add_argument("--ramp", default="50000,70000",
                    help="higher rates tried to find what each system sustains; '' for none "
                         "(default: %(default)s)")
    ap.add_argument("--seconds", type=float, default=5.0,
                    help="publishing time per run (default: %(default)s)")
    ap.add_argument("--repetitions", type=int, default=3, help="(default: %(default)s)")
    ap.add_argument("--skip", type=float, default=0.1,
                    help="fraction of each run's first messages left out (default: %(default)s)")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help="a subset of none,plugin,pumpd (default: all)")
    ap.add_argument("--output", type=Path, help="results file (default bench/results/latency-*.jsonl)")
    ap.add_argument("--from", dest="from_file", type=Path,
                    help="run nothing: the table and report from an earlier results file")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rates = [float(r) for r in args.rates.split(",") if r]
    rates += [float(r) for r in args.ramp.split(",") if r]
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"--systems: unknown {sorted(unknown)}; choose from {SYSTEMS}")
    if args.from_file is not None:
        records = [json.loads(line) for line in args.from_file.read_text().splitlines() if line]
        for rec in records:  # the rule of this version, whatever the file's
            rec["sustained"] = bool(rec["ok"]) and (rec.get("p99_ms") or math.inf) < SUSTAINED_P99_MS
        return report(records, args.from_file, argv)
    out = results_file("latency", args.output)
    records = []
    with BenchNode() as bench, tempfile.TemporaryDirectory(prefix="pumpd-latency-") as tmp, \
            out.open("a") as sink:
        total = len(rates) * args.repetitions * len(systems)
        i = 0
        for rep in range(args.repetitions):
            order = systems if rep % 2 == 0 else systems[::-1]
            for rate in rates:
                for system in order:
                    i += 1
                    rec = run_once(bench, system, rate, args.seconds, args.skip, rep, Path(tmp))
                    records.append(rec)
                    sink.write(json.dumps(rec) + "\n")
                    sink.flush()
                    print(f"[{i}/{total}] {system:6} {rate:>8,.0f} msg/s: "
                          + (f"p50 {fmt(rec.get('p50_ms'))} p99 {fmt(rec.get('p99_ms'))} ms"
                             f"{'' if rec.get('sustained') else ' (not sustained)'}"
                             if rec["ok"] else f"failed: {rec['error']}"), flush=True)
    return report(records, out, argv)


def report(records: list[dict[str, Any]], results: Path, argv: list[str] | None) -> int:
    rows = medians(records)
    best = highest_sustained(records)
    print(table(rows))
    print("highest rate sustained:", best)
    print("report:", write_report(rows, best, results, argv if argv is not None else sys.argv[1:]))
    return 0 if any(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
