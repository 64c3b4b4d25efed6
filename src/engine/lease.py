"""A position's lease: the right to run one position (shovel x worker index) of a group of
daemons, held on that position's own source connection.

The lease is an exclusive queue declared on the source channel before ``basic.consume``
(``exclusive``, not durable, not auto-deleted). The broker grants an exclusive queue to one
connection at a time, answers ``405 RESOURCE_LOCKED`` to every other one, and deletes the queue
when its connection closes: the lease and the consumer share fate. A member whose source
connection died (a crash, a partition, a heartbeat timeout) has lost the lease at the same
moment as its consumer, and its unacknowledged deliveries go back to the queue for the next
holder. No clock is compared across machines and no other service is involved.

Which positions a member *tries* to hold is a :class:`LeaseGate`'s business (the group's even
spread); the default gate tries every position and never lets one go.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from ..config.model import Declaration
from .link import Link, LinkError

__all__ = ["ALWAYS", "GATE_POLL", "RESOURCE_LOCKED", "LeaseGate", "LeaseRefused", "LeaseSpec", "take_lease",
           "watch_gate"]

RESOURCE_LOCKED = 405  # the broker's answer to a declare of another connection's exclusive queue


@dataclass(frozen=True)
class LeaseSpec:
    """What a pump needs to run a position of a group: its lease queue and how often a standby
    position asks for it again."""

    name: str
    retry: float = 2.0  # seconds, jittered by +-25 %
    group: str | None = None  # the group's name (a stream destination's producer carries it)


class LeaseGate(Protocol):
    """The group's say over one position (the even spread decides; the lease still fences)."""

    def take_now(self) -> bool:
        """Whether the pump may try to take the lease now (asked before every attempt)."""

    def release_now(self) -> bool:
        """Whether the pump should hand the position over now (asked about once a second while
        it runs): it then stops consuming, settles what it holds, closes its source connection
        (the lease goes with it) and stands by."""


class _Always:
    """The default gate: try every position at once, never let one go."""

    def take_now(self) -> bool:
        return True

    def release_now(self) -> bool:
        return False


ALWAYS: LeaseGate = _Always()


class LeaseRefused(Exception):
    """Another connection holds the lease: this position stands by (not a failure)."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"lease {name!r} is held by another connection (another member runs "
                         "this position)")
        self.name = name
        self.detail = detail  # the broker's own words


def lease_declaration(name: str) -> Declaration:
    """The lease queue's declaration. ``x-queue-type: classic``: a vhost whose default queue
    type is quorum would refuse an exclusive queue otherwise."""
    return Declaration("queue.declare", {
        "queue": name, "exclusive": True, "durable": False, "auto_delete": False,
        "arguments": {"x-queue-type": "classic"}})


async def take_lease(link: Link, name: str) -> None:
    """Declare the lease queue on ``link``'s channel (the source channel).

    :raises LeaseRefused: another connection holds it (the broker has closed the channel, and
        with it this link)
    :raises LinkError: any other failure
    """
    try:
        await link.declare([lease_declaration(name)])
    except LinkError as exc:
        if exc.reply_code == RESOURCE_LOCKED:
            raise LeaseRefused(name, str(exc)) from None
        raise
    link.last_declared_queue = ""  # queue "" means the last queue of the shovel's declarations


GATE_POLL = 1.0  # seconds between questions to a gate whether to hand the position over


async def watch_gate(gate: LeaseGate, stop: asyncio.Event, released: asyncio.Event,
                     until: asyncio.Event) -> None:
    """Set ``until`` when ``stop`` is set or ``gate`` asks for the position back (then
    ``released`` too): the session stops consuming and settles what it holds, as on a stop."""
    while not stop.is_set():
        if gate.release_now():
            released.set()
            break
        try:
            await asyncio.wait_for(stop.wait(), timeout=GATE_POLL)
        except asyncio.TimeoutError:
            pass
    until.set()
