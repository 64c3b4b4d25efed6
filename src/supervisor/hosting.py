"""The coordinator's worker processes: which process runs which position, the control pipes,
and what became of the positions of a process that exited.

Every position runs in a worker process (:mod:`pumpd.supervisor.worker`) of capacity one (an
``own_process`` shovel's, or any under ``--shovels-per-process 1``) or K. Placement: a due
position goes into a running process of its capacity with room that runs no other position of
the same shovel (competing consumers of one shovel spread over processes, so a crash takes only
one of them); the positions left over are grouped, in order, into new processes of up to their
capacity, again one position of a shovel per process. A process left with no position is told to
exit, so the process count follows the configuration after a reload or run-time deletions (and
a position of capacity one restarts in a fresh process, as it always has).

The coordinator's event loop reads each process's pipe (``loop.add_reader``): "ended" reports
are noted on the position and acted on by the coordinator's next pass; end of file means the
process is gone, and SIGCHLD (or the next tick) reaps it.
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
from multiprocessing.process import BaseProcess

from . import lifecycle
from .positions import Position, Shovel, WorkerProcess, describe_exit
from .slots import SlotPool, SlotRecord
from .worker import HEARTBEAT_INTERVAL, PositionSpec, ProcessSpec
from .worker import main as worker_main

log = logging.getLogger("pumpd.coordinator")

Placed = tuple[Shovel, Position]
Started = tuple[Shovel, Position, "WorkerProcess"]
STALE = 3 * HEARTBEAT_INTERVAL  # a process silent this long gets no new position
# A control message waits at most this long for room in a process's pipe. A live process reads
# its pipe at once and the pipe holds hundreds of kilobytes, so a full one means a stuck event
# loop: the process is killed (its positions restart) rather than the coordinator blocking with
# it.
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


def _label(proc: WorkerProcess) -> str:
    return "worker host" if proc.shared else "worker"


class WorkerProcesses:
    def __init__(self, ctx: SpawnContext, pool: SlotPool, shovels_per_process: int,
                 log_format: str, log_level: str, wake: Callable[[], None]) -> None:
        self._ctx = ctx
        self._pool = pool
        self.shovels_per_process = shovels_per_process
        self._log_format = log_format
        self._log_level = log_level
        self._wake = wake
        self.processes: list[WorkerProcess] = []

    def capacity_for(self, s: Shovel) -> int:
        """How many positions share the process of one of ``s``'s positions."""
        return 1 if s.definition.cfg.own_process else self.shovels_per_process

    def place(self, due: list[Placed], spec: Callable[[Shovel, Position], PositionSpec],
              now: float) -> tuple[list[Started], list[tuple[Placed, str]]]:
        """Start ``due`` positions in worker processes; returns those started, each with its
        process, and those that could not be (with why)."""
        started: list[Started] = []
        failed: list[tuple[Placed, str]] = []
        groups: list[tuple[int, list[Placed]]] = []
        for s, w in due:
            k = self.capacity_for(s)
            proc = next((p for p in self.processes if p.capacity == k
                         and p.takes(now, STALE) and not p.hosts_shovel(s.name)), None)
            if proc is not None and self._start_in(proc, s, w, spec(s, w), now):
                started.append((s, w, proc))
                continue
            group = next((g for gk, g in groups if gk == k and len(g) < k
                          and all(gs.name != s.name for gs, _gw in g)), None)
            if group is None:
                groups.append((k, [(s, w)]))
            else:
                group.append((s, w))
        for k, group in groups:
            spawned = self._spawn(k, group, spec, now)
            if isinstance(spawned, WorkerProcess):
                started.extend((s, w, spawned) for s, w in group)
            else:
                failed.extend((p, spawned) for p in group)
        return started, failed

    def _fresh_slot(self, w: Position, now: float) -> None:
        # A fresh record for the new process: no counters (they are carried), a heartbeat now.
        self._pool.write(w.slot, SlotRecord(since=time.time(), heartbeat=now))

    def _start_in(self, proc: WorkerProcess, s: Shovel, w: Position, ps: PositionSpec,
                  now: float) -> bool:
        """Start one position in a running process; False when its pipe is gone."""
        self._fresh_slot(w, now)
        if not self.send(proc, ("start", ps)):
            return False
        self._adopt(proc, s, w)
        log.info("started worker %s#%d in worker host pid %d%s", s.name, w.index, proc.pid,
                 f", restart {w.restarts}" if w.restarts else "",
                 extra={"event": "spawn", "shovel": s.name, "worker": w.index,
                        "restarts": w.restarts})
        return True

    @staticmethod
    def _adopt(proc: WorkerProcess, s: Shovel, w: Position) -> None:
        proc.positions[w.slot] = (s, w)

    @staticmethod
    def vacate(w: Position) -> None:
        """``w``'s process runs it no more: its end was reaped."""
        if w.runner is not None:
            w.runner.positions.pop(w.slot, None)

    def _spawn(self, capacity: int, group: list[Placed],
               spec: Callable[[Shovel, Position], PositionSpec],
               now: float) -> WorkerProcess | str:
        """A new worker process of ``capacity`` for ``group``, or why it did not start."""
        for _s, w in group:
            self._fresh_slot(w, now)
        ours, theirs = self._ctx.Pipe()
        process_spec = ProcessSpec(conn=theirs, capacity=capacity,
                                   positions=tuple(spec(s, w) for s, w in group),
                                   parent_pid=os.getpid(), log_format=self._log_format,
                                   log_level=self._log_level)
        name = "pumpd worker host" if capacity > 1 or not group else \
            f"pumpd {group[0][0].name}#{group[0][1].index}"
        process = self._ctx.Process(target=worker_main, args=(process_spec,), name=name)
        try:
            process.start()
        except OSError as exc:
            ours.close()
            return f"could not be started: {exc}"
        finally:
            theirs.close()  # the child has its own copy
        assert process.pid is not None
        bound_sends(ours)
        proc = WorkerProcess(process, process.pid, ours, now, capacity)
        self.processes.append(proc)
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable, proc)
        for s, w in group:
            self._adopt(proc, s, w)
        self._log_spawn(proc, group)
        return proc

    @staticmethod
    def _log_spawn(proc: WorkerProcess, group: list[Placed]) -> None:
        if not proc.shared:
            for s, w in group:
                log.info("started worker %s#%d (pid %d)%s", s.name, w.index, proc.pid,
                         f", restart {w.restarts}" if w.restarts else "",
                         extra={"event": "spawn", "shovel": s.name, "worker": w.index,
                                "restarts": w.restarts})
            return
        names = [f"{s.name}#{w.index}" for s, w in group]
        log.info("started worker host (pid %d) for %d worker(s): %s", proc.pid, len(group),
                 ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else ""),
                 extra={"event": "spawn_host", "workers": len(group)})
        for s, w in group:
            if w.restarts:
                log.info("started worker %s#%d in worker host pid %d, restart %d", s.name,
                         w.index, proc.pid, w.restarts,
                         extra={"event": "spawn", "shovel": s.name, "worker": w.index,
                                "restarts": w.restarts})

    def _readable(self, proc: WorkerProcess) -> None:
        """The process's pipe: "ended" reports, or its end of file (the process is gone)."""
        try:
            while proc.conn.poll():
                msg = proc.conn.recv()
                if msg[0] == "ended":
                    entry = proc.positions.get(msg[1])
                    if entry is not None:
                        lifecycle.noted_end(entry[1], msg[2], msg[3])
        except (EOFError, OSError):
            self._gone(proc)
        self._wake()

    @staticmethod
    def _gone(proc: WorkerProcess) -> None:
        """The pipe is closed: stop reading it (the process is reaped when it exits)."""
        if not proc.eof:
            proc.eof = True
            asyncio.get_running_loop().remove_reader(proc.conn.fileno())

    def send(self, proc: WorkerProcess, msg: tuple[object, ...]) -> bool:
        """A control message to ``proc``; False when it cannot take one (gone, or stuck: then
        killed, and its positions restart as after a crash)."""
        if proc.eof or proc.kill_reason is not None:
            return False
        try:
            proc.conn.send(msg)
            return True
        except BlockingIOError:  # SO_SNDTIMEO expired: the process has not read its pipe
            reason = f"its control pipe took no message for {SEND_TIMEOUT:g}s"
            log.warning("%s pid %d: %s; killing it", _label(proc), proc.pid, reason,
                        extra={"event": "kill", "reason": reason})
            self.kill(proc, reason)
        except OSError:
            self._gone(proc)
        return False

    def stop(self, w: Position) -> None:
        """Ask the worker process to drain this one position."""
        assert w.runner is not None
        self.send(w.runner, ("stop", w.slot))  # if it cannot, its exit ends this position

    def reap(self) -> list[tuple[Shovel, Position, str]]:
        """Positions that ended, with how: reported over a pipe, or their process exited."""
        out: list[tuple[Shovel, Position, str]] = []
        for proc in list(self.processes):
            if proc.process.exitcode is None:
                out.extend((s, w, ended_text(w.ended)) for s, w in proc.positions.values()
                           if w.ended is not None)
                continue
            if not proc.eof:
                self._readable(proc)  # "ended" reports sent just before it exited
            code = proc.process.exitcode
            proc.process.close()
            self._gone(proc)
            proc.conn.close()
            self.processes.remove(proc)
            exit_text = describe_exit(code, proc.kill_reason)
            if proc.positions and proc.shared:
                exit_text += f" (worker host pid {proc.pid}, {len(proc.positions)} worker(s))"
            out.extend((s, w, exit_text if w.ended is None else ended_text(w.ended))
                       for s, w in proc.positions.values())
        return out

    def release_idle(self) -> None:
        """Tell processes left with no position to exit."""
        for proc in self.processes:
            if not proc.positions and not proc.exiting and proc.process.exitcode is None:
                proc.exiting = True
                self.send(proc, ("exit",))

    def murder(self, s: Shovel, w: Position, reason: str) -> None:
        """Kill the process of a position that is hung or overdue: one event loop runs every
        position of the process, so it cannot be killed alone."""
        proc = w.runner
        assert proc is not None
        extra = {"event": "kill", "shovel": s.name, "worker": w.index, "reason": reason}
        if proc.shared:
            log.warning("worker host (pid %d, %d worker(s)): worker %s#%d: %s; killing it",
                        proc.pid, len(proc.positions), s.name, w.index, reason, extra=extra)
            self.kill(proc, f"worker {s.name}#{w.index}: {reason}")
        else:
            log.warning("worker %s#%d (pid %d): %s; killing it", s.name, w.index, proc.pid,
                        reason, extra=extra)
            self.kill(proc, reason)

    def kill(self, proc: WorkerProcess, reason: str) -> None:
        proc.kill_reason = reason
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already gone: reaped on the next pass

    def terminate_all(self) -> list[BaseProcess]:
        """SIGTERM every live worker process (each drains all it runs); the processes."""
        live = [proc.process for proc in self.processes if proc.process.exitcode is None]
        for proc in self.processes:
            if proc.process.exitcode is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        return live

    def drain_all(self, limit: float) -> None:
        """Every worker process drains as on SIGTERM (publishes what it holds, waits for its
        confirms, acks); one still running after ``limit`` seconds is left to :meth:`kill_all`.
        Blocking: the coordinator's last resort, when its loop is not to be trusted any more."""
        processes = self.terminate_all()
        deadline = time.monotonic() + limit
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        log.info("%d of %d worker process(es) drained", sum(p.exitcode is not None
                                                           for p in processes), len(processes))

    def kill_all(self) -> None:
        for proc in self.processes:
            if proc.process.exitcode is None:
                log.error("%s pid %d still running at exit: killing it", _label(proc), proc.pid)
                self.kill(proc, "pumpd exiting")
                proc.process.join(5)
