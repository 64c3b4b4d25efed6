"""The generic pump: run one shovel's sessions one after the other, for as long as it should run.

Connect to a source and a destination broker chosen at random, forward, and after a failure try
the failed side's brokers not yet tried in this round at once; when every one has failed, wait
``reconnect_delay`` (backing off, with jitter, once rounds fail in a row) and start a new round
(``brokers.py``); with a delay of 0 the shovel stops for good after its first failure (the
the plugin's rule).
State changes and counters go to a :class:`~pumpd.engine.status.StatusSink`; how they are shown or
stored is not the pump's concern.

A session that moves nothing while it should (``stall.py``) is ended and a new one started at
once. :meth:`Pump.pause` drains the session (cancel the consumer, publish and confirm
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
from .lease import ALWAYS, LeaseGate, LeaseRefused, LeaseSpec, watch_gate
from .link_errors import LinkError
from .pausing import PauseSwitch
from .queue_names import producer_reference
from .session import Session, SessionEnded
from .session_watch import SessionWatch
from .status import Counters, State, StatusSink
from .wiring import prepare_loop

log = logging.getLogger("pumpd.pump")

COUNTER_INTERVAL = 0.25  # seconds between counter snapshots sent to the sink...
# ...while they change; an idle shovel's check slows down to this, and sends nothing unchanged
# (a thousand idle shovels in a few processes must cost next to nothing)
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
    :param index: the position's number within its shovel (0..workers-1)
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
        index: int = 0,
    ) -> None:
        self.cfg = cfg
        self.lease = lease
        # the position's number within its shovel, and so its stream producer's name
        self.producer = producer_reference(lease.group if lease is not None else None,
                                           cfg.name, index)
        self._gate = gate or ALWAYS
        self.sink = sink
        self.drain_timeout = drain_timeout
        self.client_name = client_name
        self._rng = rng or random.Random()
        self._sources = BrokerRound(cfg.source.uris, self._rng)
        self._destinations = BrokerRound(cfg.destination.uris, self._rng)
        self._failed_side: str | None = None  # of the last failed session, when known
        self._totals = Counters()  # completed sessions
        self._session: Session | None = None
        self._state: State | None = None
        self._limit_total: int | None = None
        if isinstance(cfg.delete_after, int):
            self._limit_total = cfg.delete_after
        self.terminated_reason: str | None = None
        self._expired_after: float | None = None  # set when delete_after_duration ended it
        self._careful = 0  # messages the next session forwards one at a time (Session)
        self._watch = SessionWatch(cfg, self._rng)  # the source backlog and the stall rule
        self._switch = PauseSwitch(paused=paused)  # pause and resume
        self._failures = 0  # rounds of the broker lists failed in a row (the backoff)
        self._standby_reason = ""

    # -- status --------------------------------------------------------------------------------

    def _enter(self, state: State, reason: str | None = None, level: int = logging.INFO) -> None:
        if state != self._state or reason is not None:
            self._state = state
            # The counters first: a reader of a state (paused, standby after a handover,
            # terminated) takes the counters beside it as those of that moment, and the
            # reporter's own next look may be seconds away
            self.sink.counters_changed(self.counters())
            self.sink.state_changed(state, reason, time.time())
            shown = f" ({reason})" if reason and reason != state.label else ""
            log.log(level, "shovel %s: %s%s", self.cfg.name, state.label, shown)

    def counters(self) -> Counters:
        c = Counters(**self._totals.as_dict())  # a copy: _levels writes to it
        if self._session is not None:  # the totals' gauges stay 0: carry() keeps them
            c = c.add(self._session.counters())
        self._levels(c)
        return c

    # -- pause and resume -------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """Pausing or paused: asked to pause and not resumed since."""
        return self._switch.paused

    def pause(self) -> None:
        """Stop consuming: the running session cancels its consumer, publishes and confirms
        what it holds, acks it and closes (within ``drain_timeout``); then the pump waits in
        ``paused``, holding no connection, until :meth:`resume`. Call it on the pump's event
        loop (``loop.call_soon_threadsafe`` from another thread); pausing twice is pausing."""
        if self._switch.pause():
            log.info("shovel %s: pausing", self.cfg.name)

    def resume(self) -> None:
        """Consume again (a new session) after :meth:`pause`, or for a pump started paused.
        On the pump's event loop, as :meth:`pause`; resuming a running pump does nothing."""
        if self._switch.resume():
            log.info("shovel %s: resuming", self.cfg.name)

    async def _stay_paused(self, stop: asyncio.Event) -> None:
        # The backlog is read on the source connection, which a paused shovel does not hold.
        self._watch.unknown()
        self._enter(State.PAUSED, "paused")
        await self._switch.wait_resumed(stop)

    # -- the plugin's remaining / remaining_unacked, and the source backlog -----------------------

    def _levels(self, c: Counters) -> None:
        c.source_backlog = self._watch.backlog
        c.lag_messages = self._watch.lag_messages
        since = self._watch.lag.since
        c.lag_since_ms = -1 if since is None else round(since * 1000)
        if self._limit_total is None:
            c.remaining = c.remaining_unacked = -1  # no delete_after: unlimited
            return
        moved = c.consumed if self.cfg.ack_mode == AckMode.NO_ACK else c.acked
        c.remaining = max(self._limit_total - moved, 0)
        c.remaining_unacked = max(c.remaining - c.in_flight, 0)

    async def _report_counters(self) -> None:
        last: Counters | None = None
        interval = COUNTER_INTERVAL
        while True:
            self._watch.check(self._session, paused=self._switch.paused)
            c = self.counters()
            if c != last:
                self.sink.counters_changed(c)
                last, interval = c, COUNTER_INTERVAL
            else:
                interval = min(interval * 2, IDLE_COUNTER_INTERVAL)
            await asyncio.sleep(interval)

    # -- running -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        prepare_loop(asyncio.get_running_loop())
        for warning in self.cfg.warnings:  # where pumpd reads it unlike the plugin
            log.warning("shovel %s: %s", self.cfg.name, warning)
        reporter = asyncio.create_task(self._report_counters())
        timer = None
        if self.cfg.delete_after_duration is not None:  # src-delete-after-duration
            stop, timer = self._stop_after_duration(stop, self.cfg.delete_after_duration)
        halter = self._switch.follow(stop)
        try:
            await self._run(stop)
        finally:
            reporter.cancel()
            halter.cancel()
            if timer is not None:
                timer.cancel()
            await self._watch.close()
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
        while not stop.is_set():
            if self._switch.paused:
                await self._stay_paused(stop)
                continue
            if self._state != State.STANDBY:  # a standby retry says nothing until it changes
                self._enter(State.STARTING)
            if self.lease is not None and not self._gate.take_now():
                await self._stand_by("the group runs this position on another member")
                continue
            started, moved_before = time.monotonic(), self._moved()
            outcome, error = await self._one_session(self._switch.halt)
            if outcome == Outcome.FAILED:
                go_on = await self._after_failure(error, time.monotonic() - started,
                                                  self._moved() > moved_before)
            else:
                go_on = await self._after(outcome, error, stop)
            if not go_on:
                return
        self._terminate(self._stopped_reason())

    async def _after(self, outcome: Outcome, error: str | None, stop: asyncio.Event) -> bool:
        """The next step after a session that did not fail; False when the shovel is over."""
        if outcome in (Outcome.STANDBY, Outcome.RELEASED):
            # Not a failure: the source answered. No backoff, no reconnect counted.
            self._failures = 0
            await self._stand_by(error or "standing by")
        elif outcome == Outcome.STOPPED:
            if stop.is_set():
                self._terminate(self._stopped_reason())
                return False
            # else drained for a pause (perhaps resumed since: a new session)
        elif outcome == Outcome.LIMIT:
            self._terminate(f"delete-after reached: {self._moved()} messages moved")
            return False
        elif outcome == Outcome.TERMINAL:
            self._terminate(error or "stopped by the undeliverable policy")
            return False
        elif outcome == Outcome.STALLED:
            self._restart_stalled(error)
        elif outcome in (Outcome.CAREFUL_DONE, Outcome.HANDLED):
            self._failures = 0
            if outcome == Outcome.HANDLED:
                self._totals.reconnects += 1
                self._enter(State.STARTING, f"{error}; handled by the undeliverable policy, "
                                            "reconnecting now")
        return True

    def _restart_stalled(self, error: str | None) -> None:
        """Reconnect at once: the broker redelivers what the stalled session held. The session
        ran for stall_timeout at least: a fresh round, in which the stalled side moves on to its
        next broker, if its list has another."""
        self._failures = 0
        self._totals.reconnects += 1
        self._totals.stall_restarts += 1
        self._sources.healthy()
        self._destinations.healthy()
        self._next_broker()
        log.warning("shovel %s: %s; restarting the session", self.cfg.name, error)
        self._enter(State.STARTING, f"{error}; restarting the session")

    async def _after_failure(self, error: str | None, lasted: float, moved: bool) -> bool:
        """Reconnect after a failed session: at once to the next broker of the round, else after
        the (backed-off) delay; False when reconnect_delay 0 ends the shovel."""
        if moved or lasted >= HEALTHY_SESSION_SECONDS:
            self._failures = 0  # a healthy session: this failure is a first one again
        if moved or lasted >= FRESH_ROUND_SECONDS:
            self._sources.healthy()
            self._destinations.healthy()
        if self.cfg.reconnect_delay == 0:
            self._terminate(f"{error}; reconnect_delay is 0, not reconnecting", logging.WARNING)
            return False
        if self._switch.paused:  # failed while pausing: nothing is held any more
            return True
        self._totals.reconnects += 1
        if self._failed_side == "destination":  # what piles up meanwhile, for the lag
            self._watch.read_meanwhile(f"{self.client_name} {self.cfg.name} (backlog)")
        # A failed connection is a WARNING: the line names the side, the broker and the cause.
        if self._next_broker():
            self._enter(State.STARTING, f"{error}; reconnecting now, to the next broker of the list",
                        logging.WARNING)
            return True
        self._failures += 1
        delay = self._backoff(self._failures)
        self._enter(State.STARTING, f"{error}; reconnecting in {delay:.1f}s", logging.WARNING)
        try:  # a pause or a stop ends the wait
            await asyncio.wait_for(self._switch.halt.wait(), timeout=delay)
        except asyncio.TimeoutError:
            pass
        return True

    async def _stand_by(self, reason: str) -> None:
        """Enter standby (said once while the reason stays the same) and wait lease_retry,
        jittered so that the members of a group do not ask in lockstep; a stop or a pause ends
        the wait."""
        assert self.lease is not None
        self._watch.unknown()  # another member forwards: this position's lag is not known
        if self._state != State.STANDBY or reason != self._standby_reason:
            self._standby_reason = reason
            self._enter(State.STANDBY, f"{reason}; asking again every {self.lease.retry:g}s")
        delay = self.lease.retry * self._rng.uniform(1 - LEASE_JITTER, 1 + LEASE_JITTER)
        try:
            await asyncio.wait_for(self._switch.halt.wait(), timeout=delay)
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

    def _terminate(self, reason: str, level: int = logging.INFO) -> None:
        self.terminated_reason = reason
        self._watch.unknown()
        self._enter(State.TERMINATED, reason, level)

    def _backoff(self, failures: int) -> float:
        """The plugin's delay for the first retry; repeated failures back off, with jitter so that
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

    def _new_session(self, limit: int) -> Session:
        return Session(
            self.cfg,
            limit_from_queue_length=(
                self.cfg.delete_after == DeleteAfter.QUEUE_LENGTH and self._limit_total is None
            ),
            on_blocked=lambda b: self._enter(State.BLOCKED if b else State.RUNNING),
            limit=limit,
            client_name=self.client_name,
            careful=self._careful,
            lease=self.lease.name if self.lease is not None else None,
            producer=self.producer,
        )

    async def _one_session(self, stop: asyncio.Event) -> tuple[Outcome, str | None]:
        """Run one session to its end (``stop``: a stop or a pause); returns how it ended and,
        when it failed, stalled or was stopped by the policy, why."""
        limit = self._remaining_limit()
        if limit < 0:
            return Outcome.LIMIT, None
        self._failed_side = None
        session = self._session = self._new_session(limit)
        gate_watch: asyncio.Task[None] | None = None
        released = asyncio.Event()
        try:
            try:
                await session.open(self._sources.current, self._destinations.current)
                if session.queue_length_limit is not None:
                    self._limit_total = session.queue_length_limit
                    log.info("shovel %s: will move %d messages (the queue's length at start)",
                             self.cfg.name, self._limit_total)
                    if self._limit_total == 0:
                        return Outcome.LIMIT, None
                # blocked already while opening: a destination alarm raised before the start
                self._enter(State.BLOCKED if session.blocked else State.RUNNING)
                self._watch.start(session)
                until = stop
                if self.lease is not None and self._gate is not ALWAYS:
                    until = asyncio.Event()
                    gate_watch = asyncio.create_task(watch_gate(self._gate, stop, released, until))
                outcome = await session.wait(until)
                self._watch.forwarding_ended()
            except LeaseRefused as refused:
                log.debug("shovel %s: %s", self.cfg.name, refused.detail)
                return Outcome.STANDBY, str(refused)
            except SessionEnded as ended:
                return await self._ended(session, ended), str(ended)
            except LinkError as exc:
                self._failed_side = exc.side
                return Outcome.FAILED, str(exc)
            except OSError as exc:  # not a link's (those are LinkErrors): say what it was
                return Outcome.FAILED, exc.strerror or str(exc) or f"{type(exc).__name__} (no detail)"
            if outcome == Outcome.CAREFUL_DONE:
                self._careful = 0
            await self._drain(session)
            if outcome is None and released.is_set() and not stop.is_set():
                return Outcome.RELEASED, "handed over to another member of the group"
            return outcome or Outcome.STOPPED, None
        finally:
            if gate_watch is not None:
                gate_watch.cancel()
            self._watch.stop()
            await session.close()
            self._fold(session)
            self._session = None

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
                (session.path.in_flight + session.path.buffered) if session.path else 0,
                self.drain_timeout,
            )

    def _fold(self, session: Session) -> None:
        self._totals = self._totals.carry(session.counters())
