"""What an AMQP 1.0 side of a shovel promises, against RabbitMQ 3.10's own AMQP 1.0 on the
private nodes: every ack mode moves every message and settles the source; the plugin's forward
annotations and the ``amqp10_*`` edits are on every message with their AMQP types; what a
destination refuses goes to the undeliverable policy and nothing is lost; delivery ids pass
2^16; the status shows the counters and no password.

RabbitMQ 3.10 never answers a transfer with ``rejected``: a publish its queue refuses (a full
``reject-publish`` queue) ends the AMQP 1.0 session, and the broker resets the connection. What
pumpd's undeliverable policy receives from an AMQP 1.0 side here are the messages it cannot
forward (no AMQP 1.0 form, or no AMQP 0-9-1 one); the refused publish is a lost connection, after
which the source delivers the message again.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
from pumpd.amqp10.message import Header, Message, Properties, decode_message, encode_message
from pumpd.amqp10.values import Symbol, Timestamp, UInt
from pumpd.config.parse import ConfigError, parse_config
from pumpd.engine.status import Counters, State
from pumpd.testing.amqp10_endpoint import Amqp10Address
from pumpd.testing.localnode import LocalNode

from tests.support import amqp10_io as io10
from tests.support import amqp_helpers as amqp
from tests.support.amqp10_io import side10
from tests.support.daemon_helpers import Daemon
from tests.support.harness import RunningPumps, running, shovel


def source_settled(node: LocalNode, vhost: str, queue: str) -> bool:
    """Nothing ready in ``queue`` and nothing delivered unsettled from it."""
    return amqp.queue_depth(node.uri(vhost), queue)[0] == 0 and amqp.unacked(node, vhost, queue) == 0


def numbered(n: int, start: int = 0, **props: object) -> list[amqp.Message]:
    """AMQP 0-9-1 messages with message ids ``id-START`` .. (persistent)."""
    return [amqp.Message(b"m%06d" % i, pika.BasicProperties(message_id=f"id-{i}",
                                                            delivery_mode=2, **props))
            for i in range(start, start + n)]


def numbered10(n: int, start: int = 0) -> list[Message]:
    """AMQP 1.0 messages with message ids ``id-START`` .., an annotation and application
    properties (durable)."""
    return [Message(header=Header(durable=True),
                    message_annotations={Symbol("x-opt-origin"): "tests"},
                    properties=Properties(message_id=f"id-{i}", subject="s"),
                    application_properties={"i": i}, body=[b"m%06d" % i])
            for i in range(start, start + n)]


def ids(n: int, start: int = 0) -> set[str]:
    return {f"id-{i}" for i in range(start, start + n)}


def wait_moved(pumps: RunningPumps, n: int, acked: int) -> Counters:
    pumps.wait_for(lambda: pumps.status().counters.published >= n
                   and pumps.status().counters.acked >= acked
                   and pumps.status().counters.in_flight == 0, 60, f"{n} moved")
    return pumps.status().counters


# -- ack modes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("ack_mode", ["on_confirm", "on_publish", "no_ack"])
def test_each_ack_mode_from_amqp091_to_an_amqp10_destination(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_b: Amqp10Address, ack_mode: str) -> None:
    src = node_a.uri(vhost_a)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(node_b.uri(vhost_b), "out")
    n = 2000
    amqp.publish_messages(src, "", "in", numbered(n))
    s = shovel(sources={"broker": src}, queue="in", destinations=side10(amqp10_b, "out"),
               ack_mode=ack_mode, prefetch_count=100)
    with running(s) as pumps:
        c = wait_moved(pumps, n, 0 if ack_mode == "no_ack" else n)
        pumps.wait_for(lambda: source_settled(node_a, vhost_a, "in"), 30, "source settled")
        assert pumps.status().state == State.RUNNING
    got = io10.message_ids(io10.receive(amqp10_b, "/amq/queue/out", n))
    assert sorted(got) == sorted(ids(n)), "every message once, in order or not"
    assert got == [f"id-{i}" for i in range(n)], "in order"
    assert (c.consumed, c.published, c.nacked, c.in_flight, c.buffered) == (n, n, 0, 0, 0)
    assert c.acked == (0 if ack_mode == "no_ack" else n)
    assert c.confirmed == (n if ack_mode == "on_confirm" else 0)
    assert amqp.queue_depth(node_b.uri(vhost_b), "out")[0] == 0


@pytest.mark.parametrize("destination", ["amqp10", "amqp091"])
@pytest.mark.parametrize("ack_mode", ["on_confirm", "on_publish"])
def test_each_ack_mode_from_an_amqp10_source(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, amqp10_b: Amqp10Address, ack_mode: str,
        destination: str) -> None:
    dst = node_b.uri(vhost_b)
    amqp.declare_queue(node_a.uri(vhost_a), "in")
    amqp.declare_queue(dst, "out")
    n = 2000
    io10.send(amqp10_a, "/amq/queue/in", numbered10(n))
    if destination == "amqp10":
        to: dict[str, Any] = {"destinations": side10(amqp10_b, "out")}
    else:
        to = {"destinations": {"broker": dst},
              "publish_fields": {"exchange": "", "routing_key": "out"}}
    s = shovel(sources=side10(amqp10_a, "in"), ack_mode=ack_mode, prefetch_count=100, **to)
    with running(s) as pumps:
        c = wait_moved(pumps, n, n)
        pumps.wait_for(lambda: source_settled(node_a, vhost_a, "in"), 30, "source settled")
        assert pumps.status().state == State.RUNNING
    if destination == "amqp10":
        got = io10.message_ids(io10.receive(amqp10_b, "/amq/queue/out", n))
    else:
        got = [d.properties.message_id for d in amqp.drain_queue(dst, "out", expected=n)]
    assert got == [f"id-{i}" for i in range(n)]
    assert (c.consumed, c.published, c.acked, c.nacked, c.in_flight) == (n, n, n, 0, 0)
    assert c.confirmed == (n if ack_mode == "on_confirm" else 0)


def test_no_ack_is_refused_for_an_amqp10_source_and_the_refusal_says_why(
        amqp10_a: Amqp10Address, amqp10_b: Amqp10Address) -> None:
    with pytest.raises(ConfigError) as info:
        shovel(sources=side10(amqp10_a, "in"), destinations=side10(amqp10_b, "out"),
               ack_mode="no_ack")
    e = info.value
    assert e.clause == "ack_mode", str(e)
    assert "no_ack cannot go with an AMQP 1.0 source" in e.message
    # why: the source lets go of each message as it sends it, so nothing could be rejected or
    # left at the source
    assert "settles each message as it sends it" in e.message
    assert "on_confirm or on_publish" in e.message


# -- what the destination adds to each message --------------------------------------------------


@pytest.mark.parametrize("form", ["static", pytest.param("dynamic", marks=pytest.mark.xfail(
    strict=True, reason="pumpd tells a dynamic shovel by its AMQP 0-9-1 declarations "
    "(engine/forwarding.py hop_fields): one with an AMQP 1.0 side is always called static"))])
def test_forward_and_timestamp_annotations_as_the_plugin_writes_them(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, amqp10_b: Amqp10Address, form: str) -> None:
    """The shovel's type is the form it was defined in; the bare message is sent as it came,
    only the annotations grow."""
    amqp.declare_queue(node_a.uri(vhost_a), "in")
    amqp.declare_queue(node_b.uri(vhost_b), "out")
    n = 300
    sent = numbered10(n)
    io10.send(amqp10_a, "/amq/queue/in", sent)
    if form == "dynamic":
        definition: dict[str, object] = {
            "src-protocol": "amqp10", "src-uri": io10.uri10(amqp10_a),
            "src-address": "/amq/queue/in", "dest-protocol": "amqp10",
            "dest-uri": io10.uri10(amqp10_b), "dest-address": "/amq/queue/out",
            "dest-add-forward-headers": True, "dest-add-timestamp-header": True}
    else:
        definition = {"sources": side10(amqp10_a, "in"), "destinations": side10(amqp10_b, "out"),
                      "add_forward_headers": True, "add_timestamp_header": True}
    cfg = parse_config({"shovels": {"fwd-10": definition}}).shovels["fwd-10"]
    before = int(time.time() * 1000)
    with running(cfg) as pumps:
        pumps.wait_for(lambda: pumps.status("fwd-10").counters.acked == n, 60, f"{n} acked")
    after = int(time.time() * 1000)
    got = [decode_message(p) for p in io10.receive(amqp10_b, "/amq/queue/out", n)]
    assert [g.bare for g in got] == [encode_message(Message(
        properties=m.properties, application_properties=m.application_properties,
        body=m.body)) for m in sent], "the bare message is sent byte for byte"
    stamps = []
    for g in got:
        ann = g.message_annotations or {}
        assert {k: (type(v), v) for k, v in ann.items() if k != "x-opt-shovelled-timestamp"} == {
            Symbol("x-opt-origin"): (str, "tests"),
            Symbol("x-opt-shovelled-by"): (str, f"pumpd@{socket.gethostname()}"),
            Symbol("x-opt-shovel-type"): (str, form),
            Symbol("x-opt-shovel-name"): (str, "fwd-10"),
        }
        assert all(type(k) is Symbol for k in ann)
        stamp = ann[Symbol("x-opt-shovelled-timestamp")]
        assert type(stamp) is Timestamp, f"{stamp!r}: a timestamp in milliseconds"
        stamps.append(int(stamp))
    assert before <= min(stamps) <= max(stamps) <= after


@pytest.mark.parametrize("source", ["amqp091", "amqp10"])
def test_amqp10_properties_application_properties_and_annotations_on_every_message(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, amqp10_b: Amqp10Address, source: str) -> None:
    """The static form's ``amqp10_*`` maps, each value with its field's AMQP type, over what
    the message had; shovel type "static" in the forward annotations."""
    src = node_a.uri(vhost_a)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(node_b.uri(vhost_b), "out")
    n = 300
    if source == "amqp091":
        amqp.publish_messages(src, "", "in", numbered(n, headers={"h": "v"}))
        frm: dict[str, Any] = {"sources": {"broker": src}, "queue": "in"}
    else:
        io10.send(amqp10_a, "/amq/queue/in", numbered10(n))
        frm = {"sources": side10(amqp10_a, "in")}
    s = shovel("props-10", destinations=side10(amqp10_b, "out"), add_forward_headers=True,
               amqp10_properties={"user_id": "guest", "to": "/queue/elsewhere",
                                  "subject": "set", "content_type": "application/x-test",
                                  "content_encoding": "identity", "reply_to": "/queue/r",
                                  "creation_time": 1_700_000_000_123, "group_id": "g",
                                  "group_sequence": 7, "absolute_expiry_time": 4_102_444_800_000,
                                  "reply_to_group_id": "rg"},
               amqp10_application_properties={"app-key": "app-value", "i": "replaced"},
               amqp10_message_annotations={"x-opt-ann": "ann-value"}, **frm)
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status("props-10").counters.acked == n, 60, f"{n} acked")
    got = [decode_message(p) for p in io10.receive(amqp10_b, "/amq/queue/out", n)]
    assert [g.properties.message_id for g in got if g.properties] == [f"id-{i}" for i in range(n)]
    for g in got:
        p = g.properties
        assert p is not None
        fields = {name: (type(getattr(p, name)), getattr(p, name)) for name in (
            "user_id", "to", "subject", "content_type", "content_encoding", "reply_to",
            "creation_time", "group_id", "group_sequence", "absolute_expiry_time",
            "reply_to_group_id")}
        assert fields == {
            "user_id": (bytes, b"guest"), "to": (str, "/queue/elsewhere"),
            "subject": (str, "set"), "content_type": (Symbol, "application/x-test"),
            "content_encoding": (Symbol, "identity"), "reply_to": (str, "/queue/r"),
            "creation_time": (Timestamp, 1_700_000_000_123), "group_id": (str, "g"),
            "group_sequence": (UInt, 7), "absolute_expiry_time": (Timestamp, 4_102_444_800_000),
            "reply_to_group_id": (str, "rg")}
        app = g.application_properties or {}
        assert (type(app["app-key"]), app["app-key"]) == (str, "app-value")
        assert (type(app["i"]), app["i"]) == (str, "replaced"), "the configured value wins"
        if source == "amqp091":
            assert app["h"] == "v", "the message's own application properties are kept"
        ann = g.message_annotations or {}
        assert (type(ann[Symbol("x-opt-ann")]), ann[Symbol("x-opt-ann")]) == (str, "ann-value")
        assert ann[Symbol("x-opt-shovel-type")] == "static"
        assert ann[Symbol("x-opt-shovel-name")] == "props-10"
        assert Symbol("x-opt-shovelled-timestamp") not in ann
        if source == "amqp10":
            assert ann[Symbol("x-opt-origin")] == "tests"


# -- what cannot be delivered -------------------------------------------------------------------


@pytest.mark.parametrize("source", ["amqp091", "amqp10"])
def test_a_full_reject_publish_queue_over_amqp10_loses_nothing(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, amqp10_b: Amqp10Address, source: str) -> None:
    """RabbitMQ 3.10 answers a publish that its reject-publish queue refuses by ending the
    AMQP 1.0 session and resetting the connection (it has no ``rejected`` to send): to the
    shovel a lost destination. The messages it had not accepted come back from the source and
    are sent again on the next connection, until the queue has room; none is lost, none goes
    to the undeliverable policy."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "small", arguments={"x-max-length": 50,
                                                "x-overflow": "reject-publish"})
    n = 200
    if source == "amqp091":
        amqp.publish_messages(src, "", "in", numbered(n))
        frm: dict[str, Any] = {"sources": {"broker": src}, "queue": "in",
                               "undeliverable": "park"}
    else:
        io10.send(amqp10_a, "/amq/queue/in", numbered10(n))
        frm = {"sources": side10(amqp10_a, "in"), "undeliverable": "dead-letter"}
    s = shovel(destinations=side10(amqp10_b, "small"), prefetch_count=20, reconnect_delay=0.2,
               **frm)
    got: list[object] = []
    with running(s) as pumps:
        pumps.wait_for(lambda: amqp.queue_depth(dst, "small")[0] == 50, 30, "the queue full")
        pumps.wait_for(lambda: pumps.status().counters.reconnects >= 2, 30,
                       "the destination lost, twice")
        reasons = [r for _, r in pumps.history["s"] if r]
        assert any(r.startswith("destination: ") for r in reasons), reasons
        deadline = time.monotonic() + 45
        while len(set(got)) < n and time.monotonic() < deadline:
            # room in the queue: the shovel's next connection fills it again
            depth = amqp.queue_depth(dst, "small")[0]
            got += io10.message_ids(io10.receive(amqp10_b, "/amq/queue/small", depth))
            time.sleep(0.1)
        pumps.wait_for(lambda: source_settled(node_a, vhost_a, "in"), 30, "source settled")
        pumps.wait_for(lambda: pumps.status().counters.acked == n, 10, f"{n} acked")
        c = pumps.status().counters
    assert set(got) == ids(n), f"lost: {sorted(ids(n) - set(got))[:5]}"
    assert (c.undeliverable_refused, c.parked, c.dead_lettered) == (0, 0, 0)
    assert c.redelivered > 0, "the messages the destination did not take came again"


