"""``pumpd plan-migration``: a vhost's queues, read from the management API, as a pumpd plan.

One shovel per queue of the source vhost: it consumes the queue as it is (no source
declaration: the queue exists, and declaring it again could only fail on a mismatch), declares
the queue alike on the destination (durability, auto-delete, type and every argument, as the
management API reports them) and publishes each message to the default exchange with the
queue's name, so it lands in the queue of the same name, ``on_confirm``. The plan is printed as
a configuration file in the static form, sorted by queue name, to be read and edited before it
runs.

Left out, with a note on stderr: exclusive queues (owned by one connection of the source, no
other can consume them) and server-named ones (``amq.gen-...``: their name is chosen anew each
time the application declares them). Streams are planned with a consumer offset (``"first"``):
a stream keeps its messages when they are read, so its shovel copies it and then follows it.

The management API is read by :mod:`.management_api` (one request, the source URI's user and
password over https only unless ``--management-insecure-http`` says plain http is fine).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import stat
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from .. import exitcodes
from ..config.clauses import DEFAULT_PREFETCH
from ..config.limits import MAX_SHOVELS_PER_PROCESS
from ..config.parse import ConfigError, parse_config
from ..config.uri import URIError, parse_uri
from .errors import JSON, ConfigImportError
from .management_api import fetch_queues, management_url

__all__ = ["Plan", "main", "plan_migration", "shovels_per_process_for"]

PROG = "pumpd plan-migration"
# One process per shovel up to this many shovels (pumpd's default, the safest); beyond it a plan
# packs them (a few dozen idle worker processes already cost a gigabyte of memory).
PACK_ABOVE = 24
# When packing: at least this many shovels per process, and no more than this many processes
# (each process still gives every shovel its own connections, so a process of 60 is fine).
MIN_PER_PROCESS = 25
MAX_PROCESSES = 16
SERVER_NAMED_PREFIX = "amq.gen-"


@dataclass
class Plan:
    """What :func:`plan_migration` made of a vhost's queues."""

    document: dict[str, JSON]  # the configuration file
    notes: list[str] = field(default_factory=list)  # for stderr
    planned: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # why -> how many queues
    filtered: int = 0  # left out by --include / --exclude

    def summary(self) -> str:
        skipped = sum(self.skipped.values())
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
        line = (f"{self.planned} shovel{'s' if self.planned != 1 else ''} planned, "
                f"{skipped} skipped" + (f" ({why})" if why else ""))
        if self.filtered:
            line += f", {self.filtered} left out by --include/--exclude"
        return line


# ============================================================================================
# The plan


def _shovel_name(queue: str, taken: set[str]) -> str:
    """The queue's name, made a usable shovel name: control characters (which a shovel name may
    not hold) become '_', and a clash gets a numbered suffix."""
    base = "".join("_" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in queue)
    if not base.strip():
        base = "queue"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}~{n}"
    taken.add(name)
    return name


def shovels_per_process_for(count: int) -> int | None:
    """The plan's ``shovels_per_process``: None (one process each) up to :data:`PACK_ABOVE`
    shovels, else at least :data:`MIN_PER_PROCESS` per process and at most
    :data:`MAX_PROCESSES` processes."""
    if count <= PACK_ABOVE:
        return None
    return min(MAX_SHOVELS_PER_PROCESS, max(MIN_PER_PROCESS, math.ceil(count / MAX_PROCESSES)))


def _destination_declaration(queue: dict[str, JSON]) -> dict[str, JSON]:
    name = queue["name"]
    fields: dict[str, JSON] = {"queue": name, "durable": bool(queue.get("durable", True))}
    if queue.get("auto_delete"):
        fields["auto_delete"] = True
    arguments = dict(queue.get("arguments") or {})
    kind = queue.get("type")
    # The arguments as the application declared them, so that its own declaration matches the
    # new queue; a queue of another type than classic gets the x-queue-type that made it so.
    if isinstance(kind, str) and kind != "classic" and "x-queue-type" not in arguments:
        arguments["x-queue-type"] = kind
    if arguments:
        fields["arguments"] = {k: arguments[k] for k in sorted(arguments)}
    return {"queue.declare": fields}


def _why_skipped(queue: dict[str, JSON], name: str) -> tuple[str, str] | None:
    """Why a queue cannot be moved (a key of :attr:`Plan.skipped`, and the note), or None."""
    if queue.get("exclusive"):
        return "exclusive", ("it is exclusive (owned by one connection of the source: no other "
                             "connection can consume it, and it goes away with its owner)")
    if name.startswith(SERVER_NAMED_PREFIX):
        return "server-named", ("it is server-named (the broker picks a new amq.gen- name each "
                                "time the application declares it, so the application will not "
                                "look for this one on the destination)")
    return None


