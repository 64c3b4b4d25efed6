"""What a group of daemons looks like from one member (``group.py`` keeps it up to date): what
a member says of itself (:class:`MemberInfo`, its record), and the view (:class:`GroupView`): the
live members, by slot.
Plain values, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from .spread import PositionKey, assign

__all__ = ["MAX_RECORD_BYTES", "GroupView", "Member", "MemberInfo"]

MAX_RECORD_BYTES = 1 << 20  # a member record larger than this is not read as one


@dataclass(frozen=True)
class MemberInfo:
    """What a member says of itself in its record.

    :param id: the member id the spread rule uses: stable across restarts of the same daemon
        (two members with one id are a configuration error: logged, and counted once)
    :param endpoint: its HTTP API address, when it serves one
    :param positions: the positions it runs now
    :param started: when it started (seconds since the epoch, its own clock: shown, never
        compared)
    :param definitions: a hash of the shovel definitions it runs (the same on every member
        when their configuration files agree)
    """

    id: str
    host: str
    pid: int
    endpoint: str | None = None
    positions: tuple[PositionKey, ...] = ()
    started: float = 0.0
    definitions: str = ""

    def to_json(self) -> bytes:
        return json.dumps({
            "id": self.id, "host": self.host, "pid": self.pid, "endpoint": self.endpoint,
            "positions": [[p.shovel, p.worker] for p in self.positions],
            "started": self.started, "definitions": self.definitions,
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, body: bytes) -> MemberInfo:
        """:raises ValueError: when ``body`` is not a member record"""
        if len(body) > MAX_RECORD_BYTES:
            raise ValueError(f"{len(body)} bytes, more than {MAX_RECORD_BYTES}")
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        ident, host, pid = doc.get("id"), doc.get("host"), doc.get("pid")
        endpoint, started = doc.get("endpoint"), doc.get("started", 0.0)
        definitions = doc.get("definitions", "")
        raw_positions = doc.get("positions", [])
        if not isinstance(ident, str) or not ident:
            raise ValueError("no member id")
        if not isinstance(host, str) or not isinstance(pid, int) or isinstance(pid, bool):
            raise ValueError("host or pid missing")
        if endpoint is not None and not isinstance(endpoint, str):
            raise ValueError("endpoint is not a string")
        if not isinstance(started, (int, float)) or isinstance(started, bool):
            raise ValueError("started is not a number")
        if not isinstance(definitions, str):
            raise ValueError("definitions is not a string")
        if not isinstance(raw_positions, list):
            raise ValueError("positions is not a list")
        positions = []
        for item in raw_positions:
            if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str)
                    or not isinstance(item[1], int) or isinstance(item[1], bool)):
                raise ValueError("a position is not [shovel, index]")
            positions.append(PositionKey(item[0], item[1]))
        return cls(ident, host, pid, endpoint, tuple(positions), float(started), definitions)


@dataclass(frozen=True)
class Member:
    """A live slot: its member's record, once read (None until then)."""

    slot: int
    info: MemberInfo | None

    @property
    def id(self) -> str | None:
        return None if self.info is None else self.info.id


@dataclass(frozen=True)
class GroupView:
    """The group as one member sees it at one moment.

    :param my_slot: this member's slot; None when it is not in the group (not connected,
        or every slot taken)
    :param members: the live slots, this member's included when it holds one, by slot
    """

    cluster: str
    me: str
    my_slot: int | None = None
    members: tuple[Member, ...] = ()

    @property
    def joined(self) -> bool:
        return self.my_slot is not None

    def ids(self) -> frozenset[str]:
        """The ids of the members whose record is known (the spread rule's members): this
        member's included when it is in the group."""
        return frozenset(m.info.id for m in self.members if m.info is not None)

    def member(self, member_id: str) -> Member | None:
        """The member with this id (the lowest slot, should two claim it)."""
        return next((m for m in self.members if m.id == member_id), None)

    def held(self) -> dict[str, tuple[PositionKey, ...]]:
        """What each member's record says it runs, by member id (the lowest slot, should two
        claim one id)."""
        out: dict[str, tuple[PositionKey, ...]] = {}
        for m in self.members:
            if m.info is not None:
                out.setdefault(m.info.id, m.info.positions)
        return out

    def preferred(self, positions: Iterable[PositionKey]) -> dict[PositionKey, str]:
        """The spread rule's member for each position among the members of this view whose
        record is known (:func:`pumpd.group.spread.assign` over :meth:`ids`, sticky to what
        their records say they run): empty when the view has no member."""
        return assign(self.ids(), positions, self.held())

    def runners(self, position: PositionKey) -> tuple[Member, ...]:
        """The members whose record says they run ``position`` (one, normally; none while it
        moves; a record is up to ``info_interval`` old)."""
        return tuple(m for m in self.members
                     if m.info is not None and position in m.info.positions)

    def duplicate_ids(self) -> frozenset[str]:
        """Ids claimed by more than one live slot (a configuration error)."""
        seen: set[str] = set()
        twice: set[str] = set()
        for m in self.members:
            if m.info is not None:
                (twice if m.info.id in seen else seen).add(m.info.id)
        return frozenset(twice)
