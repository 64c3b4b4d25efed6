"""Failures, flow control and reconnection, against real brokers that the tests break."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import pika
import pytest
from pumpd.config.model import ShovelConfig
from pumpd.engine.pump import FRESH_ROUND_SECONDS
from pumpd.engine.status import State
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode, find_free_port

from tests.support import amqp_helpers as amqp
from tests.support.harness import running, shovel


def q_to_out(src: str, dst: str, **clauses: Any) -> ShovelConfig:
    """A shovel from durable queue "q" at ``src`` to durable queue "out" at ``dst``, declared."""
    amqp.declare_queue(src, "q", durable=True)
    amqp.declare_queue(dst, "out", durable=True)
    return shovel(sources={"broker": src}, destinations={"broker": dst}, queue="q",
                  publish_fields={"exchange": "", "routing_key": "out"}, **clauses)


def first_pick_seed(options: int, wanted: int) -> int:
    """A seed whose first broker among ``options`` is ``wanted`` (engine/brokers.py shuffles the
    source list first)."""
    def first(seed: int) -> int:
        order = list(range(options))
        random.Random(seed).shuffle(order)
        return order[0]
    return next(s for s in range(1000) if first(s) == wanted)


def test_several_brokers_one_down_reconnects_to_another(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    dead = f"amqp://guest:guest@127.0.0.1:{find_free_port()}/%2F"
    amqp.declare_queue(uri, "q", durable=True)
    amqp.declare_queue(uri, "out", durable=True)
    amqp.publish_messages(uri, "", "q", [amqp.Message(b"x")] * 100)
    # reconnect_delay 3600: a wait would fail the test; another broker is tried at once
    s = shovel(sources={"brokers": [dead, uri]}, destinations={"broker": uri}, queue="q",
               publish_fields={"exchange": "", "routing_key": "out"}, reconnect_delay=3600)
    with running(s, rng=random.Random(first_pick_seed(2, 0))) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == 100, 60, "100 acked")
    reasons = [r for st, r in pumps.history["s"] if st == State.STARTING and r]
    assert any("cannot connect" in r and "reconnecting now, to the next broker" in r
               for r in reasons), reasons
    assert pumps.status().counters.reconnects == 1


def test_every_broker_down_backs_off_then_a_new_round(node_a: LocalNode, vhost_a: str) -> None:
    """Two dead brokers of two: the round is over after both failed once, and only then does
    the shovel wait reconnect_delay; the next round tries both again."""
    dead = [f"amqp://guest:guest@127.0.0.1:{find_free_port()}/%2F" for _ in range(2)]
    uri = node_a.uri(vhost_a)
    s = shovel(sources={"brokers": dead}, destinations={"broker": uri}, queue="q",
               publish_fields={"exchange": "", "routing_key": "out"}, reconnect_delay=0.2)
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.reconnects >= 6, 60, "three rounds")
    reasons = [r for st, r in pumps.history["s"] if st == State.STARTING and r]
    kinds = ["now" if "reconnecting now" in r else "wait" for r in reasons
             if "reconnecting" in r][:6]
    assert kinds == ["now", "wait", "now", "wait", "now", "wait"], reasons


def test_declarations_are_reissued_on_every_connect(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "q", durable=True)
    s = shovel(sources={"broker": uri}, queue="q", reconnect_delay=0.1,
               destinations={"broker": uri, "declarations": [
                   {"exchange.declare": {"exchange": "dx", "type": "fanout"}},
                   {"queue.declare": {"queue": "dq"}},
                   {"queue.bind": {"exchange": "dx", "queue": "dq"}}]},
               publish_fields={"exchange": "dx"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        with amqp.blocking_connection(uri) as c:
            ch = c.channel()
            ch.queue_delete("dq")
            ch.exchange_delete("dx")
        node_a.ctl("close_all_connections", "-p", vhost_a, "test: force a reconnect")
        pumps.wait_for(lambda: pumps.status().counters.reconnects == 1 and pumps.status().state == State.RUNNING,
                       30, "reconnected")
        amqp.publish_messages(uri, "", "q", [amqp.Message(b"after")] * 3)
        pumps.wait_for(lambda: amqp.queue_depth(uri, "dq")[0] == 3, 30, "3 in the re-declared queue")


def test_reconnect_delay_zero_terminates_after_the_first_failure(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "q", durable=True)
    s = shovel(sources={"broker": uri}, destinations={"broker": uri}, queue="q", reconnect_delay=0)
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        node_a.ctl("close_all_connections", "-p", vhost_a, "test: connection killed")
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 30, "terminated")
        time.sleep(0.5)
        assert pumps.status().state == State.TERMINATED
    reason = pumps.status().reason or ""
    assert "test: connection killed" in reason and "not reconnecting" in reason
    assert [st for st, _ in pumps.history["s"]] == [State.STARTING, State.RUNNING, State.TERMINATED]


def test_states_carry_the_time_they_were_entered(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "q", durable=True)
    before = time.time()
    with running(shovel(sources={"broker": uri}, destinations={"broker": uri}, queue="q")) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        running_since = pumps.status().since
    st = pumps.status()
    assert before <= running_since <= st.since <= time.time()
    assert (st.state, st.reason) == (State.TERMINATED, "shutdown")


def test_blocked_destination_holds_messages_in_order_within_prefetch(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str
) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    s = q_to_out(src, dst, prefetch_count=50)
    sent = [amqp.Message(b"%05d" % i) for i in range(1000)]
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        amqp.publish_messages(src, "", "q", sent[:10])
        pumps.wait_for(lambda: pumps.status().counters.acked == 10, 30, "first 10 through")
        node_b.set_vm_memory_high_watermark(0)
        try:
            # the broker blocks a connection (and says so) when it next publishes
            amqp.publish_messages(src, "", "q", sent[10:])
            pumps.wait_for(lambda: pumps.status().state == State.BLOCKED, 30, "blocked")
            pumps.wait_for(lambda: amqp.unacked(node_a, vhost_a, "q") == 50, 30, "prefetch reached")
            time.sleep(1)
            assert amqp.unacked(node_a, vhost_a, "q") == 50
            assert pumps.status().counters.buffered <= 50
            assert amqp.queue_depth(dst, "out")[0] == 10
        finally:
            node_b.set_vm_memory_high_watermark(0.4)
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running again")
        pumps.wait_for(lambda: pumps.status().counters.acked == 1000, 60, "all acked")
    assert [d.body for d in amqp.drain_queue(dst, "out", expected=1000, timeout=30)] == [m.body for m in sent]
    states = [st for st, _ in pumps.history["s"]]
    assert states[:4] == [State.STARTING, State.RUNNING, State.BLOCKED, State.RUNNING]


def test_destination_nack_requeues_at_the_source_and_nothing_is_lost(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "q", durable=True)
    with amqp.blocking_connection(uri) as c:
        # a full reject-publish queue makes the broker nack publishes
        c.channel().queue_declare("small", durable=True,
                                  arguments={"x-max-length": 10, "x-overflow": "reject-publish"})
    sent = [amqp.Message(b"%d" % i) for i in range(40)]
    amqp.publish_messages(uri, "", "q", sent)
    s = shovel(sources={"broker": uri}, destinations={"broker": uri}, queue="q",
               publish_fields={"exchange": "", "routing_key": "small"}, prefetch_count=20)
    got: list[bytes] = []
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.nacked > 0, 30, "a nack")
        deadline = time.monotonic() + 60
        while len(got) < 40 and time.monotonic() < deadline:
            got += [d.body for d in amqp.drain_queue(uri, "small", expected=None, timeout=1)]
            time.sleep(0.05)
    assert sorted(got, key=int) == [m.body for m in sent]
    c = pumps.status().counters
    assert c.nacked > 0 and c.redelivered > 0 and c.acked == 40
    assert amqp.queue_depth(uri, "q")[0] == 0


@pytest.mark.parametrize("victim", ["destination", "source"])
def test_broker_killed_mid_stream_loses_nothing(node_a: LocalNode, node_b: LocalNode,
                                                vhost_a: str, vhost_b: str, victim: str) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "q", durable=True)
    amqp.declare_queue(dst, "out", durable=True)
    n = 30_000
    sent = [amqp.Message(b"%06d" % i, pika.BasicProperties(delivery_mode=2)) for i in range(n)]
    amqp.publish_messages(src, "", "q", sent)
    s = shovel(sources={"broker": src}, destinations={"broker": dst}, queue="q", reconnect_delay=0.5,
               publish_fields={"exchange": "", "routing_key": "out"},
               publish_properties={"delivery_mode": 2})
    node = node_b if victim == "destination" else node_a
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked > 3000, 60, "stream under way")
        node.kill()
        node.restart()
        pumps.wait_for(lambda: pumps.status().counters.reconnects >= 1, 60, "a reconnect")
        pumps.wait_for(lambda: amqp.queue_depth(src, "q")[0] == 0 and pumps.status().counters.in_flight == 0
                       and amqp.unacked(node_a, vhost_a, "q") == 0, 120, "source drained")
    depth = amqp.queue_depth(dst, "out")[0]
    bodies = [d.body for d in amqp.drain_queue(dst, "out", expected=depth, timeout=120)]
    missing = {m.body for m in sent} - set(bodies)
    assert not missing, (f"{len(missing)} lost (e.g. {sorted(missing)[:5]}); {len(bodies)} drained, "
                         f"depth was {depth}; counters {pumps.status().counters}")
    duplicates = len(bodies) - n
    assert duplicates >= 0
    if duplicates:
        assert pumps.status().counters.redelivered > 0


def test_uri_parameters_reach_the_connection(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "q", durable=True)
    amqp.declare_queue(uri, "out", durable=True)
    big = [amqp.Message(bytes(range(256)) * 1200)] * 3  # 300 KiB: many 4 KiB frames
    amqp.publish_messages(uri, "", "q", big)
    s = shovel(sources={"broker": uri}, destinations={"broker": uri + "?frame_max=4096&heartbeat=7&channel_max=20"},
               queue="q", publish_fields={"exchange": "", "routing_key": "out"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == 3, 30, "3 acked")
        out = node_a.ctl("list_connections", "-q", "--no-table-headers", "frame_max", "timeout", "channel_max")
        assert "4096\t7\t20" in out.replace(" ", "\t"), out
    assert [d.body for d in amqp.drain_queue(uri, "out", expected=3, timeout=10)] == [m.body for m in big]


def test_passwords_never_reach_logs_or_status(node_a: LocalNode, vhost_a: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bad = node_a.uri(vhost_a, "guest", "Sup3rSecretPw")
    s = shovel(sources={"broker": bad}, destinations={"broker": bad}, queue="q", reconnect_delay=0)
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 30, "terminated")
    assert "authentication" in (pumps.status().reason or "")
    assert "Sup3rSecretPw" not in (pumps.status().reason or "")
    assert "Sup3rSecretPw" not in caplog.text


def test_blocked_without_prefetch_stops_consuming_until_unblocked(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str
) -> None:
    """no_ack has no prefetch to bound what piles up while blocked: the consumer is cancelled."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    s = q_to_out(src, dst, ack_mode="no_ack")
    sent = [amqp.Message(b"%05d" % i) for i in range(20_000)]
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        node_b.set_vm_memory_high_watermark(0)
        try:
            amqp.publish_messages(src, "", "q", sent[:1])
            pumps.wait_for(lambda: pumps.status().state == State.BLOCKED, 30, "blocked")
            pumps.wait_for(lambda: amqp.queue_depth(src, "q")[1] == 0, 30, "consumer cancelled")
            amqp.publish_messages(src, "", "q", sent[1:])
            time.sleep(0.5)
            assert amqp.queue_depth(src, "q") == (len(sent) - 1, 0), "nothing consumed while blocked"
        finally:
            node_b.set_vm_memory_high_watermark(0.4)
        pumps.wait_for(lambda: amqp.queue_depth(dst, "out")[0] == len(sent), 60, "all delivered")
        assert amqp.queue_depth(src, "q") == (0, 1)
    got = amqp.drain_queue(dst, "out", expected=len(sent), timeout=30)
    assert [d.body for d in got] == [m.body for m in sent]