def plan_migration(queues: Sequence[dict[str, JSON]], *, source: str, destination: str,
                   include: Sequence[re.Pattern[str]] = (),
                   exclude: Sequence[re.Pattern[str]] = (),
                   shovels_per_process: int | None = None) -> Plan:
    """One shovel per queue, from ``source`` to the queue of the same name on ``destination``.

    :param queues: the source vhost's queues, as the management API lists them.
    :param source: the source URI, written into every shovel as given.
    :param destination: the destination URI, likewise.
    :param include: keep only queues whose whole name matches one of these (all when empty).
    :param exclude: then leave out those whose whole name matches one of these.
    :param shovels_per_process: written as given; None: chosen by
        :func:`shovels_per_process_for`.
    """
    plan = Plan(document={})
    shovels: dict[str, JSON] = {}
    taken: set[str] = set()
    for queue in sorted(queues, key=lambda q: str(q["name"])):
        name = str(queue["name"])
        if (include and not any(p.fullmatch(name) for p in include)) or \
                any(p.fullmatch(name) for p in exclude):
            plan.filtered += 1
            continue
        skipped = _why_skipped(queue, name)
        if skipped is not None:
            reason, note = skipped
            plan.skipped[reason] = plan.skipped.get(reason, 0) + 1
            plan.notes.append(f"skipped queue {name!r}: {note}")
            continue
        shovel: dict[str, JSON] = {
            "sources": {"broker": source},
            "destinations": {"broker": destination,
                             "declarations": [_destination_declaration(queue)]},
            "queue": name,
            "prefetch_count": DEFAULT_PREFETCH,
            "ack_mode": "on_confirm",
            "publish_fields": {"exchange": "", "routing_key": name},
        }
        if queue.get("type") == "stream":
            # A stream consumer must say where to start (the default is "next": only new
            # messages) and needs a prefetch, which the plan sets.
            shovel["consumer_args"] = {"x-stream-offset": "first"}
            plan.notes.append(f"queue {name!r} is a stream: its shovel reads it from the first "
                              "message and then follows it (a stream keeps what is read, so its "
                              "backlog does not fall, and a restarted shovel starts again from "
                              "the first message: duplicates on the destination); stop the "
                              "shovel once the destination holds every message")
        if queue.get("policy"):
            plan.notes.append(f"queue {name!r} has the policy {queue['policy']!r} on the source; "
                              "policies are not copied (only the queue's own arguments are): "
                              "define it on the destination vhost too")
        shovels[_shovel_name(name, taken)] = shovel
        plan.planned += 1
    per_process = shovels_per_process or shovels_per_process_for(plan.planned)
    if per_process is not None:
        plan.document["shovels_per_process"] = per_process
    plan.document["shovels"] = shovels
    return plan


# ============================================================================================
# The command


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r}: {exc}") from None


