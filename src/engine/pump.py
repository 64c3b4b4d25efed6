"""The generic pump: run one shovel's sessions one after the other, for as long as it should run.

Connect to a source and a destination broker chosen at random, forward, and after a failure try
the failed side's brokers not yet tried in this round at once; when every one has failed, wait
``reconnect_delay`` (backing off, with jitter, once rounds fail in a row) and start a new round
(``brokers.py``); with a delay of 0 the shovel stops for good after its first failure (the
seed's rule).
State changes and counters go to a :class:`~pumpd.engine.status.StatusSink`; how they are shown or
stored is not the pump's concern.

A session that moves nothing while it should (``stall.py``) is ended and a new one started at
once (issue 23). :meth:`Pump.pause` drains the session (cancel the consumer, publish and confirm
what is held, ack it) and waits in ``paused``, holding no connection, until :meth:`Pump.resume`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

from ..config.model import AckMode, DeleteAfter, ShovelConfig
from .brokers import BrokerRound
from .ending import Outcome
from .lease import ALWAYS, LeaseGate, LeaseRefused, LeaseSpec
from .link import LinkError, quiet_pika_errors
from .session import Session, SessionEnded
from .stall import StallRule
from .status import Counters, State, StatusSink

log = logging.getLogger("pumpd.pump")

COUNTER_INTERVAL = 0.25  # seconds between counter snapshots sent to the sink...
# ...while they change; an idle shovel's check slows down to this, and sends nothing unchanged
# (issue 14: a thousand idle shovels in a few processes must cost next to nothing)
IDLE_COUNTER_INTERVAL = 2.0
MAX_BACKOFF_FACTOR = 8  # repeated failures stretch the delay up to this multiple
# A session that ran at least this long, or moved messages, was healthy: the next failure starts
# the backoff again from reconnect_delay.
HEALTHY_SESSION_SECONDS = 30.0
# A session that stayed up this long proves its brokers worked: its failure starts a new round of
# the broker lists (every other broker tried at once) though the backoff goes on. Shorter ones
# (a broker that accepts and then fails at once) go on with the round, so that such a broker
# cannot keep a shovel reconnecting without ever waiting.
FRESH_ROUND_SECONDS = 2.0
BACKLOG_EVERY = 5.0  # seconds between passive declares reading the source backlog (issue 13)...
BACKLOG_IDLE_EVERY = 30.0  # ...up to this while the backlog stays the same (read at random phase)
GATE_POLL = 1.0  # seconds between questions to a lease gate whether to hand the position over
LEASE_JITTER = 0.25  # a standby position asks again after lease_retry +- this fraction


class Pump:
    """Runs one shovel until ``stop`` is set or the shovel terminates by design.

    :param drain_timeout: how long a stop (or a pause) waits for outstanding confirms before
        closing anyway
    :param client_name: shown as the connection name in the brokers' management UI
    :param paused: start paused: connect and consume only once :meth:`resume` is called
    :param lease: run as a position of a group: only while holding this lease (engine/lease.py)
    :param gate: the group's say over when to try the lease and when to let it go (default:
        always try, never let go)
    """

    def __init__(
        self,
        cfg: ShovelConfig,
        sink: StatusSink,
        *,
        drain_timeout: float = 30.0,
        client_name: str = "pumpd",
        rng: random.Random | None = None,
        paused: bool = False,
        lease: LeaseSpec | None = None,
        gate: LeaseGate | None = None,
    ) -> None:
        self.cfg = cfg
        self.lease = lease
        self._gate = gate or ALWAYS
        self.sink = sink
        self.drain_timeout = drain_timeout
        self.client_name = client_name
        self._rng = rng or random.Random()
        self._sources = BrokerRound(cfg.source.brokers, self._rng)
        self._destinations = BrokerRound(cfg.destination.brokers, self._rng)
        self._failed_side: str | None = None  # of the last failed session, when known
        self._totals = Counters()  # completed sessions
        self._session: Session | None = None
        self._state: State | None = None
        self._limit_total: int | None = None
        if isinstance(cfg.delete_after, int):
            self._limit_total = cfg.delete_after
        self.terminated_reason: str | None = None
        self._expired_after: float | None = None  # set when delete_after_duration ended it
        self._source_backlog = -1  # messages ready in the source queue; -1: not read yet
        self._careful = 0  # messages the next session forwards one at a time (Session)
        self._stall: StallRule | None = None  # the running session's stall rule
        self._stop: asyncio.Event | None = None  # run()'s stop (delete_after_duration's included)
        self._read_now = asyncio.Event()  # the stall rule wants a backlog reading now
        # Pause and resume (issue 23). _halt is set while no session may forward (stopping or
        # paused): sessions and the reconnect delay wait on it; _wake tells a paused pump that
        # it was resumed or stopped.
        self._paused = paused
        self._halt = asyncio.Event()
        self._wake = asyncio.Event()
        if paused:
            self._halt.set()
        self._standby_reason = ""

    # -- status --------------------------------------------------------------------------------

    def _enter(self, state: State, reason: str | None = None) -> None:
        if state != self._state or reason is not None:
            self._state = state
            self.sink.state_changed(state, reason, time.time())
            shown = f" ({reason})" if reason and reason != state.label else ""
            log.info("shovel %s: %s%s", self.cfg.name, state.label, shown)

    def counters(self) -> Counters:
        c = Counters(**self._totals.as_dict())  # a copy: _levels writes to it
        if self._session is not None:  # the totals' gauges stay 0: carry() keeps them
            c = c.add(self._session.counters())
        self._levels(c)
        return c

    # -- issue 23: pause and resume ------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """Pausing or paused: asked to pause and not resumed since."""
        return self._paused

    def pause(self) -> None:
        """Stop consuming: the running session cancels its consumer, publishes and confirms
        what it holds, acks it and closes (within ``drain_timeout``); then the pump waits in
        ``paused``, holding no connection, until :meth:`resume`. Call it on the pump's event
        loop (``loop.call_soon_threadsafe`` from another thread); pausing twice is pausing."""
        if not self._paused:
            self._paused = True
            self._halt.set()
            log.info("shovel %s: pausing", self.cfg.name)

    def resume(self) -> None:
        """Consume again (a new session) after :meth:`pause`, or for a pump started paused.
        On the pump's event loop, as :meth:`pause`; resuming a running pump does nothing."""
        if self._paused:
            self._paused = False
            if not self._stopping():
                self._halt.clear()
            self._wake.set()
            log.info("shovel %s: resuming", self.cfg.name)

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    async def _halt_on(self, stop: asyncio.Event) -> None:
        """``stop`` halts sessions as a pause does, and wakes a paused pump."""
        await stop.wait()
        self._halt.set()
        self._wake.set()

    async def _stay_paused(self, stop: asyncio.Event) -> None:
        # The backlog is read on the source connection, which a paused shovel does not hold.
        self._source_backlog = -1
        # What it moved before the pause, before it says "paused": the reporter's next look may
        # be 2 s away, and a reader of "paused" takes these as final
        self.sink.counters_changed(self.counters())
        self._enter(State.PAUSED, "paused")
        while self._paused and not stop.is_set():
            self._wake.clear()
            await self._wake.wait()

    # -- issue 13: the plugin's remaining / remaining_unacked, and the source backlog ----------

    def _levels(self, c: Counters) -> None:
        c.source_backlog = self._source_backlog
        if self._limit_total is None:
            c.remaining = c.remaining_unacked = -1  # no delete_after: unlimited
            return
        moved = c.consumed if self.cfg.ack_mode == AckMode.NO_ACK else c.acked
        c.remaining = max(self._limit_total - moved, 0)
        c.remaining_unacked = max(c.remaining - c.in_flight, 0)

    async def _read_backlog(self, session: Session, rule: StallRule) -> None:
        """Messages ready in the source queue, by a passive declare every few seconds: how far
        behind the shovel is, and what the stall rule reads (which may ask for a reading
        sooner). A failure here is the session's to report, not this reader's."""
        every = BACKLOG_EVERY
        while session.source is not None and session.queue:
            before = self._source_backlog
            asked = time.monotonic()
            rule.reading_asked(asked)
            try:
                self._source_backlog = await session.source.queue_length(session.queue)
            except Exception:  # the closed channel ends the session, which says why
                return
            rule.reading_answered(asked, self._source_backlog)
            # Stretched while nothing changes, jittered so that many shovels do not read together
            every = min(every * 2, BACKLOG_IDLE_EVERY) if self._source_backlog == before \
                else BACKLOG_EVERY
            self._read_now.clear()
            try:
                await asyncio.wait_for(self._read_now.wait(),
                                       timeout=every * self._rng.uniform(0.8, 1.0))
            except asyncio.TimeoutError:
                pass

    def _check_stall(self) -> None:
        """End the running session if the stall rule says it is stalled; or ask for a backlog
        reading when the rule needs one. Called with every counter check (at most 2 s apart)."""
        session, rule = self._session, self._stall
        if session is None or rule is None or not rule.enabled:
            return
        now = time.monotonic()
        stall = rule.check(now, session.counters(), excused=session.blocked or self._paused)
        if stall is not None:
            self._stall = None  # one end per session
            session.end(SessionEnded(f"stalled: {stall.reason}", side=stall.side, stalled=True))
        elif rule.reading_due(now):
            self._read_now.set()

    async def _report_counters(self) -> None:
        last: Counters | None = None
        interval = COUNTER_INTERVAL
        while True:
            self._check_stall()
            c = self.counters()
            if c != last:
                self.sink.counters_changed(c)
                last, interval = c, COUNTER_INTERVAL
            else:
                interval = min(interval * 2, IDLE_COUNTER_INTERVAL)
            await asyncio.sleep(interval)

    # -- running -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        quiet_pika_errors(asyncio.get_running_loop())
        for warning in self.cfg.warnings:  # issue 13: where pumpd reads it unlike the plugin
            log.warning("shovel %s: %s", self.cfg.name, warning)
        reporter = asyncio.create_task(self._report_counters())
        timer = None
        if self.cfg.delete_after_duration is not None:  # issue 13: src-delete-after-duration
            stop, timer = self._stop_after_duration(stop, self.cfg.delete_after_duration)
        self._stop = stop
        halter = asyncio.create_task(self._halt_on(stop))
        try:
            await self._run(stop)
        finally:
            reporter.cancel()
            halter.cancel()
            if timer is not None:
                timer.cancel()
            self.sink.counters_changed(self.counters())

    def _stop_after_duration(self, stop: asyncio.Event,
                             seconds: float) -> tuple[asyncio.Event, asyncio.Task[None]]:
        """An event set by ``stop`` or once ``seconds`` have passed since the shovel started,
        whichever comes first; the latter ends it as delete_after_duration does."""
        either = asyncio.Event()

        async def watch() -> None:
            try:
                await asyncio.wait_for(stop.wait(), timeout=seconds)
            except asyncio.TimeoutError:
                self._expired_after = seconds
            either.set()

        return either, asyncio.create_task(watch())

    async def _run(self, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            if self._paused:
                await self._stay_paused(stop)
                continue
            if self._state != State.STANDBY:  # a standby retry says nothing until it changes
                self._enter(State.STARTING)
            if self.lease is not None and not self._gate.take_now():
                await self._stand_by("the group runs this position on another member")
                continue
            started, moved_before = time.monotonic(), self._moved()
            outcome, error = await self._one_session(self._halt)
            if outcome in (Outcome.STANDBY, Outcome.RELEASED):
                # Not a failure: the source answered. No backoff, no reconnect counted.
                failures = 0
                await self._stand_by(error or "standing by")
                continue
            if outcome == Outcome.STOPPED:
                if not stop.is_set():
                    continue  # drained for a pause (perhaps resumed since: a new session)
                self._terminate(self._stopped_reason())
                return
            if outcome == Outcome.LIMIT:
                self._terminate(f"delete-after reached: {self._moved()} messages moved")
                return
            if outcome == Outcome.TERMINAL:
                self._terminate(error or "stopped by the undeliverable policy")
                return
            if outcome == Outcome.STALLED:
                # Reconnect at once: the broker redelivers what the stalled session held. The
                # session ran for stall_timeout at least: a fresh round, in which the stalled
                # side moves on to its next broker, if its list has another.
                failures = 0
                self._totals.reconnects += 1
                self._totals.stall_restarts += 1
                self._sources.healthy()
                self._destinations.healthy()
                self._next_broker()
                log.warning("shovel %s: %s; restarting the session", self.cfg.name, error)
                self._enter(State.STARTING, f"{error}; restarting the session")
                continue
            if outcome in (Outcome.CAREFUL_DONE, Outcome.HANDLED):
                failures = 0
                if outcome == Outcome.HANDLED:
                    self._totals.reconnects += 1
                    self._enter(State.STARTING, f"{error}; handled by the undeliverable policy, "
                                                "reconnecting now")
                continue
            lasted = time.monotonic() - started
            if self._moved() > moved_before or lasted >= HEALTHY_SESSION_SECONDS:
                failures = 0  # a healthy session: this failure is a first one again
            if self._moved() > moved_before or lasted >= FRESH_ROUND_SECONDS:
                self._sources.healthy()
                self._destinations.healthy()
            if self.cfg.reconnect_delay == 0:
                self._terminate(f"{error}; reconnect_delay is 0, not reconnecting")
                return
            if self._paused:  # failed while pausing: nothing is held any more
                continue
            if self._next_broker():
                self._totals.reconnects += 1
                self._enter(State.STARTING, f"{error}; reconnecting now, to the next broker of the list")
                continue
            failures += 1
            delay = self._backoff(failures)
            self._totals.reconnects += 1
            self._enter(State.STARTING, f"{error}; reconnecting in {delay:.1f}s")
            try:  # a pause or a stop ends the wait
                await asyncio.wait_for(self._halt.wait(), timeout=delay)
            except asyncio.TimeoutError:
                continue
        self._terminate(self._stopped_reason())

    async def _stand_by(self, reason: str) -> None:
        """Enter standby (said once while the reason stays the same) and wait lease_retry,
        jittered so that the members of a group do not ask in lockstep; a stop or a pause ends
        the wait."""
        assert self.lease is not None
        if self._state != State.STANDBY or reason != self._standby_reason:
            self._standby_reason = reason
            self._enter(State.STANDBY, f"{reason}; asking again every {self.lease.retry:g}s")
        delay = self.lease.retry * self._rng.uniform(1 - LEASE_JITTER, 1 + LEASE_JITTER)
        try:
            await asyncio.wait_for(self._halt.wait(), timeout=delay)
        except asyncio.TimeoutError:
            pass

    def _next_broker(self) -> bool:
        """Move the failed side(s) on to their next broker; True when one is left to try at
        once in this round, False when the round is over (wait, then start a new one)."""
        sides = {"source": [self._sources], "destination": [self._destinations]}.get(
            self._failed_side or "", [self._sources, self._destinations])
        results = [side.failed() for side in sides]
        return any(results)

    def _stopped_reason(self) -> str:
        if self._expired_after is None:
            return "shutdown"
        return (f"delete-after-duration reached: stopped after {self._expired_after:g}s, "
                f"{self._moved()} messages moved")

    def _terminate(self, reason: str) -> None:
        self.terminated_reason = reason
        self._enter(State.TERMINATED, reason)

    def _backoff(self, failures: int) -> float:
        """The seed's delay for the first retry; repeated failures back off, with jitter so that
        many shovels failing together do not reconnect in lockstep."""
        base = self.cfg.reconnect_delay
        if failures <= 1:
            return base
        factor = min(2 ** (failures - 1), MAX_BACKOFF_FACTOR)
        return float(base * factor * self._rng.uniform(0.75, 1.0))

    def _moved(self) -> int:
        """Messages the source has let go of for good (acked, or consumed with no_ack)."""
        if self.cfg.ack_mode == AckMode.NO_ACK:
            return self._totals.consumed
        return self._totals.acked

    def _remaining_limit(self) -> int:
        """The delivery limit for the next session: 0 = none, -1 = already reached."""
        if self._limit_total is None:
            return 0
        return max(self._limit_total - self._moved(), 0) or -1

    async def _one_session(self, stop: asyncio.Event) -> tuple[Outcome, str | None]:
        """Run one session to its end (``stop``: a stop or a pause); returns how it ended and,
        when it failed, stalled or was stopped by the policy, why."""
        limit = self._remaining_limit()
        if limit < 0:
            return Outcome.LIMIT, None
        src, dst = self._sources.current, self._destinations.current
        self._failed_side = None
        session = Session(
            self.cfg,
            limit_from_queue_length=(
                self.cfg.delete_after == DeleteAfter.QUEUE_LENGTH and self._limit_total is None
            ),
            on_blocked=lambda b: self._enter(State.BLOCKED if b else State.RUNNING),
            limit=limit,
            client_name=self.client_name,
            careful=self._careful,
            lease=self.lease.name if self.lease is not None else None,
        )
        self._session = session
        backlog_reader: asyncio.Task[None] | None = None
        gate_watch: asyncio.Task[None] | None = None
        try:
            try:
                await session.open(src, dst)
                if session.queue_length_limit is not None:
                    self._limit_total = session.queue_length_limit
                    log.info("shovel %s: will move %d messages (the queue's length at start)",
                             self.cfg.name, self._limit_total)
                    if self._limit_total == 0:
                        return Outcome.LIMIT, None
                # blocked already while opening: a destination alarm raised before the start
                self._enter(State.BLOCKED if session.blocked else State.RUNNING)
                rule = StallRule(self.cfg.stall_timeout, time.monotonic(),
                                 confirms=self.cfg.ack_mode == AckMode.ON_CONFIRM,
                                 backlog_ready=not session.reads_stream)
                self._stall = rule
                backlog_reader = asyncio.create_task(self._read_backlog(session, rule))
                released = asyncio.Event()
                if self.lease is not None and self._gate is not ALWAYS:
                    until = asyncio.Event()
                    gate_watch = asyncio.create_task(self._watch_gate(stop, released, until))
                    outcome = await session.wait(until)
                else:
                    outcome = await session.wait(stop)
                self._stall = None  # a drain for a stop, a pause or a handover is not a stall
            except LeaseRefused as refused:
                log.debug("shovel %s: %s", self.cfg.name, refused.detail)
                return Outcome.STANDBY, str(refused)
            except SessionEnded as ended:
                return await self._ended(session, ended), str(ended)
            except LinkError as exc:
                self._failed_side = exc.side
                return Outcome.FAILED, str(exc)
            except OSError as exc:
                return Outcome.FAILED, f"{exc.strerror or exc}"
            if outcome == Outcome.CAREFUL_DONE:
                self._careful = 0
            await self._drain(session)
            if outcome is None and released.is_set() and not stop.is_set():
                return Outcome.RELEASED, "handed over to another member of the group"
            return outcome or Outcome.STOPPED, None
        finally:
            self._stall = None
            if gate_watch is not None:
                gate_watch.cancel()
            if backlog_reader is not None:
                backlog_reader.cancel()
            await session.close()
            self._fold(session)
            self._session = None

    async def _watch_gate(self, stop: asyncio.Event, released: asyncio.Event,
                          until: asyncio.Event) -> None:
        """Set ``until`` when ``stop`` is set or the gate asks for the position back (then
        ``released`` too): the session stops consuming and settles what it holds, as on a stop."""
        while not stop.is_set():
            if self._gate.release_now():
                released.set()
                break
            try:
                await asyncio.wait_for(stop.wait(), timeout=GATE_POLL)
            except asyncio.TimeoutError:
                pass
        until.set()

    async def _ended(self, session: Session, ended: SessionEnded) -> Outcome:
        """What a session's end by failure or by the policy means for the next one."""
        if ended.stalled:
            self._failed_side = ended.side
            return Outcome.STALLED
        if ended.terminal:
            await session.drain(self.drain_timeout)
            return Outcome.TERMINAL
        if ended.handled:
            self._careful = session.careful_left
            return Outcome.HANDLED
        if ended.refused_message and not self._careful:
            self._careful = ended.unsettled
        self._failed_side = ended.side
        return Outcome.FAILED

    async def _drain(self, session: Session) -> None:
        """Settle what the session holds before it closes, within the drain timeout."""
        if not await session.drain(self.drain_timeout):
            log.warning(
                "shovel %s: %d messages not settled within %.0fs; the source requeues them",
                self.cfg.name,
                (session.relay.in_flight + session.relay.buffered) if session.relay else 0,
                self.drain_timeout,
            )

    def _fold(self, session: Session) -> None:
        self._totals = self._totals.carry(session.counters())
