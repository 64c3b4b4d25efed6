"""A stream → stream shovel on a group of two daemons: the member running its position is killed
(SIGKILL) or frozen (SIGSTOP past the group's failover, then woken) mid-stream, the other member
takes the position over, and the destination stream, read back whole over AMQP 0-9-1 (not
pumpd's counters), holds every source offset exactly once and in order.

A frozen member that wakes still holds deliveries and publishes it read before; it must write
none of them: the session's fence stops it, and the destination drops what the producer stored
before (the survivor publishes under the same producer name). The handover's time is printed
(``-s``), measured from the members' logs; bench/stream_faults.py --group measures it at length.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pumpd.testing.localnode import LocalNode

from tests.support.daemon_helpers import Daemon
from tests.support.group_helpers import (
    freeze,
    group_member,
    process_tree,
    taken_over_after,
    wake,
)
from tests.support.stream_helpers import (
    in_background,
    new_stream,
    publish_paced,
    stored_offsets,
    stream_length,
    stream_shovel,
)

pytestmark = pytest.mark.timeout(420)

MESSAGES = 100_000
PER_SECOND = 5_000  # the source grows for 20 s: the fault lands with the shovel at work
SOURCE_HEARTBEAT = 5  # seconds, on the source URI: how soon a silent member's lease goes
# the destination's length must stay put this long before it is read back whole (a zombie's
# late writes would show by then)
SETTLE = 5.0
# the group settles within settle + grace + a few polls (2 + 3 + 2 s here)
HELD = 8.0


@pytest.fixture(scope="module")
def node() -> Iterator[LocalNode]:
    """One node for the source, the destination and the group's coordination."""
    with LocalNode(plugins=["rabbitmq_stream"]) as n:
        yield n


def _running(d: Daemon, shovel: str) -> bool:
    doc = d.shovel(shovel)
    return bool(doc and doc["state"] == "running")


def _confirmed(d: Daemon, shovel: str) -> int:
    doc = d.shovel(shovel)
    return int(doc["counters"]["confirmed"]) if doc else 0


def _holder(members: list[Daemon], shovel: str, timeout: float) -> Daemon:
    """The one member that runs the position, once the same one has for HELD seconds (a
    member that joins later may be handed the position, after ``settle``)."""
    deadline = time.monotonic() + timeout
    last: Daemon | None = None
    since = time.monotonic()
    while True:
        running = [d for d in members if _running(d, shovel)]
        now = running[0] if len(running) == 1 else None
        if now is not last:
            last, since = now, time.monotonic()
        elif now is not None and time.monotonic() - since >= HELD:
            return now
        assert time.monotonic() < deadline, f"not one member running {shovel}: {running}"
        time.sleep(0.2)


def _settled_length(uri: str, port: int, stream: str, at_least: int, timeout: float,
                    alive: Callable[[], None]) -> int:
    """The destination's length once it reached ``at_least`` and stayed put for SETTLE."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while True:
        alive()
        length = stream_length(uri, port, stream)
        if length != last:
            last, since = length, time.monotonic()
        elif length >= at_least and time.monotonic() - since >= SETTLE:
            return length
        assert time.monotonic() < deadline, (
            f"the destination holds {length} of {at_least} after {timeout} s")
        time.sleep(0.5)


@pytest.mark.parametrize("fault", ["kill", "freeze"])
def test_a_member_killed_or_frozen_mid_stream_hands_over_and_every_offset_is_stored_once(
        fault: str, pumpd_daemon: Callable[..., Daemon], node: LocalNode) -> None:
    uri = node.uri()
    port = node.stream_port
    # a name of its own: the source broker keeps a stream position per shovel name
    shovel = f"s2s-{fault}"
    assert port is not None
    src, dst = new_stream(uri), new_stream(uri)
    doc: dict[str, Any] = {
        "group": {"name": f"g-{uuid.uuid4().hex[:6]}", "coordination_uri": uri,
                  "lease_retry": 0.5, "poll_interval": 0.5, "settle": 2, "grace": 3},
        "shovels": {shovel: stream_shovel(f"{uri}?heartbeat={SOURCE_HEARTBEAT}", src, uri,
                                          dst, port, reconnect_delay=0.5)},
    }
    members = [group_member(pumpd_daemon, doc, name) for name in ("a", "b")]
    for d in members:
        d.start()
    victim = _holder(members, shovel, 60)
    survivor = next(d for d in members if d is not victim)
    publisher = in_background(publish_paced, uri, src, MESSAGES, PER_SECOND)
    victim.wait_for(lambda: _confirmed(victim, shovel) >= MESSAGES // 4, 120,
                    f"{MESSAGES // 4} confirmed by the first holder")
    tree = process_tree(victim)
    at_fault = stream_length(uri, port, dst)
    faulted = time.time()
    if fault == "kill":
        victim.kill_everything()
    else:
        freeze(tree)
    try:
        survivor.wait_for(lambda: _running(survivor, shovel), 90,
                          f"{shovel} running on the survivor")
        took = taken_over_after(faulted, [survivor], [shovel])
        if fault == "freeze":
            # the survivor stores past what the frozen member held before it wakes: a late
            # write of the zombie would then be a duplicate or, with a higher id, a gap
            base = _confirmed(survivor, shovel)
            survivor.wait_for(lambda: _confirmed(survivor, shovel) >= base + 2000, 60,
                              "2000 more stored by the survivor")
    finally:
        if fault == "freeze":
            wake(tree)
    woke = time.time()
    if fault == "kill":
        victim.start()  # the same files: the same member id, back in the group
    publisher.join(120)
    assert not publisher.is_alive(), "the source was not filled"

    def both_alive() -> None:
        for d in members:
            assert d.proc is not None and d.proc.poll() is None, f"a member exited:\n{d.log()}"

    length = _settled_length(uri, port, dst, MESSAGES, 180, both_alive)
    offsets = stored_offsets(uri, dst, length, timeout=120)
    counts = Counter(offsets)
    missing = MESSAGES - sum(1 for o in counts if 0 <= o < MESSAGES)
    duplicates = sum(n - 1 for n in counts.values())
    print(f"{fault}: the destination held {at_fault} at the fault; {shovel} ran on the "
          f"survivor {took:.1f} s after it; back {woke - faulted:.1f} s after it; "
          f"{len(offsets)} stored, {missing} missing, {duplicates} duplicates")
    assert (len(offsets), missing, duplicates) == (MESSAGES, 0, 0)
    assert offsets == list(range(MESSAGES))
    # the position did move: the first holder stored some, the survivor the rest
    assert 0 < at_fault < MESSAGES
    if fault == "freeze":
        # the member that woke said why it published nothing it held: its fence
        fenced = [e["message"] for e in victim.log_events() if e.get("shovel") == shovel
                  and "none of it is published" in e["message"]]
        assert fenced, victim.log()
