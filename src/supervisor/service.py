"""What the coordinator tells a service manager (systemd ``Type=notify``) through
:mod:`pumpd.supervisor.sd_notify`: readiness, reloading, stopping, and a one-line status.

Ready means every worker position has made its first attempt: its process reports running,
blocked or terminated, or reports a failed connection (reconnecting), or it has already crashed
and waits for its restart. A shovel whose broker is down therefore does not hold readiness back:
it is ready as soon as its first connection attempt has failed. A reload is reported done
(``READY=1`` again) once the file has been read and its changes are under way, or refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..engine.status import State
from .positions import Position, Shovel
from .sd_notify import Notifier, monotonic_usec
from .slots import ReasonCode


def has_tried(w: Position) -> bool:
    """Whether this position's first attempt is over, successful or not."""
    if w.done:
        return True  # terminated by design
    if w.process is None:
        return w.last_exit is not None  # crashed (or failed to spawn) and waits for its restart
    rec = w.record
    return w.live_record() and (rec.state != State.STARTING or rec.reason_code != ReasonCode.NONE)


def summary(shovels: Iterable[Shovel]) -> str:
    """``STATUS=`` text, e.g. "12 shovels: 11 running, 1 starting"."""
    live = [s for s in shovels if not s.removing]
    counts: dict[str, int] = {}
    for s in live:
        counts[s.state.label] = counts.get(s.state.label, 0) + 1
    order = (State.RUNNING, State.BLOCKED, State.STARTING, State.PAUSED, State.STANDBY,
             State.TERMINATED)
    parts = [f"{counts[st.label]} {st.label}" for st in order if st.label in counts]
    noun = "shovel" if len(live) == 1 else "shovels"
    return f"{len(live)} {noun}: {', '.join(parts)}" if parts else f"{len(live)} {noun}"


class ServiceState:
    """Turns the coordinator's events and each pass over its shovels into notifications, each
    sent once (a status line only when its text changes)."""

    def __init__(self, notifier: Notifier | None = None) -> None:
        self.notifier = notifier or Notifier()
        self.ready = False
        self._stopping = False
        self._status = ""

    def observe(self, shovels: Iterable[Shovel]) -> None:
        if not self.notifier.enabled or self._stopping:
            return
        shovels = list(shovels)
        status = summary(shovels)
        lines = []
        if not self.ready and all(has_tried(w) for s in shovels if not s.removing
                                  for w in s.positions):
            self.ready = True
            lines.append("READY=1")
        if status != self._status:
            self._status = status
            lines.append(f"STATUS={status}")
        if lines:
            self.notifier.send(*lines)

    def reloading(self) -> None:
        self.notifier.send("RELOADING=1", monotonic_usec(), "STATUS=reloading the configuration")
        self._status = ""  # the next pass says how things stand

    def reloaded(self) -> None:
        self.ready = True
        self.notifier.send("READY=1")

    def stopping(self, workers: int) -> None:
        self.notifier.send("STOPPING=1", f"STATUS=draining {workers} worker(s)")
        self._stopping = True  # no READY=1 after STOPPING=1, nor a status line over this one

    def close(self) -> None:
        self.notifier.close()
