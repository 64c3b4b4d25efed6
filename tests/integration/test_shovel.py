"""The shovel engine against real brokers: every clause of the static form."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from decimal import Decimal

import pika
import pytest
from pumpd.engine.status import State
from pumpd.testing.localnode import LocalNode

from tests.support import amqp_helpers as amqp
from tests.support.harness import running, shovel

RICH_HEADERS = {
    "str": "text", "int": -42, "long": 2**40, "bool": False, "bytes": b"\x00\xff",
    "decimal": Decimal("12.50"), "when": datetime(2025, 5, 6, 7, 8, 9, tzinfo=timezone.utc),
    "void": None, "nested": {"table": {"deeper": [1, "two", {"three": [True, None]}]}},
    "array": [1, "a", [2, [3]], {"k": "v"}],
}


def mixed_messages(n: int, seed: int = 0) -> list[amqp.Message]:
    """Bodies from empty to several frames, with and without properties and headers."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.choice([0, 1, 64, 1000, 4096, 20_000, 300_000]) if i % 50 == 0 else rng.choice([0, 10, 64, 300])
        body = rng.randbytes(size)
        if i % 3 == 0:
            props = None
        else:
            props = pika.BasicProperties(
                content_type="application/octet-stream", content_encoding="identity",
                headers={**RICH_HEADERS, "i": i}, delivery_mode=rng.choice([1, 2]),
                priority=rng.randrange(10), correlation_id=f"c{i}", reply_to="replies",
                expiration="3600000", message_id=f"m{i}", timestamp=1_700_000_000 + i, type="t",
                app_id="tests", cluster_id="cl")
        out.append(amqp.Message(body, props))
    return out


PROPERTY_NAMES = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                  "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
                  "user_id", "app_id", "cluster_id")


def assert_same_messages(sent: list[amqp.Message], got: list, *, ignore: tuple[str, ...] = ()) -> None:
    assert len(got) == len(sent)
    for i, (m, d) in enumerate(zip(sent, got, strict=False)):
        assert d.body == m.body, f"message {i}: body differs"
        expected = m.properties or pika.BasicProperties()
        for name in PROPERTY_NAMES:
            if name not in ignore:
                got_value, sent_value = getattr(d.properties, name), getattr(expected, name)
                assert amqp.naive(got_value) == amqp.naive(sent_value), f"message {i}: {name}"


def test_20000_mixed_messages_between_two_vhosts_and_users_arrive_identical(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str
) -> None:
    node_a.add_user("shovel-src", "s3cret-src", vhost_a)
    node_b.add_user("shovel-dst", "s3cret-dst", vhost_b)
    src = node_a.uri(vhost_a, "shovel-src", "s3cret-src")
    dst = node_b.uri(vhost_b, "shovel-dst", "s3cret-dst")
    sent = mixed_messages(20_000)
    amqp.declare_queue(node_a.uri(vhost_a), "orders", durable=True)
    amqp.publish_messages(node_a.uri(vhost_a), "", "orders", sent)
    s = shovel(
        sources={"broker": src},
        destinations={"broker": dst, "declarations": [
            {"exchange.declare": {"exchange": "incoming", "type": "direct", "durable": True}},
            {"queue.declare": {"queue": "orders-copy", "durable": True}},
            {"queue.bind": {"queue": "orders-copy", "exchange": "incoming", "routing_key": "orders"}},
        ]},
        queue="orders",
        publish_fields={"exchange": "incoming", "routing_key": "orders"},
        prefetch_count=500,
    )
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == 20_000, 180, "20,000 acked")
        assert pumps.status().state == State.RUNNING
    got = amqp.drain_queue(node_b.uri(vhost_b), "orders-copy", expected=20_000, timeout=60)
    assert_same_messages(sent, got)
    assert amqp.queue_depth(node_a.uri(vhost_a), "orders") == (0, 0)
    c = pumps.status().counters
    assert (c.consumed, c.published, c.confirmed, c.acked, c.nacked) == (20_000,) * 4 + (0,)


