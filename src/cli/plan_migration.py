"""``pumpd plan-migration``: the command. The plan itself is
:func:`pumpd.importers.migration_plan.plan_migration`'s; this module reads the command line, the
management API's answer and writes the plan where it was asked to go."""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
import tempfile
from collections.abc import Sequence

import orjson

from .. import exitcodes
from ..config.limits import MAX_SHOVELS_PER_PROCESS
from ..config.parse import ConfigError, parse_config
from ..config.uri import URIError, parse_uri
from ..importers.import_errors import ConfigImportError
from ..importers.management_api import fetch_queues, management_url
from ..importers.migration_plan import MAX_PROCESSES, MIN_PER_PROCESS, PROG, plan_migration


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
