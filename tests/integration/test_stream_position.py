"""A shovel whose source is a stream records where it is on the source broker and resumes right
after it (engine/stream_position.py), against real brokers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pika
from pumpd.engine.queue_names import stream_position_queue
from pumpd.testing.localnode import LocalNode, find_free_port

from tests.support.amqp_helpers import blocking_connection, declare_queue, drain_queue, queue_depth
from tests.support.daemon_helpers import Daemon
from tests.support.harness import running, shovel


def _stream(uri: str, name: str) -> None:
    with blocking_connection(uri) as c:
        c.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})


def _publish(uri: str, queue: str, first: int, n: int) -> None:
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(first, first + n):
            ch.basic_publish("", queue, b"%d" % i, pika.BasicProperties(message_id=f"id{i}"))


def _record(uri: str, shovel_name: str) -> dict[str, Any] | None:
    with blocking_connection(uri) as c:
        ch = c.channel()
        method, _props, body = ch.basic_get(stream_position_queue(shovel_name), auto_ack=False)
        if method is None:
            return None
        ch.basic_reject(method.delivery_tag, requeue=True)
        return dict(json.loads(body))


def _last_offset(uri: str, stream: str, message_id: str) -> int:
    """The offset of the message ``message_id``, read from the stream with pika."""
    found: list[int] = []

    def take(ch: Any, m: Any, p: Any, _b: bytes) -> None:
        ch.basic_ack(m.delivery_tag)
        if p.message_id == message_id:
            found.append(p.headers["x-stream-offset"])

    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=200)
        ch.basic_consume(stream, take, arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 20
        while not found and time.monotonic() < deadline:
            c.process_data_events(time_limit=0.1)
        c._impl.close()  # no cancel: pika's cancel rejects, which a stream refuses
    assert found
    return found[0]


def test_shovel_resumes_a_stream_after_the_recorded_offset(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    _stream(src, "st")
    declare_queue(dst, "copy", durable=True)
    _publish(src, "st", 0, 300)
    s = shovel("from-stream", sources={"broker": src}, destinations={"broker": dst}, queue="st",
               consumer_args={"x-stream-offset": "first"}, prefetch_count=100,
               publish_fields={"exchange": "", "routing_key": "copy"})
    with running(s) as pumps:
        pumps.wait_for(lambda: queue_depth(dst, "copy")[0] == 300, 60, "300 at the destination")
    record = _record(src, "from-stream")
    assert record == {"stream": "st", "offset": _last_offset(src, "st", "id299")}

    # a restart (or another daemon with the same shovel) goes on after it, not from "first"
    # (the stream is forwarded in order: once the last one is there, any resent one is too)
    _publish(src, "st", 300, 50)
    with running(s) as pumps:
        pumps.wait_for(lambda: queue_depth(dst, "copy")[0] >= 350, 60, "350 at the destination")
    got = drain_queue(dst, "copy")
    assert [d.body for d in got] == [b"%d" % i for i in range(350)]
    assert _record(src, "from-stream") == {"stream": "st",
                                           "offset": _last_offset(src, "st", "id349")}


def test_another_daemon_takes_a_stream_over_where_a_lost_one_left_it(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str, tmp_path: Path) -> None:
    """Two daemons as on two machines (own directory, state file, token, port): the first is
    SIGKILLed with every process it started (a machine lost: no drain); the second, with the same
    configuration, goes on after the offset the first recorded on the source broker."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    _stream(src, "st-takeover")
    declare_queue(dst, "copy-takeover", durable=True)
    _publish(src, "st-takeover", 0, 200)
    config = {"from-stream-2": {
        "sources": {"broker": src}, "destinations": {"broker": dst}, "queue": "st-takeover",
        "consumer_args": {"x-stream-offset": "first"}, "prefetch_count": 100,
        "publish_fields": {"exchange": "", "routing_key": "copy-takeover"}}}
    daemons: list[Daemon] = []
    try:
        for name in ("first", "second"):
            (tmp_path / name).mkdir()
        first = Daemon(tmp_path / "first", config, (), find_free_port(), name="first").start()
        daemons.append(first)
        first.wait_for(lambda: queue_depth(dst, "copy-takeover")[0] == 200, 60, "200 moved")
        last = _last_offset(src, "st-takeover", "id199")
        # recorded once nothing is in flight, at most a second after the last confirm
        first.wait_for(lambda: _record(src, "from-stream-2") == {"stream": "st-takeover",
                                                                  "offset": last},
                       30, "the position recorded")
        first.kill_everything()
        _publish(src, "st-takeover", 200, 50)
        second = Daemon(tmp_path / "second", config, (), find_free_port(), name="second").start()
        daemons.append(second)
        second.wait_for(lambda: queue_depth(dst, "copy-takeover")[0] >= 250, 60, "250 moved")
        second.stop()
    finally:
        for d in daemons:
            d.kill_everything()
    got = drain_queue(dst, "copy-takeover")
    assert [d.body for d in got] == [b"%d" % i for i in range(250)]


def test_two_stream_shovels_whose_long_names_share_a_beginning_keep_two_positions(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str) -> None:
    """Shovel names may be 512 bytes, queue names 255: two names that differ only past the cut
    must still get two records, or the second shovel resumes where the first one stopped and
    never sends what came before."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    _stream(src, "st-shared")
    _publish(src, "st-shared", 0, 120)
    common = "s" * 240
    for tail in ("a", "b"):
        _stream_all_to(src, dst, common + tail, "st-shared", f"copy-{tail}", 120)
    assert stream_position_queue(common + "a") != stream_position_queue(common + "b")


def _stream_all_to(src: str, dst: str, name: str, stream: str, queue: str, n: int) -> None:
    """Run shovel ``name`` from ``stream`` (from its first message unless it has a record) into
    ``queue`` until ``n`` messages are there and its position is recorded; then check them."""
    declare_queue(dst, queue, durable=True)
    s = shovel(name, sources={"broker": src}, destinations={"broker": dst}, queue=stream,
               consumer_args={"x-stream-offset": "first"}, prefetch_count=50,
               publish_fields={"exchange": "", "routing_key": queue})
    with running(s) as pumps:
        pumps.wait_for(lambda: queue_depth(dst, queue)[0] == n, 60, f"{n} at {queue}")
        last = _last_offset(src, stream, f"id{n - 1}")
        pumps.wait_for(lambda: _record(src, name) == {"stream": stream, "offset": last},
                       30, "the position recorded")
    got = drain_queue(dst, queue)
    assert [d.body for d in got] == [b"%d" % i for i in range(n)]

