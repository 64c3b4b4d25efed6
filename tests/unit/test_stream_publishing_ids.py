"""A stream destination's publishing ids: a stream source's offset plus 1, a header or the
message id strictly increasing (a missing or repeated one refused by name), or a plain count;
and the form a 0-9-1 message is stored in, which RabbitMQ 3.x reads back over 0-9-1."""

from __future__ import annotations

import pytest
from pumpd.amqp10.message import Message, Properties, decode_message
from pumpd.amqp10.values import Int, Symbol, Timestamp, UByte
from pumpd.dataplane.api import Delivered
from pumpd.dataplane.properties import encode_properties
from pumpd.engine.endpoint import Unforwardable
from pumpd.engine.queue_names import producer_reference
from pumpd.engine.streams.publishing_ids import PublishingIds, parse_mode
from pumpd.streams.amqp091_form import UnstorableMessage, stored_form
from pumpd.streams.routing import HASH_START, murmur3_32, partition


def _delivered(**props: object) -> Delivered:
    return Delivered(delivery_tag=1, redelivered=False, exchange=b"", routing_key=b"s",
                     properties=encode_properties(props), body=b"b", reason="")


def test_source_offsets_are_the_ids_plus_one_and_the_brokers_answer_is_where_to_resume() -> None:
    ids = PublishingIds("source-offset")
    assert [ids.next(_delivered(headers={"x-stream-offset": o})) for o in (0, 1, 7)] == [1, 2, 8]
    assert ids.resume_offset(0) is None  # nothing stored
    assert ids.resume_offset(8) == 8  # offset 7 stored: resume at 8
    one = Message(message_annotations={Symbol("x-stream-offset"): 9}, body=[b"x"])
    assert ids.next(one) == 10
    with pytest.raises(Unforwardable, match="has no x-stream-offset"):
        ids.next(_delivered())


def test_a_header_must_carry_a_strictly_increasing_integer() -> None:
    ids = PublishingIds("header:seq")
    assert ids.next(_delivered(headers={"seq": 3})) == 3
    with pytest.raises(Unforwardable, match="no integer header 'seq'"):
        ids.next(_delivered(headers={"other": 4}))
    with pytest.raises(Unforwardable, match="header 'seq' 3 is not above the previous "
                                            "message's 3"):
        ids.next(_delivered(headers={"seq": 3}))
    assert ids.next(_delivered(headers={"seq": 2**40})) == 2**40
    amqp10 = Message(application_properties={"seq": 2**41}, body=[b"x"])
    assert ids.next(amqp10) == 2**41


def test_the_message_id_as_a_decimal_number() -> None:
    ids = PublishingIds("message_id")
    assert ids.next(_delivered(message_id="12")) == 12
    with pytest.raises(Unforwardable, match="no integer message_id"):
        ids.next(_delivered(message_id="abc"))
    assert ids.next(Message(properties=Properties(message_id=20), body=[b"x"])) == 20


def test_none_counts_and_names_no_producer() -> None:
    ids = PublishingIds("none")
    assert not ids.deduplicates
    assert [ids.next(_delivered()) for _ in range(3)] == [1, 2, 3]
    assert ids.resume_offset(5) is None


@pytest.mark.parametrize("bad", ["", "offset", "header:", "id"])
def test_an_unknown_mode_is_named(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a publishing id"):
        parse_mode(bad)


def test_the_stored_form_is_rabbitmq_3s_form_of_a_091_publish() -> None:
    props = encode_properties({
        "content_type": "text/plain", "headers": {"n": 7, "x-c": "k", "x-stream-offset": 4},
        "delivery_mode": 2, "priority": 3, "expiration": "60000", "message_id": "id-1",
        "timestamp": 1_700_000_000, "type": "kind", "user_id": "guest", "app_id": "app"})
    m = decode_message(stored_form(b"ex", b"rk", props, b"body"))
    assert m.header is None
    assert m.message_annotations == {
        Symbol("x-routing-key"): "rk", Symbol("x-exchange"): "ex",
        Symbol("x-basic-priority"): UByte(3), Symbol("x-basic-delivery-mode"): UByte(2),
        Symbol("x-basic-expiration"): "60000"}
    assert m.properties is not None
    assert (m.properties.message_id, m.properties.user_id, m.properties.content_type,
            m.properties.creation_time) == ("id-1", b"guest", Symbol("text/plain"),
                                            Timestamp(1_700_000_000_000))
    assert m.application_properties == {"x-basic-type": "kind", "x-basic-app-id": "app",
                                        "n": Int(7), "x-c": "k"}
    assert m.body == [b"body"]


@pytest.mark.parametrize(("headers", "named"), [
    ({"t": {"k": 1}}, "headers['t']: a table"), ({"a": [1]}, "headers['a']: an array")])
def test_what_a_3x_stream_cannot_store_is_refused_by_name(headers: dict[str, object],
                                                          named: str) -> None:
    with pytest.raises(UnstorableMessage, match=named.replace("[", r"\[").replace("]", r"\]")):
        stored_form(b"", b"q", encode_properties({"headers": headers}), b"x")


@pytest.mark.parametrize("key", [b"", b"a", b"ab", b"abc", b"abcd", b"key-7", "ünï".encode(),
                                 bytes(range(37))])
def test_the_routing_hash_is_the_one_rabbitmqs_stream_clients_use(key: bytes) -> None:
    mmh3 = pytest.importorskip("mmh3")  # rstream's dependency: the clients' own hash
    assert murmur3_32(key) == mmh3.hash(key, HASH_START, signed=False)
    assert partition(key, 3) == mmh3.hash(key, HASH_START, signed=False) % 3


# RabbitMQ's .NET stream client's test vectors of its hash routing over three partitions: they
# hold without mmh3 installed
@pytest.mark.parametrize(("key", "index"), [
    ("hello1", 1), ("hello2", 0), ("hello3", 1), ("hello4", 2), ("hello5", 0), ("hello6", 2),
    ("hello7", 0), ("hello8", 1), ("hello9", 0), ("hello10", 2), ("hello88", 1)])
def test_known_routing_keys_go_where_rabbitmqs_clients_send_them(key: str, index: int) -> None:
    assert partition(key.encode(), 3) == index


def test_the_producer_name_is_the_positions_and_fits_255_bytes() -> None:
    assert producer_reference(None, "orders", 0) == "pumpd.producer.orders.0"
    assert producer_reference("eu", "orders", 2) == "pumpd.producer.eu.orders.2"
    long = producer_reference("eu", "ö" * 300, 1)
    assert len(long.encode()) <= 255 and long.endswith(".1")
    assert long != producer_reference("eu", "ö" * 299 + "x", 1)
