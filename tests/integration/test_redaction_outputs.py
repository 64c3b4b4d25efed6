"""Secrets are never printed, end to end: every password form of
:mod:`redaction_cases` is absent from ``pumpd check``, the importers' stderr, a refused PUT's
body, the log line of a refused reload, and the status, API and log of workers that fail to log
in, in real processes against a private broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pumpd.testing.localnode import LocalNode

from tests.support.redaction_cases import CASE_IDS, CASES, Case, leaks

RIGHT_PASSWORD = "the-Right-pass-1"


def pumpd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, env=dict(os.environ))


def bad_query(uri: str) -> str:
    """``uri`` refused for its query, so that the error quotes the URI itself."""
    return uri + ("&" if "?" in uri else "?") + "heartbeat=x"


def static_shovel(uri: str, dest: str = "amqp://dest.example", **clauses: Any) -> dict[str, Any]:
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
        path.write_text(json.dumps({"shovels": {"s": static_shovel(uri, **clauses)}}))
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


def test_refused_puts_and_a_refused_reload_show_no_password(pumpd_daemon: Any) -> None:
    d = pumpd_daemon({})
    bodies = []
    for case in CASES:
        for definition in ({"src-uri": bad_query(case.uri()), "src-queue": "q",
                            "dest-uri": "amqp://b"},
                           {"src-uri": case.uri(), "src-queue": "q", "dest-uri": "amqp://b",
                            "src-prefetch-count": -1},
                           {"src-uri": "amqp://b", "src-queue": case.uri(),
                            "dest-uri": "amqp://b", "ack-mode": case.uri()}):
            status, doc = d.request("PUT", "/api/shovels/x", definition)
            assert status == 400, doc
            text = json.dumps(doc) + json.dumps(doc, ensure_ascii=False)
            assert leaks(text, case) == [], text
            bodies.append(text)
    assert any("invalid AMQP URI" in b for b in bodies)

    for n, case in enumerate(CASES, start=1):
        d.write_config({"s": static_shovel(bad_query(case.uri()))})
        d.signal(signal.SIGHUP)
        d.wait_for(lambda n=n: len([e for e in d.log_events()
                                    if e.get("event") == "reload_failed"]) == n,
                   30, f"reload {n} refused")
    log = d.log_path.read_text()
    assert log.count("reload refused") == len(CASES)
    for case in CASES:
        assert leaks(log, case) == [], log


def test_workers_failing_to_log_in_show_no_password(pumpd_daemon: Any, node_a: LocalNode,
                                                   vhost_a: str) -> None:
    host = f"127.0.0.1:{node_a.amqp_port}"
    cases = [c for c in CASES if c.parses]
    for case in cases:  # real users, whose password is another one
        node_a.add_user(case.user, RIGHT_PASSWORD, vhost_a)
    shovels = {c.id: static_shovel(c.uri(host, vhost_a), node_a.uri(vhost_a), reconnect_delay=1)
               for c in cases}
    d = pumpd_daemon(shovels, "--log-format", "text")  # the text format; the JSON one above

    def all_failed() -> bool:
        return all(d.shovel(c.id)["workers"][0]["reason"] for c in cases)

    d.wait_for(all_failed, 60, "every worker's login refused")
    assert "authentication refused" in d.shovel("quote")["workers"][0]["reason"]
    status, api = d.request("GET", "/api/shovels")
    assert status == 200
    views = [json.dumps(api), json.dumps(api, ensure_ascii=False)]
    for args in ((), ("--json",)):
        done = pumpd("status", "--http", f"127.0.0.1:{d.port}", *args)
        assert done.returncode == 0, done.stderr
        views.append(done.stdout + done.stderr)
    log = d.log_path.read_text()
    assert "authentication refused" in log
    # The worker dies of it, its traceback printed by multiprocessing, bypassing logging.
    d.wait_for(lambda: "cannot load the TLS files" in d.log_path.read_text(), 30, "TLS failure")
    log = d.log_path.read_text()
    for case in cases:
        for text in (*views, log):
            assert leaks(text, case) == [], text
