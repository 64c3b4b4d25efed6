"""Shovels written with the dynamic-shovel names, and their extras (delete-after, headers)."""

from __future__ import annotations

import time

from pumpd.engine.status import State
from pumpd.testing.localnode import LocalNode

from tests.support import amqp_helpers as amqp
from tests.support.harness import running, shovel


def test_src_delete_after_a_count_moves_exactly_that_many(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in")
    amqp.publish_messages(uri, "", "in", [amqp.Message(b"%d" % i) for i in range(50)])
    s = shovel(**{"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-queue": "out",
                  "src-delete-after": 20, "src-prefetch-count": 7})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 60, "terminated")
    assert "delete-after reached: 20 messages moved" in (pumps.status().reason or "")
    assert [d.body for d in amqp.drain_queue(uri, "out", expected=20, timeout=10)] == [b"%d" % i for i in range(20)]
    assert amqp.queue_depth(uri, "in") == (30, 0)


def test_src_delete_after_queue_length_moves_what_was_there_at_start(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in")
    amqp.publish_messages(uri, "", "in", [amqp.Message(b"early")] * 40)
    s = shovel(**{"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-queue": "out",
                  "src-delete-after": "queue-length", "ack-mode": "on-publish"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 60, "terminated")
        amqp.publish_messages(uri, "", "in", [amqp.Message(b"late")] * 5)
        time.sleep(0.5)
    assert "40 messages moved" in (pumps.status().reason or "")
    assert amqp.queue_depth(uri, "out")[0] == 40
    assert amqp.queue_depth(uri, "in")[0] == 5


def test_forward_and_timestamp_headers(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in")
    before = int(time.time())
    s = shovel(name="fwd", **{"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-queue": "out",
                              "dest-add-forward-headers": True, "dest-add-timestamp-header": True})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status("fwd").state == State.RUNNING, 30, "running")
        amqp.publish_messages(uri, "", "in", [amqp.Message(b"m")])
        pumps.wait_for(lambda: amqp.queue_depth(uri, "out")[0] == 1, 30, "forwarded")
    (d,) = amqp.drain_queue(uri, "out", expected=1, timeout=10)
    hop = d.properties.headers["x-shovelled"][0]
    assert hop["shovel-name"] == "fwd" and hop["src-queue"] == "in"
    assert "guest" not in hop["src-uri"] + hop["dest-uri"]  # no credentials at all, as the plugin
    assert before <= d.properties.headers["x-shovelled-timestamp"] <= time.time() + 1


def test_src_exchange_consumes_through_a_server_named_queue(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    with amqp.blocking_connection(uri) as c:
        c.channel().exchange_declare("events", "topic")
    s = shovel(**{"src-uri": uri, "src-exchange": "events", "src-exchange-key": "order.*",
                  "dest-uri": uri, "dest-queue": "orders"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        amqp.publish_messages(uri, "events", "order.new", [amqp.Message(b"yes")] * 3)
        amqp.publish_messages(uri, "events", "invoice.new", [amqp.Message(b"no")] * 3)
        pumps.wait_for(lambda: amqp.queue_depth(uri, "orders")[0] == 3, 30, "3 orders")
    assert [d.body for d in amqp.drain_queue(uri, "orders", expected=3, timeout=5)] == [b"yes"] * 3
