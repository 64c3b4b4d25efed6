"""The coordinator: one worker process per shovel (or N), supervised from their shared-memory slots.

Modelled on gunicorn's arbiter. Signal handlers only record the signal and wake the main loop;
the loop does everything, in plain verbs, every tick (and at once on SIGCHLD):

* ``reap``: collect workers that exited and decide what follows: nothing (pumpd is stopping, or
  the worker was retired), a start right away (a restart was asked for), nothing ever (the shovel
  terminated by design: reconnect_delay 0 after a failure, or its delete_after limit), or a
  restart after an exponential backoff with jitter (a crash);
* ``murder``: SIGKILL a worker whose heartbeat stopped (a hung event loop), one that never
  started, and one that drains longer than the drain timeout plus a grace period;
* ``spawn``: start the workers that are due, in multiprocessing's "spawn" context (never fork:
  a fresh interpreter, no inherited threads or locks);
* ``observe``: read every slot, sample the rates, log each shovel's state changes.

SIGTERM / SIGINT: every worker is told to drain (SIGTERM), the loop waits for them (killing those
that outlive the drain timeout + grace), and the coordinator exits 0. SIGHUP: the configuration
file is read again; shovels whose definition changed restart, new ones start, removed ones stop,
the rest are not touched; an invalid file is refused and the running set kept.

The HTTP endpoint (:mod:`pumpd.daemon.http_api`) runs on the same event loop and calls the methods of
:class:`Coordinator` that implement :class:`~pumpd.daemon.http_api.Api`.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import random
import signal
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, Literal

import orjson

from .. import exitcodes
from ..config.parse import ConfigError
from ..engine.status import Counters, State
from ..version import __version__
from . import definitions as daemon_config
from . import statefile
from .definitions import ShovelDefinition
from .http_api import HttpServer, Reply, error
from .report import (
    RATE_FIELDS,
    RateMeter,
    ShovelView,
    WorkerView,
    add_counters,
    carry,
    metrics_text,
    shovel_doc,
)
from .slots import ReasonCode, SlotPool, SlotRecord, SlotRef, SlotUnreadable
from .worker import WorkerSpec
from .worker import main as worker_main

log = logging.getLogger("pumpd.coordinator")

TICK = 0.25  # seconds between passes of the main loop when nothing wakes it earlier
DRAIN_GRACE = 10.0  # beyond the drain timeout, before a draining worker is killed
STARTUP_TIMEOUT = 30.0  # a spawned worker must write its first heartbeat within this
RESTART_BASE = 0.5  # first restart delay after a crash, doubled per consecutive crash...
RESTART_CAP = 30.0  # ...up to this
STABLE_AFTER = 30.0  # a worker that ran this long before crashing starts the backoff afresh


@dataclass(frozen=True)
class DaemonOptions:
    config_path: str
    state_path: str
    default_workers: int | None  # --workers; None: one per shovel unless its clause says more
    drain_timeout: float = 30.0
    heartbeat_timeout: float = 10.0
    http: tuple[str, int] | None = ("127.0.0.1", 15680)
    log_format: str = "text"
    log_level: str = "info"


@dataclass(eq=False)
class Worker:
    """One worker position of a shovel: successive processes, one slot."""

    index: int
    slot: SlotRef
    process: BaseProcess | None = None
    pid: int = 0
    start_at: float | None = 0.0  # monotonic time of the next start; None: not scheduled
    spawned_at: float = 0.0
    stop_sent_at: float | None = None
    then: Literal["restart", "retire"] | None = None  # what follows the requested stop
    done: bool = False  # terminated by design: not started again until restarted or changed
    restarts: int = 0
    failures: int = 0  # consecutive crashes, for the backoff
    kill_reason: str | None = None
    last_exit: str | None = None
    carried: Counters = field(default_factory=Counters)  # earlier processes' totals
    meter: RateMeter = field(default_factory=RateMeter)
    record: SlotRecord = field(default_factory=SlotRecord)  # the last consistent slot read

    def live_record(self) -> bool:
        """Whether the slot holds the running process's own report."""
        return self.process is not None and self.record.pid == self.pid

    @property
    def moving(self) -> bool:
        """Whether a live process of this worker reports running (or blocked): a worker that is
        starting, reconnecting or gone moves nothing, whatever its last counters say."""
        return self.live_record() and self.record.state in (State.RUNNING, State.BLOCKED)

    def counters(self) -> Counters:
        return add_counters(self.carried, self.record.counters) if self.live_record() \
            else self.carried


