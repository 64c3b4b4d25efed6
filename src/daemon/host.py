"""A worker host: one process running several worker positions (``--shovels-per-process K``).

Each hosted position is what a worker process is alone (:mod:`pumpd.daemon.worker`): its own
:class:`~pumpd.engine.pump.Pump`, connections, relay, counters, state and slot. They share one
uvloop event loop, one heartbeat timer (it writes every hosted slot) and one orphan check.

The coordinator controls positions one by one through a duplex pipe, which the host reads with
``loop.add_reader`` (no thread, no polling timer):

* coordinator -> host: ``("start", WorkerSpec)``, ``("stop", SlotRef)`` (drain that position
  only), ``("exit",)`` (the coordinator has no position left for this host);
* host -> coordinator: ``("ended", SlotRef, exit_status, error)`` when a position's pump has
  returned (``error`` is the text of an unexpected exception, None otherwise).

A pipe rather than signals: a signal cannot say which position, and a pipe's end-of-file tells
each side at once that the other is gone. SIGTERM/SIGINT drain every hosted position and exit;
SIGHUP is ignored. A host whose coordinator disappears drains everything and exits.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from .log import HOSTED
from .slots import SlotRef, SlotTable, SlotWriter
from .worker import HEARTBEAT_INTERVAL, SlotSink, WorkerSpec, run_pump

log = logging.getLogger("pumpd.worker")


@dataclass(frozen=True)
class HostSpec:
    """Everything a host process needs, pickled across the spawn (the pipe end included)."""

    conn: Connection
    positions: tuple[WorkerSpec, ...]  # started at once; later ones come through the pipe
    parent_pid: int
    log_format: str = "text"
    log_level: str = "info"
    heartbeat_interval: float = HEARTBEAT_INTERVAL


@dataclass(eq=False)
class _Hosted:
    spec: WorkerSpec
    sink: SlotSink
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[int] | None = None


class Host:
    def __init__(self, spec: HostSpec, implementation: str) -> None:
        self.spec = spec
        self.implementation = implementation
        self.conn = spec.conn
        self.positions: dict[SlotRef, _Hosted] = {}
        self._tables: dict[str, SlotTable] = {}
        self._writers: dict[SlotRef, SlotWriter] = {}
        self._exit = False  # the coordinator said so, or a signal, or the coordinator is gone
        self._done = asyncio.Event()

    def _writer(self, ref: SlotRef) -> SlotWriter:
        writer = self._writers.get(ref)
        if writer is None:
            table = self._tables.get(ref.block)
            if table is None:
                table = self._tables[ref.block] = SlotTable.attach(ref.block)
            writer = self._writers[ref] = table.writer(ref.index)
        return writer

    def start(self, ws: WorkerSpec) -> None:
        if self._exit:
            self._send(("ended", ws.slot, 0, "the host is stopping"))
            return
        hosted = _Hosted(ws, SlotSink(self._writer(ws.slot), self.implementation))
        self.positions[ws.slot] = hosted
        context = contextvars.copy_context()  # its log lines name its shovel (daemon.log)
        context.run(HOSTED.set, (ws.shovel.name, ws.index))
        hosted.task = asyncio.create_task(run_pump(ws, hosted.sink, hosted.stop),
                                          name=f"pumpd {ws.tag}", context=context)
        hosted.task.add_done_callback(lambda t: self._ended(hosted, t))

    def _ended(self, hosted: _Hosted, task: asyncio.Task[int]) -> None:
        self.positions.pop(hosted.spec.slot, None)
        error: str | None = None
        code = 1
        if task.cancelled():
            error = "cancelled"
        elif (exc := task.exception()) is not None:
            error = f"{type(exc).__name__}: {exc}"
            log.error("worker %s failed: %s", hosted.spec.tag, error, exc_info=exc,
                      extra={"shovel": hosted.spec.shovel.name, "worker": hosted.spec.index})
        else:
            code = task.result()
        self._send(("ended", hosted.spec.slot, code, error))
        self._check_done()

    def _send(self, msg: tuple[Any, ...]) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            pass  # the coordinator is gone: the orphan check drains the rest

    def stop_all(self, why: str) -> None:
        if not self._exit:
            log.info("%s: draining %d hosted worker(s)", why, len(self.positions))
        self._exit = True
        for hosted in self.positions.values():
            hosted.stop.set()
        self._check_done()

    def _check_done(self) -> None:
        if self._exit and not self.positions:
            self._done.set()

    def on_readable(self) -> None:
        try:
            while self.conn.poll():
                msg = self.conn.recv()
                if msg[0] == "start":
                    self.start(msg[1])
                elif msg[0] == "stop":
                    hosted = self.positions.get(msg[1])
                    if hosted is not None:
                        hosted.stop.set()
                elif msg[0] == "exit":
                    self.stop_all("the coordinator has no more work for this host")
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
            self.stop_all(f"the coordinator (pid {self.spec.parent_pid}) is gone")

    async def heartbeat(self) -> None:
        """One timer for every hosted slot: proves the loop is alive; notices an orphan."""
        while True:
            await asyncio.sleep(self.spec.heartbeat_interval)
            for hosted in list(self.positions.values()):
                hosted.sink.beat()
            if os.getppid() != self.spec.parent_pid and not self._exit:
                log.warning("the coordinator (pid %d) is gone: draining and exiting",
                            self.spec.parent_pid)
                self.stop_all("orphaned")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop_all, signal.Signals(sig).name)
        loop.add_reader(self.conn.fileno(), self.on_readable)
        for ws in self.spec.positions:
            self.start(ws)
        beats = asyncio.create_task(self.heartbeat())
        try:
            await self._done.wait()
        finally:
            beats.cancel()
            loop.remove_reader(self.conn.fileno())

    def close(self) -> None:
        self._writers.clear()
        for table in self._tables.values():
            table.close()


def main(spec: HostSpec) -> None:
    """The host process's entry point (``multiprocessing`` target)."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from . import log as daemon_log

    daemon_log.configure(spec.log_format, spec.log_level, host=True)
    import uvloop

    from ..dataplane.implementation import IMPLEMENTATION

    host = Host(spec, IMPLEMENTATION)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(host.run())
    finally:
        host.close()
    sys.exit(0)
