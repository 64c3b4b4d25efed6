"""The coordinator's worker hosts (``--shovels-per-process K`` > 1): which host runs which
position, the control pipes, and what became of the positions of a host that exited.

Placement: a due position goes into a running host with room that runs no other position of the
same shovel (competing consumers of one shovel spread over hosts, so a host crash takes only one
of them); the positions left over are grouped, in order, into new hosts of up to K, again one
position of a shovel per host. A host left with no position is told to exit, so the process
count follows the configuration after a reload or run-time deletions.

The coordinator's event loop reads each host's pipe (``loop.add_reader``): "ended" reports are
noted on the position and acted on by the coordinator's next pass; end of file means the host is
gone, and SIGCHLD (or the next tick) reaps it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import struct
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext

from .host import HostSpec
from .host import main as host_main
from .positions import Host, Shovel, Worker, describe_exit
from .slots import SlotPool, SlotRecord
from .worker import HEARTBEAT_INTERVAL, WorkerSpec

log = logging.getLogger("pumpd.coordinator")

Position = tuple[Shovel, Worker]
STALE = 3 * HEARTBEAT_INTERVAL  # a host silent this long gets no new position
# A control message waits at most this long for room in a host's pipe. A live host reads its pipe
# at once and the pipe holds hundreds of kilobytes, so a full one means a stuck event loop: the
# host is killed (its positions restart) rather than the coordinator blocking with it.
SEND_TIMEOUT = 5.0


def bound_sends(conn: Connection) -> None:
    """Make a blocking send on ``conn`` (a socket pair end) fail after :data:`SEND_TIMEOUT`."""
    timeout = SEND_TIMEOUT
    sock = socket.socket(fileno=os.dup(conn.fileno()))  # the option is the socket's, not the fd's
    try:
        seconds = int(timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                        struct.pack("ll", seconds, int((timeout - seconds) * 1e6)))
    finally:
        sock.close()


def ended_text(ended: tuple[int, str | None]) -> str:
    code, failure = ended
    return f"failed: {failure}" if failure else describe_exit(code, None)


class Hosts:
    def __init__(self, ctx: SpawnContext, pool: SlotPool, capacity: int, log_format: str,
                 log_level: str, wake: Callable[[], None]) -> None:
        self._ctx = ctx
        self._pool = pool
        self.capacity = capacity
        self._log_format = log_format
        self._log_level = log_level
        self._wake = wake
        self.hosts: list[Host] = []

    def place(self, due: list[Position], spec: Callable[[Shovel, Worker], WorkerSpec],
              now: float) -> tuple[list[Position], list[tuple[Position, str]]]:
        """Start ``due`` positions in hosts; returns those started and those that could not be
        (with why). A started position's ``host``, ``process`` and ``pid`` are set."""
        k = self.capacity
        started: list[Position] = []
        failed: list[tuple[Position, str]] = []
        groups: list[list[Position]] = []
        for s, w in due:
            host = next((h for h in self.hosts
                         if h.takes(k, now, STALE) and not h.hosts_shovel(s.name)), None)
            if host is not None and self._start_in(host, s, w, spec(s, w), now):
                started.append((s, w))
                continue
            group = next((g for g in groups
                          if len(g) < k and all(gs.name != s.name for gs, _gw in g)), None)
            if group is None:
                groups.append([(s, w)])
            else:
                group.append((s, w))
        for group in groups:
            error = self._spawn_host(group, spec, now)
            if error is None:
                started.extend(group)
            else:
                failed.extend((p, error) for p in group)
        return started, failed

    def _fresh_slot(self, w: Worker, now: float) -> None:
        # A fresh record for the new process: no counters (they are carried), a heartbeat now.
        self._pool.write(w.slot, SlotRecord(since=time.time(), heartbeat=now))

    def _start_in(self, host: Host, s: Shovel, w: Worker, ws: WorkerSpec, now: float) -> bool:
        """Start one position in a running host; False when its pipe is gone."""
        self._fresh_slot(w, now)
        if not self.send(host, ("start", ws)):
            return False
        self._adopt(host, s, w)
        log.info("started worker %s#%d in worker host pid %d%s", s.name, w.index, host.pid,
                 f", restart {w.restarts}" if w.restarts else "",
                 extra={"event": "spawn", "shovel": s.name, "worker": w.index,
                        "restarts": w.restarts})
        return True

    @staticmethod
    def _adopt(host: Host, s: Shovel, w: Worker) -> None:
        host.positions[w.slot] = (s, w)
        w.host, w.process, w.pid = host, host.process, host.pid

    def _spawn_host(self, group: list[Position], spec: Callable[[Shovel, Worker], WorkerSpec],
                    now: float) -> str | None:
        for _s, w in group:
            self._fresh_slot(w, now)
        ours, theirs = self._ctx.Pipe()
        host_spec = HostSpec(conn=theirs, positions=tuple(spec(s, w) for s, w in group),
                             parent_pid=os.getpid(), log_format=self._log_format,
                             log_level=self._log_level)
        process = self._ctx.Process(target=host_main, args=(host_spec,), name="pumpd worker host")
        try:
            process.start()
        except OSError as exc:
            ours.close()
            return f"could not be started: {exc}"
        finally:
            theirs.close()  # the child has its own copy
        assert process.pid is not None
        bound_sends(ours)
        host = Host(process, process.pid, ours, now)
        self.hosts.append(host)
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable, host)
        for s, w in group:
            self._adopt(host, s, w)
        names = [f"{s.name}#{w.index}" for s, w in group]
        log.info("started worker host (pid %d) for %d worker(s): %s", host.pid, len(group),
                 ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else ""),
                 extra={"event": "spawn_host", "workers": len(group)})
        for s, w in group:
            if w.restarts:
                log.info("started worker %s#%d in worker host pid %d, restart %d", s.name,
                         w.index, host.pid, w.restarts,
                         extra={"event": "spawn", "shovel": s.name, "worker": w.index,
                                "restarts": w.restarts})
        return None

    def _readable(self, host: Host) -> None:
        """The host's pipe: "ended" reports, or its end of file (the host is gone)."""
        try:
            while host.conn.poll():
                msg = host.conn.recv()
                if msg[0] == "ended":
                    entry = host.positions.get(msg[1])
                    if entry is not None:
                        entry[1].ended = (msg[2], msg[3])
        except (EOFError, OSError):
            self._gone(host)
        self._wake()

    @staticmethod
    def _gone(host: Host) -> None:
        """The host's pipe is closed: stop reading it (the process is reaped when it exits)."""
        if not host.eof:
            host.eof = True
            asyncio.get_running_loop().remove_reader(host.conn.fileno())

    def send(self, host: Host, msg: tuple[object, ...]) -> bool:
        """A control message to ``host``; False when it cannot take one (gone, or stuck: then
        killed, and its positions restart as after a crash)."""
        if host.eof or host.kill_reason is not None:
            return False
        try:
            host.conn.send(msg)
            return True
        except BlockingIOError:  # SO_SNDTIMEO expired: the host has not read its pipe
            reason = f"its control pipe took no message for {SEND_TIMEOUT:g}s"
            log.warning("worker host pid %d: %s; killing it", host.pid, reason,
                        extra={"event": "kill", "reason": reason})
            self.kill(host, reason)
        except OSError:
            self._gone(host)
        return False

    def stop(self, w: Worker) -> None:
        """Ask the host to drain this one position."""
        assert w.host is not None
        self.send(w.host, ("stop", w.slot))  # if it cannot, its exit ends this position

    def reap(self) -> list[tuple[Shovel, Worker, str]]:
        """Positions that ended, with how: reported over a pipe, or their host exited."""
        out: list[tuple[Shovel, Worker, str]] = []
        for host in list(self.hosts):
            if host.process.exitcode is None:
                out.extend((s, w, ended_text(w.ended)) for s, w in host.positions.values()
                           if w.ended is not None)
                continue
            if not host.eof:
                self._readable(host)  # "ended" reports sent just before it exited
            code = host.process.exitcode
            host.process.close()
            self._gone(host)
            host.conn.close()
            self.hosts.remove(host)
            exit_text = describe_exit(code, host.kill_reason)
            if host.positions:
                exit_text += f" (worker host pid {host.pid}, {len(host.positions)} worker(s))"
            out.extend((s, w, exit_text if w.ended is None else ended_text(w.ended))
                       for s, w in host.positions.values())
        return out

    def release_idle(self) -> None:
        """Tell hosts left with no position to exit."""
        for host in self.hosts:
            if not host.positions and not host.exiting and host.process.exitcode is None:
                host.exiting = True
                self.send(host, ("exit",))

    def kill(self, host: Host, reason: str) -> None:
        host.kill_reason = reason
        try:
            os.kill(host.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def kill_all(self) -> None:
        for host in self.hosts:
            if host.process.exitcode is None:
                log.error("worker host pid %d still running at exit: killing it", host.pid)
                self.kill(host, "pumpd exiting")
                host.process.join(5)
