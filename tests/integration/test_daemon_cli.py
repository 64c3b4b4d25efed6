"""The daemon's command line: what is refused before anything starts, and with which exit code."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pika
import pytest
from pumpd import exitcodes
from pumpd.supervisor.statefile import default_path
from pumpd.testing.localnode import LocalNode, find_free_port

from tests.support.amqp_helpers import declare_queue, queue_depth
from tests.support.daemon_helpers import fill_queue, shovel_def

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"  # never connected to: these runs stop earlier


def pumpd(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def write(path: Path, shovels: dict[str, object]) -> Path:
    path.write_text(json.dumps({"shovels": shovels}))
    return path


def port_answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_bad_configuration_exits_2_with_the_error_before_anything_starts(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.json", {"s": {**shovel_def(URI, "in", URI, "out"),
                                            "prefetch_count": -1}})
    port = find_free_port()
    result = pumpd("--config", str(cfg), "--http", f"127.0.0.1:{port}")
    assert result.returncode == exitcodes.CONFIG_ERROR
    assert "shovel 's'" in result.stderr and "prefetch_count" in result.stderr
    assert not port_answers(port)
    assert not default_path(cfg).exists()


def test_an_invalid_state_file_or_a_name_in_both_exits_2(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.json", {"s": shovel_def(URI, "in", URI, "out")})
    state = tmp_path / "c.runtime.json"
    assert default_path(cfg) == state
    state.write_text("{broken")
    result = pumpd("--config", str(cfg), "--http", "off")
    assert result.returncode == exitcodes.CONFIG_ERROR and "state file" in result.stderr
    write(state, {"s": shovel_def(URI, "in", URI, "out")})
    result = pumpd("--config", str(cfg), "--http", "off")
    assert result.returncode == exitcodes.CONFIG_ERROR
    assert "both in the configuration file and at run time" in result.stderr


@pytest.mark.parametrize("clauses", [{"queue": "", "sources": {"broker": URI, "declarations": [
    "queue.declare"]}}, {"delete_after": "queue-length"}])
def test_workers_that_could_not_share_the_source_queue_are_refused(
    tmp_path: Path, clauses: dict[str, object]
) -> None:
    cfg = write(tmp_path / "c.json", {"s": {**shovel_def(URI, "in", URI, "out"), **clauses}})
    result = pumpd("--config", str(cfg), "--http", "off", "--workers", "3")
    assert result.returncode == exitcodes.CONFIG_ERROR
    assert "--workers 3" in result.stderr


def test_a_status_address_in_use_exits_4_before_any_worker_starts(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.json", {"s": shovel_def(URI, "in", URI, "out")})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = pumpd("--config", str(cfg), "--http", f"127.0.0.1:{port}")
    assert result.returncode == exitcodes.CANNOT_LISTEN
    assert "cannot listen" in result.stderr
    assert "started worker" not in result.stderr


def test_status_without_a_daemon_exits_3() -> None:
    result = pumpd("status", "--http", f"127.0.0.1:{find_free_port()}")
    assert result.returncode == exitcodes.UNAVAILABLE
    assert "cannot reach pumpd" in result.stderr
    assert "is pumpd running?" in result.stderr


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.json", {})
    for args in (["--config", str(cfg), "--single-process", "--workers", "2"],
                 ["--config", str(cfg), "--workers", "0"],
                 ["--config", str(cfg), "--http", "nowhere"],
                 ["status", "--http", "off"]):
        assert pumpd(*args).returncode == exitcodes.CONFIG_ERROR, args


def test_help_explains_the_daemon_and_its_exit_codes() -> None:
    text = pumpd("--help").stdout
    for needle in ("--workers", "--http", "--state-file", "--drain-timeout",
                   "--heartbeat-timeout", "--log-format", "--single-process", "SIGHUP",
                   "/api/shovels", "/metrics", "15680", "CONFIG_ERROR", "CANNOT_LISTEN",
                   "pumpd status"):
        assert needle in text, needle
    assert "--json" in pumpd("status", "--help").stdout


def test_the_other_subcommands_still_work(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.json", {"s": shovel_def(URI, "in", URI, "out")})
    result = pumpd("check", "--config", str(cfg))
    assert result.returncode == 0 and result.stdout.startswith("s: queue in")


def test_single_process_runs_the_shovels_in_the_foreground_and_stops_on_sigterm(
    tmp_path: Path, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    declare_queue(uri, "in")
    cfg = write(tmp_path / "c.json", {"s": shovel_def(uri, "in", uri, "out")})
    proc = subprocess.Popen([sys.executable, "-m", "pumpd", "--config", str(cfg),
                             "--single-process", "--status-interval", "0"],
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        fill_queue(uri, "in", [b"one", b"two"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if queue_depth(uri, "out")[0] == 2:
                    break
            except pika.exceptions.ChannelClosedByBroker:  # not declared yet
                pass
            time.sleep(0.1)
        assert queue_depth(uri, "out")[0] == 2
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == exitcodes.OK
        assert "started worker" not in stderr  # no daemon, no worker processes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
