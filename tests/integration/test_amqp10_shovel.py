"""Shovels with an AMQP 1.0 side, against RabbitMQ's own AMQP 1.0 (``rabbitmq_amqp1_0`` on the
private nodes): every direction (1.0 → 1.0, 0-9-1 → 1.0, 1.0 → 0-9-1), each ack mode, the
plugin's forward annotations and ``dest-*`` edits, a destination that rejects, and a source
broker killed mid-stream, with every message accounted for."""

from __future__ import annotations

import pika
import pytest
from pumpd.amqp10.message import Header, Message, Properties, decode_message, encode_message
from pumpd.amqp10.values import Int, Symbol, Timestamp, UByte, UInt, ULong
from pumpd.config.model import ShovelConfig
from pumpd.engine.status import State
from pumpd.testing.amqp10_endpoint import Amqp10Address
from pumpd.testing.localnode import LocalNode

from tests.support import amqp10_io as io10
from tests.support import amqp_helpers as amqp
from tests.support.foreign_amqp10 import (
    CARRIED_BY_RABBITMQ,
    as_delivered_by_rabbitmq,
    differences,
    proton_receive,
    proton_send,
    skip_unless_proton,
)
from tests.support.harness import running, shovel


def uri10(address: Amqp10Address) -> str:
    """A pumpd AMQP 1.0 URI for a private node's vhost (RabbitMQ 3.x: ``vhost:NAME``)."""
    return f"{address.url()}?sasl=plain&hostname={address.hostname}"


def side10(address: Amqp10Address, queue: str) -> dict[str, str]:
    """An AMQP 1.0 side on an existing queue of RabbitMQ 3.x."""
    return {"protocol": "amqp10", "broker": uri10(address), "address": f"/amq/queue/{queue}"}


def numbered(n: int, **props: object) -> list[amqp.Message]:
    return [amqp.Message(b"m%06d" % i, pika.BasicProperties(message_id=f"id-{i}", **props))
            for i in range(n)]


def moved_all(cfg: ShovelConfig, n: int, dst: str, queue: str) -> None:
    with running(cfg) as pumps:
        pumps.wait_for(lambda: amqp.queue_depth(dst, queue)[0] == n, 120, f"{n} arrived")
        pumps.wait_for(lambda: pumps.status().counters.acked == n, 30, f"{n} acked")
        assert pumps.status().state == State.RUNNING
        c = pumps.status().counters
        assert (c.consumed, c.published, c.acked, c.nacked) == (n, n, n, 0)


def rich10(n: int) -> list[Message]:
    """AMQP 1.0 messages with a header, properties, application properties of several types
    and annotations, numbered by message id."""
    return [Message(
        header=Header(durable=True, priority=UByte(4)),
        message_annotations={Symbol("x-opt-origin"): "tests"},
        properties=Properties(message_id=f"id-{i}", correlation_id=ULong(i),
                              content_type=Symbol("application/json"), subject="s",
                              creation_time=Timestamp(1_700_000_000_123)),
        application_properties={"k": "v", "n": Int(-7), "big": 2**40, "flag": True,
                                "u": UInt(9), "b": b"\x00\xff"},
        body=[b'{"i": %d}' % i]) for i in range(n)]


def test_amqp10_to_amqp10_sends_the_bare_message_byte_for_byte(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, amqp10_b: Amqp10Address) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "out")
    n = 3000
    sent = rich10(n)
    io10.send(amqp10_a, "/amq/queue/in", sent)
    moved_all(shovel(sources=side10(amqp10_a, "in"), destinations=side10(amqp10_b, "out"),
                     prefetch_count=200), n, dst, "out")
    got = [decode_message(p) for p in io10.receive(amqp10_b, "/amq/queue/out", n)]
    assert [g.bare for g in got] == [encode_message(m) [len(_prefix(m)):] for m in sent]
    assert [g.properties.message_id for g in got if g.properties] == [f"id-{i}" for i in range(n)]
    assert got[0].application_properties == sent[0].application_properties
    assert amqp.queue_depth(src, "in") == (0, 0) and amqp.unacked(node_a, vhost_a, "in") == 0


