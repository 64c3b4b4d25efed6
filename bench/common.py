"""Helpers shared by the benchmarks: the common result fields, a fast pre-fill publisher, a
queue-depth probe and CPU time read from ``/proc``.

Nothing here is part of pumpd; the benchmark only uses pumpd's :class:`~pumpd.testing.localnode.LocalNode`.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
from pika import frame as amqp_frame
from pika import spec
from pumpd.testing.localnode import find_free_port

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


# A benchmark stopped by SIGTERM (kill, timeout) must still stop the private brokers it started:
# the default action ends the interpreter without unwinding its with-blocks or running its exit
# handlers, and the nodes would keep running.
if threading.current_thread() is threading.main_thread() \
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


# ------------------------------------------------------------------------ common result fields

# Every result line of every benchmark carries these, so one reader (bench/analyse.py) takes
# them all: ``bench`` (shovel, workers, confirms), ``case`` (what was measured), ``system`` (who
# did it: pumpd, plugin, pika, aio-pika), ``rep`` (repetition, from 1) and ``msg_s`` (messages
# per second). Each benchmark adds its own fields beside them.
COMMON_FIELDS = ("bench", "case", "system", "rep", "msg_s")


def common_fields(bench: str, case: str, system: str, rep: int,
                  msg_s: float | None) -> dict[str, object]:
    return {"bench": bench, "case": case, "system": system, "rep": rep,
            "msg_s": None if msg_s is None else round(msg_s, 1)}


# --------------------------------------------------------------------------- CPU from /proc


def process_cpu_seconds(pid: int) -> float:
    """user + system CPU time of process ``pid`` (all its threads), in seconds.

    Fields 14 (utime) and 15 (stime) of ``/proc/PID/stat``, in clock ticks (``SC_CLK_TCK``). For
    a thread-group leader they include every thread of the process, live or exited; they do not
    include child processes.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()  # fields from 3 (state) on
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def host_busy_seconds() -> float:
    """CPU time every core of the host spent busy (not idle, not iowait) since boot, in seconds."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    # cpu user nice system idle iowait irq softirq steal guest guest_nice (guest is in user)
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in parts[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def _ppid_and_comm(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1 : stat.rfind(")")]
    ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
    return ppid, comm


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command name) of every process (a full scan of /proc: a few ms)."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _ppid_and_comm(int(entry))
            if info is not None:
                table[int(entry)] = info
    return table


def _descends_from(pid: int, root: int, table: dict[int, tuple[int, str]]) -> bool:
    while pid > 1:
        if pid == root:
            return True
        pid = table.get(pid, (0, ""))[0]
    return False


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it, e.g. pumpd's coordinator, its workers and
    multiprocessing's resource tracker."""
    table = _process_table()
    return [pid for pid in table if _descends_from(pid, root, table)]


def tree_cpu_seconds(pids: list[int]) -> dict[int, float]:
    """:func:`process_cpu_seconds` of each of ``pids`` that still exists."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            out[pid] = process_cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            pass  # exited meanwhile
    return out


def find_descendant(root: int, comm: str) -> int | None:
    """PID of a process named ``comm`` below ``root`` in the process tree (or ``root`` itself).

    :class:`~pumpd.testing.localnode.LocalNode` ``.pid`` is the ``rabbitmq-server`` shell script; the
    Erlang VM (``beam.smp``) runs as its child.
    """
    table = _process_table()
    for pid, (_ppid, name) in table.items():
        if name == comm and _descends_from(pid, root, table):
            return pid
    return None


# -------------------------------------------------------------------------- queue depth probe


def _parameters(uri: str) -> pika.URLParameters:
    sep = "&" if "?" in uri else "?"
    # heartbeat 0: the probe can sit idle for a while between runs without being disconnected
    return pika.URLParameters(f"{uri}{sep}heartbeat=0")


class QueueProbe:
    """A blocking connection of its own for declaring, purging and reading queue depths."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.connection = pika.BlockingConnection(_parameters(uri))
        self.channel = self.connection.channel()

    def depth(self, queue: str) -> tuple[int, int]:
        """``(ready messages, consumers)`` of ``queue`` from a passive ``queue.declare``.

        Unacknowledged messages are not counted in the ready messages.
        """
        ok = self.channel.queue_declare(queue, passive=True).method
        return ok.message_count, ok.consumer_count

    def declare(self, queue: str, durable: bool) -> None:
        """Declare ``queue``; an existing one with the other durability is deleted first."""
        try:
            self.channel.queue_declare(queue, durable=durable)
        except pika.exceptions.ChannelClosedByBroker:  # PRECONDITION_FAILED: other properties
            self.channel = self.connection.channel()
            self.channel.queue_delete(queue)
            self.channel.queue_declare(queue, durable=durable)

    def purge(self, queue: str) -> None:
        self.channel.queue_purge(queue)

    def close(self) -> None:
        try:
            self.connection.close()
        except Exception:
            pass


# ------------------------------------------------------------------------------ fast pre-fill


@dataclass
class _Confirms:
    acked: int = 0
    error: str | None = None
    closed: bool = False


