"""What a shovel reports about itself: the plugin's status states, the time each was entered, and
counters. The pump only calls a :class:`StatusSink`; where the report goes (a table in the
foreground runner, a shared-memory slot in the daemon) is the sink's business.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field, fields
from typing import ClassVar, Protocol


class State(enum.IntEnum):
    """The plugin's shovel states. Values are stable: they are stored in shared-memory slots."""

    STARTING = 0
    RUNNING = 1
    BLOCKED = 2
    TERMINATED = 3
    STANDBY = 4  # a position of a group that another member holds (engine/lease.py)
    # paused on request; holds no consumer (nor connection) until resumed
    PAUSED = 5

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass
class Counters:
    """Cumulative per-shovel counters (per worker in the daemon).

    consumed: deliveries taken from the source; published: re-published to the destination;
    confirmed / nacked: destination confirms; acked: source messages acknowledged (counted per
    message, even when one multiple ack covers many); returned: unroutable at the destination;
    redelivered: deliveries flagged redelivered by the source (possible duplicates);
    in_flight: published and not yet settled; buffered: received and held while blocked;
    bytes: body bytes re-published.

    Undeliverable messages (the ``undeliverable`` clause), each counted once when handled:
    undeliverable_malformed: properties that could not be parsed to edit them;
    undeliverable_too_large: a content header over the destination's frame_max;
    undeliverable_refused: refused by the destination closing its channel, isolated by a
    careful session; undeliverable_unroutable: returned as unroutable and parked or stopped on
    (a dropped one is only ``returned``); parked / dead_lettered: how many of them went to the
    park queue / were rejected to the source queue's dead-letter exchange.

    stall_restarts: sessions ended because they were stalled (``engine/stall.py``: a backlog
    and nothing moving, or no confirm with messages outstanding, for ``stall_timeout``); each is
    also one of ``reconnects``.

    Levels (the plugin's shovel_status figures), ``-1`` when unknown or unlimited:
    remaining: messages still to move before delete_after ends the shovel (-1: no limit);
    remaining_unacked: of those, how many are not yet published; source_backlog: messages
    ready in the source queue at the last passive declare (every few seconds while running).

    How far behind the position is (``engine/lag.py``), ``-1`` when unknown: lag_messages:
    messages not yet forwarded (the source backlog as last read plus those received and not yet
    confirmed; unknown for a stream or a source that counts no backlog); lag_since_ms: the
    instant (milliseconds since the epoch) since which it is behind, ``0`` when caught up; the
    lag in seconds is the reader's now minus it (:func:`lag_seconds`), so a position that stays
    behind does not write a new record every tick.
    """

    consumed: int = 0
    published: int = 0
    confirmed: int = 0
    acked: int = 0
    nacked: int = 0
    returned: int = 0
    redelivered: int = 0
    reconnects: int = 0
    in_flight: int = 0
    buffered: int = 0
    bytes: int = 0
    undeliverable_malformed: int = 0
    undeliverable_too_large: int = 0
    undeliverable_refused: int = 0
    undeliverable_unroutable: int = 0
    parked: int = 0
    dead_lettered: int = 0
    stall_restarts: int = 0
    remaining: int = -1
    remaining_unacked: int = -1
    source_backlog: int = -1
    lag_messages: int = -1
    lag_since_ms: int = -1

    # Levels are gauges whose -1 means unknown; workers of one shovel report the same level, so
    # they are combined with max(), never added (lag_since_ms: the earliest instant, below).
    LEVELS: ClassVar[frozenset[str]] = frozenset({"remaining", "remaining_unacked",
                                                  "source_backlog", "lag_messages",
                                                  "lag_since_ms"})
    # Gauges describe the present moment; everything else accumulates.
    GAUGES: ClassVar[frozenset[str]] = frozenset({"in_flight", "buffered"}) | LEVELS
    # What a relay counts itself: attributes of both the native and the reference relay.
    RELAY_FIELDS: ClassVar[tuple[str, ...]] = (
        "consumed", "published", "confirmed", "acked", "nacked", "returned", "redelivered",
        "in_flight", "buffered", "bytes")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        # computed once: the coordinator adds every worker's counters a few times a second
        return _COUNTER_NAMES

    @classmethod
    def of_relay(cls, relay: object, **handled: int) -> Counters:
        """A relay's counters, plus what the session counted beside it (``handled``)."""
        return cls(**{name: getattr(relay, name) for name in cls.RELAY_FIELDS}, **handled)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.names()}

    def add(self, other: Counters) -> Counters:
        """Both together, as two workers of one shovel: totals and gauges add up, levels take
        the larger (-1, unknown, loses to any known level)."""
        return Counters(**{name: _behind_longer(mine, theirs) if name == "lag_since_ms"
                           else max(mine, theirs) if name in self.LEVELS else mine + theirs
                           for name, mine, theirs in self._pairs(other)})

    def carry(self, finished: Counters) -> Counters:
        """These totals with those of a ``finished`` process or session folded in: its gauges
        were about its own present, so they end with it and these are kept."""
        return Counters(**{name: mine if name in self.GAUGES else mine + theirs
                           for name, mine, theirs in self._pairs(other=finished)})

    def _pairs(self, other: Counters) -> list[tuple[str, int, int]]:
        return [(name, getattr(self, name), getattr(other, name)) for name in self.names()]



_COUNTER_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Counters))


def _behind_longer(a: int, b: int) -> int:
    """Of two lag_since_ms, the one behind longer: unknown (-1) loses to any known, caught up
    (0) to any instant, and of two instants the earlier wins."""
    if a <= 0 or b <= 0:
        return max(a, b)
    return min(a, b)


def lag_seconds(counters: Counters, now: float) -> float | None:
    """Seconds behind at wall-clock ``now``: None unknown, 0.0 caught up, else ``now`` minus
    the instant since which the position is behind (never negative), to the millisecond."""
    since = counters.lag_since_ms
    if since < 0:
        return None
    if since == 0:
        return 0.0
    return round(max(0.0, now - since / 1000), 3)


class StatusSink(Protocol):
    """Receives a shovel's state changes and counter snapshots."""

    def state_changed(self, state: State, reason: str | None, at: float) -> None:
        """``at`` is a wall-clock ``time.time()``; ``reason`` is set for ``terminated``."""

    def counters_changed(self, counters: Counters) -> None:
        """Called at most a few times a second with the current totals."""


@dataclass
class ShovelStatus:
    """An in-process :class:`StatusSink` that simply remembers the latest report."""

    name: str
    source: str = ""
    destination: str = ""
    implementation: str = ""
    state: State = State.STARTING
    reason: str | None = None
    since: float = field(default_factory=time.time)
    counters: Counters = field(default_factory=Counters)

    def state_changed(self, state: State, reason: str | None, at: float) -> None:
        self.state, self.reason, self.since = state, reason, at

    def counters_changed(self, counters: Counters) -> None:
        self.counters = counters