def _prefix(m: Message) -> bytes:
    """The encoded sections before the bare message (header, annotations)."""
    return encode_message(Message(header=m.header, delivery_annotations=m.delivery_annotations,
                                  message_annotations=m.message_annotations))


def test_amqp091_to_amqp10_maps_properties_and_headers(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_b: Amqp10Address) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "out")
    n = 3000
    sent = numbered(n, content_type="text/plain", headers={"k": "v", "n": 7}, priority=3,
                    correlation_id="c", delivery_mode=2, timestamp=1_700_000_000)
    amqp.publish_messages(src, "", "in", sent)
    moved_all(shovel(sources={"broker": src}, queue="in", destinations=side10(amqp10_b, "out"),
                     prefetch_count=200), n, dst, "out")
    got = [decode_message(p) for p in io10.receive(amqp10_b, "/amq/queue/out", n)]
    assert [b"".join(g.body) for g in got] == [m.body for m in sent]
    for i, g in enumerate(got):
        assert g.properties is not None and g.properties.message_id == f"id-{i}"
        assert (g.properties.content_type, g.properties.correlation_id) == ("text/plain", "c")
        assert g.properties.creation_time == 1_700_000_000_000
        assert g.header is not None and (g.header.durable, g.header.priority) == (True, 3)
        assert g.application_properties == {"k": "v", "n": 7}
    assert amqp.queue_depth(src, "in") == (0, 0) and amqp.unacked(node_a, vhost_a, "in") == 0


