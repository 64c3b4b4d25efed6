"""Write the documentation site's generated pages into docs/reference/ (run before mkdocs build).

- ``cli.md``: every command's ``--help``, from the parsers the command line itself uses
  (:func:`pumpd.cli.command_parsers`), so that the page cannot disagree with the program.
- ``configuration.md`` and ``pumpd.schema.json``: from the one configuration spec
  (:mod:`pumpd.config.spec`).
- ``bench-report/``: a copy of the generated benchmark report (``bench/report``, made by
  ``make bench-report``), so that the performance page links to the figures it quotes.

docs/reference/ is generated whole on every run and is not kept in git.

    python tools/gen_docs.py [--out docs/reference]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "docs" / "reference"
BENCH_REPORT = ROOT / "bench" / "report"

# argparse wraps help to the terminal's width: a fixed width makes the page the same everywhere.
HELP_WIDTH = "100"

# The order commands appear in on the page: the daemon first, then the rest as a user meets them.
COMMAND_ORDER = (
    "run", "check", "status", "pause", "resume", "delete-shovel",
    "import-erlang", "import-definitions", "plan-migration", "schema",
)


def cli_markdown() -> str:
    """The CLI reference page: one section per command, its help text verbatim."""
    from pumpd.cli import command_parsers

    os.environ["COLUMNS"] = HELP_WIDTH
    parsers = command_parsers()
    names = [n for n in COMMAND_ORDER if n in parsers]
    names += sorted(n for n in parsers if n not in COMMAND_ORDER)
    parts = [
        "# CLI reference",
        "",
        "Generated from the command line's own parsers by `tools/gen_docs.py`.",
        "Each section is what `--help` prints.",
        "",
    ]
    for name in names:
        title = "pumpd" if name == "run" else f"pumpd {name}"
        parts += [f"## `{title}`", "", "```text", parsers[name].format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def configuration_markdown() -> str:
    """The configuration reference page."""
    from pumpd.config.spec import reference_markdown

    return reference_markdown().strip() + "\n"


def schema_json() -> str:
    """What ``pumpd schema`` prints."""
    from pumpd.config.spec import json_schema_text

    return json_schema_text()


def copy_bench_report(out: Path) -> None:
    """The benchmark report's pages and charts, its README as the folder's index page."""
    target = out / "bench-report"
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(BENCH_REPORT.iterdir()):
        if path.suffix == ".png" or path.suffix == ".md":
            name = "index.md" if path.name == "README.md" else path.name
            shutil.copyfile(path, target / name)


def generate(out: Path) -> list[Path]:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    written = []
    for name, text in (
        ("cli.md", cli_markdown()),
        ("configuration.md", configuration_markdown()),
        ("pumpd.schema.json", schema_json()),
    ):
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    copy_bench_report(out)
    written.append(out / "bench-report")
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="where to write (default docs/reference)")
    ns = p.parse_args(argv)
    for path in generate(ns.out):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
