"""The shovel benchmark's cases and one run of a case, for ``bench/shovel.py`` (``make bench``)
and ``bench/queue_profile.py``: a module they share, not a script.

A run moves one pre-filled source queue to a destination queue on the benchmark's node with one
system (pumpd, the Shovel plugin, the plain pika shovel) and returns its record; see
``bench/shovel.py`` for what is measured and ``docs/bench.md`` for the results.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import math
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pika
from pumpd.testing.localnode import LocalNode, LocalNodeError, find_free_port

from common import (
    QueueProbe,
    find_descendant,
    host_busy_seconds,
    prefill,
    process_cpu_seconds,
    process_tree,
    tree_cpu_seconds,
)

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
PIKA_SHOVEL = BENCH_DIR / "pika_shovel.py"

VHOST = "bench"
SRC, DST = "bench.src", "bench.dst"
SYSTEMS = ("pumpd", "plugin", "pika")
PREFETCH = 1000
QUIET_WAIT = 30.0  # --quiet-wait
MAX_OTHER_CORES = 0.3  # --max-other-cores
RETRIES = 2  # --retries
POLL_INTERVAL = 0.02
STALL_TIMEOUT = 60.0  # a run fails when the destination depth does not move for this long
STOP_TIMEOUT = 60.0  # seconds a pump gets to exit after SIGTERM
PLUGIN_ACK_MODE = {"on_confirm": "on-confirm", "on_publish": "on-publish", "no_ack": "no-ack"}


@dataclass(frozen=True)
class Case:
    name: str
    body_size: int
    persistent: bool  # delivery_mode 2 and durable queues; else delivery_mode 1, transient queues
    ack_mode: str
    default_messages: int
    # the protocol of each side: "091-091", "10-10", "091-10", "10-091" (ROUTES)
    route: str = "091-091"


# a route's sides: (source speaks AMQP 1.0, destination speaks AMQP 1.0)
ROUTES = {"091-091": (False, False), "10-10": (True, True), "091-10": (False, True),
          "10-091": (True, False)}
DEFAULT_ROUTE = "091-091"


def amqp10_uri(node: LocalNode) -> str:
    """The benchmark vhost over AMQP 1.0 (RabbitMQ 3.x takes the vhost from the open frame's
    hostname)."""
    return (f"amqp://guest:guest@127.0.0.1:{node.amqp_port}?sasl=plain"
            f"&hostname=vhost:{VHOST}")


def amqp10_address(queue: str) -> str:
    """An existing queue's AMQP 1.0 address on RabbitMQ 3.x, as a source or as a target."""
    return f"/amq/queue/{queue}"


CASES = (
    Case("64B-transient-on_confirm", 64, False, "on_confirm", 150_000),
    Case("64B-persistent-on_confirm", 64, True, "on_confirm", 150_000),
    Case("1KiB-persistent-on_confirm", 1024, True, "on_confirm", 50_000),
    Case("64B-transient-on_publish", 64, False, "on_publish", 150_000),
    Case("64B-transient-no_ack", 64, False, "no_ack", 150_000),
)
# Run only when named with --cases: the 1 KiB persistent case without waiting for confirms, which
# shows how much of that case's time the confirm cycle takes (docs/bench.md).
EXTRA_CASES = (
    Case("1KiB-persistent-on_publish", 1024, True, "on_publish", 50_000),
    Case("1KiB-persistent-no_ack", 1024, True, "no_ack", 50_000),
)
ALL_CASES = (*CASES, *EXTRA_CASES)


class RunFailed(Exception):
    pass


# ----------------------------------------------------------------------------- the systems


