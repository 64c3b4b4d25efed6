"""When a member of a group hands a position over or takes one up: hysteresis over the view,
pure (the caller passes the monotonic clock).

The spread rule (:mod:`pumpd.group.spread`) names a preferred member for every position, and
the answer changes the moment the view does. Acting on every change would flap: a member that
restarts leaves the view and comes back seconds later, and each time the others would drain
and release its positions, then hand them back. Two delays stop that:

- *settle*: a running position that another member is now preferred for is released only once
  that member has been in the view without a break for ``settle`` seconds. A member that
  restarts is new again when it comes back, so its positions move back to it only after it
  stayed.
- *grace*: a free position (no lease holder) that this member is not preferred for is taken
  only after it has been seen free without a break for ``grace`` seconds: the preferred member
  had its chance first. So a position never stays unrun because its preferred member is
  slow or gone: the others step in after ``grace``.

A member always may take what it is preferred for, at once. When it is not in the group (no
view: the coordination broker cannot be reached, or no member id is known), nothing is
preferred for it: it releases nothing, and takes only positions free for ``grace``. The leases
keep every position exactly-once whatever these delays decide; they only decide how often
positions move.
"""

from __future__ import annotations

from collections.abc import Iterable

from .spread import PositionKey

__all__ = ["Handover"]


class Handover:
    """The two delays of the module docstring, for one member.

    Feed it what is seen (:meth:`see_members` on every view, :meth:`see_free` on every lease
    probe), then ask :meth:`may_take` and :meth:`should_release`.
    """

    def __init__(self, *, settle: float = 10.0, grace: float = 10.0) -> None:
        if settle < 0 or grace < 0:
            raise ValueError("settle and grace are durations: 0 or more seconds")
        self.settle = settle
        self.grace = grace
        self._member_since: dict[str, float] = {}  # member id: first seen in this unbroken run
        self._free_since: dict[PositionKey, float] = {}  # position: first seen free, unbroken

    def see_members(self, now: float, members: Iterable[str]) -> None:
        """The members in the view at ``now``: a member absent from it starts over when it
        comes back."""
        present = set(members)
        for gone in self._member_since.keys() - present:
            del self._member_since[gone]
        for member in present:
            self._member_since.setdefault(member, now)

    def see_free(self, now: float, position: PositionKey, free: bool) -> None:
        """Whether ``position``'s lease was seen free at ``now`` (held: the run of free
        sightings starts over)."""
        if free:
            self._free_since.setdefault(position, now)
        else:
            self._free_since.pop(position, None)

    def forget(self, positions: Iterable[PositionKey]) -> None:
        """Positions that are gone (a shovel deleted): drop what was seen of them."""
        for p in positions:
            self._free_since.pop(p, None)

    def member_settled(self, now: float, member: str) -> bool:
        """Whether ``member`` has been in the view, unbroken, for ``settle`` seconds."""
        since = self._member_since.get(member)
        return since is not None and now - since >= self.settle

    def free_for(self, now: float, position: PositionKey) -> float:
        """For how long ``position`` has been seen free, unbroken (0 when not)."""
        since = self._free_since.get(position)
        return 0.0 if since is None else max(0.0, now - since)

    def may_take(self, now: float, position: PositionKey, preferred: str | None,
                 me: str | None) -> bool:
        """Whether this member may try ``position``'s lease now: at once when it is the
        preferred member, else once the position has been free for ``grace``.

        :param preferred: the spread rule's member for ``position`` (None: the view has none)
        :param me: this member's id, or None when it is not in the group
        """
        if me is not None and preferred == me:
            return True
        since = self._free_since.get(position)
        return since is not None and now - since >= self.grace

    def should_release(self, now: float, preferred: str | None, me: str | None) -> bool:
        """Whether this member, running a position, should hand it over gracefully now: when
        another member is preferred for it and has settled in the view.

        :param preferred: the spread rule's member for the position (None: the view has none)
        :param me: this member's id, or None when it is not in the group (then it keeps what
            it runs: no view says who else should)
        """
        if me is None or preferred is None or preferred == me:
            return False
        return self.member_settled(now, preferred)
