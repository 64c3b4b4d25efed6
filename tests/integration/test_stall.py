"""Stalled sessions heal themselves, against private nodes: a destination that goes
silent with messages outstanding, and a source that goes silent with a backlog, are each
restarted within ``stall_timeout`` and the shovel moves again, losing nothing; a destination
under a memory alarm (blocked) is waited out, never restarted.

A silent connection is one the fault proxy stops forwarding for good
(:meth:`~pumpd.testing.TcpProxy.stall_open`): a half-dead TCP path, or a peer's connection that
hangs; the new session's connections pass. The rule itself, on a fake clock, is
tests/unit/test_stall_rule.py's.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pika
from pumpd.engine.status import State
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import declare_queue, drain_queue, queue_depth, via
from tests.support.daemon_helpers import fill_queue
from tests.support.harness import RunningPumps, running, shovel

STALL_TIMEOUT = 3


def q_to_out(src: str, dst: str, **clauses: Any) -> Any:
    """A shovel from queue "q" at ``src`` to queue "out" at ``dst`` (both declared by the
    caller)."""
    return shovel(sources={"broker": src}, destinations={"broker": dst}, queue="q",
                  reconnect_delay=0.2, publish_fields={"exchange": "", "routing_key": "out"},
                  stall_timeout=STALL_TIMEOUT, **clauses)


def reasons(pumps: RunningPumps) -> list[str]:
    return [r for _, r in pumps.history["s"] if r]


def all_arrived(dst: str, bodies: list[bytes]) -> None:
    got = drain_queue(dst, "out", expected=queue_depth(dst, "out")[0], timeout=60)
    lost = set(bodies) - {m.body for m in got}
    assert not lost, f"{len(lost)} lost, e.g. {sorted(lost)[:3]}"


def test_a_destination_gone_silent_with_messages_outstanding_is_restarted(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str, proxy_b: TcpProxy,
) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    declare_queue(src, "q")
    declare_queue(dst, "out")
    bodies = [b"%04d" % i for i in range(500)]
    with running(q_to_out(src, via(node_b, vhost_b, proxy_b), prefetch_count=100)) as pumps:
        fill_queue(src, "q", bodies[:200])
        pumps.wait_for(lambda: pumps.status().counters.acked == 200, 30, "the first 200 moved")
        assert proxy_b.stall_open() == 1
        fill_queue(src, "q", bodies[200:])
        pumps.wait_for(lambda: pumps.status().counters.in_flight > 0, 30, "messages outstanding")
        began = time.monotonic()
        # Moving again within the timeout and a few checks (generous on a shared machine)
        pumps.wait_for(lambda: pumps.status().counters.stall_restarts == 1, STALL_TIMEOUT + 10,
                       "a stall restart")
        restarted = time.monotonic() - began
        pumps.wait_for(lambda: pumps.status().counters.acked >= 500, 30, "all 500 acked")
        print(f"\nstall_timeout {STALL_TIMEOUT} s: restarted {restarted:.1f} s after the "
              f"first outstanding publish, all moved after {time.monotonic() - began:.1f} s")
        c = pumps.status().counters
        assert (c.stall_restarts, c.reconnects) == (1, 1), c
        assert pumps.status().state == State.RUNNING
    why = [r for r in reasons(pumps) if r.startswith("stalled")]
    assert len(why) == 1 and re.fullmatch(
        f"stalled: [0-9,]+ messages unconfirmed by the destination for {STALL_TIMEOUT} s; "
        "restarting the session", why[0]), reasons(pumps)
    all_arrived(dst, bodies)


def test_a_source_gone_silent_with_a_backlog_is_restarted(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str, proxy_a: TcpProxy,
) -> None:
    """The consumer gets nothing and the passive declare that reads the backlog is never
    answered: restarted. What the silent consumer held (a prefetch window) comes back when the
    source broker drops the silent connection, at its heartbeat timeout (5 s here: the broker
    never hears from that connection again)."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    declare_queue(src, "q")
    declare_queue(dst, "out")
    bodies = [b"%04d" % i for i in range(500)]
    source = via(node_a, vhost_a, proxy_a) + "?heartbeat=5"
    with running(q_to_out(source, dst, prefetch_count=100)) as pumps:
        fill_queue(src, "q", bodies[:200])
        pumps.wait_for(lambda: pumps.status().counters.acked == 200, 30, "the first 200 moved")
        assert proxy_a.stall_open() == 1
        began = time.monotonic()
        fill_queue(src, "q", bodies[200:])
        pumps.wait_for(lambda: pumps.status().counters.stall_restarts == 1, STALL_TIMEOUT + 10,
                       "a stall restart")
        restarted = time.monotonic() - began
        # the old consumer's window (100) is held by the broker; the other 200 move at once
        pumps.wait_for(lambda: pumps.status().counters.acked >= 400, 30, "moving again")
        print(f"\nstall_timeout {STALL_TIMEOUT} s: restarted {restarted:.1f} s after the "
              f"source went silent, moving again after {time.monotonic() - began:.1f} s")
        pumps.wait_for(lambda: pumps.status().counters.acked >= 500, 60,
                       "all 500 acked (the held ones once the broker dropped the connection)")
        assert pumps.status().counters.stall_restarts == 1
    why = [r for r in reasons(pumps) if r.startswith("stalled")]
    assert why == [f"stalled: the source did not answer for {STALL_TIMEOUT} s (reading its "
                   "backlog) and nothing moved; restarting the session"], reasons(pumps)
    all_arrived(dst, bodies)