class PumpProcess:
    """A pump run as a subprocess (pumpd or the pika shovel), its output in a log file."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> tuple[int | None, float]:
        """SIGTERM, then wait; returns (exit status or None if it had to be killed, seconds)."""
        began = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        self._log.close()
        return code, time.monotonic() - began

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def pumpd_argv(
    node: LocalNode, case: Case, workdir: Path, http_port: int,
    clauses: dict[str, Any] | None = None,
) -> list[str]:
    """``clauses``: more shovel clauses (a --pumpd-variant's), over the benchmark's own."""
    uri = node.uri(VHOST)
    src10, dst10 = ROUTES[case.route]
    shovel: dict[str, Any] = {"prefetch_count": PREFETCH, "ack_mode": case.ack_mode}
    if src10:
        shovel["sources"] = {"protocol": "amqp10", "broker": amqp10_uri(node),
                             "address": amqp10_address(SRC)}
    else:
        shovel["sources"] = {"broker": uri}
        shovel["queue"] = SRC
    if dst10:
        shovel["destinations"] = {"protocol": "amqp10", "broker": amqp10_uri(node),
                                  "address": amqp10_address(DST)}
    else:
        shovel["destinations"] = {"broker": uri}
        shovel["publish_fields"] = {"exchange": "", "routing_key": DST}
    config = {"shovels": {"bench": {**shovel, **(clauses or {})}}}
    path = workdir / "pumpd.json"
    path.write_text(json.dumps(config, indent=2))
    # The daemon's status endpoint on a free port: the default one (15680) may be taken by
    # another pumpd on the same host.
    return [
        sys.executable, "-m", "pumpd", "--config", str(path), "--status-interval", "0",
        "--http", f"127.0.0.1:{http_port}", "--http-open-reads",
    ]


def pika_argv(node: LocalNode, case: Case) -> list[str]:
    uri = node.uri(VHOST)
    return [
        sys.executable, str(PIKA_SHOVEL), "--src-uri", uri, "--src-queue", SRC, "--dest-uri", uri,
        "--dest-queue", DST, "--ack-mode", case.ack_mode, "--prefetch", str(PREFETCH),
    ]


def plugin_value(node: LocalNode, case: Case) -> dict[str, Any]:
    uri = node.uri(VHOST)
    src10, dst10 = ROUTES[case.route]
    value: dict[str, Any] = {"ack-mode": PLUGIN_ACK_MODE[case.ack_mode],
                             "src-prefetch-count": PREFETCH}
    if src10:
        value |= {"src-protocol": "amqp10", "src-uri": amqp10_uri(node),
                  "src-address": amqp10_address(SRC)}
    else:
        value |= {"src-protocol": "amqp091", "src-uri": uri, "src-queue": SRC}
    if dst10:
        value |= {"dest-protocol": "amqp10", "dest-uri": amqp10_uri(node),
                  "dest-address": amqp10_address(DST)}
    else:
        value |= {"dest-protocol": "amqp091", "dest-uri": uri, "dest-queue": DST}
    return value


# ---------------------------------------------------------------------------------- a run


@dataclass
class Sample:
    t: float
    arrived: int
    pump_cpu: dict[int, float]  # pid -> CPU seconds, for every process of the pump
    broker_cpu: float
    host_busy: float


def unacked_in(node: LocalNode, queue: str) -> int:
    out = node.ctl(
        "list_queues", "-p", VHOST, "name", "messages_unacknowledged", "--no-table-headers",
        "--quiet",
    )
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == queue:
            return int(parts[1])
    raise RunFailed(f"queue {queue} not listed by rabbitmqctl list_queues")


def wait_no_consumers(probe: QueueProbe, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while probe.depth(SRC)[1] > 0:
        if time.monotonic() > deadline:
            raise RunFailed(f"the source queue still has a consumer {timeout:.0f} s after stop")
        time.sleep(0.05)


def run_once(
    node: LocalNode,
    beam_pid: int,
    probe: QueueProbe,
    case: Case,
    system: str,
    messages: int,
    rep: int,
    workdir: Path,
    quiet_wait: float = QUIET_WAIT,
    pumpd_clauses: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One system moving one pre-filled queue; returns the result record (``ok`` False on a
    failure, with ``error``). With ``pumpd_clauses`` the system is a pumpd variant: pumpd run
    with those shovel clauses added, recorded under the variant's name."""
    is_pumpd = system == "pumpd" or pumpd_clauses is not None
    rec: dict[str, Any] = {
        "case": case.name, "system": system, "rep": rep, "messages": messages,
        "body_size": case.body_size, "persistent": case.persistent, "ack_mode": case.ack_mode,
        "prefetch": PREFETCH, "started_at": dt.datetime.now().isoformat(timespec="seconds"),
        "msg_per_s": None, "pump_cpu_us_per_msg": None, "broker_cpu_us_per_msg": None,
        "ratio_to_plugin": None, "wall": None, "ok": False, "error": None,
    }
    pump: PumpProcess | None = None
    http_port = find_free_port()
    shovel_name = f"bench-{case.name}-{rep}"
    samples: list[Sample] = []
    try:
        # Same starting point for every system: both queues empty and idle, then N messages.
        probe.declare(SRC, case.persistent)
        probe.declare(DST, case.persistent)
        probe.purge(SRC)
        probe.purge(DST)
        if probe.depth(SRC) != (0, 0) or probe.depth(DST) != (0, 0):
            raise RunFailed(
                f"queues not empty and idle before the run: {probe.depth(SRC)} {probe.depth(DST)}"
            )
        rec["prefill_s"] = round(
            prefill(node.uri(VHOST), SRC, messages, case.body_size, persistent=case.persistent), 3
        )
        ready, _ = probe.depth(SRC)
        if ready != messages:
            raise RunFailed(f"pre-fill left {ready} messages in the source, not {messages}")

        waited, load = wait_for_quiet(quiet_wait)
        rec["quiet_wait_s"], rec["host_load_before"] = round(waited, 2), round(load, 3)

        began = time.monotonic()
        if system == "plugin":
            node.management_request(
                "PUT", f"/api/parameters/shovel/{VHOST}/{shovel_name}",
                {"value": plugin_value(node, case)},
            )
        else:
            if is_pumpd:
                rec["pumpd_source"] = pumpd_source_digest()
                rec["pumpd_clauses"] = pumpd_clauses or {}
                argv = pumpd_argv(node, case, workdir, http_port, pumpd_clauses)
            else:
                argv = pika_argv(node, case)
            pump = PumpProcess(argv, workdir / f"{system}-{case.name}-{rep}.log")

        # Poll the destination depth until everything arrived. The pump's processes (pumpd: the
        # coordinator, its worker and multiprocessing's resource tracker) are looked up again
        # until the first message arrives, at the samples that cross 5 % and 95 %, and every
        # 0.5 s (a scan of /proc costs a few ms, too much for every sample).
        last_change, last_count = time.monotonic(), -1
        lo_mark, hi_mark = steady_marks(messages)
        pump_pids: list[int] = []
        for i in itertools.count():
            arrived, _ = probe.depth(DST)
            now = time.monotonic()
            if pump is not None:
                crossing = last_count < lo_mark <= arrived or last_count < hi_mark <= arrived
                if arrived == 0 or crossing or i % 25 == 0:
                    pump_pids = process_tree(pump.pid)
            pump_cpu = tree_cpu_seconds(pump_pids)
            samples.append(
                Sample(now, arrived, pump_cpu, process_cpu_seconds(beam_pid), host_busy_seconds())
            )
            if arrived >= messages:
                break
            if arrived != last_count:
                last_change, last_count = now, arrived
            elif now - last_change > STALL_TIMEOUT:
                raise RunFailed(f"stalled at {arrived}/{messages} for {STALL_TIMEOUT:.0f} s")
            if pump is not None and not pump.alive():
                raise RunFailed(
                    f"{system} exited with status {pump.proc.returncode} at {arrived}/{messages}"
                    f":\n{pump.log_tail()}"
                )
            time.sleep(POLL_INTERVAL)
        rec["wall"] = round(samples[-1].t - began, 3)

        if is_pumpd:
            rec["pumpd_data_plane"] = pumpd_implementation(http_port)

        # Stop the system.
        if pump is not None:
            code, stop_s = pump.stop()
            rec["exit_code"], rec["stop_s"] = code, round(stop_s, 3)
            if code != 0:
                raise RunFailed(
                    f"{system} exited with status {code} after SIGTERM"
                    if code is not None
                    else f"{system} did not exit within {STOP_TIMEOUT:.0f} s of SIGTERM"
                )
        else:
            # Deleting a dynamic shovel stops it at once, without a drain: first let the last
            # confirms come back and the last acks reach the source.
            deadline = time.monotonic() + 30
            while unacked_in(node, SRC) > 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            node.management_request("DELETE", f"/api/parameters/shovel/{VHOST}/{shovel_name}")
            shovel_name = ""
        wait_no_consumers(probe)
        left, _ = probe.depth(SRC)
        final, _ = probe.depth(DST)
        rec["left_in_source"], rec["arrived"] = left, final
        if left != 0 or final != messages:
            raise RunFailed(
                f"after stop: {left} left in the source, {final} in the destination "
                f"(expected 0 and {messages})"
            )
        if pump is not None and is_pumpd:
            rec["pumpd_log_tail"] = pump.log_tail(3)
        rec.update(metrics(samples, messages))
        rec["ok"] = True
    except (RunFailed, OSError, pika.exceptions.AMQPError, LocalNodeError) as exc:
        rec["error"] = str(exc) if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {exc}"
        if samples:  # what was measured up to the failure, for the record
            rec.update(metrics(samples, messages))
    finally:
        if pump is not None:
            pump.kill()
        if system == "plugin" and shovel_name:
            try:
                node.management_request("DELETE", f"/api/parameters/shovel/{VHOST}/{shovel_name}")
            except Exception:
                pass
    return rec


def wait_for_quiet(
    max_wait: float, threshold: float = 0.3, window: float = 0.5
) -> tuple[float, float]:
    """Wait (at most ``max_wait`` seconds) until the whole host uses less than ``threshold`` cores
    over ``window`` seconds: the broker done with the pre-fill (persistent messages are still
    being written after their confirms) and, on a shared machine, nobody else busy. Returns
    (seconds waited, last host load in cores)."""
    began = time.monotonic()
    while True:
        b0, t0 = host_busy_seconds(), time.monotonic()
        time.sleep(window)
        load = (host_busy_seconds() - b0) / (time.monotonic() - t0)
        waited = time.monotonic() - began
        if load < threshold or waited >= max_wait:
            return waited, load


def steady_marks(messages: int) -> tuple[int, int]:
    """Arrived counts that open and close the steady-state window: 5 % and 95 %."""
    return math.ceil(0.05 * messages), math.ceil(0.95 * messages)


def pumpd_source_digest() -> str:
    """A digest of pumpd's sources and extension as they are now: the working tree may change
    between runs while someone edits it, and this says which runs ran the same code."""
    import pumpd

    h = hashlib.sha1()
    root = Path(pumpd.__file__).parent
    for path in sorted([*root.glob("*.py"), *root.glob("*.so")]):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def pumpd_implementation(port: int) -> str | None:
    """The data plane pumpd's worker runs on, from the daemon's status endpoint."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/shovels/bench", timeout=2) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError):
        return None
    value = doc.get("implementation") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def metrics(samples: list[Sample], messages: int) -> dict[str, Any]:
    """Steady-state figures between the first samples at >= 5 % and >= 95 % arrived."""
    lo_mark, hi_mark = steady_marks(messages)
    lo = next((s for s in samples if s.arrived >= lo_mark), None)
    hi = next((s for s in samples if s.arrived >= hi_mark), None)
    if lo is None or hi is None or hi.arrived <= lo.arrived or hi.t <= lo.t:
        return {}
    n, secs = hi.arrived - lo.arrived, hi.t - lo.t
    # a process that started after the 5 % sample counts from 0; one that exited before the
    # 95 % sample is lost (pumpd's processes live from start to stop in a healthy run)
    pump_cpu = sum(cpu - lo.pump_cpu.get(pid, 0.0) for pid, cpu in hi.pump_cpu.items())
    broker_cpu = hi.broker_cpu - lo.broker_cpu
    other = (hi.host_busy - lo.host_busy) - pump_cpu - broker_cpu
    first = next((s for s in samples if s.arrived > 0), None)
    return {
        "msg_per_s": round(n / secs, 1),
        "steady_s": round(secs, 3),
        "steady_messages": n,
        "pump_cpu_us_per_msg": round(pump_cpu / n * 1e6, 2) if pump_cpu > 0 else None,
        "pump_cpu_cores": round(pump_cpu / secs, 3),
        "pump_processes": len(hi.pump_cpu),
        "broker_cpu_us_per_msg": round(broker_cpu / n * 1e6, 2),
        "broker_cpu_cores": round(broker_cpu / secs, 3),
        # every other process on the host (this benchmark's poller included), in cores
        "other_cpu_cores": round(max(0.0, other) / secs, 3),
        "first_arrival_s": round(first.t - samples[0].t, 3) if first is not None else None,
    }


# ------------------------------------------------------------------------------- reporting


BENCH_PLUGINS = ("rabbitmq_management", "rabbitmq_shovel", "rabbitmq_amqp1_0")


def start_bench_node(node: LocalNode) -> int:
    """Start ``node`` and create the benchmark's vhost; returns the node's ``beam.smp`` pid."""
    print("starting a private RabbitMQ node (management + shovel plugins) ...", flush=True)
    node.start()
    node.add_vhost(VHOST)
    beam_pid = find_descendant(node.pid or 0, "beam.smp")
    if beam_pid is None:
        raise SystemExit("cannot find the node's beam.smp process")
    return beam_pid


class BenchNode:
    """The benchmark's node and a probe connection to it, for ``with``: started on entry, killed
    on exit. An interrupt (Ctrl-C) ends the ``with`` block quietly, keeping what was recorded."""

    def __init__(self) -> None:
        self.node = LocalNode(plugins=BENCH_PLUGINS)
        self.beam_pid = 0
        self._probe: QueueProbe | None = None

    def __enter__(self) -> BenchNode:
        try:
            self.beam_pid = start_bench_node(self.node)
            self._probe = QueueProbe(self.node.uri(VHOST))
        except BaseException as exc:
            if self.__exit__(type(exc), exc, exc.__traceback__):
                raise SystemExit(1) from None  # interrupted while starting: nothing to run
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        try:
            if self._probe is not None:
                self._probe.close()
        finally:
            self.node.close(graceful=False)
        if exc_type is KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return True
        return False

    def run(self, case: Case, system: str, messages: int, rep: int, workdir: Path,
            quiet_wait: float = QUIET_WAIT,
            pumpd_clauses: dict[str, Any] | None = None) -> dict[str, Any]:
        """:func:`run_once` on this node; a failed run leaves the next a fresh probe connection."""
        assert self._probe is not None
        rec = run_once(self.node, self.beam_pid, self._probe, case, system, messages, rep,
                       workdir, quiet_wait, pumpd_clauses)
        if not rec["ok"]:
            self._probe.close()
            self._probe = QueueProbe(self.node.uri(VHOST))
        return rec


def results_file(kind: str, output: Path | None) -> Path:
    """``output``, or ``bench/results/KIND-<time>.jsonl``; its directory is created."""
    path = output or RESULTS_DIR / f"{kind}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
