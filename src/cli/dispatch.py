"""The ``pumpd`` command line: the daemon (default), ``status``, ``check`` and the importers.

``pumpd --config FILE`` validates the configuration and the state file, then hands over to the
coordinator (:mod:`pumpd.supervisor.coordinator`); ``--single-process`` runs the shovels in this process
instead (:mod:`pumpd.engine.runner`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .. import exitcodes
from ..version import __version__

if TYPE_CHECKING:
    from ..config.model import PumpConfig, ShovelConfig

DESCRIPTION = """\
pumpd moves messages from a queue on one broker to an exchange or address on another (or the
same), reliably and continually, over AMQP 0-9-1 or AMQP 1.0 on either side: the RabbitMQ Shovel,
run outside the broker.

  pumpd --config shovels.json          run the daemon: a coordinator and one worker process per
                                       shovel (N with --workers N), until SIGTERM / SIGINT
  pumpd status [--json] [--group]      show what every shovel of a running daemon is doing
                                       (--group: the members of its group)
  pumpd delete-shovel NAME [--force]   remove a run-time shovel (--force: a protected one)
  pumpd pause NAME                     stop a shovel consuming: what it holds is delivered, the
                                       rest stays in the source (kept across restarts)
  pumpd resume NAME                    let a paused shovel consume again
  pumpd import-erlang rabbitmq.config  convert the plugin's {rabbitmq_shovel, ...} clause to JSON
  pumpd import-definitions defs.json   convert dynamic shovels from `rabbitmqctl export_definitions`
  pumpd check --config shovels.json    validate a configuration and print what it means
  pumpd schema                         print the configuration's JSON Schema (for editors)
  pumpd --version                      print pumpd's version
  pumpd plan-migration --source URI --destination URI
                                       plan a vhost's move: one shovel per queue, from the
                                       source's management API (see --help)

The daemon: the coordinator starts a worker process per shovel and supervises it through a slot
in shared memory (state, heartbeat, counters). A worker that exits or stops heartbeating is
replaced, with exponential backoff and jitter; a shovel that terminates by design
(reconnect_delay 0 after a failure, or its delete_after limit) stays terminated and says why.
With more than one worker, a shovel's workers are competing consumers on its source queue: more
throughput, no ordering. One worker (the default) keeps the source queue's order.
--shovels-per-process K lets one worker process run up to K shovels' workers on its event loop
(for many mostly idle shovels); each is still supervised, reported and changed on its own.

Signals: SIGTERM / SIGINT drain every worker (stop consuming, publish what is held, wait up to
--drain-timeout for outstanding confirms, ack, close) and exit 0. SIGHUP reads the configuration
again: changed shovels restart, new ones start, removed ones stop, the rest are not touched (an
invalid file is refused and logged; the running shovels carry on).

Status over HTTP (127.0.0.1:15680 unless --http says otherwise). Every request but the status
page needs the bearer token of the daemon's token file (made at first start, mode 0600, beside
the state file: NAME.runtime.token; pumpd status finds it by itself); --http-open-reads and
--metrics-open open the reads. Host must name the endpoint; a non-loopback --http needs TLS.
  GET    /api/shovels                list of shovels: state, URIs (redacted), rates, counters,
                                     workers (pid, state, restarts, heartbeat age, counters)
  GET    /api/shovels/NAME           one shovel
  GET    /api/overview               the daemon itself
  GET    /metrics                    Prometheus text, series labelled shovel="NAME", worker="i"
  POST   /api/shovels/NAME/restart   restart a shovel's workers
  POST   /api/shovels/NAME/pause     pause a shovel (.../resume: resume it)
  PUT    /api/shovels/NAME           add or replace a run-time shovel; body: its definition (JSON,
                                     either configuration form); kept in the state file
  DELETE /api/shovels/NAME           remove a run-time shovel (its workers drain first)
  (?force=true on PUT / DELETE: replace or remove a protected, "internal": true, shovel)
"""

EPILOG = f"""\
exit status:
  {exitcodes.OK} (OK)             stopped cleanly (SIGTERM/SIGINT, every worker drained)
  {exitcodes.FAILURE} (FAILURE)        --single-process only: a shovel gave up on a failure
                       (reconnect_delay 0)
  {exitcodes.CONFIG_ERROR} (CONFIG_ERROR)   bad configuration, state file or usage: nothing was started
  {exitcodes.UNAVAILABLE} (UNAVAILABLE)    `pumpd status`: the daemon could not be reached
  {exitcodes.CANNOT_LISTEN} (CANNOT_LISTEN)  the status endpoint could not be bound (--http): nothing
                       was started

