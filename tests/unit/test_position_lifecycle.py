"""A position's lifecycle (pumpd.supervisor.lifecycle), without a broker or a worker: every legal
move, the fields each phase implies, illegal moves refused, and no other module writing a
position."""

from __future__ import annotations

import ast
import dataclasses
import multiprocessing
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pumpd.engine.status import Counters
from pumpd.supervisor import lifecycle
from pumpd.supervisor.lifecycle import MOVES, IllegalTransition
from pumpd.supervisor.positions import Phase, Position, WorkerProcess
from pumpd.supervisor.slots import SlotRecord, SlotRef

SRC = Path(lifecycle.__file__).resolve().parent.parent  # the package: src/
NOW = 1000.0


@pytest.fixture
def proc() -> Iterator[WorkerProcess]:
    """A worker process record (never started: the lifecycle only keeps it)."""
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process()
    try:
        yield WorkerProcess(process, 4242, ours, NOW, 1)
    finally:
        ours.close()
        theirs.close()


def check_fields(w: Position) -> None:
    """What each phase implies of the other fields."""
    has_process = w.phase in (Phase.RUNNING, Phase.DRAINING)
    assert (w.process is not None) == has_process, w
    assert (w.runner is not None) == has_process, w
    assert (w.start_at is not None) == (w.phase in (Phase.DUE, Phase.BACKING_OFF)), w
    assert (w.stop_sent_at is not None) == (w.phase is Phase.DRAINING), w
    if w.phase is not Phase.RETIRED:  # a retired position keeps what it was last asked
        assert (w.then is not None) == (w.phase is Phase.DRAINING), w
    assert w.done == (w.phase is Phase.TERMINATED), w


def fresh() -> Position:
    w = lifecycle.new_position(0, SlotRef("block", 3), NOW)
    assert w.phase is Phase.DUE and w.start_at == NOW
    check_fields(w)
    return w


def fields_of(w: Position) -> list[object]:
    return [getattr(w, f.name) for f in dataclasses.fields(w)]


def report(w: Position, counters: Counters) -> None:
    """The running process's own report in its slot."""
    lifecycle.observed(w, SlotRecord(pid=w.pid, counters=counters), w.seen_seq + 1)


# Each move, one lifecycle call as the supervisor makes it.
Step = Callable[[Position, WorkerProcess], object]
STEPS: dict[str, Step] = {
    "start": lambda w, p: lifecycle.started(w, p, NOW),
    "spawn fails": lambda w, p: lifecycle.spawn_failed(w, w.failures + 1, 0.5, "no fork", NOW),
    "stop, then restart": lambda w, p: lifecycle.stop(w, "restart", NOW),
    "stop, then retire": lambda w, p: lifecycle.stop(w, "retire", NOW),
    "retire": lambda w, p: lifecycle.retired(w),
    "crash": lambda w, p: lifecycle.exited_crashed(w, w.failures + 1, 0.5, "exited 1", NOW),
    "terminate by design": lambda w, p: lifecycle.exited_terminated(w, "exited 0"),
    "exit, then restart": lambda w, p: lifecycle.exited_to_restart(w, "exited 0", NOW),
    "exit, then retire": lambda w, p: lifecycle.exited_retired(w),
}
# How to reach each phase from a fresh position.
ROUTES: dict[Phase, tuple[str, ...]] = {
    Phase.DUE: (),
    Phase.BACKING_OFF: ("spawn fails",),
    Phase.RUNNING: ("start",),
    Phase.DRAINING: ("start", "stop, then retire"),
    Phase.TERMINATED: ("start", "terminate by design"),
    Phase.RETIRED: ("retire",),
}
# Every legal move: (from, step, to).
LEGAL = [
    (Phase.DUE, "start", Phase.RUNNING),
    (Phase.BACKING_OFF, "start", Phase.RUNNING),
    (Phase.DUE, "spawn fails", Phase.BACKING_OFF),
    (Phase.BACKING_OFF, "spawn fails", Phase.BACKING_OFF),
    (Phase.DUE, "stop, then restart", Phase.DUE),
    (Phase.BACKING_OFF, "stop, then restart", Phase.DUE),
    (Phase.TERMINATED, "stop, then restart", Phase.DUE),
    (Phase.RUNNING, "stop, then restart", Phase.DRAINING),
    (Phase.DRAINING, "stop, then restart", Phase.DRAINING),
    (Phase.RUNNING, "stop, then retire", Phase.DRAINING),
    (Phase.DRAINING, "stop, then retire", Phase.DRAINING),
    (Phase.DUE, "retire", Phase.RETIRED),
    (Phase.BACKING_OFF, "retire", Phase.RETIRED),
    (Phase.TERMINATED, "retire", Phase.RETIRED),
    (Phase.RUNNING, "crash", Phase.BACKING_OFF),
    (Phase.RUNNING, "terminate by design", Phase.TERMINATED),
    (Phase.RUNNING, "exit, then retire", Phase.RETIRED),
    (Phase.DRAINING, "exit, then restart", Phase.DUE),
    (Phase.DRAINING, "exit, then retire", Phase.RETIRED),
]


def reach(phase: Phase, p: WorkerProcess) -> Position:
    w = fresh()
    for step in ROUTES[phase]:
        STEPS[step](w, p)
        check_fields(w)
    assert w.phase is phase
    return w


