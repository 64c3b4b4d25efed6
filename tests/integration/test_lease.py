"""A group of daemons runs every position once, fenced by the position's lease, an
exclusive queue held on its own source connection (``engine/lease.py``).

What the brokers say is the truth here: who consumes is read from the source broker's own
consumer count (``rabbitmqctl list_queues``), and which connections a pump opened from the
brokers' connection lists, never from pumpd's status alone."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from typing import Any

from pumpd.engine.amqp091 import Amqp091Source
from pumpd.engine.lease import LeaseSpec
from pumpd.engine.link import LinkError
from pumpd.engine.queue_names import LEASE_PREFIX, lease_queue
from pumpd.engine.status import State
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import SteadyPublisher, drain_queue
from tests.support.daemon_helpers import Daemon, fill_queue, shovel_def
from tests.support.harness import RunningPumps, shovel


def _consumers(node: LocalNode, vhost: str, queue: str) -> int:
    """The source broker's own count of consumers on ``queue``."""
    out = node.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost, "name", "consumers")
    rows = dict(line.split("\t") for line in out.splitlines() if line)
    return int(rows[queue])


def _connections(node: LocalNode, vhost: str, named: str) -> int:
    """How many client connections to ``vhost`` on ``node`` have a connection name that
    starts with ``named`` (the client properties' connection_name, as pumpd sets it)."""
    out = node.ctl("list_connections", "-q", "--no-table-headers", "vhost", "client_properties")
    return sum(1 for line in out.splitlines()
               if line.split("\t")[0] == vhost and f'"connection_name","{named}' in line)


def _lease_queues(node: LocalNode, vhost: str) -> list[str]:
    out = node.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost, "name")
    return [q for q in out.splitlines() if q.startswith(LEASE_PREFIX)]


def _pumps(cfg: Any, client: str, **kw: Any) -> RunningPumps:
    return RunningPumps([cfg], client_name=client, **kw).start()


def _config(node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str,
            **clauses: Any) -> Any:
    return shovel("s", **shovel_def(node_a.uri(vhost_a), "src", node_b.uri(vhost_b), "dst",
                                    reconnect_delay=1, **clauses))


