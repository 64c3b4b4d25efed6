"""Secrets are never printed by the one-shot commands: every password form of
:mod:`tests.support.redaction_cases` is absent from ``pumpd check`` and from the importers'
warnings and errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.redaction_cases import CASE_IDS, CASES, Case, leaks


def pumpd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, env=dict(os.environ))


def bad_query(uri: str) -> str:
    """``uri`` refused for its query, so that the error quotes the URI itself."""
    return uri + ("&" if "?" in uri else "?") + "heartbeat=x"


def seed_shovel(uri: str, dest: str = "amqp://dest.example", **clauses: Any) -> dict[str, Any]:
    return {"sources": {"broker": uri}, "destinations": {"broker": dest}, "queue": "q", **clauses}


def _erlang_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_check_shows_no_password(tmp_path: Path, case: Case) -> None:
    for uri, clauses, code in [(case.uri(), {}, 0 if case.parses else 2),
                               (case.uri(), {"prefetch_count": -1}, 2),
                               (bad_query(case.uri()), {}, 2),
                               (case.uri(), {"ack_mode": case.uri()}, 2)]:
        path = tmp_path / "c.json"
        path.write_text(json.dumps({"shovels": {"s": seed_shovel(uri, **clauses)}}))
        done = pumpd("check", "--config", str(path))
        assert done.returncode == code, done.stderr
        assert leaks(done.stdout + done.stderr, case) == [], done.stdout + done.stderr
        if code == 0:
            assert f"on amqp{'s' if 'amqps' in uri else ''}://{case.user}@broker.example" \
                in done.stdout


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_importers_warn_and_fail_without_showing_a_password(tmp_path: Path, case: Case) -> None:
    erl = tmp_path / "advanced.config"
    defs = tmp_path / "definitions.json"
    for uri in (case.uri(), bad_query(case.uri())):
        # No ack_mode: a warning; a URI pumpd refuses: "pumpd will refuse this: ..." quoting it.
        erl.write_text("[{rabbitmq_shovel, [{shovels, [{s, [\n"
                       f"  {{source, [{{uris, [{_erlang_string(uri)}]}}, {{queue, <<\"q\">>}}]}},\n"
                       '  {destination, [{uris, ["amqp://b"]}]}]}]}]}].')
        done = pumpd("import-erlang", str(erl))
        # refused by the importer itself (whitespace), or imported with warnings
        assert (done.returncode, "warning" in done.stderr) in ((0, True), (2, False)), done.stderr
        assert leaks(done.stderr, case) == [], done.stderr
        # the same file cut short after the URI: an error at a line and column
        erl.write_text(erl.read_text()[:erl.read_text().index("<<")])
        done = pumpd("import-erlang", str(erl))
        assert done.returncode == 2 and leaks(done.stderr, case) == [], done.stderr
        defs.write_text(json.dumps({"parameters": [
            {"component": "shovel", "vhost": "/", "name": "s",
             "value": {"src-uri": uri, "src-queue": "q", "dest-uri": "amqp://b",
                       "src-prefetch-count": 10, "ack-mode": "no-ack"}}]}))
        done = pumpd("import-definitions", str(defs))
        assert leaks(done.stderr, case) == [], done.stderr

