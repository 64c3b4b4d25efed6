"""Pause and resume at the engine's level, against private nodes: a pause cancels the
consumer, publishes, confirms and acks what the session held, then holds no consumer and no
connection while every other message stays ready in the source; resume moves them all. A pump
started paused never connects.

(The daemon's ``pumpd pause`` / HTTP wiring and the state file come later.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pumpd.engine.status import State
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import declare_queue, drain_queue, queue_depth, via
from tests.support.daemon_helpers import fill_queue, settled
from tests.support.harness import RunningPumps, running, shovel


@pytest.fixture
def proxy_b(node_b: LocalNode) -> Iterator[TcpProxy]:
    # confirms take a 40 ms round trip: a backlog of a few thousand takes seconds to move
    with TcpProxy("127.0.0.1", node_b.amqp_port, delay_ms=20) as p:
        yield p


def q_to_out(src: str, dst: str, **clauses: Any) -> Any:
    return shovel(sources={"broker": src}, destinations={"broker": dst}, queue="q",
                  publish_fields={"exchange": "", "routing_key": "out"}, **clauses)


def states(pumps: RunningPumps) -> list[tuple[str, str | None]]:
    return [(s.label, r) for s, r in pumps.history["s"]]


def test_a_pause_leaves_the_backlog_in_the_source_and_resume_moves_it_all(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
    proxy_a: TcpProxy, proxy_b: TcpProxy,
) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    declare_queue(src, "q")
    declare_queue(dst, "out")
    n = 5000
    bodies = [b"%05d" % i for i in range(n)]
    fill_queue(src, "q", bodies)
    cfg = q_to_out(via(node_a, vhost_a, proxy_a), via(node_b, vhost_b, proxy_b),
                   prefetch_count=100, stall_timeout=1)
    with running(cfg) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked >= 300, 60, "some moved")
        pumps.on_loop(lambda p: p.pause())
        pumps.wait_for(lambda: pumps.status().state == State.PAUSED, 60, "paused")
        c = pumps.status().counters
        assert 300 <= c.acked < n, c  # paused with a backlog
        assert (c.in_flight, c.buffered, c.acked) == (0, 0, c.confirmed), c
        # Nothing held: no consumer, nothing unacknowledged, no connection through either proxy
        ready, unacked, consumers = settled(node_a, vhost_a, "q")
        assert (ready, unacked, consumers) == (n - c.acked, 0, 0)
        assert (proxy_a.connections, proxy_b.connections) == (0, 0)
        time.sleep(3)  # paused for several stall timeouts: still paused, nothing moves
        assert queue_depth(src, "q") == (n - c.acked, 0)
        assert pumps.status().state == State.PAUSED
        assert pumps.status().counters.acked == c.acked
        pumps.on_loop(lambda p: p.resume())
        pumps.wait_for(lambda: pumps.status().counters.acked == n, 120, "all moved")
        c = pumps.status().counters
        assert (c.stall_restarts, c.reconnects, c.redelivered) == (0, 0, 0), c
    assert ("paused", "paused") in states(pumps)
    after = states(pumps)[states(pumps).index(("paused", "paused")):]
    assert [s for s, _ in after[:3]] == ["paused", "starting", "running"], after
    got = [m.body for m in drain_queue(dst, "out", expected=n, timeout=60)]
    assert got == bodies  # nothing lost, nothing twice, in order
    assert queue_depth(src, "q") == (0, 0)


def test_a_pump_started_paused_never_connects_until_resumed(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
    proxy_a: TcpProxy, proxy_b: TcpProxy,
) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    declare_queue(src, "q")
    declare_queue(dst, "out")
    bodies = [b"%03d" % i for i in range(300)]
    fill_queue(src, "q", bodies)
    cfg = q_to_out(via(node_a, vhost_a, proxy_a), via(node_b, vhost_b, proxy_b))
    with running(cfg, paused=True) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.PAUSED, 30, "paused")
        time.sleep(2)
        assert (proxy_a.accepted, proxy_b.accepted) == (0, 0)
        assert queue_depth(src, "q") == (300, 0)
        pumps.on_loop(lambda p: p.pause())  # pausing a paused pump: still paused
        pumps.on_loop(lambda p: p.resume())
        pumps.wait_for(lambda: pumps.status().counters.acked == 300, 60, "all 300 moved")
        # resumed before the pause's drain is over: the session ends, a new one starts
        pumps.on_loop(lambda p: (p.pause(), p.resume()))
        more = [b"m%03d" % i for i in range(100)]
        fill_queue(src, "q", more)
        pumps.wait_for(lambda: pumps.status().counters.acked == 400, 60, "100 more moved")
        assert pumps.status().state == State.RUNNING
        pumps.on_loop(lambda p: p.pause())
        pumps.wait_for(lambda: pumps.status().state == State.PAUSED, 30, "paused again")
    # stopped while paused: terminated as any stop
    assert states(pumps)[-1] == ("terminated", "shutdown")
    assert [s for s, _ in states(pumps)][:3] == ["paused", "starting", "running"]
    assert sorted(m.body for m in drain_queue(dst, "out", expected=400)) == bodies + more


def test_a_pause_during_the_reconnect_delay_pauses_at_once(
    node_a: LocalNode, vhost_a: str, proxy_b: TcpProxy,
) -> None:
    """The destination refuses every connection: the pump waits out its reconnect delay; a
    pause ends that wait, and resume tries again (and a stop while paused ends the pump)."""
    src = node_a.uri(vhost_a)
    declare_queue(src, "q")
    proxy_b.set_mode("refuse")
    cfg = q_to_out(src, f"amqp://guest:guest@127.0.0.1:{proxy_b.port}/%2F",
                   reconnect_delay=60)
    with running(cfg) as pumps:
        pumps.wait_for(lambda: "reconnecting in" in (pumps.status().reason or ""), 30,
                       "waiting to reconnect")
        attempts = proxy_b.accepted
        began = time.monotonic()
        pumps.on_loop(lambda p: p.pause())
        pumps.wait_for(lambda: pumps.status().state == State.PAUSED, 10, "paused")
        assert time.monotonic() - began < 10  # not the 60 s delay
        pumps.on_loop(lambda p: p.resume())
        pumps.wait_for(lambda: proxy_b.accepted > attempts, 10, "a new attempt at once")
