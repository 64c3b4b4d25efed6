"""Forward and timestamp headers on bytes, through both relays: spliced into the content header,
every entry the publisher wrote kept byte for byte, the hop table as the Shovel plugin builds
it."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

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

from tests.support.harness import shovel
from tests.support.header_tables import (
    EVERY_TYPE,
    EXPECTED_VALUES,
    array,
    decode_table,
    entries_by_key,
    entry,
    headers_of,
    longstr,
    raw_props,
    table,
)
from tests.support.impls import IMPLEMENTATIONS, relay_class

SRC, DST = 1, 1


HOP_FIELDS = [("shovelled-by", "pumpd@host"), ("shovel-type", "dynamic"),
              ("shovel-name", "s1"), ("shovel-vhost", "v"), ("src-uri", "amqp://a:1/v"),
              ("dest-uri", "amqp://b:2/v"), ("src-queue", "in"), ("dest-queue", "out")]


HOP = encode_hop(HOP_FIELDS)


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


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request: pytest.FixtureRequest) -> str:
    return str(request.param)


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

