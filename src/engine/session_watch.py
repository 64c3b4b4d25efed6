"""What the pump watches while a session forwards: the source backlog, read by a passive declare
every few seconds (how far behind the shovel is), the session's stall rule
(``stall.py``), which reads that backlog and may ask for a reading sooner, and the lag
(``lag.py``), sampled at every check. While the destination is down the backlog is read on a
connection of its own (:meth:`SessionWatch.read_meanwhile`), so that the lag in messages goes on
showing what piles up.

A stream source's lag is read over the streams protocol instead (``streams/source_lag.py``), at
the backlog's interval: its last offset minus the last one forwarded, and the age of the chunk
that holds the first one not yet forwarded. While the destination is down it goes on, from the
last session's last forwarded offset.

The pump owns one :class:`SessionWatch` for its whole life; :meth:`SessionWatch.start` and
:meth:`SessionWatch.stop` bracket each session, :meth:`SessionWatch.check` runs with every
counter check.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING, Any

from ..config.model import AckMode, BrokerURI, ShovelConfig
from .ending import SessionEnded
from .lag import Lag, path_figures
from .link_errors import LinkError
from .session import Session
from .stall import StallRule
from .wiring import open_source, stream_source_lag

if TYPE_CHECKING:  # the stream source's readings, chosen by wiring.py
    from .streams import StreamReading, StreamSourceLag

BACKLOG_EVERY = 5.0  # seconds between passive declares reading the source backlog...
BACKLOG_IDLE_EVERY = 30.0  # ...up to this while the backlog stays the same (read at random phase)
MEANWHILE_TIMEOUT = 10.0  # seconds a reading on a connection of its own may take


class SessionWatch:
    """The source backlog and the stall rule of the running session, for one pump."""

    def __init__(self, cfg: ShovelConfig, rng: random.Random) -> None:
        self._cfg = cfg
        self._rng = rng
        self.backlog = -1  # messages ready in the source queue; -1: not known
        self._rule: StallRule | None = None  # the running session's, while it forwards
        self._read_now = asyncio.Event()  # the stall rule wants a backlog reading now
        self._reader: asyncio.Task[None] | None = None
        self.lag = Lag()
        self.lag_messages = -1  # the backlog plus what the session holds; -1: not known
        # the last session's source and queue, when its backlog counts (a queue, not a stream)
        self._counted: tuple[Any, str] | None = None
        # the last reading of the running session not yet given to the lag: (asked at, wall
        # clock; messages received when it answered + the backlog it answered)
        self._reading: tuple[float, int] | None = None
        # a stream source: the last session's stream, read over the streams protocol, the
        # offset it forwarded last (None: not known), and the task reading it
        self._stream: StreamSourceLag | None = None
        self._stream_session: Session | None = None
        self._stream_forwarded: int | None = None
        self._stream_reader: asyncio.Task[None] | None = None
        self._stream_behind = -1  # the last reading's messages behind; -1: none
        self._closing: set[asyncio.Task[None]] = set()  # held stream connections being closed

    def start(self, session: Session) -> None:
        """The session forwards from now: its stall rule's clocks start, the backlog is read."""
        counted = session.source is not None and session.source.backlog_known
        rule = StallRule(self._cfg.stall_timeout, time.monotonic(),
                         confirms=self._cfg.ack_mode == AckMode.ON_CONFIRM,
                         backlog_ready=counted and not session.reads_stream)
        self._rule = rule
        self._cancel_reader()
        self._reading = None
        self._counted = (session.source_uri, session.queue) \
            if counted and not session.reads_stream and session.queue else None
        if counted:  # else the rule goes by what moves alone, as for a stream
            self._reader = asyncio.create_task(self._read_backlog(session, rule))
        self._start_stream(session)

    def _start_stream(self, session: Session) -> None:
        """A stream source's readings for this session (the last one's stream is kept while
        it is the same)."""
        self._cancel_stream_reader()
        uri = session.source_uri
        if not session.reads_stream or not isinstance(uri, BrokerURI) or not session.queue:
            self._let_go()
            self._stream = self._stream_session = None
            self._stream_behind = -1
            self.lag.stream_unread()
            return
        port = self._cfg.source.stream_port
        if self._stream is None or not self._stream.same(uri, session.queue, port):
            self._let_go()
            self._stream = stream_source_lag(uri, session.queue, port, shovel=self._cfg.name,
                                             client_name=f"pumpd {self._cfg.name} (stream lag)")
        self._stream_session = session
        self._stream_reader = asyncio.create_task(self._read_stream(session))

    def forwarding_ended(self) -> None:
        """The session stopped forwarding: a drain for a stop, a pause or a handover is not a
        stall."""
        self._rule = None

    def stop(self) -> None:
        """The session is over."""
        self._rule = None
        self._cancel_reader()
        if self._stream_session is not None:
            forwarded = self._stream_session.stream_forwarded
            if forwarded is not None:
                self._stream_forwarded = forwarded
            self._stream_session = None
        self._cancel_stream_reader()

    def _cancel_stream_reader(self) -> None:
        if self._stream_reader is not None:
            self._stream_reader.cancel()
            self._stream_reader = None

    def _cancel_reader(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None

    def unknown(self) -> None:
        """No source connection is held (paused, standing by): the backlog cannot be read, the
        lag is not known."""
        self.backlog = self.lag_messages = -1
        self._cancel_stream_reader()
        self._let_go()  # no reading until the position forwards again
        self._stream_behind = -1
        self.lag.unknown()

    async def close(self) -> None:
        """The pump is over: readings stop, and the stream connection held between them is
        closed."""
        self._cancel_reader()
        self._cancel_stream_reader()
        self._let_go()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _let_go(self) -> None:
        """Close the stream connection held between readings, if any (in the background: the
        callers are not coroutines); the next reading opens another."""
        if self._stream is not None and self._stream.connected:  # a standby asks every retry
            task = asyncio.create_task(self._stream.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def read_meanwhile(self, client_name: str) -> None:
        """The destination failed and no session forwards: read the last session's source
        backlog once, on a connection of its own (closed at once), unless a reading is under
        way or the backlog does not count (a source that counts none). A stream source is read
        over the streams protocol instead, after the last offset the last session forwarded."""
        if self._stream is not None:
            if self._stream_reader is None and self._stream_forwarded is not None:
                self._stream_reader = asyncio.create_task(
                    self._read_stream_once(self._stream, self._stream_forwarded))
            return
        if self._counted is None or self._reader is not None:
            return
        uri, queue = self._counted
        self._reader = asyncio.create_task(self._read_once(uri, queue, client_name))

    async def _read_once(self, uri: Any, queue: str, client_name: str) -> None:
        try:
            source = await asyncio.wait_for(open_source(uri, client_name), MEANWHILE_TIMEOUT)
        except (LinkError, OSError, asyncio.TimeoutError):
            if self._reader is asyncio.current_task():
                self._reader = None
            return  # the source is down too: the backlog stays as last read
        try:
            self.backlog = await asyncio.wait_for(source.backlog(queue), MEANWHILE_TIMEOUT)
        except (LinkError, OSError, asyncio.TimeoutError):
            pass
        finally:
            if self._reader is asyncio.current_task():  # not one started since
                self._reader = None
            await source.close_quietly()

    async def _read_stream(self, session: Session) -> None:
        """A stream source's readings while ``session`` runs, every :data:`BACKLOG_EVERY`
        seconds stretching to :data:`BACKLOG_IDLE_EVERY` while they do not change."""
        stream = self._stream
        assert stream is not None
        every, previous = BACKLOG_EVERY, None
        while True:
            forwarded = session.stream_forwarded
            if forwarded is not None:
                self._stream_forwarded = forwarded
                reading = await stream.read(forwarded)
                self._take_stream_reading(reading)
                every = min(every * 2, BACKLOG_IDLE_EVERY) if reading == previous \
                    else BACKLOG_EVERY
                previous = reading
            await asyncio.sleep(every * self._rng.uniform(0.8, 1.0))

    async def _read_stream_once(self, stream: StreamSourceLag, forwarded: int) -> None:
        try:
            self._take_stream_reading(await stream.read(forwarded))
        finally:
            if self._stream_reader is asyncio.current_task():  # not one started since
                self._stream_reader = None

    def _take_stream_reading(self, reading: StreamReading | None) -> None:
        if reading is None:
            self._stream_behind = -1
            self.lag.stream_unread()
            return
        self._stream_behind = reading[0]
        self.lag.stream_reading(*reading)

    def _sample_lag(self, session: Session | None) -> None:
        """The lag at this check (``lag.py``): read from the path, nothing per message."""
        path = session.path if session is not None else None
        if session is None or path is None or session.source is None:
            self.lag.idle()
            if self._stream is not None:
                self.lag_messages = self._stream_behind
                return
            self.lag_messages = self.backlog if self._counted is not None else -1
            return
        received, held, published, timestamp = path_figures(path)
        reading, self._reading = self._reading, None
        if self._counted is not None and self.backlog >= 0:
            self.lag_messages = self.backlog + held
            source_empty = self.backlog == 0
        elif self._stream is not None and self._stream_behind >= 0:  # read on the stream
            self.lag_messages = self._stream_behind
            source_empty, reading = held == 0, None
        else:  # a stream, or no backlog: nothing held, its window wide open, nothing came
            self.lag_messages = -1
            source_empty, reading = held == 0, None
        self.lag.sample(time.time(), session=session, source_empty=source_empty,
                        received=received, held=held, published=published,
                        last_timestamp=timestamp, reading=reading)

    async def _read_backlog(self, session: Session, rule: StallRule) -> None:
        """A failure here is the session's to report, not this reader's."""
        every = BACKLOG_EVERY
        # this session's last reading: one taken while the destination was down is no sign of
        # rest when the session's first reading equals it
        previous: int | None = None
        while session.source is not None and session.queue:
            asked, asked_at = time.monotonic(), time.time()
            rule.reading_asked(asked)
            try:
                self.backlog = await session.source.backlog(session.queue)
            except Exception:  # the closed channel ends the session, which says why
                return
            if session.path is not None:
                self._reading = (asked_at, session.path.consumed + self.backlog)
            rule.reading_answered(asked, self.backlog)
            # Stretched while nothing changes, jittered so that many shovels do not read together
            every = min(every * 2, BACKLOG_IDLE_EVERY) if self.backlog == previous \
                else BACKLOG_EVERY
            previous = self.backlog
            self._read_now.clear()
            try:
                await asyncio.wait_for(self._read_now.wait(),
                                       timeout=every * self._rng.uniform(0.8, 1.0))
            except asyncio.TimeoutError:
                pass

    def check(self, session: Session | None, *, paused: bool) -> None:
        """End ``session`` if its stall rule says it is stalled, or ask for a backlog reading
        when the rule needs one, and sample the lag. Called with every counter check (at most
        2 s apart)."""
        self._sample_lag(session)
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
