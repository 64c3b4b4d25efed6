"""``pumpd pause NAME`` / ``pumpd resume NAME``: pause or resume a shovel of a running daemon
through its HTTP endpoint (``POST /api/shovels/NAME/pause`` or ``/resume``), finding the endpoint
and its token as ``pumpd status`` does (:mod:`pumpd.cli.client`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from urllib.parse import quote

from .. import exitcodes
from .client import Unreachable, connect_args, endpoint, printable, request

PAUSE_HELP = """\
Pause a shovel of a running daemon: each of its workers stops consuming (basic.cancel),
publishes what it holds, waits for the destination's confirms, acks those messages at the
source and closes its connections. Everything else stays in the source queue. The shovel then
shows state "paused" until `pumpd resume NAME`. The pause is kept in the daemon's state file: a
restarted daemon starts the shovel paused. In a group (--cluster) it is group-wide: every
member pauses the shovel within a few seconds."""

RESUME_HELP = """\
Resume a paused shovel of a running daemon: its workers connect and consume again (in a group,
on every member within a few seconds)."""


def parser(paused: bool) -> argparse.ArgumentParser:
    """``pumpd pause``'s (or ``resume``'s) arguments."""
    verb = "pause" if paused else "resume"
    p = argparse.ArgumentParser(
        prog=f"pumpd {verb}", description=PAUSE_HELP if paused else RESUME_HELP,
        epilog=f"exit status: {exitcodes.OK} {verb}d (or already so); {exitcodes.UNAVAILABLE} "
               f"refused (no such shovel, a bad token, a state file that cannot be read: "
               f"fix it or remove it) or the daemon not reached; "
               f"{exitcodes.CONFIG_ERROR} bad usage.",
    )
    p.add_argument("name", metavar="NAME", help="the shovel's name")
    connect_args(p)
    return p


def main(argv: Sequence[str], paused: bool) -> int:
    verb = "pause" if paused else "resume"
    p = parser(paused)
    ns = p.parse_args(list(argv))
    ep = endpoint(p, ns)
    try:
        doc = request(ep, "POST", f"/api/shovels/{quote(ns.name, safe='')}/{verb}")
    except Unreachable as exc:
        print(f"pumpd {verb}: {exc}", file=sys.stderr)
        return exitcodes.UNAVAILABLE
    note = doc.get("note") if isinstance(doc, dict) else None
    print(f"shovel {printable(ns.name)!r}: {printable(str(note or verb + 'd'))}")
    return exitcodes.OK