def test_a_backlog_the_source_keeps_from_the_consumer_is_restarted(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
) -> None:
    """The source answers, says messages are ready, and delivers none to the shovel's
    consumer. Provoked here with a single-active-consumer queue whose active consumer is the
    test's (holding its one unacked message): restarted every stall_timeout, in vain, until
    the broker delivers to the shovel again (README: such a queue with several workers wants
    stall_timeout 0)."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    declare_queue(src, "q", arguments={"x-single-active-consumer": True})
    declare_queue(dst, "out")
    bodies = [b"%04d" % i for i in range(300)]
    fill_queue(src, "q", bodies)
    conn = pika.BlockingConnection(pika.URLParameters(src))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1)
        held: list[Any] = []
        ch.basic_consume("q", lambda _c, m, _p, b: held.append((m, b)))
        while not held:
            conn.process_data_events(time_limit=0.1)
        with running(q_to_out(src, dst)) as pumps:
            pumps.wait_for(lambda: pumps.status().counters.stall_restarts >= 1,
                           2 * STALL_TIMEOUT + 10, "a stall restart")
            assert pumps.status().counters.consumed == 0
            why = next(r for r in reasons(pumps) if r.startswith("stalled"))
            assert why == (f"stalled: 299 ready at the source, nothing moved for "
                           f"{STALL_TIMEOUT} s; restarting the session"), why
            conn.close()  # the shovel's consumer becomes the active one: held one requeued
            pumps.wait_for(lambda: pumps.status().counters.acked == 300, 30, "all 300 moved")
    finally:
        if conn.is_open:
            conn.close()
    all_arrived(dst, bodies)


def test_a_destination_under_a_memory_alarm_is_blocked_never_restarted(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    declare_queue(src, "q")
    declare_queue(dst, "out")
    bodies = [b"%04d" % i for i in range(500)]
    with running(q_to_out(src, dst, prefetch_count=50)) as pumps:
        fill_queue(src, "q", bodies[:10])
        pumps.wait_for(lambda: pumps.status().counters.acked == 10, 30, "the first 10 moved")
        node_b.set_vm_memory_high_watermark(0)
        try:
            # RabbitMQ sends connection.blocked when the connection next publishes
            fill_queue(src, "q", bodies[10:])
            pumps.wait_for(lambda: pumps.status().state == State.BLOCKED, 60, "blocked")
            # What would be a stall but for the alarm: a backlog, nothing moving, for several
            # timeouts
            time.sleep(3 * STALL_TIMEOUT + 2)
            assert queue_depth(src, "q")[0] > 0
            assert pumps.status().state == State.BLOCKED
            c = pumps.status().counters
            assert (c.stall_restarts, c.reconnects) == (0, 0), c
        finally:
            node_b.set_vm_memory_high_watermark(0.4)
        pumps.wait_for(lambda: pumps.status().counters.acked == 500, 60, "all 500 moved")
        c = pumps.status().counters
        assert (c.stall_restarts, c.reconnects) == (0, 0), c
    all_arrived(dst, bodies)