def _per_process(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_SHOVELS_PER_PROCESS:
        raise argparse.ArgumentTypeError(
            f"expected an integer from 1 to {MAX_SHOVELS_PER_PROCESS}, got {text!r}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port, got {text!r}")
    return int(text)


DESCRIPTION = """\
Plan the move of a vhost's queues: read the source vhost's queues from its management API and
print a pumpd configuration with one shovel per queue. Each shovel consumes the queue on the
source, declares a queue of the same name alike on the destination (durable or not,
auto-delete, type classic / quorum / stream, every x- argument: TTL, length limit, overflow,
dead-lettering, lazy mode, ...) and publishes every message to it through the default exchange,
acknowledging on the source only what the destination confirmed (ack_mode on_confirm).

Left out with a note on stderr: exclusive queues and server-named (amq.gen-...) ones. A stream
is read from its first message (consumer_args x-stream-offset "first"). Policies, exchanges,
bindings, users and permissions are not copied: recreate them on the destination first (e.g.
`rabbitmqctl export_definitions` / `import_definitions`). Above 24 queues the plan sets
"shovels_per_process" so that the shovels share a few worker processes.

Read and edit the plan, validate it with `pumpd check --config FILE`, run it with
`pumpd --config FILE`, and watch `pumpd status` (see docs/migration.md)."""

EPILOG = f"""\
example:
  pumpd plan-migration --source 'amqp://admin:secret@old-host/orders' \\
      --destination 'amqp://admin:secret@new-host/orders' --exclude 'tmp\\..*' -o plan.json

exit status: {exitcodes.OK} the plan was printed; {exitcodes.CONFIG_ERROR} bad usage or nothing to plan;
{exitcodes.UNAVAILABLE} the management API could not be read."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", required=True, metavar="URI",
                   help="the source broker and vhost (amqp[s]://user:password@host[:port]/vhost); "
                        "its user and password also log in to the management API")
    p.add_argument("--destination", required=True, metavar="URI",
                   help="the destination broker and vhost; written into the plan as given")
    p.add_argument("--include", action="append", type=_regex, default=[], metavar="REGEX",
                   help="plan only queues whose whole name matches (repeatable: any of them)")
    p.add_argument("--exclude", action="append", type=_regex, default=[], metavar="REGEX",
                   help="leave out queues whose whole name matches (repeatable; applied after "
                        "--include)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--management-port", type=_port, metavar="PORT",
                       help="the management API's port on the source host (default 15672, or "
                            "15671 over https for an amqps source)")
    where.add_argument("--management-url", metavar="URL",
                       help="the management API's base URL, e.g. https://mgmt.example:443/rabbit "
                            "(when it is not on the source host)")
    p.add_argument("--management-insecure-http", action="store_true",
                   help="send the source's user and password to the management API over plain "
                        "http (by default only https is used for them)")
    p.add_argument("--shovels-per-process", type=_per_process, metavar="K",
                   help="write \"shovels_per_process\": K into the plan (default: none up to 24 "
                        f"shovels, then at least {MIN_PER_PROCESS} per process and at most "
                        f"{MAX_PROCESSES} processes)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the plan to FILE (mode 0600: it holds the URIs' passwords) "
                        "instead of stdout")
    return p


def _write(path: str | None, text: str) -> None:
    """The plan on stdout, or in ``path``: written to a new file (mode 0600: the plan holds the
    URIs' passwords) in the same directory and renamed over ``path``, so that neither an existing
    file's mode nor a symbolic link decides where the passwords go.

    :raises OSError: when ``path`` is a symbolic link or not a regular file, or on a write error.
    """
    if path is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISLNK(st.st_mode):
            raise OSError(f"is a symbolic link: not written through it (give the file it points "
                          f"to, {os.path.realpath(path)!r}, if that is where the plan goes)")
        if not stat.S_ISREG(st.st_mode):
            raise OSError("is not a regular file: not replaced")
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=directory)  # created 0600, O_EXCL: no link followed
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # replaces the name itself, never what a link points to
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv: Sequence[str]) -> int:
    """``pumpd plan-migration``: print (or write) the plan; notes and a summary on stderr."""
    p = parser()
    ns = p.parse_args(list(argv))
    try:
        source, destination = parse_uri(ns.source), parse_uri(ns.destination)
    except URIError as exc:
        p.error(str(exc))
    if source.vhost == "":
        # `GET /api/queues/` would list the queues of every vhost: never plan from that.
        p.error(f"--source {source.redacted()!r} names the empty vhost (a URI ending in '/'):"
                     " write the vhost after the host, e.g. amqp://host/%2F for the default "
                     "vhost '/', or leave the path out (amqp://host)")
    if (source.effective_host, source.port, source.vhost) == \
            (destination.effective_host, destination.port, destination.vhost):
        p.error("the source and the destination are the same vhost of the same broker: "
                     "every message would be published back into its own queue")
    base = ns.management_url or management_url(source, ns.management_port)
    try:
        queues = fetch_queues(base, source, insecure_http=ns.management_insecure_http)
    except ConfigImportError as exc:
        print(f"pumpd: plan-migration: {exc}", file=sys.stderr)
        return exitcodes.UNAVAILABLE
    plan = plan_migration(queues, source=ns.source, destination=ns.destination,
                          include=ns.include, exclude=ns.exclude,
                          shovels_per_process=ns.shovels_per_process)
    for note in plan.notes:
        print(f"pumpd: plan-migration: note: {note}", file=sys.stderr)
    if not plan.planned:
        print(f"pumpd: plan-migration: nothing to plan in vhost {source.vhost!r} "
              f"({len(queues)} queues: {plan.summary()})", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    try:  # a queue's arguments come from the management API: they may be past pumpd's bounds
        parse_config(plan.document, source="the plan")
    except ConfigError as exc:
        print(f"pumpd: plan-migration: the plan does not validate (a queue as the management "
              f"API describes it cannot be moved as it is): {exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    text = orjson.dumps(plan.document, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n"
    try:
        _write(ns.output, text)
    except OSError as exc:
        print(f"pumpd: plan-migration: {ns.output}: {exc.strerror or exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    written = f"; written to {ns.output}" if ns.output else ""
    print(f"pumpd: plan-migration: {source.redacted()}: {plan.summary()}{written}",
          file=sys.stderr)
    return exitcodes.OK
