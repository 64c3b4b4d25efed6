"""Which broker process limits a shovel benchmark case: the source or the destination queue.

``python bench/queue_profile.py`` runs one case of ``bench/shovel.py`` (default: 1 KiB persistent,
on_confirm) with each system in turn, and while it runs traces the two classic-queue processes
inside the broker with ``erlang:trace`` (``running`` and ``garbage_collection`` events) for a
window in the middle of the run. For each queue process it reports the share of the window it
spent scheduled in, and in major and minor garbage collections.

A queue process runs on one scheduler at a time: when one of them is busy for nearly the whole
window, that queue is the ceiling of the case for any pump, and a faster pump only helps by
leaving the broker more CPU. See "Where the 1 KiB persistent case spends its time" in
``docs/bench.md``. Tracing costs the broker some CPU, so the rates printed here are a little
lower than ``make bench``'s; use them to compare the processes, not the systems.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import orjson
from pumpd.testing.localnode import LocalNode, LocalNodeError

from shovel_run import (
    ALL_CASES,
    DST,
    SRC,
    VHOST,
    BenchNode,
    Case,
    results_file,
)

# Waits until the destination queue is empty (the run's purge) and then holds ``threshold``
# messages, traces both queue processes for ``window_ms``, and returns a tuple of floats (a list
# of small integers would print as a string): window seconds, destination depth before and
# after, then for the source and for the destination queue: seconds scheduled in, seconds in
# major GCs, number of major GCs, seconds in minor GCs.
PROFILE_EXPR = """
Vhost = <<"{vhost}">>, SrcName = <<"{src}">>, DstName = <<"{dst}">>,
Threshold = {threshold}, WindowMs = {window_ms},
Deadline = erlang:monotonic_time(millisecond) + {wait_ms},
Lookup = fun(Name) -> rabbit_amqqueue:lookup(rabbit_misc:r(Vhost, queue, Name)) end,
Depth = fun(Name) -> case Lookup(Name) of
    {{ok, Q}} ->
        {{messages, M}} = lists:keyfind(messages, 1, rabbit_amqqueue:info(Q, [messages])), M;
    _ -> -1 end end,
WaitFor = fun WaitFor(Pred) -> case Pred() of
    true -> ok;
    false -> case erlang:monotonic_time(millisecond) > Deadline of
        true -> erlang:error(timeout_waiting_for_the_run);
        false -> timer:sleep(10), WaitFor(Pred) end end end,
ok = WaitFor(fun() -> Depth(DstName) =:= 0 end),
ok = WaitFor(fun() -> Depth(DstName) >= Threshold end),
{{ok, SrcQ}} = Lookup(SrcName), {{ok, DstQ}} = Lookup(DstName),
SrcPid = amqqueue:get_pid(SrcQ), DstPid = amqqueue:get_pid(DstQ),
Add = fun(Key, V, St) -> maps:update_with(Key, fun(X) -> X + V end, V, St) end,
Since = fun(P, Mark, T, St) -> T - maps:get({{P, Mark}}, St, T) end,
Step = fun(P, Tag, T, St) -> case Tag of
    in -> St#{{{{P, in}} => T}};
    out -> Add({{P, run}}, Since(P, in, T, St), St);
    gc_major_start -> St#{{{{P, major_start}} => T}};
    gc_major_end -> Add({{P, nmajor}}, 1, Add({{P, major}}, Since(P, major_start, T, St), St));
    gc_minor_start -> St#{{{{P, minor_start}} => T}};
    gc_minor_end -> Add({{P, minor}}, Since(P, minor_start, T, St), St);
    _ -> St end end,
