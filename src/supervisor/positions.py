"""What the coordinator supervises: shovels, their worker positions, and the worker processes
that run them.

A position (:class:`Position`) is one competing consumer of a shovel with its own slot;
successive processes run it. A :class:`WorkerProcess` is the coordinator's record of one worker
process (:mod:`pumpd.supervisor.worker`) of capacity one (``own_process`` shovels, and every position
under ``--shovels-per-process 1``, the default) or K: its pid, its control pipe and the positions
it runs now. A position's ``process`` and ``pid`` are its worker process's, shared with the other
positions that process runs.
"""

from __future__ import annotations

import enum
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Literal, NamedTuple

from ..engine.status import Counters, State
from .definitions import ShovelDefinition
from .report import RATE_FIELDS, RateMeter, ShovelView, WorkerView, add_counters
from .slots import SlotRecord, SlotRef


@dataclass(eq=False)
class WorkerProcess:
    """A worker process as the coordinator sees it, and the positions it runs now."""

    process: BaseProcess
    pid: int
    conn: Connection  # the coordinator's end of the control pipe
    spawned_at: float
    capacity: int  # how many positions it may run at once
    positions: dict[SlotRef, tuple[Shovel, Position]] = field(default_factory=dict)
    kill_reason: str | None = None
    exiting: bool = False  # told to exit (no position left): takes no new one
    eof: bool = False  # the pipe is closed: the process is gone or going

    @property
    def shared(self) -> bool:
        """Whether it may run several positions: what it is called in logs and exit texts."""
        return self.capacity > 1

    def takes(self, now: float, stale: float) -> bool:
        """Whether a new position may start here: room, not going away, and beating (a hung
        process does not read its pipe: a message to it would wait, up to hosting.SEND_TIMEOUT)."""
        return (not self.exiting and not self.eof and self.kill_reason is None
                and len(self.positions) < self.capacity
                and all(now - w.record.heartbeat < stale for _s, w in self.positions.values()
                        if w.live_record()))

    def hosts_shovel(self, name: str) -> bool:
        return any(s.name == name for s, _w in self.positions.values())


_NOTHING_CARRIED = Counters()


class Phase(enum.Enum):
    """Where a position is in its life (:mod:`pumpd.supervisor.lifecycle`: the moves)."""

    DUE = "due"  # waits for start_at: its first start, or a restart asked for
    BACKING_OFF = "backing off"  # crashed or not spawned: waits for start_at, a backoff
    RUNNING = "running"  # a worker process runs it (starting until its first report)
    DRAINING = "draining"  # told to stop; ``then`` says what follows
    TERMINATED = "terminated"  # by design: not started again until restarted or redefined
    RETIRED = "retired"  # gone from its shovel, its slot freed


@dataclass(eq=False)
class Position:
    """One worker position of a shovel: successive processes, one slot.

    Its fields are written only by :mod:`pumpd.supervisor.lifecycle` (its phases and their
    moves); everything else reads them."""

    index: int
    slot: SlotRef
    phase: Phase = Phase.DUE
    pid: int = 0  # of its last process: kept after it exits, for the log lines
    runner: WorkerProcess | None = None  # the worker process running this position, if any
    ended: tuple[int, str | None] | None = None  # its worker process's report that it ended
    start_at: float | None = 0.0  # monotonic time of the next start; None: not scheduled
    spawned_at: float = 0.0
    stop_sent_at: float | None = None
    then: Literal["restart", "retire"] | None = None  # what follows the requested stop
    restarts: int = 0
    failures: int = 0  # consecutive crashes, for the backoff
    last_exit: str | None = None
    carried: Counters = field(default_factory=Counters)  # earlier processes' totals
    meter: RateMeter = field(default_factory=RateMeter)
    sampled_at: float = 0.0
    record: SlotRecord = field(default_factory=SlotRecord)  # the last consistent slot read
    seen_seq: int = -1  # the slot's sequence number when ``record`` was read

    @property
    def process(self) -> BaseProcess | None:
        """The OS process running this position now, if any."""
        return None if self.runner is None else self.runner.process

    @property
    def done(self) -> bool:
        """Terminated by design: not started again until restarted or redefined."""
        return self.phase is Phase.TERMINATED

    def live_record(self) -> bool:
        """Whether the slot holds the running process's own report."""
        return self.process is not None and self.record.pid == self.pid

    @property
    def moving(self) -> bool:
        """Whether a live process of this worker reports running (or blocked): a worker that is
        starting, reconnecting or gone moves nothing, whatever its last counters say."""
        return self.live_record() and self.record.state in (State.RUNNING, State.BLOCKED)

    def counters(self) -> Counters:
        if not self.live_record():
            return self.carried
        if self.carried == _NOTHING_CARRIED:  # the first process: nothing to add (cheaper)
            return self.record.counters
        return add_counters(self.carried, self.record.counters)


