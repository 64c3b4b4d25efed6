"""The state file against a real daemon: it is written from the daemon's memory (shovels and
pauses), a file that cannot be read or parsed makes every run-time change refuse with a 500
naming it (and the file is left as it is), and PUT bodies are read by the same JSON reader as
the configuration file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

from pumpd import exitcodes
from pumpd.testing.localnode import find_free_port

from tests.support.daemon_helpers import Daemon, shovel_def

NOWHERE = f"amqp://guest:guest@127.0.0.1:{find_free_port()}/%2F"  # nothing listens there
BIG = "99999999999999999999"  # past 64 bits: orjson read it as the double 1e+20


def dynamic(queue: str) -> dict[str, Any]:
    return {"src-uri": NOWHERE, "src-queue": f"{queue}-in", "dest-uri": NOWHERE,
            "dest-queue": f"{queue}-out"}


def paused(d: Daemon, name: str) -> bool:
    doc = d.shovel(name)
    return bool(doc and doc["paused"] and doc["state"] == "paused")


def refused_changes(d: Daemon, cause: str) -> None:
    """Every run-time change answers 500 naming the file and ``cause``; nothing changes."""
    for method, path, body in [("PUT", "/api/shovels/other", dynamic("other")),
                               ("PUT", "/api/shovels/rt", dynamic("changed")),
                               ("DELETE", "/api/shovels/rt", None),
                               ("POST", "/api/shovels/rt/pause", None),
                               ("POST", "/api/shovels/fixed/resume", None)]:
        status, doc = d.request(method, path, body)
        assert status == 500, (method, path, doc)
        reason = doc["reason"]
        assert reason.startswith(f"{d.state_path}: ") and cause in reason, reason
        assert "fix the file or remove it" in reason and "\n" not in reason
    assert d.shovel("other") is None and d.shovel("rt")["paused"] is False
    assert paused(d, "fixed") and d.shovel("rt")["src_queue"] == "rt-in"


def test_a_state_file_that_cannot_be_read_refuses_changes_and_loses_no_pause(
    pumpd_daemon: Any,
) -> None:
    d = pumpd_daemon({"fixed": shovel_def(NOWHERE, "in", NOWHERE, "out")})
    assert d.request("PUT", "/api/shovels/rt", dynamic("rt"))[0] == 201
    assert d.request("POST", "/api/shovels/fixed/pause")[0] == 202
    d.wait_for(lambda: paused(d, "fixed"), 30, "fixed paused")
    good = d.state_path.read_bytes()
    assert json.loads(good) == {"shovels": {"rt": dynamic("rt")}, "paused": ["fixed"]}

    # an edit cut short: not valid JSON
    cut = good[: len(good) // 2]
    d.state_path.write_bytes(cut)
    refused_changes(d, "the state file is not valid JSON: line ")
    result = subprocess.run([sys.executable, "-m", "pumpd", "resume", "fixed", "--http",
                             f"127.0.0.1:{d.port}", "--http-token-file", str(d.token_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == exitcodes.UNAVAILABLE and result.stdout == "", result
    assert "HTTP 500" in result.stderr and str(d.state_path) in result.stderr, result
    assert d.state_path.read_bytes() == cut  # left for the operator, as it was
    errors = [e for e in d.log_events() if e.get("level") == "error"
              and str(d.state_path) in str(e.get("message"))]
    assert len(errors) >= 5, d.log()

    # a directory where the file should be: cannot be read at all
    d.state_path.unlink()
    d.state_path.mkdir()
    refused_changes(d, "cannot read the state file: Is a directory")
    assert d.state_path.is_dir() and not any(d.state_path.iterdir())

    # the file fixed: changes go through again, written from what the daemon holds
    d.state_path.rmdir()
    d.state_path.write_bytes(good)
    assert d.request("PUT", "/api/shovels/other", dynamic("other"))[0] == 201
    assert json.loads(d.state_path.read_text()) == {
        "shovels": {"rt": dynamic("rt"), "other": dynamic("other")}, "paused": ["fixed"]}

    # and the pause outlives a restart
    d.signal(signal.SIGTERM)
    assert d.wait_exit(60) == 0
    d.start()
    d.wait_for(lambda: paused(d, "fixed"), 30, "fixed paused after the restart")
    assert d.shovel("rt") is not None and d.shovel("other") is not None


def test_a_removed_state_file_is_written_whole_from_memory(pumpd_daemon: Any) -> None:
    """The operator's other way out: remove the file; the next change writes every run-time
    shovel and every pause the daemon holds, not only the one it changes."""
    d = pumpd_daemon({"fixed": shovel_def(NOWHERE, "in", NOWHERE, "out")})
    assert d.request("PUT", "/api/shovels/rt", dynamic("rt"))[0] == 201
    assert d.request("POST", "/api/shovels/fixed/pause")[0] == 202
    d.state_path.write_text('{"shovels": {"rt": ')
    assert d.request("POST", "/api/shovels/rt/pause")[0] == 500
    d.state_path.unlink()
    assert d.request("POST", "/api/shovels/rt/pause")[0] == 202
    assert json.loads(d.state_path.read_text()) == {"shovels": {"rt": dynamic("rt")},
                                                     "paused": ["fixed", "rt"]}


def test_put_bodies_are_read_as_the_configuration_file_is(pumpd_daemon: Any) -> None:
    d = pumpd_daemon({})
    body = json.dumps(dynamic("twice"))[:-1] + ', "dest-queue": "elsewhere"}'
    status, doc = d.request("PUT", "/api/shovels/twice", body.encode())
    assert status == 400, doc
    assert doc["reason"] == ("PUT /api/shovels/twice: shovel 'twice': clause 'dest-queue': "
                             "key 'dest-queue' is given twice")
    with_headers = json.dumps({**dynamic("big"), "dest-publish-properties": {
        "headers": {"n": 0}}}).replace('"n": 0', f'"n": {BIG}')
    status, doc = d.request("PUT", "/api/shovels/big", with_headers.encode())
    assert status == 400, doc
    assert "clause 'dest-publish-properties'" in doc["reason"] and BIG in doc["reason"]
    assert "does not fit in a signed 64-bit integer" in doc["reason"]
    assert d.shovel("twice") is None and d.shovel("big") is None
    assert not d.state_path.exists()  # nothing written

    # the same definitions in a file: `pumpd check` refuses them alike
    for name, text in (("twice", body), ("big", with_headers)):
        d.config_path.write_text(f'{{"shovels": {{"{name}": {text}}}}}')
        result = subprocess.run([sys.executable, "-m", "pumpd", "check", "--config",
                                 str(d.config_path)], capture_output=True, text=True, timeout=60)
        assert result.returncode == exitcodes.CONFIG_ERROR, result
        assert (("given twice" in result.stderr) if name == "twice" else
                (BIG in result.stderr and "dest-publish-properties" in result.stderr)), result
