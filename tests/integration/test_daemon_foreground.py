"""The daemon in a single process: it runs the shovels in the foreground and stops on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pika
from pumpd import exitcodes
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import declare_queue, queue_depth
from tests.support.daemon_helpers import fill_queue, shovel_def


def write(path: Path, shovels: dict[str, object]) -> Path:
    path.write_text(json.dumps({"shovels": shovels}))
    return path


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

