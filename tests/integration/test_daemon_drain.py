"""SIGTERM in the middle of a large run: every worker drains, the daemon exits 0, nothing is lost
or left unacknowledged, and every message the destination confirmed is there."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from pumpd import exitcodes
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import drain_queue, queue_depth
from tests.support.daemon_helpers import (
    Daemon,
    fill_queue,
    running_state,
    settled,
    shovel_def,
    wait_depth,
)

DRAIN_TIMEOUT = 20


def _fill_while_stopped(d: Daemon, src: str, sent: list[bytes]) -> None:
    """Declare the queues through the shovel's own declarations first, then fill the source
    while nothing consumes it (the daemon is stopped; the test starts it again)."""
    d.start()
    d.wait_for(lambda: running_state(d, "big"), 30, "running")
    assert d.stop() == exitcodes.OK
    fill_queue(src, "in", sent)
    wait_depth(src, "in", len(sent))


def _drained_exactly(node_a: LocalNode, vhost_a: str, dst: str, sent: list[bytes]) -> int:
    """The drain's guarantee: nothing unacknowledged or consumed at the source, nothing lost,
    nothing twice: the destination holds exactly the first messages, in order, and the source
    exactly the others. How many moved."""
    remaining, unacked, consumers = settled(node_a, vhost_a, "in")
    assert (unacked, consumers) == (0, 0)
    moved = queue_depth(dst, "out")[0]
    assert moved + remaining == len(sent)
    got = [m.body for m in drain_queue(dst, "out", expected=moved, timeout=120)]
    assert got == sent[:moved]
    return moved


def test_sigterm_during_a_100000_message_run_drains_and_exits_0(
    pumpd_daemon, node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str
) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    n = 100_000
    sent = [b"%06d" % i + b"." * 58 for i in range(n)]  # 64-byte bodies
    d = pumpd_daemon({"big": shovel_def(src, "in", dst, "out")}, "--drain-timeout",
                     str(DRAIN_TIMEOUT), start=False)
    _fill_while_stopped(d, src, sent)
    assert queue_depth(src, "in") == (n, 0)

    d.start()
    d.wait_for(lambda: d.shovel("big")["counters"]["consumed"] >= 10_000, 120,
               "10,000 consumed")
    d.signal(signal.SIGTERM)
    # the drain timeout bounds it (plus the time to start and close connections)
    assert d.wait_exit(DRAIN_TIMEOUT + 15) == exitcodes.OK

    moved = _drained_exactly(node_a, vhost_a, dst, sent)
    assert 10_000 <= moved < n, "the stop did not land mid-run"
    # Every message the destination confirmed is there (and nothing else was published).
    exit_event = [e for e in d.log_events() if e.get("event") == "worker_exit"][-1]
    counters = exit_event["counters"]
    assert exit_event["reason"] == "shutdown"
    assert counters["published"] == counters["confirmed"] == counters["acked"] == moved
    assert counters["in_flight"] == 0
    stopped = [e for e in d.log_events() if e.get("event") == "worker_stopped"]
    assert stopped and stopped[-1]["counters"]["acked"] == moved


# The coordinator's loop raising out of the blue (a bug), injected through the flag file given
# first on the command line: the real daemon otherwise, with real workers and brokers.
_FAULTY_COORDINATOR = """
import os, sys
from pumpd.supervisor import coordinator
observe = coordinator.Coordinator._observe
def faulty(self, now):
    if os.path.exists(sys.argv[1]):
        raise RuntimeError("injected: a bug in the coordinator's loop")
    observe(self, now)
coordinator.Coordinator._observe = faulty
from pumpd.cli.dispatch import main
sys.exit(main(sys.argv[2:]))
"""


def test_an_unexpected_error_in_the_coordinator_drains_every_worker_instead_of_killing_it(
    pumpd_daemon, node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
    tmp_path: Path
) -> None:
    """The last resort SIGTERMs the workers and waits for their drain; it used to
    SIGKILL them, leaving published but unacknowledged messages to come again (duplicates)."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    n = 30_000
    sent = [b"%06d" % i + b"." * 58 for i in range(n)]
    flag = tmp_path / "fail-now"
    d = pumpd_daemon({"big": shovel_def(src, "in", dst, "out")}, "--drain-timeout",
                     str(DRAIN_TIMEOUT), start=False)
    base = d.command
    d.command = lambda: [sys.executable, "-c", _FAULTY_COORDINATOR, str(flag),
                         *base()[3:]]  # type: ignore[method-assign]
    _fill_while_stopped(d, src, sent)

    d.start()
    d.wait_for(lambda: d.shovel("big")["counters"]["consumed"] >= 3_000, 120, "3,000 consumed")
    d.remember_workers()
    flag.touch()
    assert d.wait_exit(DRAIN_TIMEOUT + 15) == exitcodes.FAILURE
    events = d.log_events()
    assert any(e.get("event") == "coordinator_failed" for e in events)
    assert not any(e.get("event") == "kill" or "killing it" in e.get("message", "")
                   for e in events), d.log()
    assert any(e.get("message") == "1 of 1 worker process(es) drained" for e in events), d.log()

    _drained_exactly(node_a, vhost_a, dst, sent)
