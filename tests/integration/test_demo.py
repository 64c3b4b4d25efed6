"""`make demo`'s job, end to end on a private node: fill a queue, shovel it, report, exit 0."""

from __future__ import annotations

import subprocess
import sys


def demo(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd.demo", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_demo_moves_every_message_on_a_private_node() -> None:
    done = demo("--private-node", "--messages", "3000", "--size", "64")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "[demo] starting a private RabbitMQ node" in out
    assert "[demo] filled demo.orders: 3,000 messages" in out
    # progress goes one line at a time when stdout is not a terminal
    assert "\r" not in out
    assert "3,000/3,000 moved, 0 left at the source" in out
    assert "final: pumpd exit status 0; 3,000 in pumpd-demo-dst/demo.orders.copy, 0 left" in out
    assert out.rstrip().endswith("[demo] OK: every message moved, nothing left behind")


def test_demo_refuses_a_bad_count_before_touching_a_broker() -> None:
    done = demo("--messages", "0", timeout=30)
    assert done.returncode == 2
    assert "--messages must be at least 1, not 0" in done.stderr
