"""The coordinator: the shovels' worker positions, supervised from their shared-memory slots.

A position runs in a worker process of its own (the default), or with ``--shovels-per-process K``
in a worker host shared with up to K - 1 others (:mod:`pumpd.daemon.hosting` places them and
talks to the hosts; :mod:`pumpd.daemon.positions` has what is supervised). The verbs below are
per position either way; only the means differ: a process of its own is stopped with SIGTERM and
killed alone, a hosted position is stopped through its host's pipe, and a hung host is killed
with every position it runs.

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

The HTTP endpoint (:mod:`pumpd.daemon.http_api`) runs on the same event loop; its methods
(:mod:`pumpd.daemon.api`) call the coordinator's verbs (add, replace, remove, stop_worker).
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
from dataclasses import dataclass
from typing import Any, Literal

from .. import exitcodes
from ..config.model import ClusterConfig
from ..config.parse import ConfigError
from ..engine.lease import LeaseSpec, lease_name
from ..engine.status import State
from ..version import __version__
from . import definitions as daemon_config
from . import tokenfile
from .access import Access
from .api import CoordinatorApi
from .definitions import ShovelDefinition
from .hosting import Hosts
from .http_api import HttpServer
from .positions import Shovel, Worker, describe_exit, missing_positions, reload_plan
from .report import SAMPLE_EVERY, carry
from .service import ServiceState
from .slots import ReasonCode, SlotPool, SlotRecord, SlotRef, SlotsUnavailable, SlotUnreadable
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
    shovels_per_process: int = 1  # K > 1: worker hosts of up to K positions (issue 14)
    access: Access | None = None  # the endpoint's token, TLS and openings (None: --http off)
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
        self._hosts = Hosts(self._ctx, self.pool, opts.shovels_per_process, opts.log_format,
                            opts.log_level, self.wake_loop)
        self._signals: deque[int] = deque()
        self._wake: asyncio.Event | None = None
        self.stopping = False
        self._rng = random.Random()
        self.started = time.time()
        self.http_address: tuple[str, int] | None = None
        self.service = ServiceState()  # systemd's Type=notify: readiness, reload, stop

    # ---------------------------------------------------------------------------- main loop

    def run(self) -> int:
        return asyncio.run(self._main())

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        access = self.opts.access or Access(token="")  # no token: every guarded request refused
        server = HttpServer(CoordinatorApi(self), access)
        if self.opts.http is not None:
            host, port = self.opts.http
            try:
                self.http_address = await server.start(host, port)
            except OSError as exc:
                log.error("cannot listen on %s:%d for the status endpoint: %s (use --http "
                          "HOST:PORT or --http off)", host, port, exc.strerror or exc)
                return exitcodes.CANNOT_LISTEN
            trouble = tokenfile.announce(self.http_address[1], access.token_file,
                                         access.tls is not None, access.tls_cert)
            if trouble:
                log.warning("%s", trouble)
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
            scheme = "https" if access.tls is not None else "http"
            where = (f"{scheme}://{self.http_address[0]}:{self.http_address[1]} (token file "
                     f"{os.path.abspath(access.token_file)})" if self.http_address else "off")
            k = self.opts.shovels_per_process
            log.info("pumpd %s coordinator (pid %d): %d shovel(s), %d worker(s)%s; status "
                     "endpoint %s", __version__, os.getpid(), len(self.shovels),
                     sum(len(s.workers) for s in self.shovels.values()),
                     f", up to {k} per process" if k > 1 else "", where,
                     extra={"event": "start"})
            await self._loop()
        except Exception:  # the last resort: a bug; the workers still hold messages
            log.critical("unexpected error in the coordinator: draining every worker (up to "
                         "%gs), then exiting", self.opts.drain_timeout + DRAIN_GRACE,
                         exc_info=True, extra={"event": "coordinator_failed"})
            self.service.stopping(sum(1 for _s, w in self._all_workers() if w.process is not None))
            self._drain_all()
            return exitcodes.FAILURE
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
                loop.remove_signal_handler(sig)
            await server.close()
            if self.http_address is not None:
                tokenfile.remove_record(self.http_address[1], os.getpid())
            self.service.close()
            self._kill_all()  # only what outlived its drain: a clean stop has no worker left
            self.pool.close()
        log.info("pumpd stopped", extra={"event": "stop"})
        return exitcodes.OK

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            self._handle_signals()
            now = time.monotonic()
            self._reap(now)
            if self.stopping and not any(s.workers for s in self.shovels.values()) \
                    and not self._hosts.hosts:
                return
            self._murder(now)
            self._spawn_due(now)
            self._observe(now)
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
        while self._signals:
            sig = self._signals.popleft()
            name = signal.Signals(sig).name
            if sig == signal.SIGHUP:
                if self.stopping:
                    log.info("%s ignored: stopping", name)
                else:
                    log.info("%s: reloading %s", name, self.opts.config_path,
                             extra={"event": "reload"})
                    self.service.reloading()
                    self._reload(time.monotonic())
                    self.service.reloaded()
            elif not self.stopping:
                n = sum(1 for _s, w in self._all_workers() if w.process is not None)
                log.info("%s: draining %d worker(s) (drain timeout %gs), then exiting", name, n,
                         self.opts.drain_timeout, extra={"event": "shutdown"})
                self.stopping = True
                self.service.stopping(n)
                now = time.monotonic()
                for s in list(self.shovels.values()):
                    for w in list(s.workers):
                        self.stop_worker(s, w, "retire", now)
            else:
                log.info("%s: already draining", name)

    def _all_workers(self) -> Iterator[tuple[Shovel, Worker]]:
        for s in list(self.shovels.values()):
            for w in list(s.workers):
                yield s, w

    # ------------------------------------------------------------------------------- verbs

    def _spawn_due(self, now: float) -> None:
        if self.stopping:
            return
        hosted: list[tuple[Shovel, Worker]] = []
        for s, w in self._all_workers():
            if (w.process is None and not w.done and w.start_at is not None
                    and w.start_at <= now and not s.removing):
                if self.opts.shovels_per_process > 1 and not s.definition.cfg.own_process:
                    hosted.append((s, w))
                else:
                    self._spawn(s, w, now)
        if hosted:
            started, failed = self._hosts.place(hosted, self._worker_spec, now)
            for s, w in started:
                self._started_position(s, w, now)
            for (s, w), error in failed:
                self._crashed(s, w, error, ReasonCode.SPAWN_FAILED, now)

    def _worker_spec(self, s: Shovel, w: Worker) -> WorkerSpec:
        return WorkerSpec(
            shovel=s.definition.cfg, index=w.index, slot=w.slot,
            drain_timeout=self.opts.drain_timeout, parent_pid=os.getpid(),
            log_format=self.opts.log_format, log_level=self.opts.log_level,
            lease=None if (c := self.opts.cluster) is None else LeaseSpec(
                lease_name(c.name, s.name, w.index), c.lease_retry),
        )

    def _spawn(self, s: Shovel, w: Worker, now: float) -> None:
        spec = self._worker_spec(s, w)
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
        w.process, w.pid = process, process.pid
        self._started_position(s, w, now)
        log.info("started worker %s#%d (pid %d)%s", s.name, w.index, w.pid,
                 f", restart {w.restarts}" if w.restarts else "",
                 extra={"event": "spawn", "shovel": s.name, "worker": w.index,
                        "restarts": w.restarts})

    def _started_position(self, s: Shovel, w: Worker, now: float) -> None:
        w.spawned_at = now
        w.start_at, w.stop_sent_at, w.then, w.kill_reason, w.ended = None, None, None, None, None
        w.record, w.seen_seq = SlotRecord(), -1

    def _reap(self, now: float) -> None:
        for s, w in self._all_workers():
            process = w.process
            if w.host is not None or process is None or process.exitcode is None:
                continue
            code = process.exitcode
            process.close()
            self._position_exited(s, w, describe_exit(code, w.kill_reason), now)
        for s, w, exit_text in self._hosts.reap():
            self._position_exited(s, w, exit_text, now)
        self._hosts.release_idle()
        for s in list(self.shovels.values()):
            if s.removing and not s.workers:
                del self.shovels[s.name]
                log.info("shovel %s: removed", s.name, extra={"event": "removed", "shovel": s.name})

    def _position_exited(self, s: Shovel, w: Worker, exit_text: str, now: float) -> None:
        self._read(w)  # the final report
        if w.live_record():  # fold it in; its gauges (in flight, buffered) end with it
            w.carried = carry(w.carried, w.record.counters)
        if w.host is not None:
            w.host.positions.pop(w.slot, None)
        w.process, w.host, w.ended = None, None, None
        w.kill_reason, w.stop_sent_at = None, None
        self._after_exit(s, w, exit_text, now)

    def _after_exit(self, s: Shovel, w: Worker, exit_text: str, now: float) -> None:
        rec, pid = w.record, w.pid
        who = f"worker {s.name}#{w.index} (pid {pid})"
        extra: dict[str, Any] = {"shovel": s.name, "worker": w.index, "exit": exit_text}
        if w.then == "retire" or self.stopping:
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
            if w.host is not None and w.host.kill_reason is not None:
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
            if reason is None:
                continue
            if w.host is None:
                w.kill_reason = reason
                log.warning("worker %s#%d (pid %d): %s; killing it", s.name, w.index, w.pid,
                            reason, extra={"event": "kill", "shovel": s.name, "worker": w.index,
                                           "reason": reason})
                self._signal(w.pid, signal.SIGKILL)
            else:
                # One event loop runs every position of the host: it cannot be killed alone.
                host = w.host
                log.warning("worker host (pid %d, %d worker(s)): worker %s#%d: %s; killing it",
                            host.pid, len(host.positions), s.name, w.index, reason,
                            extra={"event": "kill", "shovel": s.name, "worker": w.index,
                                   "reason": reason})
                self._hosts.kill(host, f"worker {s.name}#{w.index}: {reason}")

    def _signal(self, pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass  # already gone: reaped on the next pass

    def stop_worker(self, s: Shovel, w: Worker, then: Literal["restart", "retire"],
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
            if w.host is None:
                self._signal(w.pid, signal.SIGTERM)
            else:
                self._hosts.stop(w)

    def _retire(self, s: Shovel, w: Worker) -> None:
        if w in s.workers:
            s.workers.remove(w)
            self.pool.free(w.slot)

    def _drain_all(self) -> None:
        """Every worker process drains as on SIGTERM (publishes what it holds, waits for its
        confirms, acks); one still running after the drain timeout and the grace is killed by
        :meth:`_kill_all`. Blocking: the loop is not to be trusted any more."""
        processes = []
        for _s, w in self._all_workers():
            if w.host is None and w.process is not None and w.process.exitcode is None:
                self._signal(w.pid, signal.SIGTERM)
                processes.append(w.process)
        for host in self._hosts.hosts:
            if host.process.exitcode is None:
                self._signal(host.pid, signal.SIGTERM)
                processes.append(host.process)
        deadline = time.monotonic() + self.opts.drain_timeout + DRAIN_GRACE
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        log.info("%d of %d worker process(es) drained", sum(p.exitcode is not None
                                                           for p in processes), len(processes))

    def _kill_all(self) -> None:
        for _s, w in self._all_workers():
            if w.host is None and w.process is not None and w.process.exitcode is None:
                log.error("worker pid %d still running at exit: killing it", w.pid)
                self._signal(w.pid, signal.SIGKILL)
                w.process.join(5)
        self._hosts.kill_all()

    def process_count(self) -> tuple[int, int]:
        """Live worker positions, and the worker processes (hosts counted once) running them."""
        positions = sum(1 for _s, w in self._all_workers() if w.process is not None)
        single = sum(1 for _s, w in self._all_workers()
                     if w.process is not None and w.host is None)
        return positions, single + len(self._hosts.hosts)

    def block_names(self) -> list[str]:
        return self.pool.block_names

    # ------------------------------------------------------------------------ observation

    def _read(self, w: Worker) -> None:
        try:
            seq = self.pool.seq(w.slot)
            if seq == w.seen_seq:
                return  # not written since the last read: idle shovels cost no unpacking
            w.record = self.pool.read(w.slot)
            w.seen_seq = seq
        except SlotUnreadable:
            pass  # keep the last good copy; a dead writer's slot is rewritten at its restart

    def _observe(self, now: float) -> None:
        for s in self.shovels.values():
            for w in s.workers:
                self._read(w)
                if now - w.sampled_at >= SAMPLE_EVERY:
                    w.sampled_at = now
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
        starting if any is, else standby if any is (another member of the group runs them),
        else terminated."""
        records = [w.record for w in s.workers]
        if not records:
            return State.TERMINATED, "removed" if s.removing else "shutdown"
        states = {r.state for r in records}
        for state in (State.BLOCKED, State.RUNNING, State.STARTING, State.STANDBY,
                      State.TERMINATED):
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
            s.workers.append(Worker(i, slots.pop(), start_at=now))
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
        for w in list(s.workers):
            if w.index < n:
                w.done, w.failures = False, 0
                self.stop_worker(s, w, "restart", now)
            else:
                self.stop_worker(s, w, "retire", now)
        for i in missing:
            s.workers.append(Worker(i, slots.pop(), start_at=now))
        s.workers.sort(key=lambda w: w.index)

    def remove(self, s: Shovel, now: float) -> None:
        s.removing = True
        for w in list(s.workers):
            self.stop_worker(s, w, "retire", now)

    def _reload(self, now: float) -> None:
        """Read and validate the file once, reserve the slots it needs, and only then apply it:
        any failure before that point leaves every running shovel untouched."""
        try:
            file_defs = daemon_config.load_file(self.opts.config_path, self.opts.default_workers)
            daemon_config.merge(file_defs, self.runtime_definitions(), self.opts.state_path)
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