@dataclass(eq=False)
class Shovel:
    name: str
    definition: ShovelDefinition
    positions: list[Position] = field(default_factory=list)
    removing: bool = False
    state: State = State.STARTING
    reason: str = ""
    since: float = field(default_factory=time.time)


def shovel_view(s: Shovel, now: float) -> ShovelView:
    """The report's snapshot of a shovel, from the bookkeeping and the last slot reads (for
    ``/api/shovels``, ``/metrics`` and ``pumpd status``)."""
    workers = []
    for w in sorted(s.positions, key=lambda w: w.index):
        live = w.live_record()
        workers.append(WorkerView(
            index=w.index,
            pid=w.pid if w.process is not None else 0,
            alive=w.process is not None,
            stopping=w.stop_sent_at is not None,
            record=w.record,
            restarts=w.restarts,
            last_exit=w.last_exit,
            next_start_in=(max(0.0, w.start_at - now)
                           if w.process is None and w.start_at is not None else None),
            heartbeat_age=now - w.record.heartbeat if live else None,
            counters=w.counters(),
            # A rate is over the last few seconds; a worker that stopped moving moves
            # nothing now, so it shows 0 rather than a trailing average.
            rates=w.meter.rates() if w.moving else {f: 0.0 for f in RATE_FIELDS},
            moving=w.moving,
        ))
    return ShovelView(name=s.name, cfg=s.definition.cfg, origin=s.definition.origin,
                      removing=s.removing, state=s.state, reason=s.reason, since=s.since,
                      workers=workers)


def missing_positions(s: Shovel, n: int) -> list[int]:
    """The positions a shovel of ``n`` workers lacks now (each will need a slot)."""
    have = {w.index for w in s.positions if w.index < n}
    return [i for i in range(n) if i not in have]


class ReloadPlan(NamedTuple):
    """What a reload does to the running shovels, decided before anything is done."""

    removed: list[Shovel]
    added: list[str]
    changed: list[Shovel]
    unchanged: list[Shovel]
    slots: int  # new positions: of the added shovels, and beyond a changed one's present ones


def reload_plan(shovels: Mapping[str, Shovel],
                file_defs: Mapping[str, ShovelDefinition]) -> ReloadPlan:
    removed = [s for s in shovels.values() if s.definition.origin == "config"
               and not s.removing and s.name not in file_defs]
    plan = ReloadPlan(removed, [], [], [], 0)
    slots = 0
    for name, definition in file_defs.items():
        existing = shovels.get(name)
        if existing is None:
            plan.added.append(name)
            slots += definition.cfg.workers
        elif existing.removing or existing.definition.cfg != definition.cfg:
            plan.changed.append(existing)
            slots += len(missing_positions(existing, definition.cfg.workers))
        else:
            plan.unchanged.append(existing)
    return plan._replace(slots=slots)


def describe_exit(code: int, kill_reason: str | None) -> str:
    if kill_reason is not None:
        return f"killed by pumpd: {kill_reason}"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "?"
        return f"killed by signal {-code} ({name})"
    return f"exited with status {code}"
