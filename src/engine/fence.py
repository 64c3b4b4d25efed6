"""The fence of a session whose source may have given up on it: a member of a group that lost
its lease must publish nothing it held.

A source broker closes a connection it heard nothing from for about its heartbeat timeout,
requeues that connection's deliveries and drops its lease; another member may take both. A
process frozen longer than that (SIGSTOP, a suspended VM) still finds the deliveries it read
before in its buffers once it resumes, and possibly confirms from the destination that make it
flush them before it reads the source's end: they would be published twice. So a session stops
publishing once its source link is closed, or once the event loop stood still for half the
heartbeat timeout (the other half is margin: the broker cannot have given up sooner). A timer
proves every quarter of the timeout that the loop runs.

The session's flush reads the fence's three facts itself (:attr:`Fence.fenced`,
:attr:`Fence.source_closed`, :attr:`Fence.deadline`: two attribute reads and a clock read, no
call), on the path every message takes, and calls :meth:`Fence.trip` when one says so.

A stand-still is measured on :func:`gap_clock`, CLOCK_BOOTTIME where there is one: Linux's
CLOCK_MONOTONIC does not count a suspend (a laptop's lid, a VM's host), while the source broker,
on another machine, does: a session suspended past the fence would otherwise publish.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from .ending import SessionEnded
from .endpoint import Endpoint

FENCE_FRACTION = 0.5  # of the source heartbeat timeout: a longer stand-still fences the session
NO_HEARTBEAT_FENCE = 30.0  # seconds, when the source connection has heartbeats off


_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)  # Linux only; looked up once


def gap_clock() -> float:
    """Seconds on a clock that keeps counting while the machine is suspended (CLOCK_BOOTTIME),
    or the monotonic clock where there is none. Read on every flush: nothing else is done."""
    if _BOOTTIME is None:
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)


def fence_after(heartbeat: int) -> float:
    """How long the event loop may stand still before a session publishes nothing it holds."""
    return heartbeat * FENCE_FRACTION if heartbeat > 0 else NO_HEARTBEAT_FENCE


class _NotYet:
    """Stands for the source link's ``closed`` future until the fence starts."""

    @staticmethod
    def done() -> bool:
        return False


class Fence:
    """One session's fence on its source link.

    :param end: ends the session, once, when a stand-still fenced it (a closed source link
        says why itself)
    """

    def __init__(self, end: Callable[[SessionEnded], None]) -> None:
        self._end = end
        self._source: Endpoint | None = None
        self.after = fence_after(0)
        self._tick_at = gap_clock()
        self._ticker: asyncio.TimerHandle | None = None
        self.fenced = False  # nothing more may be published
        # the source link's end: done once it closed (its deliveries are requeued)
        self.source_closed: asyncio.Future[BaseException] | _NotYet = _NotYet()
        self.deadline = float("inf")  # a flush later than this (gap_clock) means a stand-still

    def start(self, source: Endpoint) -> None:
        """The session forwards from ``source`` now: the loop must prove it runs."""
        self._source = source
        self.source_closed = source.closed
        self.after = fence_after(source.heartbeat)
        self._schedule()

    def _schedule(self) -> None:
        self._tick_at = gap_clock()
        self.deadline = self._tick_at + self.after
        self._ticker = asyncio.get_running_loop().call_later(self.after / 2, self._tick)

    def _tick(self) -> None:
        # a tick much later than due: the process stood still
        if gap_clock() - self._tick_at > self.after:
            self.trip()
            return
        self._schedule()

    def trip(self) -> None:
        """Publish nothing more; when the loop stood still with the source link open, say so
        (the session ends) and abort the link."""
        if self.fenced or self._source is None:
            return
        self.fenced = True
        self.cancel()
        if self._source.is_open:
            still = gap_clock() - self._tick_at
            self._end(SessionEnded(
                f"source: the event loop stood still for {still:.1f}s, more than {self.after:g}s "
                "(half the source heartbeat timeout): the source broker may have closed the "
                "connection and redelivered what it held; none of it is published",
                side="source"))
            self._source.abort()

    def cancel(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
