"""The coordinator's own stand-still: when its supervision loop did not run, and from when it
may judge its workers' silence again.

A worker is killed as hung when its heartbeat is older than ``--heartbeat-timeout``. That
judgement assumes the coordinator watched the whole time. When the coordinator itself stood
still (the daemon's whole process group stopped with SIGSTOP, a paused VM, a suspended laptop),
its workers stood still with it and their heartbeats are as old as the freeze: judged at once,
every one of them would look hung and be killed before it could run its fence. So the
coordinator asks its own clock first, as the workers' fence (:mod:`pumpd.engine.fence`) does:
two passes of its loop further apart than :func:`stood_still_after` mean it stood still, and
every silence it judges (a heartbeat, a first report, a drain) then counts only from the moment
it resumed. A worker that really hangs is still killed, one timeout after that moment.

The gap is measured on CLOCK_BOOTTIME where there is one: Linux's CLOCK_MONOTONIC, which the
heartbeats are written with, does not count a suspend, while the brokers on other machines do.
The window starts at the pass's own monotonic time, the clock the heartbeats are compared on.

Pure bookkeeping: the clock is passed in, so the rule is tested without stopping a process.
"""

from __future__ import annotations

from collections.abc import Callable

from ..engine.fence import gap_clock

TICKS_OF_SLACK = 4  # passes this many ticks apart are still a running loop (a slow pass, load)
TIMEOUT_FRACTION = 0.25  # of the heartbeat timeout: a longer gap could make workers look hung


def stood_still_after(tick: float, heartbeat_timeout: float) -> float:
    """How far apart two passes of the loop must be for the coordinator to have stood still.

    Well beyond the tick, so that a slow pass under load is not a stand-still; and a quarter of
    the heartbeat timeout when that is more: a shorter freeze leaves the workers' heartbeats
    younger than the timeout (a quarter of it, plus one beat's interval), nothing to excuse.
    """
    return max(tick * TICKS_OF_SLACK, heartbeat_timeout * TIMEOUT_FRACTION)


class StandStill:
    """The coordinator's passes, watched on ``clock``.

    :param threshold: seconds between two passes beyond which the coordinator stood still
        (:func:`stood_still_after`)
    :param clock: the gap's clock (:func:`gap_clock`; a test's own)
    """

    def __init__(self, threshold: float, clock: Callable[[], float] = gap_clock) -> None:
        self.threshold = threshold
        self._clock = clock
        self._last = clock()
        self.resumed_at = float("-inf")  # the pass time (monotonic) of the last resumption

    def passed(self, now: float) -> float | None:
        """One pass of the loop at ``now`` (monotonic): how long the coordinator stood still
        before it, when it did (workers' silences then count from ``now``), else None."""
        at = self._clock()
        gap, self._last = at - self._last, at
        if gap <= self.threshold:
            return None
        self.resumed_at = now
        return gap

    def silent_for(self, since: float, now: float) -> float:
        """How long something the coordinator waits for (a heartbeat, a first report, an exit)
        has been missing at ``now`` as far as the coordinator could watch: from ``since``, or
        from its last resumption if that is later."""
        return now - max(since, self.resumed_at)
