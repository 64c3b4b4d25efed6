"""A fault run of a stream destination: faults injected while pumpd copies a source into a
destination stream, then the whole destination read back and checked message by message.

    python bench/stream_faults.py [--messages 1000000] [--faults 10] [--source stream|queue]
                                  [--group]

Two private nodes with ``rabbitmq_stream``: the source node holds the source (a stream, or with
``--source queue`` a durable classic or quorum queue), filled with ``--messages`` messages of
``--body-size`` bytes whose bodies start with their sequence number; the destination node holds
the destination stream. pumpd runs as a daemon (``python -m pumpd --config FILE``) on one shovel
from the source to the destination stream over the streams protocol, acknowledging on confirm.
Both sides go through a :class:`~pumpd.testing.proxy.TcpProxy` of their own, so that
connections can be reset and stalled.

While it runs, ``--faults`` faults are injected when the destination's length crosses evenly
spaced marks, each once the previous one is over and pumpd stores again, cycling through the
kinds in :data:`KINDS`: kill -9 of the worker process, kill -9 of the whole daemon (then started
again), a destination node restart, a source node restart, a reset of the destination's
connections, a stall of the destination's connections longer than the heartbeat and stall
timeouts, a reset of the source's connections. Each fault is logged with its time and the
destination's length then.

With ``--group`` the shovel runs on a group of two daemons (a ``group`` clause, the source node
as coordination broker, each member with its own configuration and state file), and the kinds
start with ``member-kill``: kill -9 of the member running the shovel, the other member taking
the position over (the seconds it took are logged), then the killed member started again so
that it rejoins. The worker and daemon kills hit the member running the shovel.

At the end the whole destination stream is read over the streams protocol (not pumpd's
counters) and checked against the source's sequence numbers: count, duplicates, missing,
unexpected bodies, order.

- A stream source with ``publishing_id: "source-offset"``: every source message exactly once,
  in order.
- A queue source with ``publishing_id: "none"``: nothing missing; a fault may store again what
  was published and not yet confirmed, which is at most the prefetch window, so the duplicates
  are bounded by ``prefetch * faults``.

A JSON line goes to ``bench/results/stream_faults-<time>.jsonl``; the exit status is 0 when the
check passed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
from pumpd.spark.read.read_options import ReadOptions, parse_read_options
from pumpd.spark.read.streams.protocol import StreamProbe, read
from pumpd.testing.localnode import LocalNode, find_free_port
from pumpd.testing.proxy import TcpProxy

from common import common_fields, prefill, process_tree
from shovel_run import results_file

KINDS = ("worker-kill", "daemon-kill", "destination-restart", "source-restart",
         "destination-reset", "destination-stall", "source-reset")
GROUP_KINDS = ("member-kill", *KINDS)
GROUP = "faults"
MEMBERS = ("a", "b")
# the most seconds a member kill may take to be over: the other member runs the position
TAKEOVER_SECONDS = 120.0
SHOVEL = "faults"
SOURCE, DESTINATION = "faults-source", "faults-destination"
# Both sides' heartbeat and the shovel's stall timeout are short, so that a stalled connection
# is given up within seconds; the stall lasts longer than either.
HEARTBEAT = 5
STALL_TIMEOUT = 10.0
STALL_SECONDS = 2 * HEARTBEAT + 5
RECONNECT_DELAY = 1.0
POLL_INTERVAL = 0.2
# the run failed when the destination's length did not move for this long with messages to go
HANG_SECONDS = 180.0
# the length must stay put this long at the end before the destination is read
SETTLE_SECONDS = 5.0
SEQUENCE_DIGITS = 16


def body_of(size: int) -> Callable[[int], bytes]:
    def body(i: int) -> bytes:
        return (b"%0*d" % (SEQUENCE_DIGITS, i)).ljust(size, b".")
    return body


def sequence_of(body: bytes) -> int:
    """The sequence number a body starts with; -1 for a body that is not one of ours."""
    head = body[:SEQUENCE_DIGITS]
    return int(head) if len(head) == SEQUENCE_DIGITS and head.isdigit() else -1


def declare(uri: str, name: str, arguments: dict[str, Any]) -> None:
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        conn.channel().queue_declare(name, durable=True, arguments=arguments)


def ready_messages(uri: str, queue: str) -> int | None:
    try:
        with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
            return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    except pika.exceptions.AMQPError:
        return None


class StreamReader:
    """A stream's length (the next offset of a stream that was never truncated) and its
    messages, over the streams protocol, straight to the node (not through a proxy)."""

    def __init__(self, node: LocalNode, stream: str) -> None:
        assert node.stream_port is not None
        self.stream = stream
        self.options: ReadOptions = parse_read_options({
            "uri": node.uri(), "stream": stream, "streamPort": str(node.stream_port),
            "pollTimeoutMs": "100"})
        self.probe: StreamProbe | None = None
        self.last = 0

    def length(self) -> int:
        """The length now, or the last one read while the node does not answer."""
        try:
            if self.probe is None or not self.probe.alive():
                if self.probe is not None:
                    self.probe.close()
                self.probe = None
                self.probe = StreamProbe(self.options)
            tail = self.probe.next_offset(self.stream)
            self.last = 0 if tail is None else tail
        except Exception:  # a node restarting: try again at the next poll
            if self.probe is not None:
                self.probe.close()
            self.probe = None
        return self.last

    def sequences(self, end: int) -> list[int]:
        """The sequence numbers of offsets 0 to ``end - 1``, in the stream's order."""
        out: list[int] = []
        for batch in read(self.options, self.stream, 0, end):
            out += [sequence_of(b) for b in batch.column("body").to_pylist()]
        return out

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()


