"""The ``pumpd`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import exitcodes

DESCRIPTION = """\
pumpd moves messages from a queue on one RabbitMQ broker to an exchange on another (or the same)
broker, reliably and continually: the RabbitMQ Shovel, run outside the broker.

  pumpd --config shovels.json          run every shovel in the file until SIGTERM / SIGINT
  pumpd import-erlang rabbitmq.config  convert the plugin's {rabbitmq_shovel, ...} clause to JSON
  pumpd import-definitions defs.json   convert dynamic shovels from `rabbitmqctl export_definitions`
  pumpd check --config shovels.json    validate a configuration and print what it means
"""

EPILOG = """\
exit status: 0 stopped cleanly; 1 a shovel gave up on a failure (reconnect_delay 0);
2 bad configuration or usage (nothing was started); 3 a needed service is unavailable.
See README.md for the configuration format.
"""


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pumpd",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", required=True, metavar="FILE", help="shovel definitions (JSON)")
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long to wait for outstanding confirms (default 30)",
    )
    p.add_argument(
        "--status-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="log a progress line per shovel this often; 0 turns it off (default 5)",
    )
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    return p


def _file_command(prog: str, help_text: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"pumpd {prog}", description=help_text)
    p.add_argument("file", metavar="FILE")
    return p


def _load(path: str) -> object:
    from .config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"pumpd: {exc}", file=sys.stderr)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "import-erlang":
        ns = _file_command(
            "import-erlang",
            "Print the shovels of a rabbitmq.config / advanced.config as pumpd JSON.",
        ).parse_args(args[1:])
        from .importers import main_import_erlang

        return main_import_erlang(ns.file)
    if args and args[0] == "import-definitions":
        ns = _file_command(
            "import-definitions",
            "Print the dynamic shovels of a `rabbitmqctl export_definitions` file as pumpd JSON.",
        ).parse_args(args[1:])
        from .importers import main_import_definitions

        return main_import_definitions(ns.file)
    if args and args[0] == "check":
        p = argparse.ArgumentParser(prog="pumpd check", description="Validate a configuration.")
        p.add_argument("--config", "-c", required=True, metavar="FILE")
        ns = p.parse_args(args[1:])
        cfg = _load(ns.config)
        if cfg is None:
            return exitcodes.CONFIG_ERROR
        from .model import PumpConfig
        from .runner import describe_endpoint

        assert isinstance(cfg, PumpConfig)
        for s in cfg.shovels.values():
            print(
                f"{s.name}: queue {s.queue or '(last declared)'!s} on "
                f"{describe_endpoint(s, 'source')} -> {describe_endpoint(s, 'destination')}, "
                f"ack_mode {s.ack_mode.value}, prefetch {s.prefetch_count}, "
                f"reconnect_delay {s.reconnect_delay:g}s"
            )
        return exitcodes.OK

    ns = _run_parser().parse_args(args)
    from . import logsetup

    logsetup.configure(ns.log_format, ns.log_level)
    cfg = _load(ns.config)
    if cfg is None:
        return exitcodes.CONFIG_ERROR
    from .model import PumpConfig
    from .runner import run_foreground

    assert isinstance(cfg, PumpConfig)
    return run_foreground(cfg, drain_timeout=ns.drain_timeout, status_interval=ns.status_interval)


if __name__ == "__main__":
    sys.exit(main())
