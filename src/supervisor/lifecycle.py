"""A worker position's lifecycle: its phases, the moves allowed between them, and the only code
that writes a :class:`~pumpd.supervisor.positions.Position`'s fields.

Every move, and what makes it::

    DUE, BACKING_OFF          -- started in a worker process   --> RUNNING
    DUE, BACKING_OFF          -- could not be spawned          --> BACKING_OFF
    RUNNING                   -- told to stop                  --> DRAINING
    DRAINING                  -- told again (then may change)  --> DRAINING
    RUNNING                   -- exited: crashed or killed     --> BACKING_OFF
    RUNNING                   -- exited: terminated by design  --> TERMINATED
    DRAINING                  -- exited, then restart          --> DUE
    RUNNING, DRAINING         -- exited, then retire or pumpd stopping --> RETIRED
    DUE, BACKING_OFF, TERMINATED -- told to stop, then restart --> DUE
    DUE, BACKING_OFF, TERMINATED -- told to stop, then retire  --> RETIRED

The phases are :class:`~pumpd.supervisor.positions.Phase`'s. ``TERMINATED`` is by design:
reconnect_delay 0 after a failure, the delete_after limit, or an undeliverable policy that stops.

A position without a process (``DUE``, ``BACKING_OFF``, ``TERMINATED``) is restarted or retired at
once when asked to stop. When each move happens is decided by
:mod:`pumpd.supervisor.supervision`; a move not in :data:`MOVES` is a bug and raises
:class:`IllegalTransition`.
"""

from __future__ import annotations

from typing import Literal

from .positions import Phase, Position, WorkerProcess
from .report import carry
from .slots import SlotRecord, SlotRef

# Every move allowed, from each phase.
MOVES: dict[Phase, frozenset[Phase]] = {
    # started; could not be spawned (a backoff); a restart asked for; stopped for good
    Phase.DUE: frozenset({Phase.RUNNING, Phase.BACKING_OFF, Phase.DUE, Phase.RETIRED}),
    Phase.BACKING_OFF: frozenset({Phase.RUNNING, Phase.BACKING_OFF, Phase.DUE, Phase.RETIRED}),
    # told to stop; crashed; terminated by design; exited while pumpd stops
    Phase.RUNNING: frozenset({Phase.DRAINING, Phase.BACKING_OFF, Phase.TERMINATED,
                              Phase.RETIRED}),
    # told again (what follows may change); exited, then restarted or retired
    Phase.DRAINING: frozenset({Phase.DRAINING, Phase.DUE, Phase.RETIRED}),
    Phase.TERMINATED: frozenset({Phase.DUE, Phase.RETIRED}),
    Phase.RETIRED: frozenset(),
}
WITHOUT_PROCESS = frozenset({Phase.DUE, Phase.BACKING_OFF, Phase.TERMINATED})
WITH_PROCESS = frozenset({Phase.RUNNING, Phase.DRAINING})


class IllegalTransition(AssertionError):
    """A move the lifecycle does not allow: a bug in the supervisor."""


def _move(w: Position, to: Phase) -> None:
    if to not in MOVES[w.phase]:
        raise IllegalTransition(f"position {w.index} (slot {w.slot}): {w.phase.value} -> "
                                f"{to.value}")
    w.phase = to


def _require(w: Position, phases: frozenset[Phase], what: str) -> None:
    if w.phase not in phases:
        raise IllegalTransition(f"position {w.index} (slot {w.slot}): {what} while "
                                f"{w.phase.value}")


# ------------------------------------------------------------------------------------ moves
# Each checks its move before it writes anything: an illegal one leaves the position as it was.

def new_position(index: int, slot: SlotRef, now: float) -> Position:
    """A position due now: a new shovel's, or one a changed definition adds."""
    return Position(index, slot, start_at=now)


def started(w: Position, proc: WorkerProcess, now: float) -> None:
    """DUE or BACKING_OFF -> RUNNING: ``proc`` runs it now, from a fresh slot record."""
    _move(w, Phase.RUNNING)
    w.runner, w.pid = proc, proc.pid
    w.spawned_at = now
    w.start_at, w.stop_sent_at, w.then, w.ended = None, None, None, None
    w.record, w.seen_seq = SlotRecord(), -1


