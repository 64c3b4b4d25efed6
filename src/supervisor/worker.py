"""A worker process: up to ``capacity`` worker positions, each one :class:`~pumpd.engine.pump.Pump`, on one uvloop event loop.

There is one process model. A position of an ``own_process`` shovel, or any position under
``--shovels-per-process 1`` (the default), runs in a worker process of capacity one; with
``--shovels-per-process K`` the others share processes of capacity K. The coordinator starts
:func:`main` in a fresh interpreter (multiprocessing's "spawn" context) with a picklable
:class:`ProcessSpec`. As gunicorn's one ``Worker`` base, :class:`Worker` has ``init_process``
(signals, logging, the event loop), ``run`` and ``notify`` (the heartbeat), and one handler
method per signal and per control message.

Each position writes every state change, a counter snapshot (the pump sends one every 0.25 s)
and a heartbeat into its own shared-memory slot, never anything per message. One heartbeat timer
beats every slot of the process and notices an orphan (the coordinator's pid gone): then every
position drains and the process exits, so a coordinator killed with SIGKILL leaves nothing
running unsupervised.

The coordinator controls positions one by one through a duplex pipe, which the worker reads with
``loop.add_reader`` (no thread, no polling timer):

* coordinator -> worker: ``("start", PositionSpec)``, ``("stop", SlotRef)`` (drain that position
  only: stop consuming, publish what it holds, wait up to the drain timeout for its confirms, ack
  them and close), ``("pause", SlotRef)`` / ``("resume", SlotRef)`` (that position's pump
  drains as for a stop but stays, paused, holding no connection, until resumed),
  ``("exit",)`` (the coordinator has no position left for this process),
  ``("gate", {SlotRef: (take, release)})`` (in a group with a coordination broker: the group's
  answers for those positions' :class:`SteeredGate`, sent when they change);
* worker -> coordinator: ``("ended", SlotRef, exit_status, error)`` when a position's pump has
  returned (``error`` is the text of an unexpected exception, None otherwise). The exit status
  is :data:`pumpd.exitcodes.OK` after a requested stop or a delete_after limit,
  :data:`pumpd.exitcodes.FAILURE` when the shovel gave up (reconnect_delay 0); the coordinator
  decides what follows from the slot (state and reason code), the status only confirms it.

A pipe rather than signals: a signal cannot say which position, and a pipe's end-of-file tells
each side at once that the other is gone. SIGTERM/SIGINT drain every position and exit (the
coordinator's last resort); SIGHUP is ignored (reloading is the coordinator's business; a
terminal hang-up reaches the whole process group).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from .. import exitcodes
from ..config.model import ShovelConfig
from ..engine.lease import LeaseSpec
from ..engine.status import Counters, State
from .process_log import HOSTED
from .slots import (
    HEARTBEAT,
    HEARTBEAT_AT,
    ReasonCode,
    SlotRecord,
    SlotRef,
    SlotTable,
    SlotWriter,
    classify_reason,
)

if TYPE_CHECKING:  # the engine's pump is imported in the worker process only, when it starts
    from ..engine.pump import Pump

log = logging.getLogger("pumpd.worker")

HEARTBEAT_INTERVAL = 1.0  # seconds; the coordinator's timeout is several times this


@dataclass(frozen=True)
class PositionSpec:
    """Everything one position needs, pickled across the spawn or the control pipe."""

    shovel: ShovelConfig
    index: int  # this position's number within its shovel, 0..workers-1
    slot: SlotRef
    drain_timeout: float
    lease: LeaseSpec | None = None  # a position of a group (--cluster): run while holding it
    paused: bool = False  # its shovel is paused: start without connecting, until resumed
    # Steered by the group's answers over the pipe (supervisor/membership.py); before the first one
    # the position tries its lease only after this many seconds. None: the lease alone decides.
    steered_grace: float | None = None
    member: str | None = None  # in a group: this daemon's member id, in connection names

    @property
    def client_name(self) -> str:
        """Its connections' name: ``pumpd NAME#I``, and in a group ``... member ID``."""
        return f"pumpd {self.tag}" + (f" member {self.member}" if self.member else "")

    @property
    def tag(self) -> str:
        return f"{self.shovel.name}#{self.index}"


@dataclass(frozen=True)
class ProcessSpec:
    """Everything a worker process needs, pickled across the spawn (the pipe end included)."""

    conn: Connection
    capacity: int  # 1: the process is named after its one position (logs, ``ps``)
    positions: tuple[PositionSpec, ...]  # started at once; later ones come through the pipe
    parent_pid: int
    log_format: str = "text"
    log_level: str = "info"
    heartbeat_interval: float = HEARTBEAT_INTERVAL