def bad091(n: int, start: int) -> list[amqp.Message]:
    """AMQP 0-9-1 messages with no AMQP 1.0 form: a content type that is not ASCII (a
    symbol in AMQP 1.0)."""
    return numbered(n, start, content_type="t\u00ebxt/plain")


def bad10(n: int, start: int) -> list[Message]:
    """AMQP 1.0 messages with no AMQP 0-9-1 form: an application property named ``x-...``
    (it would come back as an annotation)."""
    return [Message(header=Header(durable=True),
                    properties=Properties(message_id=f"id-{i}"),
                    application_properties={"x-not-a-header": "v"}, body=[b"bad %d" % i])
            for i in range(start, start + n)]


def test_park_from_an_amqp091_source_to_an_amqp10_destination(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_b: Amqp10Address) -> None:
    """Messages the AMQP 1.0 destination cannot send go to the park queue on the source
    broker, the others to the destination, in order."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "out")
    good, bad = 30, 5
    amqp.publish_messages(src, "", "in", numbered(good // 2) + bad091(bad, 100)
                          + numbered(good - good // 2, good // 2))
    s = shovel(sources={"broker": src}, queue="in", destinations=side10(amqp10_b, "out"),
               undeliverable={"policy": "park", "park_queue": "parked"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == good
                       and pumps.status().counters.parked == bad, 30, "all settled")
        c = pumps.status().counters
        assert pumps.status().state == State.RUNNING
    assert (c.parked, c.undeliverable_malformed, c.published) == (bad, bad, good)
    parked = amqp.drain_queue(src, "parked", expected=bad)
    assert [d.properties.message_id for d in parked] == [f"id-{i}" for i in range(100, 100 + bad)]
    assert all("no AMQP 1.0 form" in d.properties.headers["x-pumpd-undeliverable"]
               for d in parked)
    got = io10.message_ids(io10.receive(amqp10_b, "/amq/queue/out", good))
    assert got == [f"id-{i}" for i in range(good)]
    assert source_settled(node_a, vhost_a, "in")


@pytest.fixture
def dead_lettered_in(node_a: LocalNode, vhost_a: str) -> Iterator[str]:
    """Queue "in" on node A, dead-lettering to queue "dlq" (through exchange "dlx")."""
    src = node_a.uri(vhost_a)
    with amqp.blocking_connection(src) as c:
        ch = c.channel()
        ch.exchange_declare("dlx", "fanout", durable=True)
        ch.queue_declare("dlq", durable=True)
        ch.queue_bind("dlq", "dlx")
        ch.queue_declare("in", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    yield "in"


def test_dead_letter_from_an_amqp10_source_settles_them_rejected(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, dead_lettered_in: str) -> None:
    """Messages the AMQP 0-9-1 destination cannot take are settled ``rejected`` at the AMQP
    1.0 source: RabbitMQ dead-letters them to the queue's dead-letter exchange."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(dst, "out")
    good, bad = 30, 5
    io10.send(amqp10_a, "/amq/queue/in", numbered10(good // 2) + bad10(bad, 100)
              + numbered10(good - good // 2, good // 2))
    s = shovel(sources=side10(amqp10_a, "in"), destinations={"broker": dst},
               publish_fields={"exchange": "", "routing_key": "out"},
               undeliverable="dead-letter")
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == good
                       and pumps.status().counters.dead_lettered == bad, 30, "all settled")
        pumps.wait_for(lambda: source_settled(node_a, vhost_a, "in"), 30, "source settled")
        c = pumps.status().counters
        assert pumps.status().state == State.RUNNING
    assert (c.dead_lettered, c.undeliverable_malformed, c.published) == (bad, bad, good)
    dead = amqp.drain_queue(src, "dlq", expected=bad)
    assert [d.properties.message_id for d in dead] == [f"id-{i}" for i in range(100, 100 + bad)]
    assert all(d.properties.headers["x-death"][0]["reason"] == "rejected" for d in dead)
    got = amqp.drain_queue(dst, "out", expected=good)
    assert [d.properties.message_id for d in got] == [f"id-{i}" for i in range(good)]


@pytest.mark.parametrize("source", ["amqp091", "amqp10"])
def test_stop_stops_the_shovel_with_nothing_lost(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, amqp10_b: Amqp10Address, source: str) -> None:
    """The first message that cannot be delivered stops the shovel, named; it and everything
    after it not yet settled stay at the source."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "out")
    good, bad = 20, 3
    if source == "amqp091":
        amqp.publish_messages(src, "", "in", numbered(good) + bad091(bad, 100)
                              + numbered(good, 200))
        cfg = shovel(sources={"broker": src}, queue="in", destinations=side10(amqp10_b, "out"),
                     undeliverable="stop")
    else:
        io10.send(amqp10_a, "/amq/queue/in", numbered10(good) + bad10(bad, 100)
                  + numbered10(good, 200))
        cfg = shovel(sources=side10(amqp10_a, "in"), destinations={"broker": dst},
                     publish_fields={"exchange": "", "routing_key": "out"}, undeliverable="stop")
    with running(cfg) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 30, "terminated")
    reason = pumps.status().reason or ""
    assert reason.startswith("undeliverable message (delivery tag ") and "policy stop" in reason
    if source == "amqp091":
        assert "message_id 'id-100'" in reason and "no AMQP 1.0 form" in reason, reason
    else:
        # a message with no 0-9-1 form is named by its delivery (the 21st of the session)
        assert "delivery tag 21)" in reason and "no AMQP 0-9-1 form" in reason, reason
    if source == "amqp091":
        at_dst = io10.message_ids(io10.receive(amqp10_b, "/amq/queue/out",
                                               amqp.queue_depth(dst, "out")[0]))
        left = [d.properties.message_id for d in amqp.drain_queue(
            src, "in", expected=amqp.queue_depth(src, "in")[0])]
    else:
        at_dst = [d.properties.message_id for d in amqp.drain_queue(
            dst, "out", expected=amqp.queue_depth(dst, "out")[0])]
        left = io10.message_ids(io10.receive(amqp10_a, "/amq/queue/in",
                                             amqp.queue_depth(src, "in")[0]))
    assert at_dst[:good] == [f"id-{i}" for i in range(good)]
    assert "id-100" in left and not {"id-100", "id-101", "id-102"} & set(at_dst)
    assert set(at_dst) | set(left) == ids(good) | ids(bad, 100) | ids(good, 200)


# -- many messages; the status --------------------------------------------------------------------


def test_seventy_thousand_messages_pass_delivery_id_two_to_the_sixteen(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, amqp10_b: Amqp10Address) -> None:
    """Both links' delivery ids pass 65535 on one session (the plugin's AMQP 1.0 shovel once
    stopped there)."""
    src = node_a.uri(vhost_a)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(node_b.uri(vhost_b), "out")
    n = 70_000
    amqp.publish_messages(src, "", "in", numbered(n))
    s = shovel(sources=side10(amqp10_a, "in"), destinations=side10(amqp10_b, "out"))
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == n, 120, f"{n} acked")
        pumps.wait_for(lambda: source_settled(node_a, vhost_a, "in"), 30, "source settled")
        c = pumps.status().counters
        assert pumps.status().state == State.RUNNING and c.reconnects == 0
    got = io10.message_ids(io10.receive(amqp10_b, "/amq/queue/out", n, timeout=120))
    assert got == [f"id-{i}" for i in range(n)]
    assert (c.consumed, c.published, c.confirmed, c.acked) == (n, n, n, n)


def pumpd_status(d: Daemon, *args: str) -> str:
    """What ``pumpd status`` prints for the daemon ``d``."""
    result = subprocess.run(
        [sys.executable, "-m", "pumpd", "status", *args, "--http", f"127.0.0.1:{d.port}"],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        env={**os.environ, "PUMPD_TOKEN_FILE": str(d.token_path)})
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def own_user(node_a: LocalNode, node_b: LocalNode, vhost_a: str,
             vhost_b: str) -> Iterator[tuple[str, str]]:
    """A user with a password of its own on both test vhosts: (user, password)."""
    user, password = f"f10-{uuid.uuid4().hex[:6]}", f"Pw-{uuid.uuid4().hex}"
    node_a.add_user(user, password, vhost_a)
    node_b.add_user(user, password, vhost_b)
    yield user, password
    node_a.ensure_running().ctl("delete_user", user)
    node_b.ensure_running().ctl("delete_user", user)


def running_amqp10_daemon(node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
                          pumpd_daemon: Callable[..., Daemon], own_user: tuple[str, str],
                          n: int) -> tuple[Daemon, dict[str, Any], Amqp10Address,
                                           Amqp10Address]:
    """A pumpd daemon running an AMQP 1.0 shovel "s10" (as ``own_user``) that moved ``n``
    messages; returns the daemon, the shovel's status and the two sides' addresses, once
    checked that no status nor log line shows the password."""
    user, password = own_user
    a10 = node_a.amqp10_address(vhost_a, user, password)
    b10 = node_b.amqp10_address(vhost_b, user, password)
    amqp.declare_queue(node_a.uri(vhost_a), "in")
    amqp.declare_queue(node_b.uri(vhost_b), "out")
    io10.send(a10, "/amq/queue/in", numbered10(n))
    d = pumpd_daemon({"s10": {"sources": side10(a10, "in"), "destinations": side10(b10, "out")}})
    doc = d.wait_for(lambda: (lambda x: x if x and x["state"] == "running"
                              and x["counters"]["acked"] == n else None)(d.shovel("s10")),
                     60, f"running, {n} acked")
    text = f"{doc} {d.shovels()} {d.log(400)} {pumpd_status(d)} {pumpd_status(d, '--json')}"
    assert password not in text
    return d, doc, a10, b10


def test_the_status_shows_counters_and_uris_without_the_password(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        pumpd_daemon: Callable[..., Daemon], own_user: tuple[str, str]) -> None:
    """``pumpd status`` (the daemon's /api/shovels) of a running AMQP 1.0 shovel."""
    n = 500
    d, doc, a10, b10 = running_amqp10_daemon(node_a, node_b, vhost_a, vhost_b, pumpd_daemon,
                                             own_user, n)
    (shown,) = json.loads(pumpd_status(d, "--json"))["shovels"]
    assert (shown["name"], shown["state"], shown["src_uri"], shown["dest_uri"]) == (
        "s10", "running", doc["src_uri"], doc["dest_uri"])
    assert "s10" in pumpd_status(d) and "running" in pumpd_status(d)
    counters = doc["counters"]
    assert {k: counters[k] for k in ("consumed", "published", "confirmed", "acked", "nacked",
                                     "in_flight")} == {
        "consumed": n, "published": n, "confirmed": n, "acked": n, "nacked": 0, "in_flight": 0}
    for key, addr in (("src_uri", a10), ("dest_uri", b10)):
        assert doc[key] == (f"amqp://{addr.user}@{addr.host}:{addr.port}"
                            f"?hostname={addr.hostname}"), doc[key]


def test_the_status_names_the_amqp10_protocol_and_addresses(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        pumpd_daemon: Callable[..., Daemon], own_user: tuple[str, str]) -> None:
    """As the plugin's shovel status does: the protocols, and src_address / dest_address in
    place of a queue."""
    _, doc, _, _ = running_amqp10_daemon(node_a, node_b, vhost_a, vhost_b, pumpd_daemon,
                                         own_user, 10)
    assert (doc["src_protocol"], doc["dest_protocol"]) == ("amqp10", "amqp10")
    assert (doc.get("src_address"), doc.get("dest_address")) == ("/amq/queue/in",
                                                                 "/amq/queue/out")
