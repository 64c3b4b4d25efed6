"""What happens to a worker position, start to end: started when due, reaped when its process
ends it, killed when it hangs, restarted after a backoff when it crashed, drained and retired
when asked.

The whole path of a crash, in the order the coordinator's loop runs it every tick:

* :meth:`Supervision.reap`: a position whose process exited (or reported its end on its pipe)
  is decided here: retired (pumpd is stopping, or it was asked to stop for good), due again at
  once (a restart was asked for), never started again (terminated by design: reconnect_delay 0
  after a failure, its delete_after limit, an undeliverable policy that stops), or restarted
  after an exponential backoff with jitter (a crash, :func:`backoff`);
* :meth:`Supervision.murder`: the process of a position whose heartbeat stopped (a hung event
  loop), that never reported, or that drains longer than the drain timeout plus
  :data:`DRAIN_GRACE` is killed (SIGKILL); its exit is reaped as a crash. After the coordinator
  itself stood still (:mod:`pumpd.supervisor.standstill`) those silences count only from the
  moment it resumed: its workers stood still with it;
* :meth:`Supervision.spawn_due`: the positions due are placed in worker processes
  (:mod:`pumpd.supervisor.hosting`); one that cannot be is backed off as after a crash.

:meth:`Supervision.stop` drains a position, then restarts or retires it. Each move is one of
:mod:`pumpd.supervisor.lifecycle`'s, the only code that writes a position.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from ..engine.status import State
from . import lifecycle
from .hosting import WorkerProcesses
from .observation import read_slot
from .positions import Position, Shovel
from .slots import ReasonCode, SlotPool, SlotRecord
from .worker import PositionSpec

log = logging.getLogger("pumpd.coordinator")

DRAIN_GRACE = 10.0  # beyond the drain timeout, before a draining worker is killed
STARTUP_TIMEOUT = 30.0  # a spawned worker must write its first heartbeat within this
RESTART_BASE = 0.5  # first restart delay after a crash, doubled per consecutive crash...
RESTART_CAP = 30.0  # ...up to this
STABLE_AFTER = 30.0  # a worker that ran this long before crashing starts the backoff afresh
# the reasons a worker gives for ending by design: it is not started again
BY_DESIGN = (ReasonCode.GAVE_UP, ReasonCode.DELETE_AFTER, ReasonCode.UNDELIVERABLE)


def backoff(rng: random.Random, failures: int) -> float:
    """Exponential, capped, with "equal jitter": half fixed, half random, so that workers
    crashing together (a broker restart) do not come back in lockstep."""
    ceiling = min(RESTART_CAP, RESTART_BASE * 2.0 ** min(failures - 1, 30))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def _positions(shovels: Iterable[Shovel]) -> Iterator[tuple[Shovel, Position]]:
    for s in list(shovels):
        for w in list(s.positions):
            yield s, w


class Supervision:
    """The positions' lives, for the coordinator: see the module docstring."""

    def __init__(self, pool: SlotPool, workers: WorkerProcesses, drain_timeout: float,
                 heartbeat_timeout: float, silent_for: Callable[[float, float], float]) -> None:
        self._pool = pool
        self._workers = workers
        self._drain_timeout = drain_timeout
        self._heartbeat_timeout = heartbeat_timeout
        self._silent_for = silent_for  # seconds silent since then, stand-stills discounted
        self._rng = random.Random()

    # ------------------------------------------------------------------------------ spawn

    def spawn_due(self, shovels: Iterable[Shovel],
                  spec: Callable[[Shovel, Position], PositionSpec], now: float) -> None:
        due = [(s, w) for s, w in _positions(shovels)
               if w.process is None and not w.done and w.start_at is not None
               and w.start_at <= now and not s.removing]
        if not due:
            return
        started, failed = self._workers.place(due, spec, now)
        for _s, w, proc in started:
            lifecycle.started(w, proc, now)
        for (s, w), error in failed:
            self._back_off(s, w, error, ReasonCode.SPAWN_FAILED, now, exited=False)

    # ------------------------------------------------------------------------------- reap

    def reap(self, stopping: bool, now: float) -> None:
        """Decide what follows each position whose process ended it."""
        for s, w, exit_text in self._workers.reap():
            read_slot(self._pool, w)  # the final report
            self._workers.vacate(w)
            self._after_exit(s, w, exit_text, stopping, now)

    def _after_exit(self, s: Shovel, w: Position, exit_text: str, stopping: bool,
                    now: float) -> None:
        rec, pid = w.record, w.pid
        who = f"worker {s.name}#{w.index} (pid {pid})"
        extra: dict[str, Any] = {"shovel": s.name, "worker": w.index, "exit": exit_text}
        if w.then == "retire" or stopping:
            lifecycle.exited_retired(w)
            self._free(s, w)
            c = w.carried
            log.info("%s stopped (%s): consumed %d published %d confirmed %d acked %d", who,
                     exit_text, c.consumed, c.published, c.confirmed, c.acked,
                     extra={**extra, "event": "worker_stopped", "counters": c.as_dict()})
        elif w.then == "restart":
            lifecycle.exited_to_restart(w, exit_text, now)
            log.info("%s stopped for a restart (%s); restart %d", who, exit_text, w.restarts,
                     extra={**extra, "event": "restart", "restarts": w.restarts})
        elif rec.pid == pid and rec.state == State.TERMINATED and rec.reason_code in BY_DESIGN:
            lifecycle.exited_terminated(w, exit_text)
            log.warning("%s terminated by design: %s; not restarted", who, rec.reason,
                        extra={**extra, "event": "terminated", "reason": rec.reason})
        else:
            killed = exit_text.startswith("killed by pumpd")
            code = ReasonCode.HUNG if killed else ReasonCode.CRASHED
            self._back_off(s, w, exit_text, code, now, exited=True)

    def _back_off(self, s: Shovel, w: Position, what: str, code: ReasonCode, now: float,
                  exited: bool) -> None:
        """``w`` crashed (``what`` says how): its next start, and its slot saying so."""
        failures = 1 if w.spawned_at and now - w.spawned_at >= STABLE_AFTER else w.failures + 1
        delay = backoff(self._rng, failures)
        if exited:
            lifecycle.exited_crashed(w, failures, delay, what, now)
        else:
            lifecycle.spawn_failed(w, failures, delay, what, now)
        reason = f"{what}; restarting in {delay:.1f}s"
        self._pool.write(w.slot, SlotRecord(state=State.STARTING, reason_code=code,
                                            reason=reason, since=time.time(), heartbeat=now,
                                            implementation=w.record.implementation))
        read_slot(self._pool, w)
        log.warning("worker %s#%d (pid %d) %s; restart %d in %.1fs", s.name, w.index, w.pid,
                    what, w.restarts, delay,
                    extra={"event": "crash", "shovel": s.name, "worker": w.index, "exit": what,
                           "restarts": w.restarts, "delay": round(delay, 2)})

    # ----------------------------------------------------------------------------- murder

    def murder(self, shovels: Iterable[Shovel], now: float) -> None:
        """Kill the process of every position that is hung, never reported, or drains too
        long."""
        silent_for = self._silent_for
        for s, w in _positions(shovels):
            if w.runner is None or w.runner.kill_reason is not None:
                continue
            reason = None
            if w.stop_sent_at is not None:
                limit = self._drain_timeout + DRAIN_GRACE
                if silent_for(w.stop_sent_at, now) > limit:
                    reason = f"still draining after {limit:g}s"
            elif w.record.pid != w.pid:
                if silent_for(w.spawned_at, now) > STARTUP_TIMEOUT:
                    reason = f"no report within {STARTUP_TIMEOUT:g}s of starting"
            elif silent_for(w.record.heartbeat, now) > self._heartbeat_timeout:
                reason = f"no heartbeat for {now - w.record.heartbeat:.1f}s"
            if reason is not None:
                self._workers.murder(s, w, reason)

    # ------------------------------------------------------------------------ stop, restart

    def stop(self, s: Shovel, w: Position, then: Literal["restart", "retire"],
             now: float) -> None:
        """Ask a position to drain and exit; ``then`` says what follows its exit. One with no
        process is restarted or retired at once."""
        if w.process is None and then == "retire":
            lifecycle.retired(w)
            self._free(s, w)
        elif lifecycle.stop(w, then, now):
            self._workers.stop(w)

    def restart(self, s: Shovel, w: Position, now: float) -> None:
        """A restart asked for: a position terminated by design makes a new attempt."""
        if lifecycle.restart_requested(w, now):
            self._workers.stop(w)

    def _free(self, s: Shovel, w: Position) -> None:
        if w in s.positions:
            s.positions.remove(w)
            self._pool.free(w.slot)