def test_amqp10_to_amqp091_maps_properties_and_application_properties(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(dst, "out")
    n = 3000
    sent = rich10(n)
    io10.send(amqp10_a, "/amq/queue/in", sent)
    moved_all(shovel(sources=side10(amqp10_a, "in"), destinations={"broker": dst},
                     publish_fields={"exchange": "", "routing_key": "out"},
                     prefetch_count=200), n, dst, "out")
    got = amqp.drain_queue(dst, "out", expected=n)
    assert [d.body for d in got] == [b"".join(m.body) for m in sent]
    for i, d in enumerate(got):
        p = d.properties
        assert (p.message_id, p.content_type, p.priority, p.delivery_mode) == (
            f"id-{i}", "application/json", 4, 2)
        assert p.headers is not None
        assert {k: p.headers[k] for k in ("k", "n", "big", "flag", "b")} == {
            "k": "v", "n": -7, "big": 2**40, "flag": True, "b": b"\x00\xff"}
    assert amqp.queue_depth(src, "in") == (0, 0) and amqp.unacked(node_a, vhost_a, "in") == 0


# -- a client that is not pumpd's: Qpid Proton sends, Proton receives ---------------------------

@pytest.mark.parametrize("kind", [k for k in CARRIED_BY_RABBITMQ if k != "large"])
def test_what_proton_sends_proton_receives_after_an_amqp10_shovel_unaltered(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, amqp10_b: Amqp10Address, kind: str) -> None:
    skip_unless_proton()
    amqp.declare_queue(node_a.uri(vhost_a), "in")
    amqp.declare_queue(node_b.uri(vhost_b), "out")
    n = 20
    sent = proton_send(amqp10_a, "/amq/queue/in", kind, n)
    moved_all(shovel(sources=side10(amqp10_a, "in"), destinations=side10(amqp10_b, "out")),
              n, node_b.uri(vhost_b), "out")
    got = proton_receive(amqp10_b, "/amq/queue/out", n)
    for i, (s, g) in enumerate(zip(sent, got, strict=True)):
        diffs = differences(as_delivered_by_rabbitmq(s.description, hops=2), g.description)
        assert not diffs, f"{kind} #{i}: " + "\n".join(diffs)


# amqp-value and amqp-sequence bodies are left out: RabbitMQ 3.10 resets the connection over
# pumpd's encoding of some of them (as it does over some of Proton's: test_amqp10_interop.py)
@pytest.mark.parametrize("kind", ["simple", "many-sections"])
def test_what_proton_sends_comes_back_after_amqp091_and_back_unaltered(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address, kind: str) -> None:
    """Through RabbitMQ's mapping and back: 1.0 → 0-9-1 on one shovel, 0-9-1 → 1.0 on
    another; what Proton receives is what it sent."""
    skip_unless_proton()
    src, mid = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "in")
    amqp.declare_queue(src, "back")
    amqp.declare_queue(mid, "mid")
    n = 20
    sent = proton_send(amqp10_a, "/amq/queue/in", kind, n)
    there = shovel("there", sources=side10(amqp10_a, "in"), destinations={"broker": mid},
                   publish_fields={"exchange": "", "routing_key": "mid"})
    back = shovel("back", sources={"broker": mid}, queue="mid",
                  destinations=side10(amqp10_a, "back"))
    with running(there, back) as pumps:
        pumps.wait_for(lambda: amqp.queue_depth(src, "back")[0] == n, 60, f"{n} back")
    got = proton_receive(amqp10_a, "/amq/queue/back", n)
    for i, (s, g) in enumerate(zip(sent, got, strict=True)):
        # Added on the way, nothing altered: the mapping names the 0-9-1 hop's exchange and
        # routing key in x-exchange / x-routing-key annotations (as RabbitMQ 4 does), and
        # RabbitMQ 3.10 then sets a subject naming the routing key it delivered by.
        got_description = dict(g.description)
        annotations = dict(got_description.pop("message_annotations", {}))
        assert annotations.pop("x-exchange") == ["string", ""]
        assert annotations.pop("x-routing-key") == ["string", "mid"]
        if annotations:
            got_description["message_annotations"] = annotations
        if "subject" not in s.description.get("properties", {}):
            properties = dict(got_description.get("properties", {}))
            assert properties.pop("subject", None) in (None, ["string", "back"])
            got_description["properties"] = properties
        expected = as_delivered_by_rabbitmq(s.description, hops=2)
        for d in (expected, got_description):
            if not d.get("properties", True):
                del d["properties"]
        diffs = differences(expected, got_description)
        assert not diffs, f"{kind} #{i}: " + "\n".join(diffs)


def test_a_message_with_no_amqp091_form_is_refused_by_name_and_dead_lettered_at_the_source(
        node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
        amqp10_a: Amqp10Address) -> None:
    """Proton's every-type messages carry ulong-keyed annotations, which AMQP 0-9-1 has no
    place for: each is rejected at the source (its dead-letter queue), none lost, and the
    shovel goes on with the next."""
    skip_unless_proton()
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    with amqp.blocking_connection(src) as conn:
        ch = conn.channel()
        ch.queue_declare("dlq")
        ch.queue_declare("in", arguments={"x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": "dlq"})
    amqp.declare_queue(dst, "out")
    proton_send(amqp10_a, "/amq/queue/in", "every-type", 5)
    proton_send(amqp10_a, "/amq/queue/in", "simple", 5)
    s = shovel(sources=side10(amqp10_a, "in"), destinations={"broker": dst},
               publish_fields={"exchange": "", "routing_key": "out"})
    with running(s) as pumps:
        pumps.wait_for(lambda: amqp.queue_depth(dst, "out")[0] == 5
                       and amqp.queue_depth(src, "dlq")[0] == 5, 60, "5 moved, 5 dead-lettered")
        pumps.wait_for(lambda: (pumps.status().counters.dead_lettered,
                                pumps.status().counters.acked) == (5, 5), 30, "counted")
    assert amqp.queue_depth(src, "in") == (0, 0)