class SlotSink:
    """A :class:`~pumpd.engine.status.StatusSink` that keeps the latest report and writes it whole into
    the slot on every change, with a fresh heartbeat."""

    def __init__(self, writer: SlotWriter, implementation: str) -> None:
        self._writer = writer
        self.record = SlotRecord(
            pid=os.getpid(),
            state=State.STARTING,
            since=time.time(),
            heartbeat=time.monotonic(),
            started=time.time(),
            implementation=implementation,
        )
        self._publish()

    def _publish(self, **changes: Any) -> None:
        self.record = dataclasses.replace(self.record, heartbeat=time.monotonic(), **changes)
        self._body = bytearray(self.record.pack())
        self._writer.write_body(self._body)

    def state_changed(self, state: State, reason: str | None, at: float) -> None:
        self._publish(state=state, reason=reason or "", since=at,
                      reason_code=classify_reason(state, reason))

    def counters_changed(self, counters: Counters) -> None:
        self._publish(counters=counters)

    def beat(self) -> None:
        """The last record again with a fresh heartbeat: only those 8 bytes are packed anew
        (a process beats for every position it runs each second). ``record.heartbeat`` is not
        updated: nothing in the worker reads it."""
        HEARTBEAT.pack_into(self._body, HEARTBEAT_AT, time.monotonic())
        self._writer.write_body(self._body)


class SteeredGate:
    """A :class:`~pumpd.engine.lease.LeaseGate` that answers what the coordinator last said
    (``("gate", ...)`` messages). Before its first answer it behaves as for a position this
    member is not preferred for: it tries the lease only once ``grace`` seconds have passed, so
    a position never waits on a coordinator that cannot say (the lease still fences)."""

    def __init__(self, grace: float) -> None:
        self._take_at = time.monotonic() + grace
        self._answer: tuple[bool, bool] | None = None

    def answer(self, take: bool, release: bool) -> None:
        self._answer = (take, release)

    def take_now(self) -> bool:
        if self._answer is None:
            return time.monotonic() >= self._take_at
        return self._answer[0]

    def release_now(self) -> bool:
        return self._answer is not None and self._answer[1]


def make_pump(spec: PositionSpec, sink: SlotSink, gate: SteeredGate | None = None) -> Pump:
    from ..engine.pump import Pump

    return Pump(spec.shovel, sink, drain_timeout=spec.drain_timeout,
                client_name=spec.client_name, lease=spec.lease, gate=gate, paused=spec.paused,
                index=spec.index)


async def run_pump(spec: PositionSpec, sink: SlotSink, pump: Pump, stop: asyncio.Event) -> int:
    """Run one position's pump until ``stop`` or its end by design; its exit status."""
    await pump.run(stop)
    c = sink.record.counters
    log.info(
        "worker exiting (%s): consumed %d published %d confirmed %d acked %d nacked %d",
        pump.terminated_reason, c.consumed, c.published, c.confirmed, c.acked, c.nacked,
        extra={"event": "worker_exit", "shovel": spec.shovel.name, "worker": spec.index,
               "reason": pump.terminated_reason, "counters": c.as_dict()},
    )
    if sink.record.reason_code in (ReasonCode.GAVE_UP, ReasonCode.UNDELIVERABLE):
        return exitcodes.FAILURE
    return exitcodes.OK


@dataclass(eq=False)
class RunningPosition:
    spec: PositionSpec
    sink: SlotSink
    pump: Pump
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[int] | None = None
    gate: SteeredGate | None = None


