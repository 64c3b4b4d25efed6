"""Undeliverable messages under each policy, refusals by the destination, the source's
consumer_timeout, and the reconnect backoff: against real brokers."""

from __future__ import annotations

from typing import Any

import pika
from pumpd.engine.status import State
from pumpd.testing.localnode import LocalNode

from tests.support import amqp_helpers as amqp
from tests.support.harness import RunningPumps, running, shovel

BIG_HEADER = "x" * 6000  # with frame_max 4096 at the destination, the content header cannot fit


def numbered(n: int, start: int = 0, **props: Any) -> list[amqp.Message]:
    return [amqp.Message(b"m%05d" % i, pika.BasicProperties(message_id=f"id-{i}", **props))
            for i in range(start, start + n)]


def too_large(i: int) -> amqp.Message:
    return amqp.Message(b"m%05d" % i, pika.BasicProperties(message_id=f"id-{i}",
                                                           headers={"big": BIG_HEADER}))


def small_frames_shovel(src: str, dst: str, **clauses: Any) -> Any:
    """source queue "in" -> destination queue "out", the destination at frame_max 4096."""
    return shovel(sources={"broker": src},
                  destinations={"broker": f"{dst}?frame_max=4096"},
                  queue="in", publish_fields={"exchange": "", "routing_key": "out"},
                  reconnect_delay=0.2, **clauses)


def one_too_large_at(src: str, dst: str, at: int, **in_arguments: Any) -> None:
    """Queues "in" (with ``in_arguments``) and "out"; in "in", ``at`` messages, one over the
    destination's frame_max, then ``at`` more."""
    amqp.declare_queue(src, "in", arguments=in_arguments or None)
    amqp.declare_queue(dst, "out")
    amqp.publish_messages(src, "", "in", [*numbered(at), too_large(at), *numbered(at, at + 1)])


def messages_in(node: LocalNode, vhost: str, queue: str) -> int:
    """Ready plus unacknowledged messages of ``queue``."""
    out = node.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost, "name", "messages")
    counts = dict(line.split() for line in out.splitlines() if line.strip())
    return int(counts.get(queue, 0))


def bodies(deliveries: list[Any]) -> list[bytes]:
    return [d.body for d in deliveries]


def test_header_over_destination_frame_max_is_parked_and_the_next_one_moves(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    one_too_large_at(src, dst, 5)
    with running(small_frames_shovel(src, dst)) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == 10, 60, "10 forwarded")
        pumps.wait_for(lambda: pumps.status().counters.parked == 1, 30, "1 parked")
        c = pumps.status().counters
        assert c.undeliverable_too_large == 1 and c.published == 10
        assert pumps.status().state == State.RUNNING
    out = amqp.drain_queue(dst, "out", expected=10)
    assert bodies(out) == [b"m%05d" % i for i in range(11) if i != 5]
    parked = amqp.drain_queue(src, "pumpd.parked", expected=1)
    assert len(parked) == 1 and parked[0].body == b"m00005"
    headers = parked[0].properties.headers
    assert headers["big"] == BIG_HEADER  # kept as it came
    assert "frame_max" in headers["x-pumpd-undeliverable"]
    assert headers["x-pumpd-shovel"] == "s"
    assert parked[0].properties.message_id == "id-5"
    assert amqp.queue_depth(src, "in")[0] == 0


def test_dead_letter_policy_rejects_to_the_source_queues_dlx(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "dlq")
    one_too_large_at(src, dst, 3, **{"x-dead-letter-exchange": "",
                                     "x-dead-letter-routing-key": "dlq"})
    s = small_frames_shovel(src, dst, undeliverable="dead-letter")
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == 6, 60, "6 forwarded")
        pumps.wait_for(lambda: pumps.status().counters.dead_lettered == 1, 30, "dead-lettered")
    assert bodies(amqp.drain_queue(dst, "out", expected=6)) == [b"m%05d" % i for i in range(7) if i != 3]
    dead = amqp.drain_queue(src, "dlq", expected=1)
    assert bodies(dead) == [b"m00003"]
    assert dead[0].properties.headers["big"] == BIG_HEADER
    assert amqp.queue_depth(src, "in")[0] == 0


def test_stop_policy_terminates_naming_the_message_and_keeps_it_first_in_the_queue(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    one_too_large_at(src, dst, 4)
    with running(small_frames_shovel(src, dst, undeliverable={"policy": "stop"})) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 60, "terminated")
        st = pumps.status()
    assert st.reason is not None and "undeliverable message" in st.reason
    assert "id-4" in st.reason and "frame_max" in st.reason and "policy stop" in st.reason
    assert st.counters.acked == 4
    # the ones before it arrived once; it and everything after it wait in the source queue
    assert bodies(amqp.drain_queue(dst, "out", expected=4)) == [b"m%05d" % i for i in range(4)]
    assert amqp.queue_depth(dst, "out")[0] == 0
    rest = amqp.drain_queue(src, "in", expected=5)
    assert bodies(rest) == [b"m%05d" % i for i in range(4, 9)]