def test_two_pumps_with_one_lease_consume_once_and_the_other_takes_over(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    cfg = _config(node_a, vhost_a, node_b, vhost_b)
    lease = LeaseSpec(lease_queue("t", "s", 0), retry=0.5)
    first = _pumps(cfg, "pumpd first", lease=lease)
    second: RunningPumps | None = None
    try:
        first.wait_for(lambda: first.status().state == State.RUNNING, 30, "first running")
        second = _pumps(cfg, "pumpd second", lease=lease)
        second.wait_for(lambda: second.status().state == State.STANDBY, 30, "second standby")
        reason = second.status().reason or ""
        assert lease.name in reason and "another connection" in reason
        for _ in range(6):  # several lease attempts of the second, one consumer all along
            assert _consumers(node_a, vhost_a, "src") == 1
            time.sleep(0.5)
        # A standby pump never connects to the destination (nor holds a source connection
        # between its attempts longer than one declare).
        assert _connections(node_b, vhost_b, "pumpd second") == 0
        assert _connections(node_b, vhost_b, "pumpd first") == 1
        # standby is neither a failure nor a reconnect
        assert second.status().counters.reconnects == 0
        fill_queue(node_a.uri(vhost_a), "src", [b"%d" % i for i in range(500)])
        first.wait_for(lambda: first.status().counters.acked == 500, 30, "500 moved")
        first.stop()
        second.wait_for(lambda: second.status().state == State.RUNNING, 10, "second running")
        assert _consumers(node_a, vhost_a, "src") == 1
        fill_queue(node_a.uri(vhost_a), "src", [b"%d" % i for i in range(500, 1000)])
        second.wait_for(lambda: second.status().counters.acked == 500, 30, "500 more moved")
        got = Counter(d.body for d in drain_queue(node_b.uri(vhost_b), "dst", 1000))
        assert len(got) == 1000 and set(got.values()) == {1}
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert _lease_queues(node_a, vhost_a) == []  # gone with the connection that held it


class Gate:
    """A LeaseGate a test sets by hand."""

    def __init__(self, take: bool) -> None:
        self.take = take
        self.release = False
        self.asked = 0

    def take_now(self) -> bool:
        self.asked += 1
        return self.take

    def release_now(self) -> bool:
        return self.release


def test_a_gate_decides_when_a_pump_tries_the_lease_and_when_it_hands_over(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    cfg = _config(node_a, vhost_a, node_b, vhost_b, prefetch_count=50)
    lease = LeaseSpec(lease_queue("t", "s", 0), retry=0.2)
    gate = Gate(take=False)
    pumps = _pumps(cfg, "pumpd gated", lease=lease, gate=gate)
    try:
        pumps.wait_for(lambda: gate.asked >= 3, 10, "the gate asked again")
        assert pumps.status().state == State.STANDBY
        assert "another member" in (pumps.status().reason or "")
        # told not to try: no connection at all, on either side
        assert _connections(node_a, vhost_a, "pumpd gated") == 0
        assert _connections(node_b, vhost_b, "pumpd gated") == 0
        gate.take = True
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 10, "running")
        assert _consumers(node_a, vhost_a, "src") == 1
        assert _lease_queues(node_a, vhost_a) == [lease.name]
        fill_queue(node_a.uri(vhost_a), "src", [b"%d" % i for i in range(2000)])
        gate.take, gate.release = False, True  # hand over in the middle of the transfer
        pumps.wait_for(lambda: pumps.status().state == State.STANDBY, 10, "standby")
        # settled before letting go: what it consumed was published, confirmed and acked
        c = pumps.status().counters
        assert c.consumed == c.published == c.confirmed == c.acked
        assert c.in_flight == 0
        assert _consumers(node_a, vhost_a, "src") == 0
        assert _lease_queues(node_a, vhost_a) == []  # released with its source connection
        gate.take, gate.release = True, False
        pumps.wait_for(lambda: pumps.status().counters.acked == 2000, 30, "all moved")
    finally:
        pumps.stop()
    got = Counter(d.body for d in drain_queue(node_b.uri(vhost_b), "dst", 2000))
    assert len(got) == 2000 and set(got.values()) == {1}


def _after_first_read(pumps: RunningPumps, action: Any) -> threading.Event:
    """Run ``action(source_link)`` in the pump's loop right after the relay has taken the first
    deliveries off the source and scheduled their flush, before that flush runs."""
    done = threading.Event()

    def install() -> None:
        session = pumps.pumps["s"]._session
        assert session is not None and isinstance(session.source, Amqp091Source)
        source = session.source.link
        feed = source._stream.interceptor
        assert feed is not None

        def then_act(data: bytes) -> bytes:
            rest = feed(data)
            if not done.is_set() and session.path is not None and session.path.consumed:
                done.set()
                action(source)
            return rest

        source.intercept(then_act)

    pumps._loop.call_soon_threadsafe(install)
    return done


def _moved_once(pumps: RunningPumps, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
                vhost_b: str, action: Any) -> list[str]:
    """50 messages through a pump whose session meets ``action`` after its first read; each
    must arrive once. Returns the reasons the pump gave."""
    try:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        done = _after_first_read(pumps, action)
        time.sleep(0.5)
        fill_queue(node_a.uri(vhost_a), "src", [b"%d" % i for i in range(50)])
        pumps.wait_for(done.is_set, 10, "the first read")
        _settled(node_a, vhost_a)  # every message acknowledged at the source
    finally:
        pumps.stop()
    got = Counter(d.body for d in drain_queue(node_b.uri(vhost_b), "dst", None))
    assert set(got) == {b"%d" % i for i in range(50)}
    assert max(got.values()) == 1, "published by a session that had lost its source"
    return [r or "" for _s, r in pumps.history["s"]]


def test_a_session_frozen_between_a_read_and_its_flush_publishes_nothing_it_read(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    """The event loop stands still right after the relay took deliveries from the source and
    before their publishes are written (as a SIGSTOP may hit it), longer than the source's
    heartbeat timeout: the broker drops the connection and requeues them meanwhile. The flush
    that runs first thing after the freeze must publish none of them, or the next holder of the
    lease (here: the next session) publishes them a second time."""
    src = node_a.uri(vhost_a)
    src += ("&" if "?" in src else "?") + "heartbeat=2"
    cfg = shovel("s", **shovel_def(src, "src", node_b.uri(vhost_b), "dst", reconnect_delay=1))
    pumps = _pumps(cfg, "pumpd frozen", lease=LeaseSpec(lease_queue("t", "s", 0), retry=0.5))
    # the broker gives up on the silent connection 2-3 heartbeat timeouts (4-6 s) after its last byte
    reasons = _moved_once(pumps, node_a, vhost_a, node_b, vhost_b, lambda _s: time.sleep(10))
    assert any("stood still" in r for r in reasons), reasons


def test_a_session_whose_source_is_gone_publishes_nothing_it_held(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    """The source link reports its connection closed between a read and that read's flush:
    what the read gave is requeued by the source, so the flush must not publish it."""
    cfg = _config(node_a, vhost_a, node_b, vhost_b)
    pumps = _pumps(cfg, "pumpd cut")

    def source_lost(source: Any) -> None:
        source._fail(LinkError("the source connection is gone (test)"))

    reasons = _moved_once(pumps, node_a, vhost_a, node_b, vhost_b, source_lost)
    assert any("the source connection is gone" in r for r in reasons), reasons


def _group(start_daemon: Any, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
           vhost_b: str, member: str, *args: str, source_port: int | None = None) -> Daemon:
    """A member of group ``g``: heartbeats of 3 s on the source (the broker drops a silent
    connection, and its lease, within seconds), messages marked with the member's name; its
    source through ``source_port`` (a proxy) when given."""
    src = node_a.uri(vhost_a)
    if source_port is not None:
        src = src.replace(f":{node_a.amqp_port}/", f":{source_port}/")
    src += ("&" if "?" in src else "?") + "heartbeat=3"
    d = start_daemon({"s": shovel_def(src, "src", node_b.uri(vhost_b), "dst",
                                      reconnect_delay=1, prefetch_count=100,
                                      publish_properties={"headers": {"member": member}})},
                     "--cluster", "g", "--heartbeat-timeout", "60", start=False)
    d.config_path = d.workdir / f"{member}.json"  # each member its own files
    d.state_path = d.workdir / f"{member}.runtime.json"
    d.token_path = d.workdir / f"{member}.runtime.token"
    d.write_config(json.loads((d.workdir / "shovels.json").read_text())["shovels"])
    return d.start()


def _holder_and_standby(start_daemon: Any, node_a: LocalNode, vhost_a: str,
                        node_b: LocalNode, vhost_b: str,
                        source_port: int | None = None) -> tuple[Daemon, Daemon]:
    """Members "a" (running the position; its source through ``source_port`` when given) and
    "b" (standing by), started in that order."""
    a = _group(start_daemon, node_a, vhost_a, node_b, vhost_b, "a", source_port=source_port)
    a.wait_for(lambda: _state(a) == "running", 30, "a running")
    b = _group(start_daemon, node_a, vhost_a, node_b, vhost_b, "b")
    b.wait_for(lambda: _state(b) == "standby", 30, "b standby")
    return a, b


def _state(d: Daemon) -> str:
    doc = d.shovel("s")
    assert doc is not None
    return str(doc["workers"][0]["state"])


def _settled(node_a: LocalNode, vhost_a: str, timeout: float = 60) -> None:
    """Wait until the source queue holds nothing, ready or unacknowledged."""
    deadline = time.monotonic() + timeout
    while True:
        out = node_a.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost_a, "name",
                         "messages")
        rows = dict(line.split("\t") for line in out.splitlines() if line)
        if rows["src"] == "0":
            return
        assert time.monotonic() < deadline, f"the source still holds {rows['src']} messages"
        time.sleep(0.2)


def test_kill_9_of_the_holder_moves_its_position_to_the_other_member_and_loses_nothing(
        pumpd_daemon, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
        vhost_b: str) -> None:
    a, b = _holder_and_standby(pumpd_daemon, node_a, vhost_a, node_b, vhost_b)
    assert "standby" in b.shovel("s")["state"]  # type: ignore[index]  # the shovel as a whole
    with SteadyPublisher(node_a.uri(vhost_a), ["src"]) as pub:
        time.sleep(2)
        assert _consumers(node_a, vhost_a, "src") == 1
        a.kill_everything()
        killed = time.monotonic()
        b.wait_for(lambda: _consumers(node_a, vhost_a, "src") == 1, 15, "b consuming")
        took = time.monotonic() - killed
        time.sleep(2)
        sent = pub.stop()
    assert took < 10, f"took over after {took:.1f}s"
    assert _state(b) == "running"
    _settled(node_a, vhost_a)
    bodies = Counter(d.body for d in drain_queue(node_b.uri(vhost_b), "dst", None))
    assert set(bodies) == {b"%d" % i for i in range(sent)}, "lost messages"
    assert sum(bodies.values()) - sent <= 100  # duplicates within a's in-flight window


def test_a_frozen_holder_publishes_nothing_after_it_resumes_and_stands_by(
        pumpd_daemon, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
        vhost_b: str) -> None:
    a, b = _holder_and_standby(pumpd_daemon, node_a, vhost_a, node_b, vhost_b)
    worker = a.worker_pids("s")[0]
    with SteadyPublisher(node_a.uri(vhost_a), ["src"]) as pub:
        time.sleep(2)
        os.kill(worker, signal.SIGSTOP)
        try:
            # The broker drops a's silent source connection 2-3 heartbeat timeouts (6-9 s) after
            # it froze, and b takes the lease; a's socket meanwhile holds unread deliveries.
            b.wait_for(lambda: _state(b) == "running", 20, "b running")
            time.sleep(4)
            # everything a published before it froze has landed: take it out of the way
            from_a_before = sum(1 for d in drain_queue(node_b.uri(vhost_b), "dst", None)
                                if d.properties.headers["member"] == "a")
        finally:
            os.kill(worker, signal.SIGCONT)
        a.wait_for(lambda: _state(a) == "standby", 30, "a standby after resuming")
        time.sleep(1)
        sent = pub.stop()
    assert from_a_before > 0
    _settled(node_a, vhost_a)
    rest = drain_queue(node_b.uri(vhost_b), "dst", None)
    after = [d for d in rest if d.properties.headers["member"] == "a"]
    assert after == [], f"a published {len(after)} messages after it resumed"
    assert _consumers(node_a, vhost_a, "src") == 1
    assert sent > 0


def test_a_holder_cut_off_from_the_source_loses_its_lease_and_the_other_member_loses_nothing(
        pumpd_daemon, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
        vhost_b: str) -> None:
    """A partition between the holder and the source broker (its source connection goes silent
    in both directions, the destination stays reachable): the broker drops the silent connection
    and the lease with it, the other member takes over, nothing is lost, and the cut-off member,
    once pika has given up on the silent connection too, finds the lease taken and stands by."""
    with TcpProxy("127.0.0.1", node_a.amqp_port) as cut:
        a, b = _holder_and_standby(pumpd_daemon, node_a, vhost_a, node_b, vhost_b,
                                   source_port=cut.port)
        with SteadyPublisher(node_a.uri(vhost_a), ["src"]) as pub:
            time.sleep(2)
            # the open connections go silent, and new ones hang: a partition, not a reset
            assert cut.stall_open() >= 1
            cut.set_mode("stall")
            silenced = time.monotonic()
            # the broker's heartbeat check: 2-3 timeouts of 3 s after the last byte
            b.wait_for(lambda: _state(b) == "running", 30, "b running")
            took = time.monotonic() - silenced
            cut.set_mode("pass")  # the partition heals
            a.wait_for(lambda: _state(a) == "standby", 30, "a standby, its lease taken")
            time.sleep(1)
            sent = pub.stop()
    assert took < 3 * 3 + 5, f"b took over {took:.1f}s after the cut"
    _settled(node_a, vhost_a)
    bodies = Counter(d.body for d in drain_queue(node_b.uri(vhost_b), "dst", None))
    assert set(bodies) == {b"%d" % i for i in range(sent)}, "lost messages"
    # what a had published without its acks reaching the source comes again, through b
    assert sum(bodies.values()) - sent <= 100
    assert _consumers(node_a, vhost_a, "src") == 1

