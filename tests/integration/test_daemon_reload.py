"""SIGHUP: re-read the configuration and touch only the shovels whose definition changed."""

from __future__ import annotations

import json
import signal
import subprocess
from functools import partial
from typing import Any

from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import queue_depth
from tests.support.daemon_helpers import (
    fill_queue,
    named_shovel,
    running_state,
    settled,
    shovel_def,
)


def test_sighup_restarts_changed_starts_new_stops_removed_and_leaves_the_rest(
    pumpd_daemon, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)

    s = partial(named_shovel, uri)

    d = pumpd_daemon({"same": s("same"), "changed": s("changed"), "removed": s("removed")})
    for name in ("same", "changed", "removed"):
        d.wait_for(lambda name=name: running_state(d, name), 30, f"{name} running")
    pids = {name: d.worker_pids(name) for name in ("same", "changed", "removed")}

    d.write_config({"same": s("same"), "changed": s("changed", prefetch_count=10),
                    "added": s("added")})
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: running_state(d, "added"), 30, "the new shovel running")
    d.wait_for(lambda: d.shovel("removed") is None, 30, "the removed shovel gone")
    d.wait_for(lambda: running_state(d, "changed")
               and d.worker_pids("changed") != pids["changed"], 30, "the changed one restarted")
    assert d.shovel("changed")["prefetch_count"] == 10
    assert d.worker_pids("same") == pids["same"]
    assert d.shovel("same")["restarts"] == 0
    assert settled(node_a, vhost_a, "removed-in") == (0, 0, 0)  # its consumer is gone
    (reloaded,) = [e for e in d.log_events() if e.get("event") == "reloaded"]
    assert (reloaded["added"], reloaded["changed"], reloaded["removed"], reloaded["unchanged"]) \
        == (["added"], ["changed"], ["removed"], ["same"])

    # an invalid file is refused: everything keeps running as it was
    d.config_path.write_text('{"shovels": {"same": {"queue": 42}}}')
    pids = {name: d.worker_pids(name) for name in ("same", "changed", "added")}
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: any(e.get("event") == "reload_failed" for e in d.log_events()), 30,
               "the reload refused")
    assert {name: d.worker_pids(name) for name in ("same", "changed", "added")} == pids
    fill_queue(uri, "same-in", [b"still moving"])
    d.wait_for(lambda: queue_depth(uri, "same-out")[0] == 1, 30, "the shovel still moving")
    assert d.stop() == 0


def _refusals(d: Any) -> list[str]:
    return [e.get("message", "") for e in d.log_events() if e.get("event") == "reload_failed"]


def test_a_reload_that_cannot_be_read_validated_or_applied_leaves_every_worker_running(
    pumpd_daemon, node_a: LocalNode, vhost_a: str
) -> None:
    """A 995-deep file, a workers bound, a file of binary garbage, a file that
    vanished: each a refused reload in one log line; the workers keep their pids."""
    uri = node_a.uri(vhost_a)
    good = {"a": shovel_def(uri, "a-in", uri, "a-out"), "b": shovel_def(uri, "b-in", uri, "b-out")}
    d = pumpd_daemon(good)
    for name in good:
        d.wait_for(lambda name=name: running_state(d, name), 30, f"{name} running")
    pids = {name: d.worker_pids(name) for name in good}
    deep = '{"a":' * 995 + "1" + "}" * 995
    bad_files = [
        (json.dumps({"shovels": good})[:-2] + ', "c": ' + json.dumps(
            shovel_def(uri, "c-in", uri, "c-out"))[:-1]
         + ', "publish_properties": {"headers": ' + deep + "}}}}",
         "nested more than 40 deep"),
        (json.dumps({"shovels": {**good, "a": {**good["a"], "workers": 100_000_000}}}),
         "clause 'workers': must be at most 256, got 100000000"),
        (b"\xff\xfe\x00garbage" * 100, "invalid JSON"),
        (None, "cannot read the file"),
    ]
    for text, fragment in bad_files:
        before = len(_refusals(d))
        if text is None:
            d.config_path.unlink()
        elif isinstance(text, bytes):
            d.config_path.write_bytes(text)
        else:
            d.config_path.write_text(text)
        d.signal(signal.SIGHUP)
        d.wait_for(lambda before=before: len(_refusals(d)) > before, 30, "the reload refused")
        line = _refusals(d)[-1]
        assert fragment in line and "\n" not in line, line
        assert str(d.config_path) in line
        assert {name: d.worker_pids(name) for name in good} == pids
        assert d.shovel("c") is None
    fill_queue(uri, "a-in", [b"still moving"])
    d.wait_for(lambda: queue_depth(uri, "a-out")[0] == 1, 30, "the shovel still moving")
    assert {name: d.worker_pids(name) for name in good} == pids
    assert d.stop() == 0


def test_a_put_past_a_bound_is_refused_before_the_state_file_is_written(
    pumpd_daemon, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    d = pumpd_daemon({})
    body = {"src-uri": uri, "src-queue": "w-in", "dest-uri": uri, "dest-queue": "w-out",
            "workers": 100_000_000}
    status, reply = d.request("PUT", "/api/shovels/w", body)
    assert status == 400
    assert "clause 'workers': must be at most 256, got 100000000" in str(reply)
    status, reply = d.request("PUT", "/api/shovels/w", b'{"value": ' + b"[" * 5000
                              + b"]" * 5000 + b"}")
    assert status == 400
    assert not d.state_path.exists()
    assert d.stop() == 0
    d.start()  # and it starts again
    assert d.get("/api/overview")["shovels"] == 0
    assert d.stop() == 0


def test_a_state_file_past_a_bound_is_one_line_at_start(pumpd_daemon, node_a: LocalNode,
                                                         vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    d = pumpd_daemon({}, start=False)
    d.state_path.write_text(json.dumps({"shovels": {"w": {
        "src-uri": uri, "src-queue": "w-in", "dest-uri": uri, "workers": 100_000_000}}}))
    proc = subprocess.run(d.command(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert proc.stderr.startswith(f"pumpd: {d.state_path}: shovel 'w': clause 'workers': must be "
                                  "at most 256")

