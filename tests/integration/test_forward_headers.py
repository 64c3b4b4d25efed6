"""Forward and timestamp headers: spliced into the content header, every entry the publisher wrote
kept byte for byte, the hop table as the Shovel plugin builds it.

First on bytes, through both relays; then end to end, with a publisher and a consumer that are
not pika (a raw AMQP client on pamqp's codec, which writes and reads each field type exactly),
through a pumpd shovel and beside the Shovel plugin on the same node.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from decimal import Decimal
from typing import Any

import aiormq
import pamqp.commands as cmd
import pamqp.decode
import pamqp.frame
import pamqp.header
import pika
import pika.frame
import pika.spec
import pytest
from pumpd.config.uri import parse_uri
from pumpd.dataplane.frames import (
    ACK_MODE_ON_CONFIRM,
    FRAME_BODY,
    FRAME_HEADER,
    content_header_payload,
    frame,
)
from pumpd.dataplane.properties import (
    HEADERS_INDEX,
    encode_hop,
    encode_property_overrides,
    split_properties,
    table_entries,
)
from pumpd.engine.forwarding import hop_fields, uri_without_credentials
from pumpd.engine.status import State
from pumpd.testing.localnode import LocalNode

from tests.support.harness import running, shovel
from tests.support.impls import IMPLEMENTATIONS, relay_class

SRC, DST = 1, 1


def entry(key: str, typed_value: bytes) -> bytes:
    return bytes((len(key),)) + key.encode() + typed_value


def table(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack(">I", len(body)) + body


def longstr(s: bytes) -> bytes:
    return b"S" + struct.pack(">I", len(s)) + s


def array(*values: bytes) -> bytes:
    body = b"".join(values)
    return b"A" + struct.pack(">I", len(body)) + body


# One entry of every field type RabbitMQ reads (rabbit_binary_parser), with the values that a
# decode / re-encode used to change or crash on, and nested tables and arrays.
EVERY_TYPE = [
    entry("t", b"t\x01"),
    entry("b", b"b" + struct.pack(">b", -5)),
    entry("B", b"B" + struct.pack(">B", 200)),
    entry("s", b"s" + struct.pack(">h", -300)),
    entry("u", b"u" + struct.pack(">H", 60000)),
    entry("I", b"I" + struct.pack(">i", -70000)),
    entry("i", b"i" + struct.pack(">I", 4_000_000_000)),
    entry("l", b"l" + struct.pack(">q", -(2**40))),
    entry("L", b"L" + struct.pack(">q", 2**62)),
    entry("f", b"f" + struct.pack(">f", 3.0e38)),
    entry("f-half", b"f" + struct.pack(">f", 1.5)),
    entry("d", b"d" + struct.pack(">d", -1e300)),
    entry("d-pi", b"d" + struct.pack(">d", 3.141592653589793)),
    entry("D", b"D\x02" + struct.pack(">I", 100)),  # 1.00
    entry("S", longstr("ünïcode".encode())),
    entry("T", b"T" + struct.pack(">Q", 1_700_000_000)),
    entry("V", b"V"),
    entry("x", b"x" + struct.pack(">I", 3) + b"\x00\xff\x01"),
    entry("A", array(b"I" + struct.pack(">i", 1), longstr(b"two"),
                     b"F" + table(entry("deep", b"d" + struct.pack(">d", -0.25))),
                     array(b"b\x01"), b"V")),
    entry("F", b"F" + table(entry("n", b"F" + table(entry("x", b"D\x03" + struct.pack(">I", 1)))),
                            entry("e", b"F" + table()))),
    entry("A-empty", array()),
]
EXPECTED_VALUES: dict[str, Any] = {
    "t": True, "b": -5, "B": 200, "s": -300, "u": 60000, "I": -70000, "i": 4_000_000_000,
    "l": -(2**40), "L": 2**62, "f": struct.unpack(">f", struct.pack(">f", 3.0e38))[0],
    "f-half": 1.5, "d": -1e300, "d-pi": 3.141592653589793, "D": Decimal("1.00"),
    "S": "ünïcode", "V": None, "x": bytearray(b"\x00\xff\x01"),
    "A": [1, "two", {"deep": -0.25}, [1], None],
    "F": {"n": {"x": Decimal("0.001")}, "e": {}}, "A-empty": [],
}

HOP_FIELDS = [("shovelled-by", "pumpd@host"), ("shovel-type", "dynamic"),
              ("shovel-name", "s1"), ("shovel-vhost", "v"), ("src-uri", "amqp://a:1/v"),
              ("dest-uri", "amqp://b:2/v"), ("src-queue", "in"), ("dest-queue", "out")]
HOP = encode_hop(HOP_FIELDS)


def raw_props(headers: bytes | None, **others: Any) -> bytes:
    """A property list: the given headers table bytes (or none) and pika-encoded others."""
    base = pika.frame.Header(0, 0, pika.BasicProperties(**others)).marshal()[19:-1]
    values = split_properties(base)
    values[HEADERS_INDEX] = headers
    flags = 0
    out = b""
    for i, v in enumerate(values):
        if v is not None:
            flags |= 1 << (15 - i)
            out += v
    return struct.pack(">H", flags) + out


def deliver(tag: int, body: bytes, props: bytes) -> bytes:
    out = pika.frame.Method(SRC, pika.spec.Basic.Deliver("ctag", tag, False, "ex", "rk")).marshal()
    out += frame(FRAME_HEADER, SRC, content_header_payload(len(body), props))
    return out + (frame(FRAME_BODY, SRC, body) if body else b"")


def relayed_props(impl: str, props: bytes, **kw: Any) -> bytes:
    """The property list the relay publishes for one message with ``props``."""
    r = relay_class(impl)(source_channel=SRC, dest_channel=DST, dest_frame_max=131072,
                          ack_mode=ACK_MODE_ON_CONFIRM, **kw)
    assert r.feed_source(deliver(1, b"body", props)) == b""
    assert not r.paused, r.take_undeliverable()
    out = r.take_publishes()
    method_end = 7 + struct.unpack_from(">I", out, 3)[0] + 1
    size = struct.unpack_from(">I", out, method_end + 3)[0]
    return out[method_end + 7 + 12 : method_end + 7 + size]


def headers_of(props: bytes) -> bytes:
    headers = split_properties(props)[HEADERS_INDEX]
    assert headers is not None
    return headers


def entries_by_key(headers: bytes) -> dict[bytes, bytes]:
    return {k: headers[start:end] for k, start, _, end in table_entries(headers)}


def decode_table(headers: bytes) -> dict[str, Any]:
    return dict(pamqp.decode.field_table(headers)[1])


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- on bytes ------------------------------------------------------------------------------------


def test_every_field_type_is_kept_byte_for_byte_with_the_hop_and_timestamp_after(impl: str) -> None:
    original = table(*EVERY_TYPE)
    before = int(time.time())
    out = headers_of(relayed_props(impl, raw_props(original, priority=3, app_id="a"),
                                   forward_hop=HOP, timestamp_header=True))
    after = int(time.time())
    body = out[4:]
    assert body.startswith(original[4:])  # every entry as it was, in its place
    rest = table_entries(struct.pack(">I", len(body) - len(original) + 4) + body[len(original) - 4:])
    assert [k for k, *_ in rest] == [b"x-shovelled", b"x-shovelled-timestamp"]
    decoded = decode_table(out)
    for key, value in EXPECTED_VALUES.items():
        assert decoded[key] == value, key
    assert decoded["x-shovelled"] == [dict(HOP_FIELDS)]
    stamp = entries_by_key(out)[b"x-shovelled-timestamp"]
    assert stamp[1 + 21] == ord("l")  # a 64-bit signed integer of seconds
    # The native relay reads C's time(), which glibc serves from the kernel's coarse clock; near
    # a second's edge it can name the next second while time.time() still names this one (seen
    # on this VM): one second either way is the header's own resolution.
    assert before - 1 <= struct.unpack(">q", stamp[-8:])[0] <= after + 1


def test_the_hop_table_is_long_strings_in_the_given_order(impl: str) -> None:
    out = headers_of(relayed_props(impl, raw_props(None), forward_hop=HOP))
    (hop_entry,) = table_entries(out)
    array_value = out[hop_entry[2]:hop_entry[3]]
    assert array_value == array(b"F" + HOP)
    keys = [k.decode() for k, *_ in table_entries(HOP)]
    assert keys == [k for k, _ in HOP_FIELDS]
    assert all(HOP[vpos] == ord("S") for _, _, vpos, _ in table_entries(HOP))


def test_the_new_hop_goes_first_in_an_existing_array_and_a_second_hop_first_again(impl: str) -> None:
    earlier = b"F" + table(entry("shovel-name", longstr(b"upstream")))
    original = table(entry("a", b"b\x01"), entry("x-shovelled", array(earlier)), entry("z", b"V"))
    once = relayed_props(impl, raw_props(original), forward_hop=HOP)
    second_hop = encode_hop([("shovel-name", "s2")])
    twice = headers_of(relayed_props(impl, once, forward_hop=second_hop))
    assert [k for k, *_ in table_entries(twice)] == [b"a", b"x-shovelled", b"z"]
    assert entries_by_key(twice)[b"x-shovelled"] == entry(
        "x-shovelled", array(b"F" + second_hop, b"F" + HOP, earlier))
    assert [h["shovel-name"] for h in decode_table(twice)["x-shovelled"]] == ["s2", "s1", "upstream"]


def test_an_existing_timestamp_is_replaced_in_place_by_a_64_bit_one(impl: str) -> None:
    original = table(entry("x-shovelled-timestamp", b"I" + struct.pack(">i", 5)), entry("k", b"t\x00"))
    out = headers_of(relayed_props(impl, raw_props(original), timestamp_header=True))
    (ts, k) = table_entries(out)
    assert (ts[0], k[0]) == (b"x-shovelled-timestamp", b"k")
    assert out[ts[2]] == ord("l") and struct.unpack(">q", out[ts[2] + 1:ts[3]])[0] > 5


@pytest.mark.parametrize("headers", [None, table()], ids=["absent", "empty"])
def test_a_message_without_headers_gets_a_table(impl: str, headers: bytes | None) -> None:
    props = raw_props(headers, content_type="text/plain", delivery_mode=2, message_id="m")
    out = relayed_props(impl, props, forward_hop=HOP, timestamp_header=True)
    values, original = split_properties(out), split_properties(props)
    assert [v for i, v in enumerate(values) if i != HEADERS_INDEX] == \
        [v for i, v in enumerate(original) if i != HEADERS_INDEX]
    assert list(decode_table(headers_of(out))) == ["x-shovelled", "x-shovelled-timestamp"]


def test_property_overrides_and_header_edits_compose(impl: str) -> None:
    overrides = encode_property_overrides({"app_id": "pumpd", "headers": {"x-from": "config"}})
    out = relayed_props(impl, raw_props(table(*EVERY_TYPE), app_id="orig", priority=4),
                        property_overrides=overrides, forward_hop=HOP)
    props = pika.spec.BasicProperties()
    props.decode(out)
    assert (props.app_id, props.priority) == ("pumpd", 4)
    # the plugin's order: publish_properties replace the headers, then the hop goes in
    assert list(decode_table(headers_of(out))) == ["x-from", "x-shovelled"]


def test_a_non_array_x_shovelled_moves_to_x_invalid_headers_as_the_plugin_does(impl: str) -> None:
    original = table(entry("x-shovelled", longstr(b"junk")), entry("k", b"b\x02"))
    out = decode_table(headers_of(relayed_props(impl, raw_props(original), forward_hop=HOP)))
    assert out["x-shovelled"] == [dict(HOP_FIELDS)]
    assert out["x-invalid-headers"] == {"x-shovelled": ["junk"]}
    assert out["k"] == 2


def test_headers_pushed_over_frame_max_by_the_hop_make_the_message_undeliverable(impl: str) -> None:
    props = raw_props(table(entry("pad", longstr(b"p" * (4096 - 20 - 20)))))
    assert len(props) + 20 <= 4096
    r = relay_class(impl)(source_channel=SRC, dest_channel=DST, dest_frame_max=4096,
                          ack_mode=ACK_MODE_ON_CONFIRM, forward_hop=HOP)
    r.feed_source(deliver(7, b"m", props) + deliver(8, b"n", raw_props(None)))
    tag, _, _, _, kept_props, body, reason = r.take_undeliverable()
    assert (tag, kept_props, body) == (7, props, b"m")
    assert "exceeds the destination's frame_max 4096" in reason


def test_uri_without_credentials_is_the_plugins_spelling() -> None:
    assert uri_without_credentials(parse_uri("amqp://u:secret@h.example:5673/v%2Fx?heartbeat=5")) \
        == "amqp://h.example:5673/v%2Fx"
    assert uri_without_credentials(parse_uri("amqps://u@h/")) == "amqps://h:5671/"


def test_hop_fields_follow_the_shovel_form() -> None:
    src, dst = parse_uri("amqp://u:p@h:1/va"), parse_uri("amqp://u:p@k:2/vb")
    dyn = shovel("d", **{"src-uri": "amqp://u:p@h:1/va", "src-exchange": "ev",
                         "src-exchange-key": "k.#", "dest-uri": "amqp://u:p@k:2/vb",
                         "dest-exchange": "x"})
    assert [k for k, _ in hop_fields(dyn, src, dst, "amq.gen-1")] == [
        "shovelled-by", "shovel-type", "shovel-name", "shovel-vhost", "src-uri", "dest-uri",
        "src-exchange", "src-exchange-key", "dest-exchange"]
    static = shovel("st", sources={"broker": "amqp://u:p@h:1/va"},
                    destinations={"broker": "amqp://u:p@k:2/vb"}, queue="q",
                    publish_fields={"exchange": "x"})
    assert dict(hop_fields(static, src, dst, "q")) == {
        "shovelled-by": f"pumpd@{socket.gethostname()}", "shovel-type": "static",
        "shovel-name": "st", "src-uri": "amqp://h:1/va", "dest-uri": "amqp://k:2/vb"}


# -- end to end ----------------------------------------------------------------------------------


class RawClient:
    """A minimal AMQP 0-9-1 client on pamqp's codec that writes and reads content headers as
    raw bytes, so every field type goes through exactly as written (pika cannot write B, L, d, f,
    u, i and decimals with places, and re-encodes what it reads)."""

    def __init__(self, uri: str) -> None:
        u = parse_uri(uri)
        self.sock = socket.create_connection((u.effective_host, u.port), timeout=10)
        self.buf = b""
        self.sock.sendall(pamqp.frame.marshal(pamqp.header.ProtocolHeader(), 0))
        self.expect(cmd.Connection.Start)
        self.send(0, cmd.Connection.StartOk(
            client_properties={"product": "pumpd test raw client"}, mechanism="PLAIN",
            response=f"\0{u.username}\0{u.password}", locale="en_US"))
        tune = self.expect(cmd.Connection.Tune)
        self.send(0, cmd.Connection.TuneOk(tune.channel_max, tune.frame_max, 0))
        self.send(0, cmd.Connection.Open(u.vhost))
        self.expect(cmd.Connection.OpenOk)
        self.send(1, cmd.Channel.Open())
        self.expect(cmd.Channel.OpenOk)
        self.send(1, cmd.Confirm.Select())
        self.expect(cmd.Confirm.SelectOk)

    def send(self, channel: int, method: Any) -> None:
        self.sock.sendall(pamqp.frame.marshal(method, channel))

    def read_frame(self) -> tuple[int, bytes]:
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack_from(">I", self.buf, 3)[0]
                if len(self.buf) >= 8 + size:
                    raw, self.buf = self.buf[: 8 + size], self.buf[8 + size :]
                    return raw[0], raw
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.buf += chunk

    def expect(self, kind: type) -> Any:
        ftype, raw = self.read_frame()
        assert ftype == 1, f"frame type {ftype}"
        value = pamqp.frame.unmarshal(raw)[2]
        assert isinstance(value, kind), value
        return value

    def publish(self, queue: str, props: bytes, body: bytes) -> None:
        self.send(1, cmd.Basic.Publish(exchange="", routing_key=queue))
        self.sock.sendall(frame(FRAME_HEADER, 1, content_header_payload(len(body), props))
                          + frame(FRAME_BODY, 1, body))
        self.expect(cmd.Basic.Ack)

    def get(self, queue: str, timeout: float = 30) -> tuple[bytes, bytes] | None:
        """(raw properties, body) of one message taken from ``queue``, waiting for it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.send(1, cmd.Basic.Get(queue=queue, no_ack=True))
            _, raw = self.read_frame()
            if isinstance(pamqp.frame.unmarshal(raw)[2], cmd.Basic.GetEmpty):
                time.sleep(0.1)
                continue
            _, header = self.read_frame()
            size = struct.unpack_from(">Q", header, 11)[0]
            body = b""
            while len(body) < size:
                _, part = self.read_frame()
                body += part[7:-1]
            return header[19:-1], body
        return None

    def declare(self, queue: str) -> None:
        self.send(1, cmd.Queue.Declare(queue=queue, durable=True))
        self.expect(cmd.Queue.DeclareOk)

    def close(self) -> None:
        self.sock.close()