class Daemon:
    """``python -m pumpd --config FILE`` in a subprocess, its output appended to one log file
    across its restarts, its status read over its HTTP endpoint (open reads)."""

    def __init__(self, config: Path, log_path: Path) -> None:
        self.config = config
        self.log_path = log_path
        self.port = find_free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pumpd", "--config", str(self.config),
                 "--status-interval", "0", "--http", f"127.0.0.1:{self.port}",
                 "--http-open-reads"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/api/shovels/{SHOVEL}", timeout=5) as resp:
                doc: dict[str, Any] = json.loads(resp.read())
                return doc
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def running(self) -> bool:
        """Whether this daemon runs the shovel now (in a group: holds its position)."""
        return (self.status() or {}).get("state") == "running"

    def worker_pid(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            doc = self.status()
            pids = [w.get("pid") for w in (doc or {}).get("workers", [])]
            if pids and isinstance(pids[0], int) and pids[0] > 0:
                return pids[0]
            time.sleep(0.2)
        raise RuntimeError(f"no worker of the shovel within {timeout:.0f} s:\n{self.log_tail()}")

    def processes(self) -> list[int]:
        """The coordinator and its workers, not multiprocessing's resource tracker (it cleans
        up the slot table once the others are gone)."""
        if self.proc is None:
            return []
        out = []
        for pid in process_tree(self.proc.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"resource_tracker" not in cmdline:
                out.append(pid)
        return out

    def kill_9(self) -> list[int]:
        pids = self.processes()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            self.proc.wait(30)
        return pids

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.kill_9()
            return None

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Faults:
    """The faults, by kind, on the run's nodes, proxies and daemons."""

    def __init__(self, source: LocalNode, destination: LocalNode, source_proxy: TcpProxy,
                 destination_proxy: TcpProxy, members: list[Daemon]) -> None:
        self.source, self.destination = source, destination
        self.source_proxy, self.destination_proxy = source_proxy, destination_proxy
        self.members = members
        self.busy: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.takeovers: list[float] = []  # seconds from a member kill to the position running

    def holder(self, timeout: float = 60.0) -> Daemon:
        """The daemon that runs the shovel (the only one without a group)."""
        if len(self.members) == 1:
            return self.members[0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [d for d in self.members if d.alive() and d.running()]
            if len(running) == 1:
                return running[0]
            time.sleep(0.2)
        raise RuntimeError(f"no one member running the shovel within {timeout:.0f} s")

    def alive(self) -> bool:
        """Every member's process runs (a killed one is started again within its fault)."""
        return all(d.alive() for d in self.members)

    def _member_kill(self, victim: Daemon) -> None:
        """Kill -9 ``victim``, wait for another member to run the position, start it again."""
        killed = time.monotonic()
        victim.kill_9()
        others = [d for d in self.members if d is not victim]
        deadline = killed + TAKEOVER_SECONDS
        while not any(d.running() for d in others):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no other member ran the shovel within "
                                   f"{TAKEOVER_SECONDS:.0f} s of the kill")
            time.sleep(0.1)
        self.takeovers.append(round(time.monotonic() - killed, 1))
        victim.start()

    def _in_background(self, fault: Callable[[], object]) -> None:
        """A node restart or a stall takes seconds; the run is watched meanwhile."""
        def run() -> None:
            try:
                fault()
            except BaseException as exc:
                self.failure = exc
        self.busy = threading.Thread(target=run, name="node restart", daemon=True)
        self.busy.start()

    def ready(self) -> bool:
        """The last fault is over (a node restart has ended).

        :raises RuntimeError: the node did not start again
        """
        if self.failure is not None:
            raise RuntimeError(f"a fault did not end: {self.failure}")
        return self.busy is None or not self.busy.is_alive()

    def inject(self, kind: str) -> str:
        """Inject one fault; returns what was done."""
        if kind == "worker-kill":
            pid = self.holder().worker_pid()
            os.kill(pid, signal.SIGKILL)
            return f"SIGKILL to worker {pid}"
        if kind == "daemon-kill":
            daemon = self.holder()
            pids = daemon.kill_9()
            daemon.start()
            return f"SIGKILL to {pids}, daemon started again"
        if kind == "member-kill":
            victim = self.holder()
            self._in_background(lambda: self._member_kill(victim))
            return (f"SIGKILL to the member running the shovel ({victim.config.stem}), "
                    "started again once another member runs it")
        if kind == "destination-restart":
            self._in_background(self.destination.restart)
            return "destination node stopping and starting"
        if kind == "source-restart":
            self._in_background(self.source.restart)
            return "source node stopping and starting"
        if kind == "destination-reset":
            return f"{self.destination_proxy.reset_all()} destination connection(s) reset"
        if kind == "destination-stall":
            held = self.destination_proxy.connections
            self.destination_proxy.stall(STALL_SECONDS)
            self._in_background(lambda: time.sleep(STALL_SECONDS))  # over when it ends
            return f"{held} destination connection(s) stalled for {STALL_SECONDS} s"
        if kind == "source-reset":
            return f"{self.source_proxy.reset_all()} source connection(s) reset"
        raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(GROUP_KINDS)}")


def shovel_config(source_uri: str, destination_uri: str, stream_port: int, stream_source: bool,
                  prefetch: int, coordination_uri: str | None = None) -> dict[str, Any]:
    shovel: dict[str, Any] = {
        "sources": {"broker": source_uri}, "queue": SOURCE,
        "prefetch_count": prefetch, "ack_mode": "on_confirm",
        "reconnect_delay": RECONNECT_DELAY, "stall_timeout": STALL_TIMEOUT,
        "destinations": {"protocol": "stream", "broker": destination_uri, "stream": DESTINATION,
                         "stream_port": stream_port},
        "publishing_id": "source-offset" if stream_source else "none",
    }
    if stream_source:
        shovel["consumer_args"] = {"x-stream-offset": "first"}
    doc: dict[str, Any] = {"shovels": {SHOVEL: shovel}}
    if coordination_uri is not None:
        # every other group setting is the default: the run measures what a user gets
        doc["group"] = {"name": GROUP, "coordination_uri": coordination_uri}
    return doc


def check(sequences: list[int], messages: int) -> dict[str, Any]:
    """What the destination holds against the source's ``0..messages-1``."""
    counts = Counter(sequences)
    unexpected = sum(n for s, n in counts.items() if not 0 <= s < messages)
    distinct = sum(1 for s in counts if 0 <= s < messages)
    seen: set[int] = set()
    firsts = []
    for s in sequences:
        if 0 <= s < messages and s not in seen:
            seen.add(s)
            firsts.append(s)
    return {
        "stored": len(sequences),
        "duplicates": sum(n - 1 for s, n in counts.items() if 0 <= s < messages),
        "missing": messages - distinct,
        "unexpected": unexpected,
        # first arrivals that come after a higher sequence number
        "out_of_order": sum(1 for a, b in itertools.pairwise(firsts) if b < a),
        "exact": sequences == list(range(messages)),
    }


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    stream_source = args.source == "stream"
    rec: dict[str, Any] = {"source": args.source, "messages": args.messages,
                           "body_size": args.body_size, "prefetch": args.prefetch,
                           "publishing_id": "source-offset" if stream_source else "none",
                           "ok": False, "error": None,
                           "members": len(MEMBERS) if args.group else 1}
    if not stream_source:
        rec["queue_type"] = args.queue_type
    plugins = ("rabbitmq_stream",)
    with LocalNode(plugins=plugins) as src, LocalNode(plugins=plugins) as dst:
        assert dst.stream_port is not None
        source_arguments = ({"x-queue-type": "stream"} if stream_source
                            else {"x-queue-type": args.queue_type})
        declare(src.uri(), SOURCE, source_arguments)
        declare(dst.uri(), DESTINATION, {"x-queue-type": "stream"})
        seconds = prefill(src.uri(), SOURCE, args.messages, args.body_size, persistent=True,
                          body_of=body_of(args.body_size))
        print(f"filled {SOURCE} ({args.source}) with {args.messages} numbered messages in "
              f"{seconds:.1f} s", flush=True)
        dest = StreamReader(dst, DESTINATION)
        with TcpProxy("127.0.0.1", src.amqp_port) as source_proxy, \
                TcpProxy("127.0.0.1", dst.stream_port) as destination_proxy:
            source_uri = (f"amqp://guest:guest@127.0.0.1:{source_proxy.port}/%2F"
                          f"?heartbeat={HEARTBEAT}")
            destination_uri = f"{dst.uri()}?heartbeat={HEARTBEAT}"
            text = json.dumps(shovel_config(
                source_uri, destination_uri, destination_proxy.port, stream_source,
                args.prefetch, src.uri() if args.group else None), indent=2)
            members = []
            # a member's state and token files go beside its configuration: one file each
            for name in MEMBERS if args.group else ("pumpd",):
                config = workdir / f"{name}.json"
                config.write_text(text)
                log_path = args.daemon_log or workdir / "pumpd.log"
                if args.group:
                    log_path = log_path.with_name(f"{log_path.stem}-{name}{log_path.suffix}")
                members.append(Daemon(config, log_path))
            faults = Faults(src, dst, source_proxy, destination_proxy, members)
            marks = [args.messages * (k + 1) // (args.faults + 1) for k in range(args.faults)]
            log: list[dict[str, Any]] = []
            began = time.monotonic()
            for daemon in members:
                daemon.start()
            try:
                rec["wall_s"] = watch(args, faults, dest, marks, log, began, src.uri(),
                                      stream_source)
                exits = [d.stop() for d in members]
                rec["daemon_exit"] = exits if args.group else exits[0]
                starts = [d.starts for d in members]
                rec["daemon_starts"] = starts if args.group else starts[0]
                rec["destination_proxy_connections"] = destination_proxy.accepted
                rec["source_proxy_connections"] = source_proxy.accepted
            except BaseException:
                for daemon in members:
                    print(daemon.log_tail(), file=sys.stderr)
                raise
            finally:
                for daemon in members:
                    daemon.kill_9()
                rec["faults"] = log
                if args.group:
                    rec["takeover_s"] = faults.takeovers
                rec["faults_mid_run"] = sum(1 for f in log if f["mid_run"])
                rec["faults_by_kind"] = dict(Counter(f["kind"] for f in log))
        if not stream_source:
            rec["left_in_source"] = ready_messages(src.uri(), SOURCE)
        end = dest.length()
        read_began = time.monotonic()
        sequences = dest.sequences(end)
        rec["read_s"] = round(time.monotonic() - read_began, 1)
        dest.close()
        rec.update(check(sequences, args.messages))
    if stream_source:
        rec["ok"] = bool(rec["exact"])
    else:
        rec["duplicate_bound"] = args.prefetch * len(rec["faults"])
        rec["ok"] = (rec["missing"] == 0 and rec["unexpected"] == 0
                     and rec["duplicates"] <= rec["duplicate_bound"]
                     and rec.get("left_in_source") == 0)
    return rec


def watch(args: argparse.Namespace, faults: Faults, dest: StreamReader,
          marks: list[int], log: list[dict[str, Any]], began: float, source_uri: str,
          stream_source: bool) -> float:
    """Inject the faults at their marks and wait for the end; returns the wall time from the
    daemon's start to the last message stored."""
    last_length, last_change = -1, time.monotonic()
    last_growth = last_change
    kinds = itertools.cycle(GROUP_KINDS if args.group else KINDS)
    over_at: int | None = None  # the length when the last fault was over
    while True:
        length = dest.length()
        now = time.monotonic()
        if length != last_length:
            last_length, last_change, last_growth = length, now, now
        if log and over_at is None and faults.ready():
            over_at = length
        # The next fault waits for pumpd to be at work again: more stored since the last fault
        # was over than what was in flight then (or nothing left to store).
        armed = not log or (over_at is not None and (length > over_at + args.prefetch
                                                     or length >= args.messages))
        if len(log) < len(marks) and length >= marks[len(log)] and armed:
            kind = next(kinds)
            t = now - began
            # a queue source's duplicates count in the length: ask the queue what is left
            mid_run = length < args.messages if stream_source else bool(
                ready_messages(source_uri, SOURCE))
            print(f"[{t:7.1f} s] fault {len(log) + 1}/{len(marks)} {kind}: destination "
                  f"length {length}", flush=True)
            what = faults.inject(kind)
            print(f"           {what} ({time.monotonic() - now:.1f} s)", flush=True)
            log.append({"kind": kind, "t_s": round(t, 1), "length": length, "done": what,
                        "mid_run": mid_run})
            last_change = time.monotonic()  # a restarted daemon is given its time
            over_at = None
            continue
        if len(log) == len(marks) and length >= args.messages and faults.ready():
            settled = now - last_change >= SETTLE_SECONDS
            if settled and (stream_source or ready_messages(source_uri, SOURCE) == 0):
                return round(last_growth - began, 1)
        elif now - last_change > HANG_SECONDS:
            raise RuntimeError(f"hang: the destination held {length} of {args.messages} "
                               f"messages for {HANG_SECONDS:.0f} s")
        # a member kill leaves its member down until the others run the position
        if faults.ready() and not faults.alive():
            daemon = next(d for d in faults.members if not d.alive())
            raise RuntimeError(f"pumpd exited ({daemon.proc and daemon.proc.returncode}) at "
                               f"{length}:\n{daemon.log_tail()}")
        time.sleep(POLL_INTERVAL)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--faults", type=int, default=10)
    p.add_argument("--source", choices=("stream", "queue"), default="stream")
    p.add_argument("--queue-type", choices=("classic", "quorum"), default="classic",
                   help="the source queue's type with --source queue")
    p.add_argument("--body-size", type=int, default=64)
    p.add_argument("--prefetch", type=int, default=1000)
    p.add_argument("--output", type=Path, default=None)
    p.add_argument("--daemon-log", type=Path, default=None,
                   help="keep the daemon's output in this file (else it is thrown away; with "
                        "--group one file per member, named after it)")
    p.add_argument("--group", action="store_true",
                   help=f"run the shovel on a group of {len(MEMBERS)} daemons and kill the "
                        "member running it as one of the faults")
    args = p.parse_args()
    if not 1 <= args.messages <= 100_000_000:
        p.error("--messages: 1..100,000,000")
    if not 0 <= args.faults <= 1000:
        p.error("--faults: 0..1000")
    if not SEQUENCE_DIGITS <= args.body_size <= 100_000:
        p.error(f"--body-size: {SEQUENCE_DIGITS}..100,000 (a body starts with its number)")
    if not 1 <= args.prefetch <= 65535:
        p.error("--prefetch: 1..65,535")
    out = results_file("stream_faults", args.output)
    with tempfile.TemporaryDirectory(prefix="pumpd-stream-faults-") as tmp:
        try:
            rec = run(args, Path(tmp))
        except (RuntimeError, OSError, pika.exceptions.AMQPError) as exc:
            rec = {"source": args.source, "messages": args.messages, "ok": False,
                   "error": f"{type(exc).__name__}: {exc}"}
    case = f"{args.body_size}B-{args.source}-stream-{args.faults}faults"
    if args.group:
        case += f"-group{len(MEMBERS)}"
    rate = (args.messages / rec["wall_s"]) if rec.get("wall_s") else None
    rec = common_fields("stream_faults", case, "pumpd", 1, rate) | rec
    with out.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    print(f"\n{case}: {'OK' if rec['ok'] else 'FAILED'} ({out})")
    for key in ("error", "wall_s", "takeover_s", "faults_by_kind", "faults_mid_run", "stored", "duplicates", "duplicate_bound",
                "missing", "unexpected", "out_of_order", "exact", "left_in_source"):
        if key in rec:
            print(f"  {key:16} {rec[key]}")
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