def test_every_move_in_the_table_is_tested() -> None:
    assert {(a, b) for a, _s, b in LEGAL} == {(a, b) for a, bs in MOVES.items() for b in bs}


@pytest.mark.parametrize(("start", "step", "end"), LEGAL,
                         ids=[f"{a.name}-{s}-{b.name}" for a, s, b in LEGAL])
def test_a_legal_move(proc: WorkerProcess, start: Phase, step: str, end: Phase) -> None:
    w = reach(start, proc)
    STEPS[step](w, proc)
    assert w.phase is end
    check_fields(w)


ILLEGAL = [(a, s) for a in Phase for s in STEPS
           if not any(a is la and s == ls for la, ls, _b in LEGAL)]


@pytest.mark.parametrize(("start", "step"), ILLEGAL,
                         ids=[f"{a.name}-{s}" for a, s in ILLEGAL])
def test_an_illegal_move_raises_and_changes_nothing_else(proc: WorkerProcess, start: Phase,
                                                         step: str) -> None:
    w = reach(start, proc)
    before = fields_of(w)
    with pytest.raises(IllegalTransition):
        STEPS[step](w, proc)
    assert fields_of(w) == before


def test_an_end_is_noted_only_while_a_process_runs_the_position(proc: WorkerProcess) -> None:
    w = reach(Phase.DRAINING, proc)
    lifecycle.noted_end(w, 0, None)
    assert w.ended == (0, None)
    for phase in (Phase.DUE, Phase.BACKING_OFF, Phase.TERMINATED, Phase.RETIRED):
        with pytest.raises(IllegalTransition):
            lifecycle.noted_end(reach(phase, proc), 1, "gone")


def test_a_crash_and_its_restart(proc: WorkerProcess) -> None:
    """Crash: the final totals are carried, the backoff is scheduled and counted; the next
    start begins from a fresh record and forgets the process's end."""
    w = reach(Phase.RUNNING, proc)
    report(w, Counters(consumed=5, published=5))
    lifecycle.noted_end(w, 1, "boom")
    lifecycle.exited_crashed(w, 1, 0.75, "failed: boom", NOW + 1)
    assert (w.phase, w.start_at, w.restarts, w.failures) == (Phase.BACKING_OFF, NOW + 1.75, 1, 1)
    assert (w.last_exit, w.pid, w.ended) == ("failed: boom", 4242, None)
    assert w.carried.consumed == 5 and w.counters().consumed == 5
    lifecycle.started(w, proc, NOW + 2)
    assert (w.spawned_at, w.record, w.seen_seq, w.failures) == (NOW + 2, SlotRecord(), -1, 1)
    assert w.counters().consumed == 5  # carried while the new process has not reported


def test_a_drained_restart_resets_the_backoff(proc: WorkerProcess) -> None:
    w = reach(Phase.RUNNING, proc)
    lifecycle.exited_crashed(w, 3, 2.0, "exited 1", NOW)
    lifecycle.started(w, proc, NOW)
    assert lifecycle.stop(w, "restart", NOW + 1)
    assert (w.then, w.stop_sent_at) == ("restart", NOW + 1)
    assert not lifecycle.stop(w, "retire", NOW + 2)  # told once; what follows may change
    assert (w.then, w.stop_sent_at) == ("retire", NOW + 1)
    assert not lifecycle.stop(w, "restart", NOW + 3)
    lifecycle.exited_to_restart(w, "exited with status 0", NOW + 4)
    assert (w.phase, w.start_at, w.failures, w.restarts) == (Phase.DUE, NOW + 4, 0, 2)
    assert w.last_exit == "restarted on request (exited with status 0)"


def test_a_restart_of_a_position_terminated_by_design_counts_as_one(proc: WorkerProcess) -> None:
    w = reach(Phase.TERMINATED, proc)
    assert (w.restarts, w.last_exit, w.start_at) == (0, "exited 0", None)
    lifecycle.restart_requested(w, NOW + 5)
    assert (w.phase, w.restarts, w.start_at) == (Phase.DUE, 1, NOW + 5)
    assert w.last_exit == "restarted on request (exited 0)"
    lifecycle.restart_requested(w, NOW + 6)  # a due position is not counted again
    assert (w.restarts, w.start_at) == (1, NOW + 6)


# ---------------------------------------------------------------- the only writer of a position

POSITION_FIELDS = {f.name for f in dataclasses.fields(Position)}


def position_writes(path: Path) -> list[str]:
    """Assignments to an attribute named as a Position field, on anything but ``self``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        while targets:
            t = targets.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                targets.extend(t.elts)
            elif (isinstance(t, ast.Attribute) and t.attr in POSITION_FIELDS
                  and not (isinstance(t.value, ast.Name) and t.value.id == "self")):
                found.append(f"{path.relative_to(SRC)}:{t.lineno}: .{t.attr}")
    return found


def test_only_the_lifecycle_writes_a_position() -> None:
    files = [*SRC.joinpath("supervisor").rglob("*.py"), *SRC.joinpath("http").rglob("*.py")]
    writes = [hit for path in sorted(files) if path.name != "lifecycle.py"
              for hit in position_writes(path)]
    assert writes == []
    assert position_writes(SRC / "supervisor" / "lifecycle.py")  # the check sees writes
