"""A worker process: one :class:`~pumpd.engine.pump.Pump` on uvloop, reporting into its shared-memory slot.

The coordinator starts :func:`main` in a fresh interpreter (multiprocessing's "spawn" context)
with a picklable :class:`WorkerSpec`. The worker:

* attaches to the coordinator's slot block and writes every state change, a counter snapshot
  (the pump sends one every 0.25 s) and a heartbeat (every ``heartbeat_interval``) into its own
  slot, never anything per message;
* on SIGTERM or SIGINT stops consuming, publishes what it holds, waits up to the drain timeout for
  outstanding confirms, acks them and closes (the pump's drain), then exits;
* ignores SIGHUP (reloading is the coordinator's business; a terminal hang-up reaches the whole
  process group);
* stops the same way if the coordinator disappears (its parent pid changes), so a coordinator
  killed with SIGKILL does not leave workers running unsupervised.

Exit status: :data:`pumpd.exitcodes.OK` after a requested stop or a delete_after limit,
:data:`pumpd.exitcodes.FAILURE` when the shovel gave up (reconnect_delay 0). The coordinator
decides what to do from the slot (state and reason code), the exit status only confirms it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from .. import exitcodes
from ..config.model import ShovelConfig
from ..engine.lease import LeaseSpec
from ..engine.status import Counters, State
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

log = logging.getLogger("pumpd.worker")

HEARTBEAT_INTERVAL = 1.0  # seconds; the coordinator's timeout is several times this


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs, pickled across the spawn."""

    shovel: ShovelConfig
    index: int  # this worker's number within its shovel, 0..workers-1
    slot: SlotRef
    drain_timeout: float
    parent_pid: int
    log_format: str = "text"
    log_level: str = "info"
    heartbeat_interval: float = HEARTBEAT_INTERVAL
    lease: LeaseSpec | None = None  # a position of a group (--cluster): run while holding it

    @property
    def tag(self) -> str:
        return f"{self.shovel.name}#{self.index}"


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
        (a host beats for every shovel it runs each second). ``record.heartbeat`` is not
        updated: nothing in the worker reads it."""
        HEARTBEAT.pack_into(self._body, HEARTBEAT_AT, time.monotonic())
        self._writer.write_body(self._body)


async def _heartbeat(sink: SlotSink, spec: WorkerSpec, stop: asyncio.Event) -> None:
    """Proves the event loop is alive; also notices an orphaned worker."""
    while True:
        await asyncio.sleep(spec.heartbeat_interval)
        sink.beat()
        if os.getppid() != spec.parent_pid and not stop.is_set():
            log.warning("the coordinator (pid %d) is gone: draining and exiting", spec.parent_pid)
            stop.set()


async def run_pump(spec: WorkerSpec, sink: SlotSink, stop: asyncio.Event) -> int:
    """Run one position's pump until ``stop`` or its end by design; its exit status."""
    from ..engine.pump import Pump

    pump = Pump(spec.shovel, sink, drain_timeout=spec.drain_timeout,
                client_name=f"pumpd {spec.tag}", lease=spec.lease)
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


async def _run(spec: WorkerSpec, sink: SlotSink) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # only record the request: the pump drains and returns
        loop.add_signal_handler(sig, stop.set)
    beats = asyncio.create_task(_heartbeat(sink, spec, stop))
    try:
        return await run_pump(spec, sink, stop)
    finally:
        beats.cancel()


def main(spec: WorkerSpec) -> None:
    """The process entry point (``multiprocessing`` target). Exits with the worker's status."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # Until the event loop takes over, SIGINT/SIGTERM simply end the process: nothing is held.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from . import log as daemon_log

    daemon_log.configure(spec.log_format, spec.log_level, shovel=spec.shovel.name,
                         worker=spec.index)
    import uvloop

    from ..dataplane.implementation import IMPLEMENTATION

    table = SlotTable.attach(spec.slot.block)
    try:
        sink = SlotSink(table.writer(spec.slot.index), IMPLEMENTATION)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            code = runner.run(_run(spec, sink))
    finally:
        table.close()
    sys.exit(code)
