"""The generic path (``engine/message_path.py``) end to end between two AMQP 0-9-1 brokers:
``PUMPD_PATH=generic`` puts a 0-9-1 → 0-9-1 shovel on it instead of the native relay, so the
path that AMQP 1.0 pairs take is run here against real brokers: every message intact, each ack
mode, a destination that refuses messages going to the undeliverable policy, returns, and a
source connection killed mid-stream."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pika
import pytest
from pumpd.engine import wiring
from pumpd.engine.status import State
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode

from tests.support import amqp_helpers as amqp
from tests.support.harness import running, shovel

RICH_HEADERS = {"str": "text", "int": -42, "long": 2**40, "bool": False, "bytes": b"\x00\xff",
                "void": None, "nested": {"table": {"deeper": [1, "two", {"three": [True]}]}},
                "array": [1, "a", [2, [3]], {"k": "v"}], "decimal": Decimal("12.50"),
                "when": datetime(2025, 5, 6, 7, 8, 9, tzinfo=timezone.utc)}


@pytest.fixture(autouse=True)
def generic_path(monkeypatch: pytest.MonkeyPatch,
                 caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every shovel of these tests on the generic path, and proof that it was."""
    monkeypatch.setenv(wiring.PATH_VARIABLE, "generic")
    caplog.set_level(logging.DEBUG, logger="pumpd.wiring")
    yield
    assert any("the generic path from a Amqp091Source (amqp091) to a Amqp091Destination"
               in r.getMessage() for r in caplog.get_records("call")), "the native path was taken"


def mixed(n: int, seed: int = 0) -> list[amqp.Message]:
    """Bodies from empty to several frames; properties none, some, or every one with headers."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body = rng.randbytes(rng.choice([0, 1, 300_000]) if i % 97 == 0
                             else rng.choice([0, 10, 64, 300, 5000]))
        props = None if i % 3 == 0 else pika.BasicProperties(
            content_type="application/octet-stream", content_encoding="identity",
            headers={**RICH_HEADERS, "i": i}, delivery_mode=rng.choice([1, 2]),
            priority=rng.randrange(10), correlation_id=f"c{i}", reply_to="replies",
            expiration="3600000", message_id=f"m{i}", timestamp=1_700_000_000 + i, type="t",
            app_id="tests", cluster_id="cl")
        out.append(amqp.Message(body, props))
    return out


def numbered(n: int) -> list[amqp.Message]:
    return [amqp.Message(b"m%05d" % i, pika.BasicProperties(message_id=f"id-{i}"))
            for i in range(n)]


def bodies(deliveries: list[Any]) -> list[bytes]:
    return [d.body for d in deliveries]


def test_every_message_arrives_with_its_properties_and_headers_byte_for_byte(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str) -> None:
    """Each message goes to two queues of the source: the shovel moves one; the other is what
    the source broker delivers, the reference its copy at the destination must equal, raw."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    n = 1500
    with amqp.blocking_connection(src) as conn:
        ch = conn.channel()
        ch.exchange_declare("in", "fanout")
        for q in ("q", "twin"):
            ch.queue_declare(q, durable=True)
            ch.queue_bind(q, "in")
    amqp.declare_queue(dst, "out")
    sent = mixed(n)
    amqp.publish_messages(src, "in", "any", sent)
    s = shovel(sources={"broker": src}, destinations={"broker": dst}, queue="q",
               publish_fields={"exchange": "", "routing_key": "out"}, prefetch_count=200)
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == n, 120, f"{n} acked")
        assert pumps.status().state == State.RUNNING
    moved = amqp.raw_get(node_b.amqp_port, vhost_b, "out", n)
    reference = amqp.raw_get(node_a.amqp_port, vhost_a, "twin", n)
    assert [body for _, body in moved] == [m.body for m in sent]
    for i, (got, want) in enumerate(zip(moved, reference, strict=True)):
        assert got == want, f"message {i} differs"
    assert amqp.queue_depth(dst, "out") == (0, 0)
    assert amqp.queue_depth(src, "q")[0] == 0 and amqp.unacked(node_a, vhost_a, "q") == 0
    c = pumps.status().counters
    assert (c.consumed, c.published, c.confirmed, c.acked, c.nacked) == (n, n, n, n, 0)
    assert c.bytes == sum(len(m.body) for m in sent)


@pytest.mark.parametrize("ack_mode", ["no_ack", "on_publish", "on_confirm"])
def test_each_ack_mode_moves_everything(node_a: LocalNode, node_b: LocalNode, vhost_a: str,
                                        vhost_b: str, ack_mode: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "q")
    amqp.declare_queue(dst, "q2")
    sent = [amqp.Message(b"%d" % i) for i in range(2000)]
    amqp.publish_messages(src, "", "q", sent)
    s = shovel(sources={"broker": src}, destinations={"broker": dst}, queue="q",
               publish_fields={"exchange": "", "routing_key": "q2"}, ack_mode=ack_mode)
    with running(s) as pumps:
        pumps.wait_for(lambda: amqp.queue_depth(dst, "q2")[0] == 2000, 60, "2000 arrived")
        pumps.wait_for(lambda: amqp.queue_depth(src, "q")[0] == 0
                       and amqp.unacked(node_a, vhost_a, "q") == 0, 30, "source settled")
        if ack_mode != "no_ack":
            pumps.wait_for(lambda: pumps.status().counters.acked == 2000, 10, "counted")
    assert bodies(amqp.drain_queue(dst, "q2", expected=2000)) == [m.body for m in sent]
    c = pumps.status().counters
    assert (c.consumed, c.published) == (2000, 2000)
    assert c.acked == (0 if ack_mode == "no_ack" else 2000)
    assert c.confirmed == (2000 if ack_mode == "on_confirm" else 0)


