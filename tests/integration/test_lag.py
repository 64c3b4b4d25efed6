"""The lag figures of a daemon's shovel while its destination node is stopped and after it
returns, read from ``/metrics`` as a scraper reads them: ``pumpd_lag_seconds`` climbs with the
outage and falls back once the shovel has caught up; ``pumpd_lag_messages`` counts what piles
up at the source and returns to 0. On both paths: the native relay and the generic path. And a
stream source's figures: without its streams port (seconds only), and read over it (messages
too, exact while nothing moves)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pytest
from pumpd.engine import wiring
from pumpd.engine.session_watch import BACKLOG_EVERY, BACKLOG_IDLE_EVERY
from pumpd.engine.status import State, lag_seconds
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import SteadyPublisher
from tests.support.daemon_helpers import Daemon, running_state, shovel_def
from tests.support.harness import running, shovel

OUTAGE = 30.0  # seconds the destination node is down
RATE = 100  # messages a second the publisher sends the source queue


def at_most(d: Daemon, name: str, bound: float) -> bool:
    """Whether the figure ``name`` is known and at most ``bound`` (0 is a value, not absence)."""
    value = figure(d, name)
    return value is not None and value <= bound


def figure(d: Daemon, name: str) -> float | None:
    """The value of ``name`` for the shovel's worker 0 in ``/metrics``; None when absent."""
    status, text = d.request("GET", "/metrics")
    assert status == 200, text
    found = re.search(rf'^{name}{{shovel="orders",worker="0"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


@pytest.fixture(params=["native", "generic"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(wiring.PATH_VARIABLE, str(request.param))  # the daemon inherits it
    return str(request.param)


def test_lag_rises_while_the_destination_is_down_and_falls_back_after(
        path: str, pumpd_daemon: Any, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
        vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    d = pumpd_daemon({"orders": shovel_def(src, "orders", dst, "orders-copy",
                                         reconnect_delay=1)})
    with SteadyPublisher(src, ["orders"], RATE, declare=True) as pub:
        d.wait_for(lambda: running_state(d, "orders"), 30, "the shovel running")
        # caught up: the backlog read as 0, nothing unconfirmed for long
        d.wait_for(lambda: at_most(d, "pumpd_lag_seconds", 1.0)
                   and figure(d, "pumpd_lag_messages") is not None, 30,
                   "the shovel caught up")

        node_b.stop()
        stopped = time.monotonic()
        seconds: list[tuple[float, float | None]] = []
        messages: list[float] = []
        while time.monotonic() - stopped < OUTAGE:
            seconds.append((time.monotonic() - stopped, figure(d, "pumpd_lag_seconds")))
            behind = figure(d, "pumpd_lag_messages")
            if behind is not None:
                messages.append(behind)
            time.sleep(0.5)
        late = [s for at, s in seconds if at >= OUTAGE - 5]
        # the age of the oldest message waiting grows with the outage...
        assert late and all(s is not None and s >= 20 for s in late), seconds
        assert all(s is None or s <= at + 10 for at, s in seconds), seconds
        # ...and so do the messages waiting, read at the source while the destination is down
        assert messages and max(messages) >= RATE * 10, messages

        before = figure(d, "pumpd_messages_confirmed_total") or 0
        node_b.restart()
        back = time.monotonic()
        # forwarding again once the destination confirms again (a first attempt may fail
        # while the node finishes starting, and wait out the reconnect backoff)
        d.wait_for(lambda: (figure(d, "pumpd_messages_confirmed_total") or 0) > before, 60,
                   "messages confirmed again")
        forwarding = time.monotonic()
        # it drains the backlog in well under a second at this rate; the next backlog reading
        # (at most BACKLOG_EVERY later: a session's first reading does not stretch the next)
        # counts what had arrived, and once that is forwarded the next counter tick (at most
        # 2 s) covers the instant it was asked; the rest is slack for a loaded machine
        d.wait_for(lambda: at_most(d, "pumpd_lag_seconds", 2.0),
                   2 * BACKLOG_EVERY + 4, "the lag back near 0")
        fell = time.monotonic() - forwarding
        # back to nothing behind but what a sample finds in flight: one publish at most
        d.wait_for(lambda: at_most(d, "pumpd_lag_messages", RATE // 10),
                   2 * BACKLOG_EVERY + 4, "no message behind")
        assert pub.error is None, pub.error
    doc = d.shovel("orders")
    assert doc is not None and doc["lag_seconds"] is not None
    print(f"{path}: lag fell back {fell:.1f} s after the shovel forwarded again "
          f"({forwarding - back:.1f} s after the node was restarted)")


def test_a_stream_source_has_a_lag_in_seconds_and_none_in_messages(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str) -> None:
    """A stream's end cannot be read over AMQP 0-9-1: no figure in messages; in seconds, caught
    up once nothing is held (the stream had nothing more to deliver)."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    conn = pika.BlockingConnection(pika.URLParameters(src))
    try:
        ch = conn.channel()
        ch.queue_declare("st", durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        stamp = int(time.time()) - 100
        for i in range(300):
            ch.basic_publish("", "st", b"%d" % i, pika.BasicProperties(timestamp=stamp))
    finally:
        conn.close()
    s = shovel("lag-stream", sources={"broker": src}, destinations={"broker": dst},
               queue="st", consumer_args={"x-stream-offset": "first"}, prefetch_count=100,
               publish_fields={"exchange": "", "routing_key": "copy"})
    seen: list[tuple[int, float | None]] = []
    with running(s) as pumps:
        def caught_up() -> bool:
            c = pumps.status("lag-stream").counters
            seen.append((c.lag_messages, lag_seconds(c, time.time())))
            return c.published == 300 and seen[-1][1] == 0.0

        pumps.wait_for(caught_up, 60, "the stream forwarded and caught up")
    assert all(messages == -1 for messages, _ in seen), seen
    # while forwarding, any figure known came from the timestamps or a caught-up instant
    assert all(s is None or s == 0.0 or s <= 100 + 60 for _, s in seen), seen


@pytest.fixture(scope="module")
def stream_nodes() -> Iterator[tuple[LocalNode, LocalNode]]:
    """A source node with the streams plugin, and a destination node to stop and start."""
    with LocalNode(plugins=["rabbitmq_stream"]) as src, LocalNode() as dst:
        yield src, dst


def _publish(uri: str, queue: str, n: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", queue, b"%d" % i)
    finally:
        conn.close()


def _stream_shovel(name: str, stream: str, src_node: LocalNode, dst_node: LocalNode) -> Any:
    """A shovel of ``stream`` on ``src_node`` from its first offset into the queue
    ``STREAM-copy`` on ``dst_node``, its lag read over the source node's streams port."""
    return shovel(name, sources={"broker": src_node.uri()}, queue=stream,
                  destinations={"broker": dst_node.uri(), "declarations": [
                      {"queue.declare": {"queue": f"{stream}-copy", "durable": True}}]},
                  consumer_args={"x-stream-offset": "first"}, prefetch_count=100,
                  publish_fields={"exchange": "", "routing_key": f"{stream}-copy"},
                  reconnect_delay=1, source_stream_port=src_node.stream_port)


@contextmanager
def _caught_up(name: str, stream: str, src_node: LocalNode, dst_node: LocalNode
               ) -> Iterator[tuple[Any, Callable[[], tuple[int, float | None]]]]:
    """100 messages in a new ``stream``, shovelled by :func:`_stream_shovel` until its figures
    read caught up (0 and 0): the running pumps, and a reading of (messages, seconds)."""
    assert src_node.stream_port is not None
    _publish(src_node.uri(), stream, 100)
    with running(_stream_shovel(name, stream, src_node, dst_node)) as pumps:
        def figures() -> tuple[int, float | None]:
            c = pumps.status().counters
            return c.lag_messages, lag_seconds(c, time.time())

        # the first reading comes at the session's start, the next within BACKLOG_EVERY
        pumps.wait_for(lambda: pumps.status().counters.published == 100
                       and figures() == (0, 0.0), 2 * BACKLOG_EVERY + 30, "caught up")
        yield pumps, figures


def test_a_stream_source_read_over_its_streams_port_counts_what_waits_and_its_age(
        stream_nodes: tuple[LocalNode, LocalNode]) -> None:
    """Caught up: 0 and 0. With the destination node stopped, 250 published into the source
    stream read as exactly 250 behind (nothing moves: the last forwarded offset is the last
    session's), and the seconds behind climb with the clock from when their chunk was
    written. Once the node is back and the shovel caught up: 0 and 0 again."""
    src_node, dst_node = stream_nodes
    src = src_node.uri()
    with _caught_up("lag-stream-port", "st", src_node, dst_node) as (pumps, figures):
        dst_node.stop()
        pumps.wait_for(lambda: pumps.status().state is not State.RUNNING, 60,
                       "the session ended with its destination")
        written = time.time()
        _publish(src, "st", 250)
        # read on every attempt to reconnect while the destination is down
        pumps.wait_for(lambda: figures()[0] == 250, 60, "250 behind")
        first = figures()[1]
        time.sleep(3)
        later = figures()
        assert first is not None and later[1] is not None, (first, later)
        # measured from when the chunk was written, which this test saw happen
        assert later[1] <= time.time() - written + 1, later
        assert later[1] >= first + 2, (first, later)
        assert later[0] == 250

        dst_node.restart()
        pumps.wait_for(lambda: figures() == (0, 0.0) and pumps.status().counters.published
                       >= 350, 60 + 2 * BACKLOG_IDLE_EVERY, "caught up again")


def _lag_connections(node: LocalNode, shovel_name: str) -> list[str]:
    """The peer ports of ``node``'s streams connections that read ``shovel_name``'s lag (their
    client properties carry the connection name pumpd gives them)."""
    listed = node.ctl("list_stream_connections", "-q", "peer_port",
                      "client_properties")
    return [line.split()[0] for line in listed.splitlines()
            if f"pumpd {shovel_name} (stream lag)" in line]


def test_a_stream_source_s_lag_is_read_on_one_connection_held_between_readings(
        stream_nodes: tuple[LocalNode, LocalNode]) -> None:
    """While the shovel runs, the source node lists one lag connection, always the same one,
    across readings (a connection opened and closed for each reading would be missing from a
    listing between two readings). After the source node restarts, the readings go on, on a new
    connection. When the shovel stops, the connection is closed."""
    src_node, dst_node = stream_nodes
    src = src_node.uri()
    name = "lag-held"
    with _caught_up(name, "st-held", src_node, dst_node) as (pumps, figures):
        # readings every BACKLOG_EVERY, doubling while unchanged: over this span, at least two
        seen: list[list[str]] = []
        until = time.monotonic() + 3 * BACKLOG_EVERY + 1
        while time.monotonic() < until:
            seen.append(_lag_connections(src_node, name))
            time.sleep(0.5)
        assert len(seen) >= 5, seen
        assert all(len(ports) == 1 for ports in seen), seen
        assert len({ports[0] for ports in seen}) == 1, seen

        src_node.restart()
        # a restarted node takes a moment to bring its streams back ("home node ... is down")
        deadline = time.monotonic() + 60
        while True:
            try:
                _publish(src, "st-held", 50)
                break
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        pumps.wait_for(lambda: pumps.status().counters.published >= 150
                       and figures() == (0, 0.0), 60 + 2 * BACKLOG_IDLE_EVERY,
                       "caught up after the source node's restart")
        assert len(_lag_connections(src_node, name)) == 1
    deadline = time.monotonic() + 10
    while _lag_connections(src_node, name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _lag_connections(src_node, name) == []
