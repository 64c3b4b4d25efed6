"""The documentation site builds with no warning, and the README stays a short front page.

The build is the one ``make docs`` runs: the generated reference pages (tools/gen_docs.py), then
``mkdocs build --strict``, which turns a broken link, a missing anchor or a page left out of the
navigation into a failure. No broker is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# The README is a front page; everything longer belongs in the site.
README_MAX_BYTES = 12 * 1024

# CI runs the second command: the README must keep showing the two commands a newcomer types.
README_COMMANDS = (
    "make demo    # installs what is missing, fills a queue in one vhost and shovels it into another",
    "make test    # installs what is missing and runs the test suite against private RabbitMQ nodes",
)


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore", NO_MKDOCS_2_WARNING="1")
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_site_builds_strict_with_no_warning(tmp_path: Path) -> None:
    gen = _run([sys.executable, "tools/gen_docs.py"], timeout=120)
    assert gen.returncode == 0, gen.stderr
    build = _run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                 timeout=600)
    output = build.stdout + build.stderr
    assert build.returncode == 0, output
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert warnings == [], "\n".join(warnings)
    for page in ("index.html", "reference/cli/index.html", "reference/configuration/index.html",
                 "publisher/index.html", "reference/pumpd.schema.json"):
        assert (tmp_path / "site" / page).is_file(), page
    # mkdocstrings rendered pumpd.Publisher from its docstrings (an import it cannot resolve
    # leaves no anchor for the class and its methods)
    publisher = (tmp_path / "site" / "publisher" / "index.html").read_text(encoding="utf-8")
    assert 'id="pumpd.Publisher.publish_many"' in publisher


def test_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes, more than {README_MAX_BYTES}"


def test_readme_starts_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# "), "the README starts with its title"
    fence = lines.index("```")  # the first code block is the two commands
    assert 1 < fence <= 12, "the two commands come right after the title and a short paragraph"
    block = lines[fence + 1:fence + 1 + len(README_COMMANDS)]
    assert tuple(block) == README_COMMANDS
    assert lines[fence + 1 + len(README_COMMANDS)] == "```"

