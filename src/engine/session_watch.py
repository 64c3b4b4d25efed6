"""What the pump watches while a session forwards: the source backlog, read by a passive declare
every few seconds (how far behind the shovel is), and the session's stall rule
(``stall.py``), which reads that backlog and may ask for a reading sooner.

The pump owns one :class:`SessionWatch` for its whole life; :meth:`SessionWatch.start` and
:meth:`SessionWatch.stop` bracket each session, :meth:`SessionWatch.check` runs with every
counter check.
"""

from __future__ import annotations

import asyncio
import random
import time

from ..config.model import AckMode, ShovelConfig
from .ending import SessionEnded
from .session import Session
from .stall import StallRule

BACKLOG_EVERY = 5.0  # seconds between passive declares reading the source backlog...
BACKLOG_IDLE_EVERY = 30.0  # ...up to this while the backlog stays the same (read at random phase)


class SessionWatch:
    """The source backlog and the stall rule of the running session, for one pump."""

    def __init__(self, cfg: ShovelConfig, rng: random.Random) -> None:
        self._cfg = cfg
        self._rng = rng
        self.backlog = -1  # messages ready in the source queue; -1: not known
        self._rule: StallRule | None = None  # the running session's, while it forwards
        self._read_now = asyncio.Event()  # the stall rule wants a backlog reading now
        self._reader: asyncio.Task[None] | None = None

    def start(self, session: Session) -> None:
        """The session forwards from now: its stall rule's clocks start, the backlog is read."""
        counted = session.source is not None and session.source.backlog_known
        rule = StallRule(self._cfg.stall_timeout, time.monotonic(),
                         confirms=self._cfg.ack_mode == AckMode.ON_CONFIRM,
                         backlog_ready=counted and not session.reads_stream)
        self._rule = rule
        if counted:  # else the rule goes by what moves alone, as for a stream
            self._reader = asyncio.create_task(self._read_backlog(session, rule))

    def forwarding_ended(self) -> None:
        """The session stopped forwarding: a drain for a stop, a pause or a handover is not a
        stall."""
        self._rule = None

    def stop(self) -> None:
        """The session is over."""
        self._rule = None
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None

    def unknown(self) -> None:
        """No source connection is held (paused): the backlog cannot be read."""
        self.backlog = -1

    async def _read_backlog(self, session: Session, rule: StallRule) -> None:
        """A failure here is the session's to report, not this reader's."""
        every = BACKLOG_EVERY
        while session.source is not None and session.queue:
            before = self.backlog
            asked = time.monotonic()
            rule.reading_asked(asked)
            try:
                self.backlog = await session.source.backlog(session.queue)
            except Exception:  # the closed channel ends the session, which says why
                return
            rule.reading_answered(asked, self.backlog)
            # Stretched while nothing changes, jittered so that many shovels do not read together
            every = min(every * 2, BACKLOG_IDLE_EVERY) if self.backlog == before \
                else BACKLOG_EVERY
            self._read_now.clear()
            try:
                await asyncio.wait_for(self._read_now.wait(),
                                       timeout=every * self._rng.uniform(0.8, 1.0))
            except asyncio.TimeoutError:
                pass

    def check(self, session: Session | None, *, paused: bool) -> None:
        """End ``session`` if its stall rule says it is stalled, or ask for a backlog reading
        when the rule needs one. Called with every counter check (at most 2 s apart)."""
        rule = self._rule
        if session is None or rule is None or not rule.enabled:
            return
        now = time.monotonic()
        stall = rule.check(now, session.counters(), excused=session.blocked or paused)
        if stall is not None:
            self._rule = None  # one end per session
            session.end(SessionEnded(f"stalled: {stall.reason}", side=stall.side, stalled=True))
        elif rule.reading_due(now):
            self._read_now.set()
