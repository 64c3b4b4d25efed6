"""``pumpd status --cluster`` and the member column of ``pumpd status``: what a member of a group
says of the group (``GET /api/cluster``, :mod:`pumpd.supervisor.membership`), as text."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

MEMBER_COLUMNS = ("id", "host", "pid", "endpoint", "held", "definitions")


def members_of(doc: dict[str, Any]) -> str | None:
    """The members running a shovel's workers (``-`` for a worker no member runs), or None
    outside a group (no worker has a ``holder``)."""
    workers = doc.get("workers", [])
    if not any("holder" in w for w in workers):
        return None
    return ", ".join(sorted({w.get("holder") or "-" for w in workers})) or "-"


def render_members(cluster: dict[str, Any], printable: Callable[[str], str]) -> str:
    """The group's members as one member sees them, and a warning when their definitions
    differ (their configuration files are not the same). ``printable`` escapes what came from
    outside (the client's: no terminal escape sequence gets through)."""
    head = (f"group {cluster['cluster']}: {len(cluster['members'])} member(s) seen by "
            f"{cluster['me']}" + ("" if cluster["joined"] else
                                  f" (not joined: {cluster.get('error') or 'connecting'})")
            + f"; coordination broker {cluster.get('coordination_uri')}")
    rows: list[Sequence[str]] = [tuple(c.upper() for c in MEMBER_COLUMNS)]
    for m in cluster["members"]:
        me = " (this one)" if m["id"] == cluster["me"] else ""
        rows.append(tuple(printable(str(c)) for c in (
            m["id"] + me, m["host"], m["pid"], m.get("endpoint") or "-", m["held"],
            m.get("definitions") or "-")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(MEMBER_COLUMNS))]
    lines = [printable(head)] + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
                                 .rstrip() for r in rows]
    if not cluster.get("definitions_agree", True):
        lines.append("warning: the members' shovel definitions differ (see DEFINITIONS): a "
                     "group runs one configuration file, the same on every member; copy it to "
                     "every member and reload each (SIGHUP / systemctl reload pumpd)")
    return "\n".join(lines) + "\n"