class Worker:
    """The body of a worker process (see the module docstring)."""

    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        self.implementation = ""  # the data plane's, named in every slot: set by init_process
        self.conn = spec.conn
        self.positions: dict[SlotRef, RunningPosition] = {}
        self._tables: dict[str, SlotTable] = {}
        self._writers: dict[SlotRef, SlotWriter] = {}
        self._exit = False  # the coordinator said so, or a signal, or the coordinator is gone
        self._done = asyncio.Event()
        self._control: dict[str, Callable[..., None]] = {
            "start": self.handle_start, "stop": self.handle_stop, "exit": self.handle_exit,
            "pause": self.handle_pause, "resume": self.handle_resume,
            "gate": self.handle_gate}

    # ------------------------------------------------------------------ the process's life

    def init_process(self) -> None:
        """Signals, logging and the event loop; runs until every position has ended and the
        process is told to exit (or orphaned); then exits 0."""
        spec = self.spec
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        # Until the event loop takes over, SIGINT/SIGTERM simply end the process: nothing is held.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        from . import process_log as daemon_log

        if spec.capacity == 1 and spec.positions:
            only = spec.positions[0]
            daemon_log.configure(spec.log_format, spec.log_level, shovel=only.shovel.name,
                                 worker=only.index)
        else:
            daemon_log.configure(spec.log_format, spec.log_level, host=True)
        import uvloop

        from ..dataplane.implementation import IMPLEMENTATION

        self.implementation = IMPLEMENTATION
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(self.run())
        finally:
            self.close()
        sys.exit(exitcodes.OK)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.handle_term, signal.Signals(sig).name)
        loop.add_reader(self.conn.fileno(), self.handle_control)
        for ps in self.spec.positions:
            self.handle_start(ps)
        beats = asyncio.create_task(self.heartbeat())
        try:
            await self._done.wait()
        finally:
            beats.cancel()
            loop.remove_reader(self.conn.fileno())

    def notify(self) -> None:
        """One heartbeat for every slot of the process: proves the event loop is alive."""
        for running in list(self.positions.values()):
            running.sink.beat()

    async def heartbeat(self) -> None:
        """The one timer: :meth:`notify`, and an orphan's drain."""
        while True:
            await asyncio.sleep(self.spec.heartbeat_interval)
            self.notify()
            if os.getppid() != self.spec.parent_pid and not self._exit:
                log.warning("the coordinator (pid %d) is gone: draining and exiting",
                            self.spec.parent_pid)
                self.stop_all("orphaned")

    def close(self) -> None:
        self._writers.clear()
        for table in self._tables.values():
            table.close()

    # ------------------------------------------------------------- signals and control pipe

    def handle_term(self, signame: str) -> None:
        """SIGTERM / SIGINT: every position drains, then the process exits."""
        self.stop_all(signame)

    def handle_control(self) -> None:
        """The control pipe is readable: its messages, or its end (the coordinator is gone)."""
        try:
            while self.conn.poll():
                msg = self.conn.recv()
                handler = self._control.get(msg[0])
                if handler is not None:
                    handler(*msg[1:])
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
            self.stop_all(f"the coordinator (pid {self.spec.parent_pid}) is gone")

    def handle_start(self, ps: PositionSpec) -> None:
        if self._exit:
            self._report(("ended", ps.slot, 0, "the worker process is stopping"))
            return
        sink = SlotSink(self._writer(ps.slot), self.implementation)
        gate = SteeredGate(ps.steered_grace) \
            if ps.lease is not None and ps.steered_grace is not None else None
        running = RunningPosition(ps, sink, make_pump(ps, sink, gate), gate=gate)
        self.positions[ps.slot] = running
        context = contextvars.copy_context()  # its log lines name its shovel (supervisor/process_log.py)
        context.run(HOSTED.set, (ps.shovel.name, ps.index))
        running.task = asyncio.create_task(run_pump(ps, sink, running.pump, running.stop),
                                           name=f"pumpd {ps.tag}", context=context)
        running.task.add_done_callback(lambda t: self._ended(running, t))

    def handle_stop(self, slot: SlotRef) -> None:
        running = self.positions.get(slot)
        if running is not None:
            running.stop.set()

    def handle_pause(self, slot: SlotRef) -> None:
        """Drain that position's session and wait paused (nothing for a position gone)."""
        running = self.positions.get(slot)
        if running is not None:
            running.pump.pause()

    def handle_resume(self, slot: SlotRef) -> None:
        running = self.positions.get(slot)
        if running is not None:
            running.pump.resume()

    def handle_gate(self, answers: dict[SlotRef, tuple[bool, bool]]) -> None:
        """The group's answers (take, release) for some of this process's positions."""
        for slot, (take, release) in answers.items():
            running = self.positions.get(slot)
            if running is not None and running.gate is not None:
                running.gate.answer(take, release)

    def handle_exit(self) -> None:
        self.stop_all("the coordinator has no more work for this process")

    # ---------------------------------------------------------------------------- internals

    def _writer(self, ref: SlotRef) -> SlotWriter:
        writer = self._writers.get(ref)
        if writer is None:
            table = self._tables.get(ref.block)
            if table is None:
                table = self._tables[ref.block] = SlotTable.attach(ref.block)
            writer = self._writers[ref] = table.writer(ref.index)
        return writer

    def _ended(self, running: RunningPosition, task: asyncio.Task[int]) -> None:
        self.positions.pop(running.spec.slot, None)
        error: str | None = None
        code = exitcodes.FAILURE
        if task.cancelled():
            error = "cancelled"
        elif (exc := task.exception()) is not None:
            error = f"{type(exc).__name__}: {exc}"
            log.error("worker %s failed: %s", running.spec.tag, error, exc_info=exc,
                      extra={"shovel": running.spec.shovel.name, "worker": running.spec.index})
        else:
            code = task.result()
        self._report(("ended", running.spec.slot, code, error))
        self._check_done()

    def _report(self, msg: tuple[Any, ...]) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            pass  # the coordinator is gone: the orphan check drains the rest

    def stop_all(self, why: str) -> None:
        if not self._exit and self.positions:
            log.info("%s: draining %d worker(s)", why, len(self.positions))
        self._exit = True
        for running in self.positions.values():
            running.stop.set()
        self._check_done()

    def _check_done(self) -> None:
        if self._exit and not self.positions:
            self._done.set()


def main(spec: ProcessSpec) -> None:
    """The process entry point (``multiprocessing`` target)."""
    Worker(spec).init_process()