def test_user_id_refused_by_the_destination_is_isolated_and_parked(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    """The source accepts user_id "alice" from alice; the destination refuses it from guest
    (406 PRECONDITION_FAILED closes the channel). The next session forwards one message at a
    time, finds the refused one and parks it; nothing else is lost or stuck."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    user = f"alice-{vhost_a[-8:]}"
    node_a.add_user(user, "pw", vhost_a)
    try:
        amqp.declare_queue(src, "in")
        amqp.declare_queue(dst, "out")
        amqp.publish_messages(src, "", "in", numbered(20))
        amqp.publish_messages(node_a.uri(vhost_a, user, "pw"), "", "in",
                              [amqp.Message(b"from-alice", pika.BasicProperties(user_id=user,
                                                                                message_id="alice-1"))])
        amqp.publish_messages(src, "", "in", numbered(20, 20))
        s = shovel(sources={"broker": src}, destinations={"broker": dst}, queue="in",
                   publish_fields={"exchange": "", "routing_key": "out"}, reconnect_delay=0.2)
        with running(s) as pumps:
            pumps.wait_for(lambda: pumps.status().counters.parked == 1, 60, "parked")
            pumps.wait_for(lambda: messages_in(node_a, vhost_a, "in") == 0, 60,
                           "the source queue empty, nothing unacknowledged")
            c = pumps.status().counters
            assert c.undeliverable_refused == 1
            reasons = [r for _st, r in pumps.history["s"] if r]
        got = amqp.drain_queue(dst, "out", timeout=20)
        expected = [b"m%05d" % i for i in range(40)]
        assert sorted(set(bodies(got))) == expected  # every one arrived
        assert len(got) - len(set(bodies(got))) <= c.redelivered  # duplicates were redelivered
        parked = amqp.drain_queue(src, "pumpd.parked", expected=1)
        assert bodies(parked) == [b"from-alice"]
        assert "406" in parked[0].properties.headers["x-pumpd-undeliverable"]
        assert parked[0].properties.headers["x-pumpd-original-user-id"] == user
        assert any("destination" in r and "406" in r for r in reasons), reasons
    finally:
        node_a.ctl("delete_user", user)


def test_unroutable_messages_are_dropped_and_counted_by_default(
        node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in")
    amqp.declare_queue(uri, "out")
    amqp.publish_messages(uri, "", "in", numbered(3))
    s = shovel(sources={"broker": uri}, destinations={"broker": uri}, queue="in",
               publish_fields={"exchange": "", "routing_key": "nowhere"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == 3, 30, "acked")
        assert pumps.status().counters.returned == 3
    assert amqp.queue_depth(uri, "in")[0] == 0


KEYS = ["ok", "ok", "lost", "ok", "nowhere", "ok", "ok"]


def routed_setup(src: str, dst: str) -> None:
    """Source: queue "in" fed through exchange "sx" with routing keys ok / lost / nowhere, which
    the deliveries keep; destination: exchange "x" routes only "ok" (to queue "out")."""
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "out")
    with amqp.blocking_connection(dst) as conn:
        ch = conn.channel()
        ch.exchange_declare("x", "direct")
        ch.queue_bind("out", "x", "ok")
    with amqp.blocking_connection(src) as conn:
        ch = conn.channel()
        ch.exchange_declare("sx", "direct")
        for key in set(KEYS):
            ch.queue_bind("in", "sx", key)
        ch.confirm_delivery()
        for i, key in enumerate(KEYS):
            ch.basic_publish("sx", key, b"m%05d" % i, pika.BasicProperties(message_id=f"id-{i}"))


def test_unroutable_park_keeps_the_returned_messages_and_the_next_ones_move(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    routed_setup(src, dst)
    s = shovel(sources={"broker": src}, destinations={"broker": dst}, queue="in",
               publish_fields={"exchange": "x"}, undeliverable={"unroutable": "park"})
    with running(s) as pumps:
        pumps.wait_for(lambda: messages_in(node_a, vhost_a, "in") == 0, 60, "all moved")
        # the status has the counters of up to COUNTER_INTERVAL ago; the queue can empty sooner
        pumps.wait_for(lambda: pumps.status().counters.parked == 2, 30, "2 parked")
        c = pumps.status().counters
        assert (c.returned, c.undeliverable_unroutable, c.parked) == (2, 2, 2)
    ok = [b"m%05d" % i for i, k in enumerate(KEYS) if k == "ok"]
    assert bodies(amqp.drain_queue(dst, "out", timeout=5)) == ok
    parked = amqp.drain_queue(src, "pumpd.parked", expected=2)
    assert bodies(parked) == [b"m00002", b"m00004"]
    h = parked[0].properties.headers
    assert "312 NO_ROUTE" in h["x-pumpd-undeliverable"]
    assert h["x-pumpd-original-exchange"] == "x" and h["x-pumpd-original-routing-key"] == "lost"
    assert parked[1].properties.message_id == "id-4"


def test_unroutable_stop_keeps_the_returned_message_in_the_source_queue(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    routed_setup(src, dst)
    s = shovel(sources={"broker": src}, destinations={"broker": dst}, queue="in",
               prefetch_count=1, publish_fields={"exchange": "x"},
               undeliverable={"unroutable": "stop"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 60, "terminated")
        st = pumps.status()
    assert st.reason is not None and "NO_ROUTE" in st.reason and "id-2" in st.reason
    assert bodies(amqp.drain_queue(dst, "out", timeout=5)) == [b"m00000", b"m00001"]
    assert bodies(amqp.drain_queue(src, "in", expected=5)) == [b"m%05d" % i for i in range(2, 7)]


def delays(pumps: RunningPumps) -> list[float]:
    out = []
    for _st, reason in pumps.history["s"]:
        if reason and "reconnecting in " in reason:
            out.append(float(reason.rsplit("reconnecting in ", 1)[1].rstrip("s")))
    return out


def test_backoff_starts_again_after_a_session_that_moved_messages(
        node_a: LocalNode, vhost_a: str) -> None:
    """Reproduces the report: connections closed every few seconds of healthy running must not
    stretch every later delay to 8 x reconnect_delay."""
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in")
    amqp.declare_queue(uri, "out")
    s = shovel(sources={"broker": uri}, destinations={"broker": uri}, queue="in",
               publish_fields={"exchange": "", "routing_key": "out"}, reconnect_delay=0.3)
    with running(s) as pumps:
        for round_ in range(5):
            pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
            amqp.publish_messages(uri, "", "in", numbered(10, 10 * round_))
            pumps.wait_for(lambda r=round_: pumps.status().counters.acked >= 10 * (r + 1), 30,
                           "moved")
            node_a.ctl("close_all_connections", "-p", vhost_a, "test: healthy session ends")
            pumps.wait_for(lambda r=round_: len(delays(pumps)) > r, 30, "a reconnect")
    assert delays(pumps) == [0.3] * 5
    assert len(amqp.drain_queue(uri, "out", expected=50)) >= 50


def test_backoff_grows_while_sessions_fail_without_moving_anything(
        node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    s = shovel(sources={"broker": uri, "declarations": [
                   {"queue.declare": {"queue": "missing", "passive": True}}]},
               destinations={"broker": uri}, queue="missing", reconnect_delay=0.1)
    with running(s) as pumps:
        pumps.wait_for(lambda: len(delays(pumps)) >= 4, 30, "4 reconnects")
    d = delays(pumps)
    assert d[0] == 0.1 and d[3] > 0.1 * 2, d
    reason = next(r for _st, r in pumps.history["s"] if r and "reconnecting" in r)
    assert reason.startswith("source: ") and "404" in reason, reason


def test_source_consumer_timeout_while_the_destination_is_blocked_loses_nothing(
        node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "out")
    node_a.ctl("eval", "application:set_env(rabbit, consumer_timeout, 2000).")
    node_b.set_vm_memory_high_watermark(0)
    try:
        s = shovel(sources={"broker": src}, destinations={"broker": dst}, queue="in",
                   publish_fields={"exchange": "", "routing_key": "out"}, reconnect_delay=0.5)
        with running(s) as pumps:
            amqp.publish_messages(src, "", "in", numbered(50))

            def timed_out() -> bool:
                return any(r and "consumer timeout" in r for _st, r in pumps.history["s"])

            pumps.wait_for(timed_out, 120, "the source's consumer timeout")
            node_b.set_vm_memory_high_watermark(0.4)
            pumps.wait_for(lambda: messages_in(node_a, vhost_a, "in") == 0
                           and pumps.status().state == State.RUNNING, 90, "drained")
            reason = next(r for _st, r in pumps.history["s"] if r and "consumer timeout" in r)
            assert reason.startswith("source: ") and "406" in reason
    finally:
        node_b.set_vm_memory_high_watermark(0.4)
        node_a.ctl("eval", "application:unset_env(rabbit, consumer_timeout).")
    got = amqp.drain_queue(dst, "out", timeout=20)
    assert sorted(set(bodies(got))) == [b"m%05d" % i for i in range(50)]
    assert len(got) - 50 <= pumps.status().counters.redelivered

