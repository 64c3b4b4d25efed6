"""pumpd.Publisher against private RabbitMQ nodes, on both data-plane implementations."""

from __future__ import annotations

import random
from datetime import datetime
from decimal import Decimal

import pika
import pytest
from pika import spec
from pumpd import Publisher, PublishError
from pumpd.dataplane.properties import encode_properties
from pumpd.publishing import MessageIds
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import (
    blocking_connection,
    declare_queue,
    drain_queue,
    naive,
    queue_depth,
    raw_get,
)


@pytest.mark.parametrize("mode", ["individual", "batch", "async", "none"])
def test_each_mode_publishes_everything_in_order(
    impl: str, mode: str, node_b: LocalNode, vhost_b: str
) -> None:
    uri = node_b.uri(vhost_b)
    n = 60 if mode == "individual" else 3000
    bodies = [b"m%05d" % i for i in range(n)]
    with Publisher(uri, routing_key="q", mode=mode, batch_size=100, window=256,  # type: ignore[arg-type]
                   implementation=impl, declarations=[("queue.declare", {"queue": "q"})]) as p:
        first = p.publish_many(bodies[: n // 2])
        assert first == 1
        assert p.publish(bodies[n // 2]) == n // 2 + 1
        p.publish_many(iter(bodies[n // 2 + 1 :]))
        p.flush()
        assert p.published == n and p.outstanding == 0
        if mode != "none":
            assert p.confirmed == n
    got = drain_queue(uri, "q", expected=n, timeout=30)
    assert [d.body for d in got] == bodies


def test_nacks_from_a_full_reject_publish_queue_name_the_messages(
    impl: str, node_b: LocalNode, vhost_b: str
) -> None:
    uri = node_b.uri(vhost_b)
    declare_queue(uri, "full", durable=False,
                  arguments={"x-max-length": 5, "x-overflow": "reject-publish"})
    with Publisher(uri, routing_key="full", mode="async", implementation=impl) as p:
        p.publish_messages([(b"b%d" % i, None, {"message_id": f"id-{i}"}) for i in range(1, 9)])
        with pytest.raises(PublishError) as err:
            p.flush()
        e = err.value
        assert e.nacked == [6, 7, 8]
        assert e.message_ids == {6: "id-6", 7: "id-7", 8: "id-8"}
        assert e.unconfirmed == [] and e.returned == [] and e.confirmed == 5
        p.flush()  # reported once; the publisher goes on
    assert queue_depth(uri, "full")[0] == 5


def test_an_unroutable_mandatory_message_is_returned(
    impl: str, node_b: LocalNode, vhost_b: str
) -> None:
    uri = node_b.uri(vhost_b)
    with Publisher(uri, exchange="amq.direct", mode="individual", mandatory=True,
                   implementation=impl,
                   declarations=[("queue.declare", {"queue": "routed"}),
                                 ("queue.bind", {"exchange": "amq.direct",
                                                 "routing_key": "routed"})]) as p:
        assert p.publish(b"one", "routed") == 1
        with pytest.raises(PublishError) as err:
            p.publish(b"two", "nowhere", {"message_id": "lost-2"})
        (r,) = err.value.returned
        assert (r.seq, r.reply_code, r.exchange, r.routing_key, r.message_id) == (
            2, 312, "amq.direct", "nowhere", "lost-2")
        assert err.value.nacked == [] and err.value.unconfirmed == []
        assert p.publish(b"three", "routed") == 3
    with Publisher(uri, exchange="amq.direct", mode="batch", mandatory=True,
                   implementation=impl) as p:
        with pytest.raises(PublishError) as err:  # raised by the wait after the batch
            p.publish_messages([(b"x%d" % i, "routed" if i % 3 else "nowhere",
                                 {"message_id": str(i)}) for i in range(1, 10)])
        p.flush()
    assert sorted(r.message_id or "" for r in err.value.returned) == ["3", "6", "9"]
    assert [d.body for d in drain_queue(uri, "routed", expected=8)] == [
        b"one", b"three", *[b"x%d" % i for i in range(1, 10) if i % 3]]


def test_a_memory_alarm_ends_in_the_confirm_timeout_error(
    impl: str, node_b: LocalNode, vhost_b: str
) -> None:
    uri = node_b.uri(vhost_b)
    p = Publisher(uri, routing_key="q", mode="batch", confirm_timeout=2, implementation=impl,
                  declarations=[("queue.declare", {"queue": "q"})])
    node_b.set_vm_memory_high_watermark(0)
    try:
        with pytest.raises(PublishError) as err:
            # RabbitMQ blocks a connection when it next publishes, so the first batch goes out
            for _ in range(5):
                p.publish_many([b"x"] * 100)
        assert "no confirm for 2 s while the broker had blocked the connection" in err.value.reason
        assert p.blocked
        assert err.value.unconfirmed  # what the broker never confirmed is named
        assert err.value.confirmed + len(err.value.unconfirmed) == p.published
        assert err.value.published == p.published
    finally:
        node_b.set_vm_memory_high_watermark(0.4)
        p.close()


def test_a_connection_killed_mid_stream_reports_what_was_and_was_not_confirmed(
    impl: str, node_b: LocalNode, vhost_b: str
) -> None:
    uri = node_b.uri(vhost_b)
    declare_queue(uri, "q", durable=False)
    with TcpProxy("127.0.0.1", node_b.amqp_port) as proxy:
        proxied = uri.replace(f":{node_b.amqp_port}/", f":{proxy.port}/")
        p = Publisher(proxied, routing_key="q", mode="async", window=100_000, implementation=impl)
        p.publish_many([b"%d" % s for s in range(1, 2001)])
        p.flush()
        # the connection goes silent first, then is reset: without the silence a fast broker
        # could confirm all 3,000 before the reset, and flush() would have nothing to report
        # (it did, once, in CI)
        proxy.stall_open()
        p.publish_many([b"%d" % s for s in range(2001, 5001)])  # not waited for
        proxy.reset_all()
        with pytest.raises(PublishError) as err:
            p.flush()
        e = err.value
        assert "connection was lost" in e.reason
        assert e.confirmed + len(e.unconfirmed) == 5000 == e.published
        assert all(s > 2000 for s in e.unconfirmed)
        with pytest.raises(PublishError):
            p.publish(b"after")  # the publisher is closed for good
        p.close()
    delivered = {int(d.body) for d in drain_queue(uri, "q")}
    confirmed = set(range(1, 5001)) - set(e.unconfirmed)
    assert confirmed <= delivered  # everything confirmed is in the queue


def test_bodies_properties_and_headers_arrive_byte_identical(
    impl: str, node_b: LocalNode, vhost_b: str
) -> None:
    uri = node_b.uri(vhost_b)
    headers = {"int": 7, "big": -(2**62), "float": 0.1, "str": "é", "bytes": b"\x00\xff",
               "bool": True, "none": None, "dec": Decimal("12.345"),
               "when": datetime(2026, 11, 23, 20, 0, 0), "list": [1, "a", 2.5],
               "nested": {"k": {"x": 1.0}}}
    props = {"content_type": "application/octet-stream", "content_encoding": "identity",
             "headers": headers, "delivery_mode": 2, "priority": 3, "correlation_id": "c",
             "reply_to": "r", "expiration": "600000", "message_id": "mid", "timestamp": 1_700_000_000,
             "type": "t", "user_id": "guest", "app_id": "pumpd-test", "cluster_id": "cl"}
    bodies = [b"", b"a", bytes(range(256)) * 1100, random.Random(1).randbytes(131_065)]
    with Publisher(uri, routing_key="q", mode="batch", implementation=impl,
                   declarations=[("queue.declare", {"queue": "q"})]) as p:
        p.publish_many(bodies, properties=props)
        p.publish(b"plain")
        p.flush()
    got = raw_get(node_b.amqp_port, vhost_b, "q", 5)
    assert [body for _, body in got] == [*bodies, b"plain"]
    sent = encode_properties(props)
    assert [raw for raw, _ in got] == [sent] * 4 + [b"\x00\x00"]
    # and as pika decodes them (except the doubles, which pika's decoder truncates)
    decoded = spec.BasicProperties()
    decoded.decode(sent)
    assert naive(decoded.headers)["dec"] == headers["dec"]
    assert naive(decoded.headers)["when"] == headers["when"]
    assert decoded.message_id == "mid" and decoded.priority == 3


def test_publish_rows_properties_per_row_and_deterministic_ids(
    impl: str, node_b: LocalNode, vhost_b: str
) -> None:
    uri = node_b.uri(vhost_b)
    full = {"x-max-length": 0, "x-overflow": "reject-publish"}
    with Publisher(uri, routing_key="q", mode="async", implementation=impl,
                   declarations=[("queue.declare", {"queue": "q"}),
                                 ("queue.declare", {"queue": "r"}),
                                 ("queue.declare", {"queue": "full", "arguments": full})]) as p:
        first = p.publish_rows([b"a", b"b", b"c", b"n"], routing_keys=[None, "r", None, "full"],
                               properties={"delivery_mode": 2, "app_id": "x"},
                               columns={"app_id": ["y", None, "z", None],
                                        "headers": [{"f": 0.5}, None, None, None]},
                               message_ids=MessageIds(b"w:", range(40, 44)))
        assert first == 1
        assert p.publish_rows([b"d", b"e"], message_ids=MessageIds(b"w:", [7, 3])) == 5
        assert p.publish_rows([b"f"], properties={"message_id": "same"}) == 7
        with pytest.raises(PublishError) as err:  # the ids name what was refused
            p.flush()
        assert err.value.nacked == [4] and err.value.message_ids == {4: "w:43"}
    assert raw_get(node_b.amqp_port, vhost_b, "q", 5) == [
        (encode_properties({"delivery_mode": 2, "app_id": "y", "headers": {"f": 0.5},
                            "message_id": "w:40"}), b"a"),
        (encode_properties({"delivery_mode": 2, "app_id": "z", "message_id": "w:42"}), b"c"),
        (encode_properties({"message_id": "w:7"}), b"d"),
        (encode_properties({"message_id": "w:3"}), b"e"),
        (encode_properties({"message_id": "same"}), b"f"),
    ]
    assert raw_get(node_b.amqp_port, vhost_b, "r", 1) == [
        (encode_properties({"delivery_mode": 2, "app_id": "x", "message_id": "w:41"}), b"b")]


def test_pika_basic_properties_are_accepted(impl: str, node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    with Publisher(uri, routing_key="q", mode="individual", implementation=impl,
                   declarations=[("queue.declare", {"queue": "q"})]) as p:
        p.publish(b"x", properties=pika.BasicProperties(message_id="m1", headers={"a": 1}))
    (d,) = drain_queue(uri, "q", expected=1)
    assert (d.properties.message_id, d.properties.headers) == ("m1", {"a": 1})
    with blocking_connection(uri):
        pass