def spawn_failed(w: Position, failures: int, delay: float, what: str, now: float) -> None:
    """DUE or BACKING_OFF -> BACKING_OFF: its process could not be started."""
    _require(w, frozenset({Phase.DUE, Phase.BACKING_OFF}), "a failed spawn")
    _move(w, Phase.BACKING_OFF)
    _back_off(w, failures, delay, what, now)


def stop(w: Position, then: Literal["restart", "retire"], now: float) -> bool:
    """Asked to stop, ``then`` restarted or retired. RUNNING -> DRAINING (True: the caller tells
    its process); DRAINING stays so, ``then`` replacing what was asked before (False). Without a
    process, a restart makes it DUE now with its backoff forgotten (False); retiring one without
    a process is :func:`retired`."""
    if then == "retire":
        _require(w, WITH_PROCESS, "stop then retire")
    elif w.phase not in WITH_PROCESS:
        _move(w, Phase.DUE)
        w.then, w.failures, w.start_at = None, 0, now
        return False
    first = w.phase is Phase.RUNNING
    _move(w, Phase.DRAINING)
    w.then = then
    if first:
        w.stop_sent_at = now
    return first


def restart_requested(w: Position, now: float) -> bool:
    """A restart asked for (``POST .../restart``): as :func:`stop` then restart; a position
    terminated by design counts it as a restart, since it is a new attempt."""
    if w.phase is not Phase.TERMINATED:
        return stop(w, "restart", now)
    last_exit = w.last_exit
    stop(w, "restart", now)
    w.restarts += 1
    w.last_exit = f"restarted on request ({last_exit})"
    return False


def retired(w: Position) -> None:
    """DUE, BACKING_OFF or TERMINATED -> RETIRED: its shovel no longer has it (the caller frees
    its slot)."""
    _require(w, WITHOUT_PROCESS, "retired")
    _move(w, Phase.RETIRED)
    w.start_at = None


def noted_end(w: Position, code: int, failure: str | None) -> None:
    """Its worker process reported over the pipe that it ended (acted on when reaped)."""
    _require(w, WITH_PROCESS, "an end reported")
    w.ended = (code, failure)


def exited_to_restart(w: Position, exit_text: str, now: float) -> None:
    """DRAINING -> DUE now: stopped for a restart."""
    _require(w, WITH_PROCESS, "an exit")
    _move(w, Phase.DUE)
    _exited(w)
    w.then, w.failures, w.start_at = None, 0, now
    w.restarts += 1
    w.last_exit = f"restarted on request ({exit_text})"


def exited_terminated(w: Position, exit_text: str) -> None:
    """RUNNING -> TERMINATED: it ended by design."""
    _require(w, WITH_PROCESS, "an exit")
    _move(w, Phase.TERMINATED)
    _exited(w)
    w.start_at, w.last_exit = None, exit_text


def exited_crashed(w: Position, failures: int, delay: float, what: str, now: float) -> None:
    """RUNNING -> BACKING_OFF: it crashed or was killed (``what`` says how)."""
    _require(w, WITH_PROCESS, "an exit")
    _move(w, Phase.BACKING_OFF)
    _exited(w)
    _back_off(w, failures, delay, what, now)


def exited_retired(w: Position) -> None:
    """RUNNING or DRAINING -> RETIRED: it exited and is not to run again."""
    _require(w, WITH_PROCESS, "an exit")
    _move(w, Phase.RETIRED)
    _exited(w)


def _exited(w: Position) -> None:
    """Its process ended it: fold the final report's totals in (its gauges, in flight and
    buffered, end with it) and forget the process (its pid stays, for the log lines)."""
    if w.live_record():
        w.carried = carry(w.carried, w.record.counters)
    w.runner, w.ended, w.stop_sent_at = None, None, None


def _back_off(w: Position, failures: int, delay: float, what: str, now: float) -> None:
    """It starts again after ``delay``, its ``failures``-th crash in a row."""
    w.failures = failures
    w.restarts += 1
    w.start_at, w.last_exit = now + delay, what


# -------------------------------------------------------- observations (any phase, not moves)

def observed(w: Position, record: SlotRecord, seq: int) -> None:
    """The slot's latest consistent report, and its sequence number when read."""
    w.record, w.seen_seq = record, seq


def sampled(w: Position, now: float) -> None:
    """Its counters sampled now into its rate meter."""
    w.sampled_at = now
    w.meter.sample(w.counters(), now)