def test_original_exchange_and_routing_key_are_kept_by_default(
    node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    with amqp.blocking_connection(uri) as c:
        ch = c.channel()
        ch.exchange_declare("events", "topic", durable=True)
        for name, key in (("src", "#"),):
            ch.queue_declare(name, durable=True)
            ch.queue_bind(name, "events", key)
    sent = [amqp.Message(f"m{i}".encode()) for i in range(30)]
    for i, m in enumerate(sent):
        amqp.publish_messages(uri, "events", f"order.{i % 3}", [m])
    # the destination is another vhost of the same broker, with a queue per routing key
    dst_decl = [{"exchange.declare": {"exchange": "events", "type": "topic"}}]
    for k in range(3):
        dst_decl += [{"queue.declare": {"queue": f"copy-{k}"}},
                     {"queue.bind": {"queue": f"copy-{k}", "exchange": "events", "routing_key": f"order.{k}"}}]
    node_a.add_vhost(vhost_a + "-dst")
    try:
        s = shovel(sources={"broker": uri}, destinations={"broker": node_a.uri(vhost_a + "-dst"),
                   "declarations": dst_decl}, queue="src")
        with running(s) as pumps:
            pumps.wait_for(lambda: pumps.status().counters.acked == 30, 60, "30 acked")
        for k in range(3):
            got = amqp.drain_queue(node_a.uri(vhost_a + "-dst"), f"copy-{k}", expected=10, timeout=10)
            assert [d.body for d in got] == [f"m{i}".encode() for i in range(k, 30, 3)]
            assert {(d.method.exchange, d.method.routing_key) for d in got} == {("events", f"order.{k}")}
    finally:
        node_a.delete_vhost(vhost_a + "-dst")


@pytest.mark.parametrize("ack_mode", ["no_ack", "on_publish", "on_confirm"])
def test_each_ack_mode_moves_everything(node_a: LocalNode, node_b: LocalNode, vhost_a: str,
                                        vhost_b: str, ack_mode: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "q", durable=True)
    amqp.declare_queue(dst, "q2", durable=True)
    sent = [amqp.Message(b"%d" % i) for i in range(2000)]
    amqp.publish_messages(src, "", "q", sent)
    s = shovel(sources={"broker": src}, destinations={"broker": dst}, queue="q",
               publish_fields={"exchange": "", "routing_key": "q2"}, ack_mode=ack_mode)
    with running(s) as pumps:
        pumps.wait_for(lambda: amqp.queue_depth(dst, "q2")[0] == 2000, 60, "2000 at the destination")
        pumps.wait_for(lambda: amqp.queue_depth(src, "q")[0] == 0, 30, "source empty")
    assert [d.body for d in amqp.drain_queue(dst, "q2", expected=2000, timeout=10)] == [m.body for m in sent]
    c = pumps.status().counters
    assert c.acked == (0 if ack_mode == "no_ack" else 2000)
    assert c.confirmed == (2000 if ack_mode == "on_confirm" else 0)


@pytest.mark.parametrize("hold_ms", [0, 50])
def test_source_read_hold_off_or_long_moves_everything_intact(node_a: LocalNode, vhost_a: str,
                                                              hold_ms: int) -> None:
    # Bodies up to 300 kB: reads long enough to skip the hold and short ones that start it.
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "q", durable=True)
    amqp.declare_queue(uri, "q2", durable=True)
    sent = mixed_messages(3000, seed=hold_ms)
    amqp.publish_messages(uri, "", "q", sent)
    s = shovel(sources={"broker": uri}, destinations={"broker": uri}, queue="q",
               publish_fields={"exchange": "", "routing_key": "q2"}, source_read_hold_ms=hold_ms)
    with running(s) as pumps:
        pumps.wait_for(lambda: amqp.queue_depth(uri, "q2")[0] == 3000, 60, "3000 at the destination")
        pumps.wait_for(lambda: pumps.status().counters.acked == 3000, 30, "all acked")
    assert amqp.queue_depth(uri, "q") == (0, 0)
    assert_same_messages(sent, amqp.drain_queue(uri, "q2", expected=3000, timeout=10))


def test_consumer_uses_automatic_acks_only_in_no_ack_mode(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in", durable=True)
    amqp.declare_queue(uri, "out", durable=True)
    for mode, ack_required in (("no_ack", False), ("on_confirm", True)):
        s = shovel(sources={"broker": uri}, destinations={"broker": uri}, queue="in",
                   publish_fields={"exchange": "", "routing_key": "out"}, ack_mode=mode)
        with running(s) as pumps:
            pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
            listed = node_a.ctl("list_consumers", "-q", "--no-table-headers", "-p", vhost_a, "queue_name", "ack_required")
            assert listed.split() == ["in", str(ack_required).lower()]


def test_destination_declarations_and_server_named_source_queue(node_a: LocalNode, vhost_a: str) -> None:
    """The plugin documentation's declarations example: an anonymous queue bound to an exchange, queue "" """
    uri = node_a.uri(vhost_a)
    s = shovel(
        sources={"broker": uri, "declarations": [
            {"exchange.declare": {"exchange": "my_fanout", "type": "fanout", "durable": True}},
            {"queue.declare": {"exclusive": True, "arguments": {"x-message-ttl": 60000}}},
            {"queue.bind": {"exchange": "my_fanout", "queue": ""}},
        ]},
        destinations={"broker": uri, "declarations": [
            {"exchange.declare": {"exchange": "my_direct", "type": "direct", "durable": True}},
            {"queue.declare": {"queue": "landed", "durable": True}},
            {"queue.bind": {"exchange": "my_direct", "queue": "", "routing_key": "from_shovel"}},
        ]},
        queue="",
        publish_properties={"delivery_mode": 2, "app_id": "pumpd-test"},
        publish_fields={"exchange": "my_direct", "routing_key": "from_shovel"},
    )
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        amqp.publish_messages(uri, "my_fanout", "anything", [amqp.Message(b"hello", pika.BasicProperties(delivery_mode=1, type="x"))] * 5)
        pumps.wait_for(lambda: amqp.queue_depth(uri, "landed")[0] == 5, 30, "5 landed")
    got = amqp.drain_queue(uri, "landed", expected=5, timeout=10)
    assert {(d.properties.delivery_mode, d.properties.app_id, d.properties.type) for d in got} == {(2, "pumpd-test", "x")}
    assert {d.method.routing_key for d in got} == {"from_shovel"}


@pytest.mark.parametrize("mandatory", [True, False])
def test_unroutable_messages_are_returned_and_counted_unless_mandatory_is_off(
    node_a: LocalNode, vhost_a: str, mandatory: bool
) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "q", durable=True)
    amqp.publish_messages(uri, "", "q", [amqp.Message(b"nowhere")] * 7)
    s = shovel(sources={"broker": uri}, queue="q",
               destinations={"broker": uri, "declarations": [
                   {"exchange.declare": {"exchange": "unbound", "type": "direct"}}]},
               publish_fields={"exchange": "unbound", "mandatory": mandatory})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == 7, 30, "7 acked")
    assert pumps.status().counters.returned == (7 if mandatory else 0)
    assert amqp.queue_depth(uri, "q")[0] == 0
