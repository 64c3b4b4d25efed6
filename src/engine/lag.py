"""How far behind a position is: messages not yet forwarded, and the age of the oldest of them.

Both figures are sampled once per status tick from what the pump already knows (the path's
counters, the source backlog as last read, the last message the path kept); nothing is done per
message.

**Seconds behind** is ``now - since``, where ``since`` is the latest instant known to be covered:
every message that had reached the source by then has been forwarded (the destination confirmed
it, or took it, by the ack mode). The oldest message not yet forwarded reached the source after
``since``, so its age is at most ``now - since``. ``since`` is the latest of two instants:

* the last instant the position was *caught up*, found by counting. A mark is an instant and
  the number of messages that had reached the source by then, counted in delivery order; once
  as many have been forwarded (received minus those still held: buffered or unconfirmed), the
  mark's instant is covered. A backlog reading asked at instant R and answering B makes the
  mark (R, received when it answered + B): exact, or later than exact, never early. A tick
  where the backlog as last read is 0 (``source_empty``) makes the mark (tick, received), as
  if nothing had arrived since that reading. A tick with nothing held and nothing waiting is
  covered at once: the figure is then 0. A source that counts no backlog (a stream, AMQP 1.0)
  makes no marks; it counts as empty when nothing is held, its prefetch window wide open.
* the ``timestamp`` property of the last message the destination confirmed, when the path keeps
  its last message and that message carried one (publishers' clocks: an estimate). The path's
  last message is its last *published*; its timestamp is taken, with the number published, at
  one tick and counted as confirmed at a later one, once that many are forwarded.

A stream source whose streams port answers is read instead (:meth:`Lag.stream_reading`, at the
backlog reading's interval, not per tick): its last offset and the chunk that holds the first
offset not yet forwarded, whose timestamp is when the source node wrote it. ``since`` is that
instant, or "caught up" when nothing is behind, until the next reading; the rules above apply
again once a reading fails (:meth:`Lag.stream_unread`).

Sampled at ticks, the instants are a tick's length apart at most (``COUNTER_INTERVAL`` while
messages move); a backlog read every few seconds delays a "caught up" by up to that interval.
Unknown (``None``) until the position has been covered once: a position started with a
backlog and no timestamps has no figure until it first catches up.

Ordering is assumed: the source delivers in the order messages reached it. A requeued
message (a session that failed, a competing worker's) is older than what comes after it, and
the figure can then be lower than that message's age.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any

from ..dataplane.properties import PROPERTY_INDEX, FrameError, split_properties

MARKS = 256  # instants remembered while messages are held; a full list moves its newest mark
_TIMESTAMP_INDEX = PROPERTY_INDEX["timestamp"]
_U64 = struct.Struct(">Q")


def message_timestamp(raw_properties: bytes) -> int | None:
    """The ``timestamp`` basic property (seconds since the epoch) of a content header's
    property list; None when absent or unreadable."""
    try:
        value = split_properties(raw_properties)[_TIMESTAMP_INDEX]
    except FrameError:
        return None
    if value is None:
        return None
    return int(_U64.unpack(value)[0])


def path_figures(path: Any) -> tuple[int, int, int, int | None]:
    """What :meth:`Lag.sample` reads of a path, the native relay's or the generic one's alike:
    (received, held: buffered or in flight, published, the timestamp of the last message it
    published when it keeps it). Read once per tick; the path counts as it goes anyway."""
    last = path.last_message
    return (path.consumed, path.in_flight + path.buffered, path.published,
            None if last is None else message_timestamp(last.properties))


class Lag:
    """One position's lag, sampled once per status tick (see the module docstring).

    :attr:`since`: ``None`` unknown, ``0.0`` caught up now, else the wall-clock instant (the
    figure is ``now - since``); :meth:`seconds` reads it.
    """

    def __init__(self, marks: int = MARKS) -> None:
        if marks < 1:
            raise ValueError(f"marks must be at least 1, not {marks}")
        self._capacity = marks
        self._marks: deque[tuple[float, int]] = deque()  # (instant, received by then)
        self._covered: float | None = None  # the last instant known to be caught up
        self._confirmed_at: float | None = None  # the timestamp of the last confirmed message
        self._pending: tuple[int, float] | None = None  # (published by then, its timestamp)
        self._session: object | None = None
        # a stream source's last reading holds ``since`` until the next one
        self._stream_read = False
        self.since: float | None = None

    def unknown(self) -> None:
        """The position does not forward and cannot tell (paused, standing by, terminated)."""
        self._marks.clear()
        self._pending = None
        self._session = None
        self._stream_read = False
        self._covered = self._confirmed_at = self.since = None

    def stream_reading(self, behind: int, written_at: float | None) -> None:
        """A stream source's reading: ``behind`` messages after the last one forwarded, the
        first of them in a chunk written at ``written_at`` (wall clock; None: not known). It
        holds until the next reading; nothing behind is caught up.

        :raises ValueError: for a negative ``behind``
        """
        if behind < 0:
            raise ValueError(f"behind must be at least 0, not {behind}")
        self._stream_read = True
        if behind == 0:
            self._marks.clear()
            self.since = 0.0
        else:
            self.since = written_at

    def stream_unread(self) -> None:
        """A stream source could not be read: the figure goes by the rules of a source that
        counts no backlog again, from the next tick."""
        if self._stream_read:
            self._stream_read = False
            self.since = self._anchor()

    def idle(self) -> None:
        """No session forwards (it failed, reconnecting): what was covered stays covered."""
        self._marks.clear()
        self._pending = None
        self._session = None
        if not self._stream_read:  # else the stream's reading holds
            self.since = self._anchor()  # caught up at the last tick: covered up to that tick

    def sample(self, now: float, *, session: object, source_empty: bool, received: int,
               held: int, published: int, last_timestamp: int | None,
               reading: tuple[float, int] | None = None) -> None:
        """A tick of a session that forwards. ``received``, ``held`` (buffered or in flight)
        and ``published`` are that session's counts; ``last_timestamp`` is the timestamp
        property of its last published message (None: not kept, or none); ``reading``: a
        backlog reading of this session since the last tick, as (the instant it was asked,
        messages received when it answered + the backlog it answered)."""
        if session is not self._session:  # a new session counts from 0; the old one's are gone
            self._marks.clear()
            self._pending = None
            self._session = session
        forwarded = received - held
        pending = self._pending
        if pending is not None and forwarded >= pending[0]:
            self._confirm(pending[1])
            pending = self._pending = None
        if pending is None and last_timestamp is not None and last_timestamp > 0 \
                and published > forwarded:
            self._pending = (published, float(last_timestamp))
        elif last_timestamp is not None and last_timestamp > 0 and published == forwarded:
            self._confirm(float(last_timestamp))  # nothing in flight: the last one is confirmed
        if self._stream_read:
            return  # a stream's reading holds until the next one
        marks = self._marks
        if reading is not None:
            self._mark(*reading)
        while marks and marks[0][1] <= forwarded:
            self._cover(marks.popleft()[0])
        if source_empty:
            if held == 0:
                marks.clear()
                self._cover(now)
                self.since = 0.0
                return
            self._mark(now, received)
        self.since = self._anchor()

    def _mark(self, instant: float, count: int) -> None:
        marks = self._marks
        if marks and marks[-1][0] >= instant and marks[-1][1] <= count:
            return  # a later instant already covered by fewer messages says more
        while marks and marks[-1][0] <= instant and marks[-1][1] >= count:
            marks.pop()  # an earlier instant needing as many says less
        if len(marks) < self._capacity:
            marks.append((instant, count))
        else:  # a later mark claims more than the one it replaces: never too early
            marks[-1] = (instant, max(count, marks[-1][1]))

    def seconds(self, now: float) -> float | None:
        """The figure: None unknown, 0.0 caught up, else ``now - since`` (never negative)."""
        if self.since is None:
            return None
        if self.since == 0.0:
            return 0.0
        return max(0.0, now - self.since)

    def _cover(self, instant: float) -> None:
        if self._covered is None or instant > self._covered:
            self._covered = instant

    def _confirm(self, timestamp: float) -> None:
        if self._confirmed_at is None or timestamp > self._confirmed_at:
            self._confirmed_at = timestamp

    def _anchor(self) -> float | None:
        known = [t for t in (self._covered, self._confirmed_at) if t is not None]
        return max(known) if known else None