async def _aiormq_get(uri: str, queue: str, timeout: float = 30) -> dict[str, Any]:
    """The headers of one message taken from ``queue`` by aiormq, as it decodes them."""
    connection = await aiormq.connect(uri)
    try:
        channel = await connection.channel()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = await channel.basic_get(queue, no_ack=True)
            if isinstance(message.delivery, cmd.Basic.GetOk):
                return dict(message.header.properties.headers or {})
            await asyncio.sleep(0.1)
        raise AssertionError(f"nothing arrived in {queue}")
    finally:
        await connection.close()


def _plugin_shovel(node: LocalNode, vhost: str, name: str, value: dict[str, Any]) -> None:
    import json

    node.ctl("set_parameter", "-p", vhost, "shovel", name, json.dumps(value))


def test_end_to_end_every_type_arrives_intact_and_the_hop_matches_the_plugins(
    node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    client = RawClient(uri)
    try:
        for q in ("in", "out", "in-plugin", "out-plugin"):
            client.declare(q)
        props = raw_props(table(*EVERY_TYPE), message_id="m-1", delivery_mode=2)
        base = {"src-uri": uri, "dest-uri": uri, "dest-add-forward-headers": True,
                "dest-add-timestamp-header": True}
        _plugin_shovel(node_a, vhost_a, "fwd", {**base, "src-queue": "in-plugin",
                                                "dest-queue": "out-plugin"})
        s = shovel("fwd", **base, **{"src-queue": "in", "dest-queue": "out"})
        with running(s) as pumps:
            pumps.wait_for(lambda: pumps.status("fwd").state == State.RUNNING, 30, "running")
            client.publish("in", props, b"payload")
            client.publish("in", props, b"payload")
            client.publish("in-plugin", props, b"payload")
            got = client.get("out")
            seen_by_aiormq = asyncio.run(_aiormq_get(uri, "out"))
            got_plugin = client.get("out-plugin")
        node_a.ctl("clear_parameter", "-p", vhost_a, "shovel", "fwd")
    finally:
        client.close()
    assert got is not None and got_plugin is not None, "not forwarded"
    out_props, body = got
    assert body == b"payload"
    headers = headers_of(out_props)
    originals = entries_by_key(table(*EVERY_TYPE))
    arrived = entries_by_key(headers)
    for key, raw in originals.items():
        assert arrived[key] == raw, key  # the same type and value, to the byte
    values = split_properties(out_props)
    assert values[:HEADERS_INDEX] + values[HEADERS_INDEX + 1:] == \
        [v for i, v in enumerate(split_properties(props)) if i != HEADERS_INDEX]
    decoded = decode_table(headers)
    for key, value in EXPECTED_VALUES.items():
        assert decoded[key] == value, key
        assert seen_by_aiormq[key] == value, key
        assert type(seen_by_aiormq[key]) is type(value), key
    (hop,) = decoded["x-shovelled"]
    plugin_headers = decode_table(headers_of(got_plugin[0]))
    (plugin_hop,) = plugin_headers["x-shovelled"]
    assert list(hop) == list(plugin_hop)  # key for key, in the plugin's order
    assert hop == {**plugin_hop, "shovelled-by": f"pumpd@{socket.gethostname()}",
                   "src-queue": "in", "dest-queue": "out"}
    assert hop["src-uri"] == f"amqp://127.0.0.1:{node_a.amqp_port}/{vhost_a}"
    stamp = [e for e in table_entries(headers) if e[0] == b"x-shovelled-timestamp"]
    assert [headers[vpos] for _, _, vpos, _ in stamp] == [ord("l")]


def test_end_to_end_a_second_hop_goes_first(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    client = RawClient(uri)
    try:
        for q in ("in", "mid", "out"):
            client.declare(q)
        first = shovel("hop-1", **{"src-uri": uri, "src-queue": "in", "dest-uri": uri,
                                   "dest-queue": "mid", "dest-add-forward-headers": True})
        second = shovel("hop-2", **{"src-uri": uri, "src-queue": "mid", "dest-uri": uri,
                                    "dest-queue": "out", "dest-add-forward-headers": True,
                                    "dest-add-timestamp-header": True})
        with running(first, second) as pumps:
            for name in ("hop-1", "hop-2"):
                pumps.wait_for(lambda n=name: pumps.status(n).state == State.RUNNING, 30, name)
            client.publish("in", raw_props(table(*EVERY_TYPE)), b"twice")
            got = client.get("out")
    finally:
        client.close()
    assert got is not None, "not forwarded"
    headers = headers_of(got[0])
    arrived = entries_by_key(headers)
    for key, raw in entries_by_key(table(*EVERY_TYPE)).items():
        assert arrived[key] == raw, key
    hops = decode_table(headers)["x-shovelled"]
    assert [(h["shovel-name"], h["src-queue"], h["dest-queue"]) for h in hops] == [
        ("hop-2", "mid", "out"), ("hop-1", "in", "mid")]
