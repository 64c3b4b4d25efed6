"""When a session is stalled: it shows ``running`` and moves nothing, and only a new session
would move it again (the plugin's users restart such shovels by hand: rabbitmq-server #9859,
#10544, #4219, #9114).

A session is stalled when, for ``stall_timeout`` seconds,

* the source had messages ready and nothing moved: no delivery, publish, confirm or ack (the
  consumer gets nothing, or the source does not take our acks); the backlog is the pump's
  passive declare, and "had messages ready for the whole time" means a reading asked after the
  last movement found some, ``timeout`` ago, and the latest reading still finds some (a message
  that arrives just as an idle shovel reads its backlog is on its way to the consumer, not a
  stall);
* or the source did not answer that passive declare and nothing moved (a source connection
  that is silent: the reading waits forever on it);
* or the destination stopped confirming: messages outstanding (``in_flight`` > 0, on_confirm
  only) and no confirm or nack.

Not a stall: a destination that blocked publishing (``connection.blocked``, a resource alarm:
the pump's ``blocked`` state waits it out), a paused shovel (both are *excused*: the clocks
start again when they end), a source consumer timeout (the broker closes the channel itself,
which ends the session anyway), a stream source's backlog (a stream's message count is what it
retains, not what waits for us: only the silence rule applies), and the flow rules the shovel
sets itself (a full prefetch window or the destination's write pressure hold the source only
while the destination is slow, and a slow destination confirms).

Pure bookkeeping, no I/O and no clock of its own: the pump passes ``time.monotonic()``, the
session's counters and the backlog readings.
"""

from __future__ import annotations

from dataclasses import dataclass

from .status import Counters

# The pump reads the backlog again when nothing moved for this share of the timeout since its
# last reading: a stall is then suspected, and a reading taken after the last movement starts
# the rule's clock (the regular readings come only every 5-30 s).
SUSPECT_SHARE = 0.05
# While a backlog is seen with nothing moving, read it again this often (a share of the timeout):
# the latest reading must still find messages when the timeout is up.
CONFIRM_SHARE = 0.25


@dataclass(frozen=True)
class Stall:
    """Why a session is stalled, in words for the log line and the state's reason."""

    side: str  # "source" or "destination": the connection that does not answer
    reason: str


class StallRule:
    """One session's stall rule (see the module docstring).

    :param timeout: ``stall_timeout`` in seconds; 0 or less: never a stall
    :param now: when the session started forwarding (the clocks start there)
    :param confirms: the destination confirms (ack_mode on_confirm)
    :param backlog_ready: the source's backlog counts messages waiting for us (not a stream)
    """

    def __init__(self, timeout: float, now: float, *, confirms: bool,
                 backlog_ready: bool) -> None:
        self.timeout = timeout
        self._confirms = confirms
        self._backlog_ready = backlog_ready
        self._moved: tuple[int, ...] | None = None
        self._moved_at = now  # when a movement was last seen (or the rule started)
        self._answers = -1  # confirms and nacks seen so far
        self._waiting_since = now  # since when outstanding messages wait for an answer
        self._asking_since: float | None = None  # a backlog reading asked, not answered yet
        self._ready = -1  # messages ready at the latest reading
        self._ready_asked: float | None = None  # when the latest reading was asked
        self._ready_since: float | None = None  # the first reading since the last movement
        # that found messages ready, when every reading since found some

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    # -- the backlog readings ------------------------------------------------------------------

    def reading_asked(self, now: float) -> None:
        self._asking_since = now

    def reading_answered(self, asked: float, ready: int) -> None:
        """A reading asked at ``asked`` found ``ready`` messages ready in the source queue."""
        self._asking_since = None
        self._ready, self._ready_asked = ready, asked
        if ready <= 0:
            self._ready_since = None
        elif self._ready_since is None and asked >= self._moved_at:
            self._ready_since = asked

    def reading_due(self, now: float) -> bool:
        """Whether the pump should read the backlog now rather than at its next regular time:
        nothing moved for a while and no reading was asked since, or a backlog seen with
        nothing moving is due to be confirmed."""
        if not (self.enabled and self._backlog_ready) or self._asking_since is not None:
            return False
        asked = self._ready_asked
        if now - self._moved_at >= self.timeout * SUSPECT_SHARE and (
                asked is None or asked < self._moved_at):
            return True
        return (self._ready_since is not None and asked is not None
                and now - asked >= self.timeout * CONFIRM_SHARE)

    # -- the rule ------------------------------------------------------------------------------

    def check(self, now: float, counters: Counters, *, excused: bool = False) -> Stall | None:
        """The session's stall, if it is stalled now.

        :param counters: the session's counters (only their changes matter)
        :param excused: the destination is blocked or the shovel is pausing: nothing moves by
            design, and the clocks start again
        """
        if not self.enabled:
            return None
        moved = (counters.consumed, counters.published, counters.confirmed, counters.acked,
                 counters.nacked)
        if moved != self._moved or excused:
            self._moved, self._moved_at, self._ready_since = moved, now, None
        answers = counters.confirmed + counters.nacked
        if answers != self._answers or counters.in_flight <= 0 or excused:
            self._answers, self._waiting_since = answers, now
        if excused:
            self._asking_since = None if self._asking_since is None else now
            return None
        idle = now - self._moved_at
        if self._confirms and counters.in_flight > 0 \
                and now - self._waiting_since >= self.timeout:
            return Stall("destination", f"{counters.in_flight:,} messages unconfirmed by the "
                                        f"destination for {self.timeout:g} s")
        if self._asking_since is not None and now - self._asking_since >= self.timeout \
                and idle >= self.timeout:
            return Stall("source", f"the source did not answer for {self.timeout:g} s "
                                   "(reading its backlog) and nothing moved")
        if self._backlog_ready and self._ready_since is not None and self._ready > 0 \
                and now - self._ready_since >= self.timeout:
            return Stall("source", f"{self._ready:,} ready at the source, nothing moved for "
                                   f"{self.timeout:g} s")
        return None
