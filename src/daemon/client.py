"""``pumpd status``: ask a running daemon over its HTTP endpoint and print what every shovel does.

The table reads like ``rabbitmqctl shovel_status``: one line per shovel with its state, where it
moves messages from and to, when its state last changed, and pumpd's additions (messages per
second, messages in flight, workers alive out of configured, restarts). ``--json`` prints the
daemon's own document, ``{"shovels": [...]}``, each shovel as ``GET /api/shovels`` gives it.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import orjson

from .. import exitcodes
from .http_api import DEFAULT_HOST, DEFAULT_PORT, parse_address

COLUMNS = ("name", "state", "source", "destination", "last change", "msg/s", "in flight",
           "backlog", "workers", "reason")


class Unreachable(Exception):
    """The daemon did not answer."""


def fetch(address: tuple[str, int], path: str, timeout: float = 5.0) -> Any:
    """GET ``path`` from the daemon; the decoded JSON.

    :raises Unreachable: when nothing answers, or the answer is an error.
    """
    host, port = address
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    url = f"http://{netloc}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise Unreachable(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        hint = ""
        if isinstance(why, ConnectionRefusedError):
            hint = (" (is pumpd running? It serves its status on 127.0.0.1:15680 unless started "
                    "with --http HOST:PORT; pass the same --http here)")
        raise Unreachable(f"cannot reach pumpd at {url}: {why}{hint}") from None
    except orjson.JSONDecodeError:
        raise Unreachable(f"{url} did not answer with JSON: is this pumpd's endpoint?") from None


def _source(doc: dict[str, Any]) -> str:
    return f"{doc['src_uri']} [{doc['src_queue'] or 'last declared queue'}]"


def _destination(doc: dict[str, Any]) -> str:
    exchange, key = doc.get("dest_exchange"), doc.get("dest_exchange_key")
    if exchange is None and key is None:
        where = "as published"
    else:
        parts = []
        if exchange is not None:
            parts.append(f"exchange {exchange!r}" if exchange else "default exchange")
        if key is not None:
            parts.append(f"key {key!r}")
        where = ", ".join(parts)
    return f"{doc['dest_uri']} [{where}]"


def _when(since: float | None) -> str:
    if not since:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))


def _backlog(doc: dict[str, Any]) -> str:
    """Messages waiting in the source queue, and how fast that grows (+) or shrinks (-)."""
    backlog, trend = doc.get("source_backlog"), doc.get("source_backlog_trend")
    if backlog is None:
        return "-"
    return f"{backlog:,}" + (f" {trend:+,.0f}/s" if trend else "")


def row(doc: dict[str, Any]) -> tuple[str, ...]:
    workers = f"{doc['workers_running']}/{doc['workers_configured']}"
    if doc.get("restarts"):
        workers += f" ({doc['restarts']} restart{'s' if doc['restarts'] != 1 else ''})"
    state = doc["state"] + (" (removing)" if doc.get("removing") else "")
    return (doc["name"], state, _source(doc), _destination(doc), _when(doc.get("since")),
            f"{doc.get('msg_per_s', 0.0):,.0f}", str(doc["counters"].get("in_flight", 0)),
            _backlog(doc), workers, doc.get("reason") or "")


def render_table(shovels: Sequence[dict[str, Any]]) -> str:
    if not shovels:
        return "no shovels\n"
    rows = [tuple(c.upper() for c in COLUMNS)] + [row(doc) for doc in shovels]
    if not any(r[-1] for r in rows[1:]):  # no shovel has a reason: leave the column out
        rows = [r[:-1] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    numeric = {COLUMNS.index("msg/s"), COLUMNS.index("in flight"), COLUMNS.index("backlog")}
    lines = []
    for r in rows:
        cells = [c.rjust(w) if i in numeric else c.ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="pumpd status",
        description="Show the shovels of a running pumpd daemon (from its HTTP endpoint).",
        epilog=f"exit status: {exitcodes.OK} the daemon answered; {exitcodes.UNAVAILABLE} it "
               f"could not be reached; {exitcodes.CONFIG_ERROR} bad usage.",
    )
    p.add_argument("--http", default=f"{DEFAULT_HOST}:{DEFAULT_PORT}", metavar="HOST:PORT",
                   help=f"the daemon's status endpoint (default {DEFAULT_HOST}:{DEFAULT_PORT})")
    p.add_argument("--json", action="store_true",
                   help='print {"shovels": [...]} as JSON instead of a table')
    ns = p.parse_args(list(argv))
    try:
        address = parse_address(ns.http)
    except ValueError as exc:
        p.error(str(exc))
    if address is None:
        p.error("--http off: there is nothing to ask")
    try:
        shovels = fetch(address, "/api/shovels")
    except Unreachable as exc:
        print(f"pumpd status: {exc}", file=sys.stderr)
        return exitcodes.UNAVAILABLE
    if ns.json:
        sys.stdout.write(orjson.dumps({"shovels": shovels}, option=orjson.OPT_INDENT_2).decode()
                         + "\n")
    else:
        sys.stdout.write(render_table(shovels))
    return exitcodes.OK
