"""``pumpd status``: ask a running daemon over its HTTP endpoint and print what every shovel does.

The table reads like ``rabbitmqctl shovel_status``: one line per shovel with its state, where it
moves messages from and to, when its state last changed, and pumpd's additions (messages per
second, messages in flight, workers alive out of configured, restarts). Above the table, one
line says where a migration stands (shovels by state, messages left in the source queues, the
rate, the time to empty them). ``--json`` prints ``{"summary": {...}, "shovels": [...]}``: the
same summary (:func:`pumpd.supervisor.report.summary_doc`) and each shovel as ``GET /api/shovels``
gives it.

The daemon's token is found as the daemon made it (:mod:`pumpd.http.tokenfile`):
``--http-token-file``, else ``$PUMPD_TOKEN_FILE``, else the record the daemon listening on that
port left for its local clients. Text that comes from outside (names, URIs, a broker's reply
text) is printed with control characters escaped: no terminal escape sequence gets through.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
import time
import unicodedata
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from .. import exitcodes
from ..http import tokenfile
from ..http.server import DEFAULT_HOST, DEFAULT_PORT, parse_address
from ..supervisor.report import summary_doc

COLUMNS = ("name", "state", "source", "destination", "last change", "msg/s", "in flight",
           "backlog", "lag", "workers", "reason")


class Unreachable(Exception):
    """The daemon did not answer."""


@dataclass(frozen=True)
class Endpoint:
    """Where the daemon answers, and how to be let in."""

    url: str  # scheme://host:port
    token: str | None = field(default=None, repr=False)
    context: ssl.SSLContext | None = None


def printable(text: str) -> str:
    """``text`` with every control or format character (ESC, CR, BEL, bidi overrides...)
    escaped as ``\\xNN`` / ``\\uNNNN``: safe to print on a terminal."""
    if text.isprintable():
        return text
    out = []
    for c in text:
        if c.isprintable() or c == " ":
            out.append(c)
        elif unicodedata.category(c) in ("Zs",):
            out.append(" ")
        else:
            code = ord(c)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def json_safe(text: str) -> str:
    """JSON text with the control and format characters that JSON leaves as they are (DEL, the
    C1 controls such as CSI, bidi overrides...) escaped as ``\\uXXXX``: the same document."""
    if text.isascii() and "\x7f" not in text:
        return text
    out = []
    for c in text:
        if c.isprintable() or c in "\n ":
            out.append(c)
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            high, low = divmod(ord(c) - 0x10000, 0x400)
            out.append(f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}")
    return "".join(out)


def connect_args(p: argparse.ArgumentParser) -> None:
    """The options every command that talks to a running daemon takes."""
    # Not "[https://]HOST:PORT": everything printed is redacted, and a URI's "HOST:WORD" reads
    # as a user and password there (the redactor errs on the side of hiding).
    p.add_argument("--http", default=f"{DEFAULT_HOST}:{DEFAULT_PORT}", metavar="HOST:PORT",
                   help=f"the daemon's status endpoint (default {DEFAULT_HOST}:{DEFAULT_PORT}); "
                        "prefix it with https:// when the daemon serves TLS (found by itself for "
                        "a local daemon)")
    p.add_argument("--http-token-file", metavar="FILE",
                   help=f"the daemon's token file (default: ${tokenfile.ENV_TOKEN_FILE}, else "
                        "the one the daemon on that port announced to its local user)")
    p.add_argument("--http-ca", metavar="FILE",
                   help="CA certificates (PEM) to verify an https endpoint with (default: the "
                        "system's, plus the certificate a local daemon announced)")


def endpoint(p: argparse.ArgumentParser, ns: argparse.Namespace) -> Endpoint:
    """The endpoint ``--http`` names, with its token and TLS context found.

    Exits with a usage error (2) on a bad ``--http`` or an unreadable token file.
    """
    text = ns.http.strip()
    scheme = None
    for prefix in ("http://", "https://"):
        if text.lower().startswith(prefix):
            scheme, text = prefix[:-3], text[len(prefix):].rstrip("/")
    try:
        address = parse_address(text)
    except ValueError as exc:
        p.error(str(exc))
    if address is None:
        p.error("--http off: there is nothing to ask")
    host, port = address
    record = tokenfile.find_record(port)
    token_file = ns.http_token_file or os.environ.get(tokenfile.ENV_TOKEN_FILE) or (
        record.token_file if record is not None else None)
    token = None
    if token_file:
        try:
            token = tokenfile.read(token_file)
        except tokenfile.TokenFileError as exc:
            p.error(str(exc))
    if scheme is None:
        scheme = "https" if record is not None and record.tls else "http"
    context = None
    if scheme == "https":
        context = ssl.create_default_context(cafile=ns.http_ca)
        if ns.http_ca is None and record is not None and record.tls_cert:
            try:  # the local daemon's own certificate: a self-signed endpoint is trusted
                context.load_verify_locations(cafile=record.tls_cert)
                context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
            except (OSError, ssl.SSLError):
                pass
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return Endpoint(f"{scheme}://{netloc}", token, context)


BUSY_PAUSE = 0.2  # seconds before asking again a daemon whose endpoint was full


class _Busy(Exception):
    """The endpoint had no room: a 503, or (for a read) a connection closed before any answer."""


def request(ep: Endpoint, method: str, path: str, timeout: float = 5.0) -> Any:
    """``method path`` on the daemon; the decoded JSON (None for an empty answer). Asked again
    while the endpoint is full (its connections held by other clients), until ``timeout``.

    :raises Unreachable: when nothing answers, or the answer is an error.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _request_once(ep, method, path, timeout)
        except _Busy as exc:
            timeout = deadline - time.monotonic() - BUSY_PAUSE
            if timeout <= 0:
                raise Unreachable(str(exc)) from None
            time.sleep(BUSY_PAUSE)


