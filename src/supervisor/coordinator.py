"""The coordinator: the shovels' worker positions, supervised from their shared-memory slots.

Every position runs in a worker process (:mod:`pumpd.supervisor.worker`) of capacity one, or K
with ``--shovels-per-process K`` (:mod:`pumpd.supervisor.hosting` places them). One model for both: a
position starts and stops through its process's control pipe, its end is reported there (or is
its process's exit), and a hung process is killed with every position it runs.

Modelled on gunicorn's arbiter. Signal handlers only record the signal and wake the main loop;
the loop hands each recorded signal to its own method (``handle_term``, ``handle_int``,
``handle_hup``) and does everything else in plain verbs, every tick (and at once on SIGCHLD or a
report on a pipe):

* ``reap``, ``murder``, ``spawn``: a position's whole life, from a crash to its restart
  (:mod:`pumpd.supervisor.supervision`; workers start in multiprocessing's "spawn" context, never
  fork: a fresh interpreter, no inherited threads or locks);
* ``observe``: read every slot, sample the rates, log each shovel's state changes.

SIGTERM / SIGINT: every worker is told to drain, the loop waits for them (killing those
that outlive the drain timeout + grace), and the coordinator exits 0. SIGHUP: the configuration
file is read again; shovels whose definition changed restart, new ones start, removed ones stop,
the rest are not touched; an invalid file is refused and the running set kept.

The HTTP endpoint (:mod:`pumpd.http.server`) runs on the same event loop; its methods
(:mod:`pumpd.http.handlers`) call the coordinator's verbs (add, replace, remove,
restart_worker). In a group with a coordination broker, :mod:`pumpd.supervisor.membership` (its
group on a thread of its own) steers the worker processes every tick: which positions to try,
which to hand over.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from .. import exitcodes
from ..config.model import ClusterConfig
from ..config.parse import ConfigError
from ..version import __version__
from . import definitions, lifecycle, membership
from .definitions import ShovelDefinition
from .hosting import WorkerProcesses
from .membership import Membership
from .observation import observe
from .pauses import Pauses
from .positions import Position, Shovel, missing_positions, reload_plan
from .service import ServiceState
from .slots import SlotPool, SlotRef, SlotsUnavailable
from .standstill import StandStill, stood_still_after
from .supervision import DRAIN_GRACE, Supervision
from .worker import PositionSpec

log = logging.getLogger("pumpd.coordinator")

TICK = 0.25  # seconds between passes of the main loop when nothing wakes it earlier


class ControlEndpoint(Protocol):
    """The daemon's control endpoint (its HTTP API), run on the coordinator's event loop: built
    by whoever starts the daemon, so that supervision knows nothing of HTTP."""

    tls: bool  # whether it serves https

    async def start(self) -> tuple[str, int]:
        """Listen; the address listened on. Raises OSError when it cannot."""

    async def close(self) -> None:
        """Stop listening and withdraw whatever announced the endpoint."""

    def describe(self) -> str:
        """Where it listens, for the start-up line (e.g. its URL and token file)."""


@dataclass(frozen=True)
class DaemonOptions:
    config_path: str
    state_path: str
    default_workers: int | None  # --workers; None: one per shovel unless its clause says more
    drain_timeout: float = 30.0
    heartbeat_timeout: float = 10.0
    # the control endpoint for this coordinator (None: --http off)
    endpoint: Callable[[Coordinator], ControlEndpoint] | None = None
    log_format: str = "text"
    log_level: str = "info"
    shovels_per_process: int = 1  # K > 1: worker processes of up to K positions
    tls_dirs: tuple[str, ...] = ()  # --tls-dir: where a PUT's TLS files may be (resolved)
    protected_files: tuple[str, ...] = ()  # the daemon's own: never a PUT's TLS file
    cluster: ClusterConfig | None = None  # --cluster / "cluster": every position needs its lease


class Coordinator:
    """See the module docstring. :meth:`run` blocks until the daemon has stopped."""

    def __init__(self, opts: DaemonOptions, shovels: Mapping[str, ShovelDefinition]) -> None:
        self.opts = opts
        self.pool = SlotPool()
        self.shovels: dict[str, Shovel] = {}
        self._initial = dict(shovels)
        self._ctx = multiprocessing.get_context("spawn")
        self._workers = WorkerProcesses(self._ctx, self.pool, opts.shovels_per_process,
                                        opts.log_format, opts.log_level, self.wake_loop)
        self._signals: deque[int] = deque()
        self._wake: asyncio.Event | None = None
        self.stopping = False
        self.started = time.time()
        self.http_address: tuple[str, int] | None = None
        self.service = ServiceState()  # systemd's Type=notify: readiness, reload, stop
        self.pauses = Pauses(opts.state_path, self._workers, self.runtime_definitions)
        self.membership: Membership | None = None  # a group's, with a coordination broker
        # the loop's own passes: a stand-still of the coordinator is not its workers' silence
        self._standstill = StandStill(stood_still_after(TICK, opts.heartbeat_timeout))
        self._supervision = Supervision(self.pool, self._workers, opts.drain_timeout,
                                        opts.heartbeat_timeout, self._standstill.silent_for)

    # ---------------------------------------------------------------------------- main loop

    def run(self) -> int:
        return asyncio.run(self._main())

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        endpoint = None if self.opts.endpoint is None else self.opts.endpoint(self)
        if endpoint is not None:
            try:
                self.http_address = await endpoint.start()
            except OSError:
                return exitcodes.CANNOT_LISTEN  # the endpoint said why
        self.membership = membership.join(self.opts, self.http_address,
                                          endpoint is not None and endpoint.tls,
                                          self.pauses, lambda: self.shovels)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self._record_signal, sig)
        loop.add_signal_handler(signal.SIGCHLD, self._wake.set)  # reap without waiting a tick
        now = time.monotonic()
        try:
            try:
                for name, definition in self._initial.items():
                    self.add(name, definition, now)
            except SlotsUnavailable as exc:
                log.error("cannot start: %s", exc, extra={"event": "start_failed"})
                return exitcodes.UNAVAILABLE
            where = endpoint.describe() if endpoint is not None else "off"
            k = self.opts.shovels_per_process
            log.info("pumpd %s coordinator (pid %d): %d shovel(s), %d worker(s)%s; status "
                     "endpoint %s", __version__, os.getpid(), len(self.shovels),
                     sum(len(s.positions) for s in self.shovels.values()),
                     f", up to {k} per process" if k > 1 else "", where,
                     extra={"event": "start"})
            await self._loop()
        except Exception:  # the last resort: a bug; the workers still hold messages
            log.critical("unexpected error in the coordinator: draining every worker (up to "
                         "%gs), then exiting", self.opts.drain_timeout + DRAIN_GRACE,
                         exc_info=True, extra={"event": "coordinator_failed"})
            self.service.stopping(self._live_positions())
            self._workers.drain_all(self.opts.drain_timeout + DRAIN_GRACE)
            return exitcodes.FAILURE
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
                loop.remove_signal_handler(sig)
            if endpoint is not None and self.http_address is not None:
                await endpoint.close()
            if self.membership is not None:
                await self.membership.close()
            self.service.close()
            self._workers.kill_all()  # only what outlived its drain: a clean stop has no worker left
            self.pool.close()
        log.info("pumpd stopped", extra={"event": "stop"})
        return exitcodes.OK

    async def _loop(self) -> None:
        assert self._wake is not None
        self._standstill.passed(time.monotonic())  # the start-up before the loop is no stand-still
        while True:
            self._wake.clear()
            self._handle_signals()
            now = time.monotonic()
            self._check_standstill(now)
            self._reap(now)
            if self.stopping and not any(s.positions for s in self.shovels.values()) \
                    and not self._workers.processes:
                return
            self._murder(now)
            self._spawn_due(now)
            self._observe(now)
            if self.membership is not None:
                self.membership.steer(now, self.shovels.values(), self._workers.send)
            self.service.observe(self.shovels.values())
            try:
                await asyncio.wait_for(self._wake.wait(), TICK)
            except asyncio.TimeoutError:
                pass

    def _record_signal(self, sig: int) -> None:
        """The signal handler: record, wake the loop, nothing else."""
        self._signals.append(sig)
        assert self._wake is not None
        self._wake.set()

    def _handle_signals(self) -> None:
        handlers = {signal.SIGHUP: self.handle_hup, signal.SIGTERM: self.handle_term,
                    signal.SIGINT: self.handle_int}
        while self._signals:
            sig = self._signals.popleft()
            handlers[signal.Signals(sig)]()

    def handle_hup(self) -> None:
        """SIGHUP: reload the configuration file (refused, and nothing touched, if invalid)."""
        if self.stopping:
            log.info("SIGHUP ignored: stopping")
            return
        log.info("SIGHUP: reloading %s", self.opts.config_path, extra={"event": "reload"})
        self.service.reloading()
        self._reload(time.monotonic())
        self.service.reloaded()

    def handle_term(self, name: str = "SIGTERM") -> None:
        """SIGTERM: every position drains; the loop ends when none is left."""
        if self.stopping:
            log.info("%s: already draining", name)
            return
        n = self._live_positions()
        log.info("%s: draining %d worker(s) (drain timeout %gs), then exiting", name, n,
                 self.opts.drain_timeout, extra={"event": "shutdown"})
        self.stopping = True
        self.service.stopping(n)
        now = time.monotonic()
        for s, w in self._all_workers():
            self.stop_worker(s, w, "retire", now)

    def handle_int(self) -> None:
        """SIGINT (Ctrl-C in a terminal): as SIGTERM."""
        self.handle_term("SIGINT")

    def _all_workers(self) -> Iterator[tuple[Shovel, Position]]:
        for s in list(self.shovels.values()):
            for w in list(s.positions):
                yield s, w

    def _live_positions(self) -> int:
        return sum(1 for _s, w in self._all_workers() if w.process is not None)

    # ------------------------------------------------------------------------------- verbs

    def _spawn_due(self, now: float) -> None:
        if not self.stopping:
            self._supervision.spawn_due(self.shovels.values(), self._position_spec, now)

    def _position_spec(self, s: Shovel, w: Position) -> PositionSpec:
        return membership.position_spec(self.opts, s, w, steered=self.membership is not None,
                                         paused=s.name in self.pauses)

    def _reap(self, now: float) -> None:
        self._supervision.reap(self.stopping, now)
        self._workers.release_idle()
        for s in list(self.shovels.values()):
            if s.removing and not s.positions:
                del self.shovels[s.name]
                log.info("shovel %s: removed", s.name, extra={"event": "removed", "shovel": s.name})

    def _check_standstill(self, now: float) -> None:
        """Whether the coordinator stood still since its last pass; if it did, say so once:
        its workers' silences count from now (:mod:`pumpd.supervisor.standstill`)."""
        gap = self._standstill.passed(now)
        if gap is None:
            return
        log.warning("the coordinator stood still for %.1fs; giving workers %gs to beat again "
                    "before judging them", gap, self.opts.heartbeat_timeout,
                    extra={"event": "stood_still"})

    def _murder(self, now: float) -> None:
        self._supervision.murder(self.shovels.values(), now)

    def stop_worker(self, s: Shovel, w: Position, then: Literal["restart", "retire"],
                    now: float) -> None:
        """Ask a worker to drain and exit; ``then`` says what follows its exit."""
        self._supervision.stop(s, w, then, now)

    def restart_worker(self, s: Shovel, w: Position, now: float) -> None:
        """A restart asked for (``POST .../restart``): drain, then start again; a position
        terminated by design makes a new attempt."""
        self._supervision.restart(s, w, now)

    def process_count(self) -> tuple[int, int]:
        """Live worker positions, and the worker processes running them."""
        return self._live_positions(), len(self._workers.processes)

    def block_names(self) -> list[str]:
        return self.pool.block_names

    # ------------------------------------------------------------------------ observation

    def _observe(self, now: float) -> None:
        observe(self.pool, self.shovels.values(), now)

    # ------------------------------------------------------------- shovels: add, change, remove

    def add(self, name: str, definition: ShovelDefinition, now: float,
            slots: list[SlotRef] | None = None) -> Shovel:
        """A new shovel, its workers due now; its slots from ``slots`` or allocated here.

        :raises SlotsUnavailable: when its slots cannot be had; then nothing has changed.
        """
        n = definition.cfg.workers
        if slots is None:
            slots = self.pool.reserve(n)
        s = Shovel(name, definition)
        self.shovels[name] = s
        for i in range(n):
            s.positions.append(lifecycle.new_position(i, slots.pop(), now))
        return s

    def replace(self, s: Shovel, definition: ShovelDefinition, now: float,
                slots: list[SlotRef] | None = None) -> None:
        """A new definition for a shovel: every worker restarts with it (each starts again only
        after its predecessor has exited, so a single-worker shovel keeps its order).

        :raises SlotsUnavailable: when the slots of added workers cannot be had; then nothing
            has changed.
        """
        n = definition.cfg.workers
        missing = missing_positions(s, n)
        if slots is None:
            slots = self.pool.reserve(len(missing))
        s.definition, s.removing = definition, False
        for w in list(s.positions):
            if w.index < n:
                self.stop_worker(s, w, "restart", now)
            else:
                self.stop_worker(s, w, "retire", now)
        for i in missing:
            s.positions.append(lifecycle.new_position(i, slots.pop(), now))
        s.positions.sort(key=lambda w: w.index)

    def remove(self, s: Shovel, now: float) -> None:
        s.removing = True
        self.pauses.forget(s.name)
        for w in list(s.positions):
            self.stop_worker(s, w, "retire", now)

    def _reload(self, now: float) -> None:
        """Read and validate the file once, reserve the slots it needs, and only then apply it:
        any failure before that point leaves every running shovel untouched."""
        try:
            file_defs = definitions.load_file(self.opts.config_path, self.opts.default_workers)
            definitions.merge(file_defs, self.runtime_definitions(), self.opts.state_path)
            plan = reload_plan(self.shovels, file_defs)
            slots = self.pool.reserve(plan.slots)
        except Exception as exc:  # whatever it is (RecursionError, MemoryError, ...): refused
            reason = (str(exc) if isinstance(exc, ConfigError)
                      else f"{self.opts.config_path}: {exc}" if isinstance(exc, SlotsUnavailable)
                      else f"{self.opts.config_path}: {type(exc).__name__}: {exc}")
            log.error("reload refused, the running configuration is kept: %s", reason,
                      extra={"event": "reload_failed"})
            return
        for s in plan.removed:
            self.remove(s, now)
        for name in plan.added:
            self.add(name, file_defs[name], now, slots)
        for s in plan.changed:
            self.replace(s, file_defs[s.name], now, slots)
        for s in plan.unchanged:
            s.definition = file_defs[s.name]
        names = {"added": plan.added, "changed": [s.name for s in plan.changed],
                 "removed": [s.name for s in plan.removed],
                 "unchanged": [s.name for s in plan.unchanged]}
        log.info("reload: %d added, %d changed (restarting), %d removed, %d unchanged",
                 len(plan.added), len(plan.changed), len(plan.removed), len(plan.unchanged),
                 extra={"event": "reloaded", **names})

    def runtime_definitions(self) -> dict[str, ShovelDefinition]:
        return {s.name: s.definition for s in self.shovels.values()
                if s.definition.origin == "runtime" and not s.removing}

    def wake_loop(self) -> None:
        if self._wake is not None:
            self._wake.set()