Self = self(),
Tracer = spawn(fun() ->
    Loop = fun Loop(St) -> receive
        {{trace_ts, P, Tag, _, T}} -> Loop(Step(P, Tag, T, St));
        stop -> Self ! {{profile, St}} end end,
    Loop(#{{}}) end),
Flags = [running, garbage_collection, monotonic_timestamp, {{tracer, Tracer}}],
Before = Depth(DstName), Began = erlang:monotonic_time(nanosecond),
1 = erlang:trace(SrcPid, true, Flags), 1 = erlang:trace(DstPid, true, Flags),
timer:sleep(WindowMs),
erlang:trace(SrcPid, false, [running, garbage_collection]),
erlang:trace(DstPid, false, [running, garbage_collection]),
Ended = erlang:monotonic_time(nanosecond), After = Depth(DstName),
Tracer ! stop,
St = receive {{profile, S}} -> S after 30000 -> #{{}} end,
Sec = fun(K) -> maps:get(K, St, 0) / 1.0e9 end,
Per = fun(P) -> [Sec({{P, run}}), Sec({{P, major}}), maps:get({{P, nmajor}}, St, 0) * 1.0,
                 Sec({{P, minor}})] end,
list_to_tuple([(Ended - Began) / 1.0e9, Before * 1.0, After * 1.0] ++ Per(SrcPid) ++ Per(DstPid)).
"""

FIELDS = ("window_s", "dst_before", "dst_after")
PER_QUEUE = ("run_s", "gc_major_s", "gc_major_count", "gc_minor_s")


def parse_profile(text: str) -> dict[str, float]:
    """The tuple ``PROFILE_EXPR`` returns, as printed by ``rabbitmqctl eval``, by name."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError(f"unexpected output from the profile: {body[:200]!r}")
    values = json.loads("[" + body[1:-1] + "]")
    names = list(FIELDS) + [f"{q}_{k}" for q in ("src", "dst") for k in PER_QUEUE]
    if len(values) != len(names):
        raise ValueError(f"expected {len(names)} values from the profile, got {len(values)}")
    return dict(zip(names, values, strict=True))


def shares(profile: dict[str, float]) -> dict[str, float]:
    """Busy and GC time of each queue process as fractions of the traced window."""
    window = profile["window_s"]
    out = {"window_s": round(window, 3)}
    out["msg_per_s_in_window"] = round((profile["dst_after"] - profile["dst_before"]) / window)
    for q in ("src", "dst"):
        out[f"{q}_busy"] = round(profile[f"{q}_run_s"] / window, 3)
        out[f"{q}_gc_major"] = round(profile[f"{q}_gc_major_s"] / window, 3)
        out[f"{q}_gc_minor"] = round(profile[f"{q}_gc_minor_s"] / window, 3)
        out[f"{q}_gc_major_count"] = int(profile[f"{q}_gc_major_count"])
    return out


def profile_in_background(
    node: LocalNode, threshold: int, window: float, result: dict[str, Any]
) -> threading.Thread:
    """Start the traced window in a thread; it fills ``result`` (or ``result['error']``)."""
    expr = PROFILE_EXPR.format(
        vhost=VHOST, src=SRC, dst=DST, threshold=threshold, window_ms=int(window * 1000),
        wait_ms=600_000,
    )

    def run() -> None:
        try:
            result.update(shares(parse_profile(node.ctl("eval", expr, timeout=660))))
        except (LocalNodeError, ValueError) as exc:
            result["error"] = str(exc)

    thread = threading.Thread(target=run, name="queue-profile", daemon=True)
    thread.start()
    return thread


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Trace the source and destination queue processes of a shovel benchmark "
        "case, to see which one limits it.",
    )
    names = [c.name for c in ALL_CASES]
    p.add_argument("--case", default="1KiB-persistent-on_confirm", choices=names,
                   help="the case of bench/shovel.py (default: %(default)s)")
    p.add_argument("--systems", default="pumpd,plugin",
                   help="comma-separated, from pumpd, plugin, pika (default: %(default)s)")
    p.add_argument("--reps", type=int, default=2, help="repetitions (default %(default)s)")
    p.add_argument("--messages", type=int, help="messages per run (default: the case's)")
    p.add_argument("--window", type=float, default=1.0, metavar="SECONDS",
                   help="length of the traced window (default %(default)s)")
    p.add_argument("--at", type=float, default=0.2, metavar="FRACTION",
                   help="start the window when this share of the messages arrived "
                   "(default %(default)s)")
    p.add_argument("--output", type=Path,
                   help="JSON-lines file (default: bench/results/queue-profile-<time>.jsonl)")
    args = p.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(args.systems) - {"pumpd", "plugin", "pika"})
    if unknown:
        p.error(f"unknown system(s): {', '.join(unknown)}; choose from pumpd, plugin, pika")
    if args.reps < 1 or (args.messages is not None and args.messages < 1000):
        p.error("--reps must be at least 1 and --messages at least 1000")
    if not 0 < args.at < 1 or args.window <= 0:
        p.error("--at must lie between 0 and 1, and --window must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    case: Case = next(c for c in ALL_CASES if c.name == args.case)
    messages = args.messages or case.default_messages
    out_path = results_file("queue-profile", args.output)
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}", flush=True)
    records: list[dict[str, Any]] = []
    with BenchNode() as bench:
        with (
            tempfile.TemporaryDirectory(prefix="pumpd-qprofile-") as tmp,
            out_path.open("ab") as out,
        ):
            for rep in range(1, args.reps + 1):
                shift = (rep - 1) % len(args.systems)
                for system in args.systems[shift:] + args.systems[:shift]:
                    profile: dict[str, Any] = {}
                    thread = profile_in_background(
                        bench.node, int(messages * args.at), args.window, profile
                    )
                    rec = bench.run(case, system, messages, rep, Path(tmp))
                    thread.join(timeout=120)
                    if thread.is_alive():
                        profile["error"] = "the traced window did not end within 120 s of the run"
                    rec["queue_profile"] = profile
                    records.append(rec)
                    out.write(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
                    out.flush()
                    print(line(rec), flush=True)
    print()
    print(table(records, args.systems))
    print(f"\nresults: {out_path}")
    complete = all(r["ok"] and "error" not in r["queue_profile"] for r in records)
    return 0 if records and complete else 1


def line(rec: dict[str, Any]) -> str:
    head = f"rep {rec['rep']} {rec['system']:<7}"
    if not rec["ok"]:
        return f"{head} FAILED: {rec['error']}"
    p = rec["queue_profile"]
    if "error" in p:
        return f"{head} {rec['msg_per_s']:>8,.0f} msg/s  profile failed: {p['error']}"
    late = "" if p["msg_per_s_in_window"] > 0 else "  (window outside the run!)"
    return (
        f"{head} {rec['msg_per_s']:>8,.0f} msg/s  source queue busy {p['src_busy']:.0%} "
        f"(GC major {p['src_gc_major']:.0%} x{p['src_gc_major_count']}, minor "
        f"{p['src_gc_minor']:.0%})  destination queue busy {p['dst_busy']:.0%} (GC major "
        f"{p['dst_gc_major']:.0%} x{p['dst_gc_major_count']}, minor {p['dst_gc_minor']:.0%})"
        f"{late}"
    )


def table(records: list[dict[str, Any]], systems: list[str]) -> str:
    keys = ("src_busy", "src_gc_major", "src_gc_minor", "dst_busy", "dst_gc_major", "dst_gc_minor")
    rows = ["system   msg/s   " + "  ".join(f"{k:>12}" for k in keys) + "   (medians)"]
    for system in systems:
        good = [r for r in records
                if r["system"] == system and r["ok"] and "error" not in r["queue_profile"]]
        if not good:
            rows.append(f"{system:<7}  no successful run")
            continue
        rate = statistics.median(r["msg_per_s"] for r in good)
        cells = [statistics.median(r["queue_profile"][k] for r in good) for k in keys]
        rows.append(f"{system:<7} {rate:>7,.0f}  " + "  ".join(f"{c:>12.0%}" for c in cells))
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
