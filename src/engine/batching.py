"""When batching pays: the rule that decides whether a source read is followed by a read hold
and whether a source ack waits to cover more messages.

A hold (stop reading the source for ``source_read_hold_ms``) lets one wakeup, one scan and one
publish write carry every delivery of that millisecond, which is what keeps the CPU per message
low at full speed. But a hold only pays when more messages are coming: on a quiet link it adds
the whole hold to every message's latency and saves nothing. So the rule holds only when the
recent arrival rate says that a hold would gather at least ``HOLD_MIN_MESSAGES`` deliveries, and
lets an ack wait only when at least ``ACK_MIN_MESSAGES`` more are expected within the ack delay.

The arrival rate is an exponentially decaying count of messages (time constant ``RATE_WINDOW``):
unlike an average over reads it does not care how the broker split its deliveries into TCP
segments, and it needs no timer: it is brought up to date at each read and each question.

Pure bookkeeping, no I/O and no clock of its own: the session passes ``time.monotonic()``.
"""

from __future__ import annotations

import math

# A read this long means the broker is ahead of us: the next read follows at once anyway.
READ_HOLD_BELOW = 64 * 1024
# Hold only when the hold is expected to gather this many deliveries. 16 in a millisecond is
# 16,000 msg/s: below that, messages go on at once (the plugin's latency); above it the hold
# saves 40-50 % of the CPU per message (docs/bench.md).
HOLD_MIN_MESSAGES = 16
# Once holding, go on holding down to half the rate that started it, so that a rate near the
# threshold does not flip the decision at every read.
HOLD_RELEASE_FRACTION = 0.5
# An ack waits for more only when at least this many more messages are expected meanwhile.
ACK_MIN_MESSAGES = 2
# The time constant of the arrival rate, in seconds: long enough to smooth the broker's bursts
# of a few messages, short enough that a link that goes quiet stops holding within ~0.1 s.
RATE_WINDOW = 0.05


class ArrivalRate:
    """Messages per second, an exponentially decaying count over ``window`` seconds."""

    __slots__ = ("_count", "_last", "window")

    def __init__(self, window: float = RATE_WINDOW) -> None:
        if window <= 0:
            raise ValueError(f"window must be positive, not {window}")
        self.window = window
        self._count = 0.0
        self._last: float | None = None

    def _decay_to(self, now: float) -> None:
        if self._last is not None and now > self._last:
            self._count *= math.exp((self._last - now) / self.window)
        if self._last is None or now > self._last:
            self._last = now

    def add(self, now: float, messages: int) -> None:
        """Count ``messages`` arrived at ``now`` (seconds, monotonic)."""
        self._decay_to(now)
        self._count += messages

    def per_second(self, now: float) -> float:
        """The rate as of ``now``."""
        self._decay_to(now)
        return self._count / self.window


class BatchingRule:
    """Read-hold and ack-delay decisions for one session.

    :param hold: the read hold in seconds (``source_read_hold_ms``); 0 never holds
    :param ack_delay: how long an ack may wait to cover more messages, in seconds
    """

    __slots__ = ("_holding", "ack_delay", "hold", "rate")

    def __init__(self, hold: float, ack_delay: float, *, window: float = RATE_WINDOW) -> None:
        self.hold = hold
        self.ack_delay = ack_delay
        self.rate = ArrivalRate(window)
        self._holding = False

    @property
    def holding(self) -> bool:
        """Whether the last read decided to hold (the rule is in its busy regime)."""
        return self._holding

    def after_read(self, now: float, nbytes: int, messages: int) -> float:
        """Record a source read of ``nbytes`` carrying ``messages`` deliveries; return how long
        to stop reading the source now, in seconds (0: read on at once)."""
        self.rate.add(now, messages)
        if self.hold <= 0:
            return 0.0
        expected = self.rate.per_second(now) * self.hold
        threshold = HOLD_MIN_MESSAGES * (HOLD_RELEASE_FRACTION if self._holding else 1.0)
        self._holding = expected >= threshold
        if not self._holding or nbytes >= READ_HOLD_BELOW:
            return 0.0
        return self.hold

    def ack_wait(self, now: float) -> float:
        """How long source acks may wait for more settled messages before they are written
        (0: write them now)."""
        if self.ack_delay <= 0:
            return 0.0
        if self.rate.per_second(now) * self.ack_delay < ACK_MIN_MESSAGES:
            return 0.0
        return self.ack_delay