def _request_once(ep: Endpoint, method: str, path: str, timeout: float) -> Any:
    url = ep.url + path
    headers = {"Authorization": f"Bearer {ep.token}"} if ep.token else {}
    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ep.context) as response:
            raw = response.read(64 * 1024 * 1024)
            return orjson.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        refusal = _refusal(url, exc)
        if exc.code == 503 and "too many connections" in refusal:
            raise _Busy(refusal) from None  # full: no request of this one was read
        raise Unreachable(refusal) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        if method in ("GET", "HEAD") and isinstance(why, ConnectionError | ssl.SSLEOFError) \
                and not isinstance(why, ConnectionRefusedError):
            # Closed before any answer: a full endpoint closed it to make room before reading
            # it. A read is safe to ask again; a change is not.
            raise _Busy(f"cannot reach pumpd at {url}: {why}") from None
        hint = ""
        if isinstance(why, ConnectionRefusedError):
            hint = (" (is pumpd running? It serves its status on 127.0.0.1:15680 unless started "
                    "with --http HOST:PORT; pass the same --http here)")
        raise Unreachable(f"cannot reach pumpd at {url}: {why}{hint}") from None
    except orjson.JSONDecodeError:
        raise Unreachable(f"{url} did not answer with JSON: is this pumpd's endpoint?") from None


def _refusal(url: str, exc: urllib.error.HTTPError) -> str:
    try:
        reason = str(orjson.loads(exc.read(64 * 1024)).get("reason", ""))
    except (orjson.JSONDecodeError, AttributeError, OSError):
        reason = ""
    text = f"{url}: HTTP {exc.code} {exc.reason}" + (f": {reason}" if reason else "")
    if exc.code == 401:
        text += (f" (give the daemon's token file with --http-token-file FILE or "
                 f"${tokenfile.ENV_TOKEN_FILE}; by default it is beside its state file, "
                 "NAME.runtime.token)")
    return printable(text)


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


def _lag(doc: dict[str, Any]) -> str:
    """How far behind: the age of the oldest message not yet forwarded, and how many are
    waiting; "-" for what is not known."""
    seconds, messages = doc.get("lag_seconds"), doc.get("lag_messages")
    if seconds is None and messages is None:
        return "-"
    age = "-" if seconds is None else f"{seconds:,.1f} s"
    return age if messages is None else f"{age} ({messages:,} msgs)"


def row(doc: dict[str, Any]) -> tuple[str, ...]:
    workers = f"{doc['workers_running']}/{doc['workers_configured']}"
    notes = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in (
        (doc.get("restarts"), "restart"),
        (doc["counters"].get("stall_restarts"), "stall restart")) if n]
    if notes:  # worker processes replaced; sessions restarted because they were stalled
        workers += f" ({', '.join(notes)})"
    state = doc["state"] + (" (removing)" if doc.get("removing") else "")
    if doc.get("internal"):
        state += " (protected)"
    cells = (doc["name"], state, _source(doc), _destination(doc), _when(doc.get("since")),
             f"{doc.get('msg_per_s', 0.0):,.0f}", str(doc["counters"].get("in_flight", 0)),
             _backlog(doc), _lag(doc), workers, doc.get("reason") or "")
    return tuple(printable(str(c)) for c in cells)