class _FrameReader:
    """Reads frames off a raw socket: synchronously for the handshake, then in a thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def next_frame(self) -> amqp_frame.Frame | amqp_frame.ProtocolHeader:
        while True:
            used, fr = amqp_frame.decode_frame(self.buf)
            if fr is not None:
                self.buf = self.buf[used:]
                return fr
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.buf += data

    def expect(self, channel: int, method: type) -> object:
        fr = self.next_frame()
        if not isinstance(fr, amqp_frame.Method) or fr.channel_number != channel:
            raise ConnectionError(f"expected {method.__qualname__}, got {fr!r}")
        if not isinstance(fr.method, method):
            raise ConnectionError(f"expected {method.__qualname__}, got {fr.method!r}")
        return fr.method


def prefill(
    uri: str,
    queue: str,
    count: int,
    body_size: int,
    *,
    persistent: bool,
    chunk: int = 5000,
    timeout: float = 300.0,
    body_of: Callable[[int], bytes] | None = None,
) -> float:
    """Publish ``count`` messages of ``body_size`` bytes to ``queue`` (default exchange) as fast
    as the broker takes them, in confirm mode, and wait until the last one is confirmed.

    The frames of one message are encoded once with pika's codec and written ``chunk`` messages
    at a time on a raw socket; a thread reads the confirms. Per-message client work is then near
    zero, so pre-filling 150,000 messages takes a few seconds instead of the ~20 s of a pika
    publishing loop. Returns the seconds it took.

    ``body_of``: the body of the i-th message (from 0), ``body_size`` bytes, when each message
    must be told apart from the others; otherwise every message has the same random body.

    :raises ConnectionError: a handshake failure, a nack, or a channel / connection closed by the
        broker.
    """
    began = time.monotonic()
    u = urllib.parse.urlsplit(uri)
    user = urllib.parse.unquote(u.username or "guest")
    password = urllib.parse.unquote(u.password or "guest")
    vhost = urllib.parse.unquote(u.path[1:]) if len(u.path) > 1 else "/"
    sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 5672), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = _FrameReader(sock)
    try:
        sock.sendall(amqp_frame.ProtocolHeader().marshal())
        reader.expect(0, spec.Connection.Start)
        sock.sendall(
            amqp_frame.Method(
                0,
                spec.Connection.StartOk(
                    client_properties={"product": "pumpd bench prefill"},
                    mechanism="PLAIN",
                    response=f"\0{user}\0{password}",
                ),
            ).marshal()
        )
        tune = reader.expect(0, spec.Connection.Tune)
        assert isinstance(tune, spec.Connection.Tune)
        frame_max = tune.frame_max or 131072
        for method in (
            spec.Connection.TuneOk(channel_max=tune.channel_max, frame_max=frame_max, heartbeat=0),
            spec.Connection.Open(virtual_host=vhost),
        ):
            sock.sendall(amqp_frame.Method(0, method).marshal())
        reader.expect(0, spec.Connection.OpenOk)
        sock.sendall(amqp_frame.Method(1, spec.Channel.Open()).marshal())
        reader.expect(1, spec.Channel.OpenOk)
        sock.sendall(amqp_frame.Method(1, spec.Confirm.Select()).marshal())
        reader.expect(1, spec.Confirm.SelectOk)

        body = (b"pumpd-bench-" + os.urandom(body_size))[:body_size]
        props = spec.BasicProperties(delivery_mode=2 if persistent else 1)
        one = [
            amqp_frame.Method(1, spec.Basic.Publish(exchange="", routing_key=queue)).marshal(),
            amqp_frame.Header(1, body_size, props).marshal(),
        ]
        step = frame_max - 8
        head = b"".join(one)
        one += [amqp_frame.Body(1, body[i : i + step]).marshal() for i in range(0, body_size, step)]
        message = b"".join(one)
        if body_of is not None and not 0 < body_size <= step:
            raise ValueError(f"pre-fill: numbered bodies of {body_size} B must fit one frame")
        body_header = struct.pack(">BHI", 3, 1, body_size)

        def numbered(first: int, k: int) -> bytes:
            assert body_of is not None
            parts = []
            for i in range(first, first + k):
                b = body_of(i)
                if len(b) != body_size:
                    raise ValueError(f"pre-fill: body {i} has {len(b)} B, not {body_size}")
                parts += (head, body_header, b, b"\xce")
            return b"".join(parts)

        state = _Confirms()
        done = threading.Event()

        def read_confirms() -> None:
            try:
                while True:
                    fr = reader.next_frame()
                    if not isinstance(fr, amqp_frame.Method):
                        continue
                    m = fr.method
                    if isinstance(m, spec.Basic.Ack):
                        # confirms of one channel to one queue arrive in order
                        state.acked = max(state.acked, m.delivery_tag)
                        if state.acked >= count:
                            done.set()
                    elif isinstance(m, spec.Basic.Nack):
                        state.error = f"pre-fill: the broker nacked publish {m.delivery_tag}"
                        done.set()
                    elif isinstance(m, (spec.Channel.Close, spec.Connection.Close)):
                        state.error = f"pre-fill: the broker closed with {m!r}"
                        done.set()
                    elif isinstance(m, spec.Connection.CloseOk):
                        state.closed = True
                        return
            except (OSError, ConnectionError) as exc:
                if not state.closed and state.error is None:
                    state.error = f"pre-fill: {exc}"
                done.set()

        sock.settimeout(None)
        thread = threading.Thread(target=read_confirms, daemon=True)
        thread.start()
        sent = 0
        while sent < count and not done.is_set():
            k = min(chunk, count - sent)
            sock.sendall(message * k if body_of is None else numbered(sent, k))
            sent += k
        if not done.wait(timeout):
            raise ConnectionError(f"pre-fill: {state.acked}/{count} confirmed after {timeout} s")
        if state.error is not None:
            raise ConnectionError(state.error)
        close = spec.Connection.Close(reply_code=200, reply_text="done", class_id=0, method_id=0)
        sock.sendall(amqp_frame.Method(0, close).marshal())
        thread.join(10)
    finally:
        sock.close()
    return time.monotonic() - began


def prefill_round_robin(uri: str, queues: list[str], total: int, size: int, persistent: bool) -> None:
    """Publish ``total`` messages round-robin over ``queues`` (no confirms: a passive declare on
    the same channel afterwards proves every publish has been routed)."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
        body = b"x" * size
        for i in range(total):
            ch.basic_publish("", queues[i % len(queues)], body, props)
            if i % 2000 == 1999:
                conn.process_data_events(0)
        for q in queues:
            ch.queue_declare(q, passive=True)
    finally:
        conn.close()