def full_after_five(src: str, dst: str, **clauses: Any) -> Any:
    """Ten messages in "in"; "out" takes five, then refuses (x-max-length, reject-publish)."""
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "out", arguments={"x-max-length": 5,
                                              "x-overflow": "reject-publish"})
    amqp.publish_messages(src, "", "in", numbered(10))
    return shovel(sources={"broker": src}, destinations={"broker": dst}, queue="in",
                  publish_fields={"exchange": "", "routing_key": "out"}, reconnect_delay=0.2,
                  **clauses)


def test_messages_the_destination_refuses_are_parked(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    s = full_after_five(src, dst, undeliverable={"policy": "park"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.parked == 5, 60, "5 parked")
        pumps.wait_for(lambda: pumps.status().counters.acked == 5, 30, "5 acked")
        assert pumps.status().state == State.RUNNING
        c = pumps.status().counters
        assert (c.published, c.confirmed, c.nacked) == (10, 5, 5)
    assert bodies(amqp.drain_queue(dst, "out", expected=5)) == [b"m%05d" % i for i in range(5)]
    parked = amqp.drain_queue(src, "pumpd.parked", expected=5)
    assert bodies(parked) == [b"m%05d" % i for i in range(5, 10)]
    headers = parked[0].properties.headers
    assert headers["x-pumpd-undeliverable"] == "rejected by the destination"
    assert parked[0].properties.message_id == "id-5"
    assert amqp.queue_depth(src, "in")[0] == 0 and amqp.unacked(node_a, vhost_a, "in") == 0


def test_stopping_on_a_refused_message_acks_nothing_after_it(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    s = full_after_five(src, dst, undeliverable={"policy": "stop"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 60, "terminated")
        st = pumps.status()
    assert st.reason is not None and "id-5" in st.reason and "policy stop" in st.reason
    assert st.counters.acked == 5
    assert bodies(amqp.drain_queue(dst, "out", expected=5)) == [b"m%05d" % i for i in range(5)]
    # the refused one and everything after it wait in the source queue, in order
    assert bodies(amqp.drain_queue(src, "in", expected=5)) == [b"m%05d" % i
                                                               for i in range(5, 10)]


def test_returned_messages_are_parked_before_their_source_ack(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    keys = ["ok", "lost", "ok", "ok", "lost", "ok"]
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "out")
    with amqp.blocking_connection(dst) as conn:
        conn.channel().queue_bind("out", "amq.direct", "ok")
    with amqp.blocking_connection(src) as conn:
        ch = conn.channel()
        for key in set(keys):
            ch.queue_bind("in", "amq.direct", key)
        ch.confirm_delivery()
        for i, key in enumerate(keys):
            ch.basic_publish("amq.direct", key, b"m%05d" % i,
                             pika.BasicProperties(message_id=f"id-{i}"))
    s = shovel(sources={"broker": src}, destinations={"broker": dst}, queue="in",
               publish_fields={"exchange": "amq.direct"}, undeliverable={"unroutable": "park"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.parked == 2, 60, "2 parked")
        pumps.wait_for(lambda: pumps.status().counters.acked == 6, 30, "6 acked")
        c = pumps.status().counters
        assert (c.returned, c.undeliverable_unroutable) == (2, 2)
    assert bodies(amqp.drain_queue(dst, "out", expected=4)) == [
        b"m%05d" % i for i, k in enumerate(keys) if k == "ok"]
    parked = amqp.drain_queue(src, "pumpd.parked", expected=2)
    assert bodies(parked) == [b"m00001", b"m00004"]
    assert "312 NO_ROUTE" in parked[0].properties.headers["x-pumpd-undeliverable"]
    assert amqp.queue_depth(src, "in")[0] == 0 and amqp.unacked(node_a, vhost_a, "in") == 0


def test_a_source_connection_killed_mid_stream_loses_nothing(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        proxy_a: TcpProxy) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    n = 20_000
    amqp.declare_queue(src, "q")
    amqp.declare_queue(dst, "out")
    amqp.publish_messages(src, "", "q", [amqp.Message(b"%06d" % i) for i in range(n)])
    s = shovel(sources={"broker": amqp.via(node_a, vhost_a, proxy_a)},
               destinations={"broker": dst}, queue="q", reconnect_delay=0.2,
               publish_fields={"exchange": "", "routing_key": "out"}, prefetch_count=500)
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked > 2000, 60, "moving")
        assert proxy_a.reset_all() >= 1
        pumps.wait_for(lambda: pumps.status().counters.reconnects >= 1, 60, "a reconnect")
        pumps.wait_for(lambda: amqp.queue_depth(src, "q")[0] == 0
                       and amqp.unacked(node_a, vhost_a, "q") == 0, 120, "source emptied")
    got = bodies(amqp.drain_queue(dst, "out", timeout=30))
    # at least once: what was unacknowledged when the connection died may arrive twice (at
    # most a prefetch window of it), and nothing is missing
    assert set(got) == {b"%06d" % i for i in range(n)}
    assert n <= len(got) <= n + 500