environment: PUMPD_LOCAL_BROKER=HOST:PORT is where a host-less amqp:// URI connects (default
127.0.0.1 on the URI's port); PUMPD_IMPLEMENTATION=reference forces the pure-Python data plane.
The documentation (docs/, `make docs`): the configuration reference, operations, the HTTP API
and metrics, groups, security.
"""


def _positive_int(text: str, high: int) -> int:
    try:
        value = int(text) if len(text) <= 20 else 0
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if not 1 <= value <= high:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to {high}, got {text[:20]!r}")
    return value


def _clause_count(option: str) -> Callable[[str], int]:
    """The argument type of an option that gives a configuration clause: the clause's bounds,
    from the configuration's spec."""
    from ..config.spec import cli_clause

    clause = cli_clause(option)
    assert clause.maximum is not None, clause
    high = int(clause.maximum)

    def count(text: str) -> int:
        return _positive_int(text, high)

    return count


def _clause_default(option: str) -> str:
    """How the help text states the default of an option that gives a configuration clause."""
    from ..config.spec import NoDefault, cli_clause

    default = cli_clause(option).default
    return default.meaning if isinstance(default, NoDefault) else str(default)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= value <= 86_400:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a number of seconds from 0 to 86400, "
                                         f"got {text[:20]}")
    return value


def _cluster_name(text: str) -> str:
    from ..config.cluster import check_cluster_name

    why = check_cluster_name(text)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return text


def _run_parser() -> argparse.ArgumentParser:
    from ..http.server import DEFAULT_HOST, DEFAULT_PORT

    p = argparse.ArgumentParser(
        prog="pumpd",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", required=True, metavar="FILE", help="shovel definitions (JSON)")
    p.add_argument("--version", action="version", version=f"pumpd {__version__}",
                   help="print pumpd's version and exit")
    _process_options(p)
    p.add_argument(
        "--group", "--cluster", dest="cluster", type=_cluster_name, default=None,
        metavar="NAME",
        help="run as a member of the group NAME: every daemon started with the same "
             "configuration and NAME runs each shovel's worker positions once between them, "
             "the others stand by (wins over the file's \"group\" name; --cluster is an "
             "alias)",
    )
    p.add_argument(
        "--http", default=None, metavar="HOST:PORT",
        help=f"the status endpoint (default {DEFAULT_HOST}:{DEFAULT_PORT}); \"off\" disables it",
    )
    p.add_argument(
        "--state-file", default=None, metavar="FILE",
        help="where shovels added at run time (PUT /api/shovels/NAME) are kept (default: next to "
             "the configuration, NAME.runtime.json for NAME.json); written atomically, mode 0600",
    )
    p.add_argument(
        "--drain-timeout",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long a worker waits for outstanding confirms (default 30); "
             "the coordinator kills a worker still draining 10 s after that",
    )
    p.add_argument(
        "--heartbeat-timeout", type=_seconds, default=10.0, metavar="SECONDS",
        help="replace a worker whose heartbeat is older than this (default 10; workers beat "
             "every second)",
    )
    _endpoint_options(p)
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text lines (default) or JSON lines, one object per line")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument(
        "--single-process", action="store_true",
        help="no daemon: run every shovel in this one process (no workers, no status endpoint, "
             "no state file), for debugging or embedding",
    )
    p.add_argument(
        "--status-interval",
        type=_seconds,
        default=5.0,
        metavar="SECONDS",
        help="--single-process only: log a progress line per shovel this often; 0 turns it off "
             "(default 5)",
    )
    return p


def _process_options(p: argparse.ArgumentParser) -> None:
    """How many worker processes, and how many shovels each runs."""
    p.add_argument(
        "--workers", type=_clause_count("--workers"), default=None, metavar="N",
        help="worker processes per shovel, competing consumers on its source queue (default "
             f"{_clause_default('--workers')}; a shovel's own \"workers\" clause wins; 1 keeps "
             "the queue's order)",
    )
    p.add_argument(
        "--shovels-per-process", type=_clause_count("--shovels-per-process"), default=None,
        metavar="K",
        help="let one worker process run up to K shovels' workers on its event loop (default: "
             "the file's \"shovels_per_process\", else 1: a process per worker; a shovel with "
             "\"own_process\": true always gets its own)",
    )