def bench_shovel(uri: str, src: str, dst: str) -> dict[str, Any]:
    """A shovel definition moving queue ``src`` to queue ``dst`` on one broker (both declared
    durable), prefetch 1000, on_confirm: the shovel the multi-shovel benchmarks run."""
    return {
        "sources": {"broker": uri, "declarations": [
            {"queue.declare": {"queue": src, "durable": True}}]},
        "destinations": {"broker": uri, "declarations": [
            {"queue.declare": {"queue": dst, "durable": True}}]},
        "queue": src,
        "publish_fields": {"exchange": "", "routing_key": dst},
        "ack_mode": "on_confirm",
        "prefetch_count": 1000,
    }


def crossing(samples: list[tuple[float, int]], target: float) -> float:
    """When the acked total reached ``target``, interpolated between the two polls around it."""
    for (t0, n0), (t1, n1) in itertools.pairwise(samples):
        if n0 < target <= n1:
            return t0 + (t1 - t0) * (target - n0) / (n1 - n0)
    raise ValueError(f"{target} never reached")


def memory_kib(pids: list[int]) -> tuple[int, int]:
    """Sum of VmRSS and of Pss of ``pids``, in KiB."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            pass  # exited meanwhile
    return rss, pss


def declare_durable_queues(uri: str, queues: list[str]) -> None:
    """Declare ``queues`` durable on ``uri``, over one connection."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        for q in queues:
            ch.queue_declare(q, durable=True)
    finally:
        conn.close()


# ------------------------------------------------------------------------ a pumpd daemon

def shovels_doc(port: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/shovels", timeout=30) as r:
        docs: list[dict[str, Any]] = json.loads(r.read())
    return docs





class Pumpd:
    """``python -m pumpd`` on a config of ``shovels`` in a process of its own, its HTTP API
    open for reads on a free port; ``extra`` arguments are appended to its command line."""

    def __init__(self, workdir: Path, shovels: dict[str, Any], per_process: int,
                 extra: tuple[str, ...] = ()) -> None:
        self.port = find_free_port()
        config = workdir / f"many-{self.port}.json"
        config.write_text(json.dumps({"shovels": shovels}))
        self.log = (workdir / f"many-{self.port}.log").open("wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pumpd", "--config", str(config), "--http-open-reads", "--http",
             f"127.0.0.1:{self.port}", "--log-level", "warning", "--shovels-per-process",
             str(per_process), "--state-file", str(workdir / f"many-{self.port}.state.json"),
             *extra],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

    def poll(self, what: str, predicate: Any, timeout: float) -> float:
        """Seconds since the start when ``predicate(/api/shovels)`` first held."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pumpd exited {self.proc.returncode} (log {self.log.name})")
            try:
                if predicate(shovels_doc(self.port)):
                    return time.monotonic() - self.started
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {what} (log {self.log.name})")

    def stop(self) -> float:
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return float("inf")
        finally:
            self.log.close()
        return time.monotonic() - began


def record(out: Path, result: dict[str, Any], rabbitmq: str) -> None:
    """One result line: ``result`` with the broker's version, the CPU count, the load and the
    time, appended to ``out`` (JSON lines) and printed."""
    result.update({"rabbitmq": rabbitmq, "cpus": os.cpu_count(),
                   "load_1min": round(os.getloadavg()[0], 2),
                   "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
    with out.open("a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps(result), flush=True)