@dataclass(eq=False)
class Shovel:
    name: str
    definition: ShovelDefinition
    workers: list[Worker] = field(default_factory=list)
    removing: bool = False
    state: State = State.STARTING
    reason: str = ""
    since: float = field(default_factory=time.time)


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


class Coordinator:
    """See the module docstring. :meth:`run` blocks until the daemon has stopped."""

    def __init__(self, opts: DaemonOptions, shovels: Mapping[str, ShovelDefinition]) -> None:
        self.opts = opts
        self.pool = SlotPool()
        self.shovels: dict[str, Shovel] = {}
        self._initial = dict(shovels)
        self._ctx = multiprocessing.get_context("spawn")
        self._signals: deque[int] = deque()
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._rng = random.Random()
        self._started = time.time()
        self.http_address: tuple[str, int] | None = None

    # ---------------------------------------------------------------------------- main loop

    def run(self) -> int:
        return asyncio.run(self._main())

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        server = HttpServer(self)
        if self.opts.http is not None:
            host, port = self.opts.http
            try:
                self.http_address = await server.start(host, port)
            except OSError as exc:
                log.error("cannot listen on %s:%d for the status endpoint: %s (use --http "
                          "HOST:PORT or --http off)", host, port, exc.strerror or exc)
                return exitcodes.CANNOT_LISTEN
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self._record_signal, sig)
        loop.add_signal_handler(signal.SIGCHLD, self._wake.set)  # reap without waiting a tick
        now = time.monotonic()
        for name, definition in self._initial.items():
            self._add(name, definition, now)
        where = (f"http://{self.http_address[0]}:{self.http_address[1]}"
                 if self.http_address else "off")
        log.info("pumpd %s coordinator (pid %d): %d shovel(s), %d worker(s); status endpoint %s",
                 __version__, os.getpid(), len(self.shovels),
                 sum(len(s.workers) for s in self.shovels.values()), where,
                 extra={"event": "start"})
        try:
            while True:
                self._wake.clear()
                self._handle_signals()
                now = time.monotonic()
                self._reap(now)
                if self._stopping and not any(s.workers for s in self.shovels.values()):
                    break
                self._murder(now)
                self._spawn_due(now)
                self._observe(now)
                try:
                    await asyncio.wait_for(self._wake.wait(), TICK)
                except asyncio.TimeoutError:
                    pass
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
                loop.remove_signal_handler(sig)
            await server.close()
            self._kill_all()  # only on an unexpected error: a clean stop has no worker left
            self.pool.close()
        log.info("pumpd stopped", extra={"event": "stop"})
        return exitcodes.OK

    def _record_signal(self, sig: int) -> None:
        """The signal handler: record, wake the loop, nothing else."""
        self._signals.append(sig)
        assert self._wake is not None
        self._wake.set()

    def _handle_signals(self) -> None:
        while self._signals:
            sig = self._signals.popleft()
            name = signal.Signals(sig).name
            if sig == signal.SIGHUP:
                if self._stopping:
                    log.info("%s ignored: stopping", name)
                else:
                    log.info("%s: reloading %s", name, self.opts.config_path,
                             extra={"event": "reload"})
                    self._reload(time.monotonic())
            elif not self._stopping:
                n = sum(1 for _s, w in self._all_workers() if w.process is not None)
                log.info("%s: draining %d worker(s) (drain timeout %gs), then exiting", name, n,
                         self.opts.drain_timeout, extra={"event": "shutdown"})
                self._stopping = True
                now = time.monotonic()
                for s in list(self.shovels.values()):
                    for w in list(s.workers):
                        self._stop_worker(s, w, "retire", now)
            else:
                log.info("%s: already draining", name)

    def _all_workers(self) -> Iterator[tuple[Shovel, Worker]]:
        for s in list(self.shovels.values()):
            for w in list(s.workers):
                yield s, w

    # ------------------------------------------------------------------------------- verbs

    def _spawn_due(self, now: float) -> None:
        if self._stopping:
            return
        for s, w in self._all_workers():
            if (w.process is None and not w.done and w.start_at is not None
                    and w.start_at <= now and not s.removing):
                self._spawn(s, w, now)

    def _spawn(self, s: Shovel, w: Worker, now: float) -> None:
        spec = WorkerSpec(
            shovel=s.definition.cfg, index=w.index, slot=w.slot,
            drain_timeout=self.opts.drain_timeout, parent_pid=os.getpid(),
            log_format=self.opts.log_format, log_level=self.opts.log_level,
        )
        # A fresh record for the new process: no counters (they are carried), a heartbeat now.
        self.pool.write(w.slot, SlotRecord(since=time.time(), heartbeat=now))
        process = self._ctx.Process(target=worker_main, args=(spec,),
                                    name=f"pumpd {s.name}#{w.index}")
        try:
            process.start()
        except OSError as exc:
            self._crashed(s, w, f"could not be started: {exc}", ReasonCode.SPAWN_FAILED, now)
            return
        assert process.pid is not None
        w.process, w.pid, w.spawned_at = process, process.pid, now
        w.start_at, w.stop_sent_at, w.then, w.kill_reason = None, None, None, None
        w.record = SlotRecord()
        log.info("started worker %s#%d (pid %d)%s", s.name, w.index, w.pid,
                 f", restart {w.restarts}" if w.restarts else "",
                 extra={"event": "spawn", "shovel": s.name, "worker": w.index,
                        "restarts": w.restarts})

    def _reap(self, now: float) -> None:
        for s, w in self._all_workers():
            process = w.process
            if process is None or process.exitcode is None:
                continue
            code = process.exitcode
            process.close()
            self._read(w)  # the final report
            if w.live_record():  # fold it in; its gauges (in flight, buffered) end with it
                w.carried = carry(w.carried, w.record.counters)
            w.process = None
            exit_text = describe_exit(code, w.kill_reason)
            w.kill_reason, w.stop_sent_at = None, None
            self._after_exit(s, w, exit_text, now)
        for s in list(self.shovels.values()):
            if s.removing and not s.workers:
                del self.shovels[s.name]
                log.info("shovel %s: removed", s.name, extra={"event": "removed", "shovel": s.name})

    def _after_exit(self, s: Shovel, w: Worker, exit_text: str, now: float) -> None:
        rec, pid = w.record, w.pid
        who = f"worker {s.name}#{w.index} (pid {pid})"
        extra: dict[str, Any] = {"shovel": s.name, "worker": w.index, "exit": exit_text}
        if w.then == "retire" or self._stopping:
            c = w.carried
            log.info("%s stopped (%s): consumed %d published %d confirmed %d acked %d", who,
                     exit_text, c.consumed, c.published, c.confirmed, c.acked,
                     extra={**extra, "event": "worker_stopped", "counters": c.as_dict()})
            self._retire(s, w)
        elif w.then == "restart":
            w.then, w.done, w.failures, w.start_at = None, False, 0, now
            w.restarts += 1
            w.last_exit = f"restarted on request ({exit_text})"
            log.info("%s stopped for a restart (%s); restart %d", who, exit_text, w.restarts,
                     extra={**extra, "event": "restart", "restarts": w.restarts})
        elif (rec.pid == pid and rec.state == State.TERMINATED
              and rec.reason_code in (ReasonCode.GAVE_UP, ReasonCode.DELETE_AFTER,
                                      ReasonCode.UNDELIVERABLE)):
            w.done, w.start_at, w.last_exit = True, None, exit_text
            log.warning("%s terminated by design: %s; not restarted", who, rec.reason,
                        extra={**extra, "event": "terminated", "reason": rec.reason})
        else:
            code = ReasonCode.HUNG if exit_text.startswith("killed by pumpd") else ReasonCode.CRASHED
            self._crashed(s, w, exit_text, code, now)

    def _crashed(self, s: Shovel, w: Worker, what: str, code: ReasonCode, now: float) -> None:
        if w.spawned_at and now - w.spawned_at >= STABLE_AFTER:
            w.failures = 0
        w.failures += 1
        delay = self._backoff(w.failures)
        w.restarts += 1
        w.start_at, w.last_exit, w.process = now + delay, what, None
        reason = f"{what}; restarting in {delay:.1f}s"
        self.pool.write(w.slot, SlotRecord(state=State.STARTING, reason_code=code, reason=reason,
                                           since=time.time(), heartbeat=now,
                                           implementation=w.record.implementation))
        self._read(w)
        log.warning("worker %s#%d (pid %d) %s; restart %d in %.1fs", s.name, w.index, w.pid,
                    what, w.restarts, delay,
                    extra={"event": "crash", "shovel": s.name, "worker": w.index, "exit": what,
                           "restarts": w.restarts, "delay": round(delay, 2)})

    def _backoff(self, failures: int) -> float:
        """Exponential, capped, with "equal jitter": half fixed, half random, so that workers
        crashing together (a broker restart) do not come back in lockstep."""
        ceiling = min(RESTART_CAP, RESTART_BASE * 2.0 ** min(failures - 1, 30))
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def _murder(self, now: float) -> None:
        for s, w in self._all_workers():
            if w.process is None or w.kill_reason is not None:
                continue
            reason = None
            if w.stop_sent_at is not None:
                limit = self.opts.drain_timeout + DRAIN_GRACE
                if now - w.stop_sent_at > limit:
                    reason = f"still draining after {limit:g}s"
            elif w.record.pid != w.pid:
                if now - w.spawned_at > STARTUP_TIMEOUT:
                    reason = f"no report within {STARTUP_TIMEOUT:g}s of starting"
            elif now - w.record.heartbeat > self.opts.heartbeat_timeout:
                reason = f"no heartbeat for {now - w.record.heartbeat:.1f}s"
            if reason is not None:
                w.kill_reason = reason
                log.warning("worker %s#%d (pid %d): %s; killing it", s.name, w.index, w.pid,
                            reason, extra={"event": "kill", "shovel": s.name, "worker": w.index,
                                           "reason": reason})
                self._signal(w, signal.SIGKILL)

    def _signal(self, w: Worker, sig: int) -> None:
        try:
            os.kill(w.pid, sig)
        except ProcessLookupError:
            pass  # already gone: reaped on the next pass

    def _stop_worker(self, s: Shovel, w: Worker, then: Literal["restart", "retire"],
                     now: float) -> None:
        """Ask a worker to drain and exit; ``then`` says what follows its exit."""
        w.then = then
        if w.process is None:
            w.start_at = None
            if then == "retire":
                self._retire(s, w)
            else:
                w.then, w.done, w.failures, w.start_at = None, False, 0, now
            return
        if w.stop_sent_at is None:
            w.stop_sent_at = now
            self._signal(w, signal.SIGTERM)

    def _retire(self, s: Shovel, w: Worker) -> None:
        if w in s.workers:
            s.workers.remove(w)
            self.pool.free(w.slot)

    def _kill_all(self) -> None:
        for _s, w in self._all_workers():
            if w.process is not None and w.process.exitcode is None:
                log.error("worker pid %d still running at exit: killing it", w.pid)
                self._signal(w, signal.SIGKILL)
                w.process.join(5)

    # ------------------------------------------------------------------------ observation

    def _read(self, w: Worker) -> None:
        try:
            w.record = self.pool.read(w.slot)
        except SlotUnreadable:
            pass  # keep the last good copy; a dead writer's slot is rewritten at its restart

    def _observe(self, now: float) -> None:
        for s in self.shovels.values():
            for w in s.workers:
                self._read(w)
                w.meter.sample(w.counters(), now)
            state, reason = self._aggregate(s)
            if (state, reason) != (s.state, s.reason):
                s.since = max((w.record.since for w in s.workers if w.record.state == state),
                              default=time.time()) or time.time()
                s.state, s.reason = state, reason
                moving = sum(1 for w in s.workers if w.moving)
                # "is", not ":" as in the workers' own lines: this is the shovel as a whole
                log.info("shovel %s is %s%s (%d/%d workers running)", s.name, state.label,
                         f": {reason}" if reason else "", moving, s.definition.cfg.workers,
                         extra={"event": "state", "shovel": s.name, "state": state.label,
                                "reason": reason or None})

    def _aggregate(self, s: Shovel) -> tuple[State, str]:
        """A shovel's state from its workers': blocked if any is, else running if any is, else
        starting if any is, else terminated."""
        records = [w.record for w in s.workers]
        if not records:
            return State.TERMINATED, "removed" if s.removing else "shutdown"
        states = {r.state for r in records}
        for state in (State.BLOCKED, State.RUNNING, State.STARTING, State.TERMINATED):
            if state in states:
                reasons = [r.reason for r in records if r.state == state and r.reason]
                if state in (State.BLOCKED, State.RUNNING):
                    # Moving messages, but not with every worker: say which are not, and why.
                    idle = [w for w in s.workers if not w.moving]
                    if not idle:
                        return state, ""
                    w = idle[0]
                    why = w.record.reason or w.record.state.label
                    if w.process is None:
                        why = f"not running: {w.last_exit or why}"
                    return state, (f"{len(s.workers) - len(idle)}/{len(s.workers)} workers "
                                   f"running; worker {w.index} {w.record.state.label}: {why}")
                return state, reasons[0] if reasons else ""
        raise AssertionError("unreachable")

    # ------------------------------------------------------------- shovels: add, change, remove

    def _add(self, name: str, definition: ShovelDefinition, now: float) -> Shovel:
        s = Shovel(name, definition)
        self.shovels[name] = s
        for i in range(definition.cfg.workers):
            s.workers.append(Worker(i, self.pool.allocate(), start_at=now))
        return s

    def _replace(self, s: Shovel, definition: ShovelDefinition, now: float) -> None:
        """A new definition for a shovel: every worker restarts with it (each starts again only
        after its predecessor has exited, so a single-worker shovel keeps its order)."""
        s.definition, s.removing = definition, False
        n = definition.cfg.workers
        for w in list(s.workers):
            if w.index < n:
                w.done, w.failures = False, 0
                self._stop_worker(s, w, "restart", now)
            else:
                self._stop_worker(s, w, "retire", now)
        have = {w.index for w in s.workers if w.index < n}
        for i in range(n):
            if i not in have:
                s.workers.append(Worker(i, self.pool.allocate(), start_at=now))
        s.workers.sort(key=lambda w: w.index)

    def _remove(self, s: Shovel, now: float) -> None:
        s.removing = True
        for w in list(s.workers):
            self._stop_worker(s, w, "retire", now)

    def _reload(self, now: float) -> None:
        try:
            file_defs = daemon_config.load_file(self.opts.config_path, self.opts.default_workers)
            daemon_config.merge(file_defs, self._runtime_definitions(), self.opts.state_path)
        except ConfigError as exc:
            log.error("reload refused, the running configuration is kept: %s", exc,
                      extra={"event": "reload_failed"})
            return
        added, changed, removed, unchanged = [], [], [], []
        for s in list(self.shovels.values()):
            if s.definition.origin == "config" and not s.removing and s.name not in file_defs:
                self._remove(s, now)
                removed.append(s.name)
        for name, definition in file_defs.items():
            existing = self.shovels.get(name)
            if existing is None:
                self._add(name, definition, now)
                added.append(name)
            elif existing.removing or existing.definition.cfg != definition.cfg:
                self._replace(existing, definition, now)
                changed.append(name)
            else:
                existing.definition = definition
                unchanged.append(name)
        log.info("reload: %d added, %d changed (restarting), %d removed, %d unchanged",
                 len(added), len(changed), len(removed), len(unchanged),
                 extra={"event": "reloaded", "added": added, "changed": changed,
                        "removed": removed, "unchanged": unchanged})

    def _runtime_definitions(self) -> dict[str, ShovelDefinition]:
        return {s.name: s.definition for s in self.shovels.values()
                if s.definition.origin == "runtime" and not s.removing}

    # ------------------------------------------------------------------- the HTTP endpoint's API

    def _view(self, s: Shovel, now: float) -> ShovelView:
        workers = []
        for w in sorted(s.workers, key=lambda w: w.index):
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

    def overview(self) -> dict[str, Any]:
        from ..dataplane.fastpath import IMPLEMENTATION

        return {
            "product": "pumpd",
            "version": __version__,
            "pid": os.getpid(),
            "started": self._started,
            "uptime": round(time.time() - self._started, 3),
            "config": os.path.abspath(self.opts.config_path),
            "state_file": os.path.abspath(self.opts.state_path),
            "implementation": IMPLEMENTATION,
            "drain_timeout": self.opts.drain_timeout,
            "stopping": self._stopping,
            "slot_blocks": self.pool.block_names,  # in /dev/shm: for diagnostics
            "shovels": len(self.shovels),
            "workers": sum(1 for _s, w in self._all_workers() if w.process is not None),
        }

    def shovel_list(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [shovel_doc(self._view(s, now)) for s in self.shovels.values()]

    def shovel(self, name: str) -> dict[str, Any] | None:
        s = self.shovels.get(name)
        return shovel_doc(self._view(s, time.monotonic())) if s is not None else None

    def metrics(self) -> str:
        from ..dataplane.fastpath import IMPLEMENTATION

        now = time.monotonic()
        return metrics_text([self._view(s, now) for s in self.shovels.values()], IMPLEMENTATION)

    def restart(self, name: str) -> Reply:
        if self._stopping:
            return error(503, "pumpd is stopping")
        s = self.shovels.get(name)
        if s is None or s.removing:
            return error(404, f"no shovel {name!r}")
        now = time.monotonic()
        log.info("shovel %s: restart requested", name, extra={"event": "restart_requested",
                                                                "shovel": name})
        for w in list(s.workers):
            if w.process is None and w.done:  # terminated by design: this is a new attempt
                w.restarts += 1
                w.last_exit = f"restarted on request ({w.last_exit})"
            w.done, w.failures = False, 0
            self._stop_worker(s, w, "restart", now)
        self._wake_loop()
        return Reply(202, shovel_doc(self._view(s, now)))

    def put(self, name: str, body: bytes) -> Reply:
        if self._stopping:
            return error(503, "pumpd is stopping")
        existing = self.shovels.get(name)
        if existing is not None and existing.definition.origin == "config" and \
                not existing.removing:
            return error(409, f"shovel {name!r} is defined in {self.opts.config_path}: change it "
                              "there and send SIGHUP")
        try:
            definition = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return error(400, f"the body is not valid JSON: {exc}")
        if isinstance(definition, dict) and set(definition) <= {"value", "component", "vhost",
                                                                 "name"} and "value" in definition:
            # the management API's parameter form: {"value": {...definition...}}
            definition = definition["value"]
        try:
            new = daemon_config.parse_runtime(name, definition, self.opts.default_workers,
                                              f"PUT /api/shovels/{name}")
        except ConfigError as exc:
            return error(400, str(exc))
        runtime = {n: d.definition for n, d in self._runtime_definitions().items()}
        runtime[name] = new.definition
        try:
            statefile.save(self.opts.state_path, runtime)
        except statefile.StateFileError as exc:
            log.error("%s", exc)
            return error(500, str(exc))
        now = time.monotonic()
        if existing is None:
            s = self._add(name, new, now)
            status = 201
            log.info("shovel %s: added at run time", name, extra={"event": "added", "shovel": name})
        elif not existing.removing and existing.definition.cfg == new.cfg:
            existing.definition = new
            s, status = existing, 200
        else:
            self._replace(existing, new, now)
            s, status = existing, 200
            log.info("shovel %s: replaced at run time (restarting)", name,
                     extra={"event": "replaced", "shovel": name})
        self._wake_loop()
        return Reply(status, shovel_doc(self._view(s, now)))

    def delete(self, name: str) -> Reply:
        if self._stopping:
            return error(503, "pumpd is stopping")
        s = self.shovels.get(name)
        if s is None or s.removing:
            return error(404, f"no shovel {name!r}")
        if s.definition.origin == "config":
            return error(409, f"shovel {name!r} is defined in {self.opts.config_path}: remove it "
                              "there and send SIGHUP")
        runtime = {n: d.definition for n, d in self._runtime_definitions().items() if n != name}
        try:
            statefile.save(self.opts.state_path, runtime)
        except statefile.StateFileError as exc:
            log.error("%s", exc)
            return error(500, str(exc))
        log.info("shovel %s: deleted at run time (draining)", name,
                 extra={"event": "deleted", "shovel": name})
        self._remove(s, time.monotonic())
        self._wake_loop()
        return Reply(204)

    def _wake_loop(self) -> None:
        if self._wake is not None:
            self._wake.set()