def _endpoint_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the status endpoint's security (docs/security.md)")
    g.add_argument(
        "--http-token-file", metavar="FILE",
        help="the bearer token every request but the status page needs (default: beside the "
             "state file, NAME.runtime.token); made at first start (mode 0600), reused after; "
             "refused if others may read it or it is not a regular file",
    )
    g.add_argument("--http-open-reads", action="store_true",
                   help="let GET /api/* through without the token (changes still need it)")
    g.add_argument("--metrics-open", action="store_true",
                   help="let GET /metrics through without the token (for a Prometheus without "
                        "an authorization: bearer config)")
    g.add_argument(
        "--http-allowed-host", action="append", default=[], metavar="NAME",
        help="a host name the endpoint may be reached by, in the Host header (repeatable); IP "
             "literals, localhost and the --http name are always accepted (DNS rebinding)",
    )
    g.add_argument("--http-tls-cert", metavar="FILE",
                   help="serve the endpoint over TLS 1.2+ with this certificate chain (PEM)")
    g.add_argument("--http-tls-key", metavar="FILE",
                   help="the private key of --http-tls-cert (PEM)")
    g.add_argument("--http-insecure-bind", action="store_true",
                   help="allow a non-loopback --http address without TLS (the token then "
                        "crosses the network in clear text)")
    g.add_argument(
        "--tls-dir", action="append", default=[], metavar="DIR",
        help="a directory whose files a shovel added at run time (PUT) may name as its "
             "cacertfile/certfile/keyfile (repeatable; default none: such a PUT is refused)",
    )


IMPORT_ERLANG_HELP = "Print the shovels of a rabbitmq.config / advanced.config as pumpd JSON."
IMPORT_DEFINITIONS_HELP = ("Print the dynamic shovels of a `rabbitmqctl export_definitions` "
                           "file as pumpd JSON.")


def _file_parser(prog: str, help_text: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"pumpd {prog}", description=help_text)
    p.add_argument("file", metavar="FILE")
    return p


def _file_argument(args: list[str], prog: str, help_text: str) -> str:
    """The one FILE argument of an importer subcommand (``--help`` and usage errors exit here)."""
    path: str = _file_parser(prog, help_text).parse_args(args).file
    return path


def _load(path: str) -> PumpConfig | None:
    from ..config.parse import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"pumpd: {exc}", file=sys.stderr)
        return None


def _import_erlang(args: list[str]) -> int:
    path = _file_argument(args, "import-erlang", IMPORT_ERLANG_HELP)
    from .import_commands import main_import_erlang

    return main_import_erlang(path)


def _import_definitions(args: list[str]) -> int:
    path = _file_argument(args, "import-definitions", IMPORT_DEFINITIONS_HELP)
    from .import_commands import main_import_definitions

    return main_import_definitions(path)


def _check_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pumpd check", description="Validate a configuration and "
                                "print what every shovel of it means.")
    p.add_argument("--config", "-c", required=True, metavar="FILE")
    return p


def _check(args: list[str]) -> int:
    ns = _check_parser().parse_args(args)
    cfg = _load(ns.config)
    if cfg is None:
        return exitcodes.CONFIG_ERROR
    from ..config.uri import EMPTY_VHOST_NOTE

    for s in cfg.shovels.values():
        print(
            f"{s.name}: {_source_name(s)} "
            f"{s.source.describe()} -> {s.destination.describe()}, "
            f"ack_mode {s.ack_mode.value}, prefetch {s.prefetch_count}, "
            f"reconnect_delay {s.reconnect_delay:g}s"
        )
        u = s.undeliverable
        park = f" (park queue {u.park_queue!r} on the source)" if u.parks else ""
        print(f"  undeliverable: {u.policy.value}, unroutable: {u.unroutable.value}{park}")
        for warning in s.warnings:  # where pumpd differs from the plugin
            print(f"  warning: {warning}")
        for side, endpoint in (("source", s.source), ("destination", s.destination)):
            for broker in endpoint.brokers:
                if broker.vhost == "":
                    print(f"  note: {side} {broker.redacted()}: {EMPTY_VHOST_NOTE}")
    return exitcodes.OK


def _source_name(s: ShovelConfig) -> str:
    if s.source.address is not None:  # an AMQP 1.0 source: its description names the address
        return "from"
    return f"queue {s.queue or '(last declared)'!s} on"