def render_table(shovels: Sequence[dict[str, Any]]) -> str:
    if not shovels:
        return "no shovels\n"
    from .group_status import members_of

    rows = [tuple(c.upper() for c in COLUMNS)] + [row(doc) for doc in shovels]
    members = [members_of(doc) for doc in shovels]
    if any(m is not None for m in members):  # a group's: which member runs each shovel
        rows = [(*r[:-1], m, *r[-1:]) for r, m in
                zip(rows, ["MEMBER", *(printable(m or "-") for m in members)], strict=True)]
    if not any(r[-1] for r in rows[1:]):  # no shovel has a reason: leave the column out
        rows = [r[:-1] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    numeric = {COLUMNS.index(c) for c in ("msg/s", "in flight", "backlog", "lag")}
    lines = []
    for r in rows:
        cells = [c.rjust(w) if i in numeric else c.ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min"


def render_summary(summary: dict[str, Any]) -> str:
    """One line: ``300 shovels: 290 running, 10 starting; 123,456 messages left in the source
    queues, 12,345 msg/s, about 10 s to empty``, saying "unknown" for what is not known."""
    n = summary["shovels"]
    if n == 0:
        return "0 shovels (none defined: nothing to move)\n"
    states = ", ".join(f"{count} {state}" for state, count in summary["states"].items())
    line = f"{n} shovel{'s' if n != 1 else ''}: {states}; "
    backlog, known = summary["source_backlog"], summary["source_backlog_known"]
    if backlog is None:
        line += "messages left in the source queues: unknown (not read yet)"
    else:
        line += f"{backlog:,} message{'s' if backlog != 1 else ''} left in the source queues"
        if known < n:
            line += f" (known for {known} of {n} shovels)"
    line += f", {summary['msg_per_s']:,.0f} msg/s, "
    seconds = summary["seconds_to_empty"]
    if seconds == 0:
        line += "the source queues are empty"
    elif seconds is not None and seconds < 1:
        line += "under a second to empty"
    elif seconds is not None:
        line += f"about {_duration(seconds)} to empty"
    elif backlog is not None and summary["msg_per_s"] == 0:
        line += "time to empty unknown (nothing is moving)"
    else:
        line += "time to empty unknown"
    return line + "\n"


def status_parser() -> argparse.ArgumentParser:
    """``pumpd status``'s arguments."""
    p = argparse.ArgumentParser(
        prog="pumpd status",
        description="Show the shovels of a running pumpd daemon (from its HTTP endpoint).",
        epilog=f"exit status: {exitcodes.OK} the daemon answered; {exitcodes.UNAVAILABLE} it "
               f"could not be reached; {exitcodes.CONFIG_ERROR} bad usage.",
    )
    connect_args(p)
    p.add_argument("--json", action="store_true",
                   help='print {"summary": {...}, "shovels": [...]} as JSON instead of the '
                        "summary line and the table")
    p.add_argument("--group", "--cluster", dest="cluster", action="store_true",
                   help="list the members of this daemon's group instead (GET /api/group; "
                        "--cluster is an alias)")
    return p


def main(argv: Sequence[str]) -> int:
    p = status_parser()
    ns = p.parse_args(list(argv))
    ep = endpoint(p, ns)
    if ns.cluster:
        return _cluster(ep, ns.json)
    try:
        shovels = request(ep, "GET", "/api/shovels")
    except Unreachable as exc:
        print(f"pumpd status: {exc}", file=sys.stderr)
        return exitcodes.UNAVAILABLE
    summary = summary_doc(shovels)
    if ns.json:
        sys.stdout.write(json_safe(orjson.dumps({"summary": summary, "shovels": shovels},
                                                option=orjson.OPT_INDENT_2).decode()) + "\n")
    elif shovels:
        sys.stdout.write(render_summary(summary) + "\n" + render_table(shovels))
    else:
        sys.stdout.write(render_table(shovels))
    return exitcodes.OK


def _cluster(ep: Endpoint, as_json: bool) -> int:
    from .group_status import render_members

    try:
        cluster = request(ep, "GET", "/api/group")
    except Unreachable as exc:
        print(f"pumpd status --cluster: {exc}", file=sys.stderr)
        return exitcodes.UNAVAILABLE
    sys.stdout.write(json_safe(orjson.dumps(cluster, option=orjson.OPT_INDENT_2).decode()) + "\n"
                     if as_json else render_members(cluster, printable))
    return exitcodes.OK


def delete_parser() -> argparse.ArgumentParser:
    """``pumpd delete-shovel``'s arguments."""
    p = argparse.ArgumentParser(
        prog="pumpd delete-shovel",
        description="Remove a shovel added at run time from a running daemon (its workers "
                    "drain first), as `rabbitmqctl delete_shovel` does.",
        epilog=f"exit status: {exitcodes.OK} deleted; {exitcodes.UNAVAILABLE} refused or not "
               f"reached; {exitcodes.CONFIG_ERROR} bad usage.",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--force", action="store_true",
                   help='delete it even if it is protected ("internal": true)')
    connect_args(p)
    return p


def main_delete(argv: Sequence[str]) -> int:
    """``pumpd delete-shovel NAME [--force]``: remove a shovel added at run time."""
    p = delete_parser()
    ns = p.parse_args(list(argv))
    ep = endpoint(p, ns)
    path = "/api/shovels/" + quote(ns.name, safe="") + ("?force=true" if ns.force else "")
    try:
        request(ep, "DELETE", path)
    except Unreachable as exc:
        print(f"pumpd delete-shovel: {exc}", file=sys.stderr)
        return exitcodes.UNAVAILABLE
    print(f"shovel {printable(ns.name)!r}: deleted (its workers drain)")
    return exitcodes.OK