def test_a_uri_ending_in_slash_names_the_empty_vhost_and_the_refusal_says_so(
    node_a: LocalNode, vhost_a: str
) -> None:
    # "amqp://host:port/" is the empty vhost "" by the URI spec; a classic slip for "/"
    empty = f"amqp://guest:guest@127.0.0.1:{node_a.amqp_port}/"
    s = shovel(sources={"broker": node_a.uri(vhost_a)}, destinations={"broker": empty},
               queue="q", reconnect_delay=0)
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 30, "terminated")
    reason = pumps.status().reason or ""
    assert "access refused to vhost '' for user 'guest'" in reason, reason
    assert "amqp://host/%2F" in reason, reason


def test_a_session_that_stayed_up_starts_a_fresh_round_of_the_broker_list(
        node_a: LocalNode, vhost_a: str) -> None:
    """Broker 1 fails, the shovel moves on to broker 2 (the round's last); broker 1 comes back
    and, seconds later, broker 2 fails: the session on broker 2 proved it, so broker 1 is tried
    at once instead of waiting as if the whole list had just failed (reconnect_delay 3600 would
    fail the test)."""
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "q", durable=True)
    amqp.declare_queue(uri, "out", durable=True)
    with TcpProxy("127.0.0.1", node_a.amqp_port) as p1, \
            TcpProxy("127.0.0.1", node_a.amqp_port) as p2:
        via = [uri.replace(f":{node_a.amqp_port}/", f":{p.port}/") for p in (p1, p2)]
        s = shovel(sources={"brokers": via}, destinations={"broker": uri}, queue="q",
                   publish_fields={"exchange": "", "routing_key": "out"}, reconnect_delay=3600)
        with running(s, rng=random.Random(first_pick_seed(2, 0))) as pumps:
            pumps.wait_for(lambda: pumps.status().state == State.RUNNING and p1.connections == 1,
                           30, "running through broker 1")
            p1.set_mode("refuse")
            p1.reset_all()
            pumps.wait_for(lambda: pumps.status().state == State.RUNNING and p2.connections == 1,
                           30, "running through broker 2")
            p1.set_mode("pass")
            time.sleep(FRESH_ROUND_SECONDS + 0.5)
            p2.set_mode("refuse")
            p2.reset_all()
            pumps.wait_for(lambda: pumps.status().state == State.RUNNING and p1.connections == 1,
                           30, "running through broker 1 again, at once")
            amqp.publish_messages(uri, "", "q", [amqp.Message(b"x")] * 50)
            pumps.wait_for(lambda: pumps.status().counters.acked == 50, 60, "50 acked")
    reasons = [r for st, r in pumps.history["s"] if st == State.STARTING and r]
    assert [("now" if "reconnecting now" in r else "wait") for r in reasons
            if "reconnecting" in r] == ["now", "now"], reasons