def _schema_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="pumpd schema",
        description="Print the JSON Schema (draft 2020-12) of pumpd's configuration file, for "
                    "editors and CI checks. It is generated from the same specification that "
                    "validates the file: `pumpd check` remains the final word (it also checks "
                    "what a schema cannot, such as URIs and cross-clause rules).")


def _schema(args: list[str]) -> int:
    _schema_parser().parse_args(args)
    from ..config.spec import json_schema_text

    sys.stdout.write(json_schema_text())
    return exitcodes.OK


def _plan_migration(args: list[str]) -> int:
    from .plan_migration import main as plan_main

    return plan_main(args)


def _status(args: list[str]) -> int:
    from .client import main as status_main

    return status_main(args)


def _delete_shovel(args: list[str]) -> int:
    from .client import main_delete

    return main_delete(args)


def _pause(args: list[str]) -> int:
    from .pause import main as pause_main

    return pause_main(args, paused=True)


def _resume(args: list[str]) -> int:
    from .pause import main as pause_main

    return pause_main(args, paused=False)


# The subcommands; anything else is the daemon's (or --single-process's) own arguments.
COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "import-erlang": _import_erlang,
    "import-definitions": _import_definitions,
    "check": _check,
    "schema": _schema,
    "status": _status,
    "delete-shovel": _delete_shovel,
    "pause": _pause,
    "resume": _resume,
    "plan-migration": _plan_migration,
}


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by name (``"run"``: the daemon itself), for the CLI reference."""
    from . import client, pause
    from .plan_migration import parser as plan_parser

    return {
        "run": _run_parser(),
        "check": _check_parser(),
        "schema": _schema_parser(),
        "status": client.status_parser(),
        "delete-shovel": client.delete_parser(),
        "pause": pause.parser(paused=True),
        "resume": pause.parser(paused=False),
        "import-erlang": _file_parser("import-erlang", IMPORT_ERLANG_HELP),
        "import-definitions": _file_parser("import-definitions", IMPORT_DEFINITIONS_HELP),
        "plan-migration": plan_parser(),
    }


# Their stdout is a configuration meant for a file (it holds the passwords, as its input did):
# not redacted. Every other stdout, and every stderr, is.
_CONFIG_ON_STDOUT = ("import-erlang", "import-definitions", "plan-migration")


def main(argv: Sequence[str] | None = None) -> int:
    from ..logsetup import RedactingStream

    args = list(sys.argv[1:] if argv is None else argv)
    saved = sys.stdout, sys.stderr
    sys.stderr = RedactingStream(sys.stderr)  # type: ignore[assignment]  # a TextIO's write
    if not (args and args[0] in _CONFIG_ON_STDOUT):
        sys.stdout = RedactingStream(sys.stdout)  # type: ignore[assignment]
    try:
        return _main(args)
    finally:
        sys.stdout, sys.stderr = saved


def _main(args: list[str]) -> int:
    if args and args[0] in COMMANDS:
        return COMMANDS[args[0]](args[1:])
    parser = _run_parser()
    ns = parser.parse_args(args)
    if ns.single_process:
        return _run_single_process(parser, ns)
    from .run import run_daemon

    return run_daemon(parser, ns)


def _run_single_process(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> int:
    for flag, value in (("--workers", ns.workers), ("--http", ns.http),
                        ("--state-file", ns.state_file),
                        ("--shovels-per-process", ns.shovels_per_process),
                        ("--http-token-file", ns.http_token_file),
                        ("--http-tls-cert", ns.http_tls_cert),
                        ("--http-tls-key", ns.http_tls_key),
                        ("--tls-dir", ns.tls_dir or None),
                        ("--http-allowed-host", ns.http_allowed_host or None)):
        if value is not None:
            parser.error(f"{flag} is for the daemon; --single-process runs one pump per shovel "
                         "in this process")
    from .. import logsetup

    logsetup.configure(ns.log_format, ns.log_level)
    cfg = _load(ns.config)
    if cfg is None:
        return exitcodes.CONFIG_ERROR
    from ..config.cluster import with_name

    cfg = dataclasses.replace(cfg, cluster=with_name(cfg.cluster, ns.cluster))
    from ..engine.runner import run_foreground

    return run_foreground(cfg, drain_timeout=ns.drain_timeout, status_interval=ns.status_interval)


if __name__ == "__main__":
    sys.exit(main())
