"""StoredForms: the stored form of a stream source's deliveries with a memory of the ones that
differ only by their offset. It must give exactly what the full conversion gives (RabbitMQ 3.x's
form or the container form of 3.13 and later), and the offset the headers carry, whatever the
headers hold; pure data, no broker. Then the choice of form by the broker's version, and the
container form itself: the mapping, without the offset header."""

from __future__ import annotations

from typing import Any

import pytest
from pumpd.amqp10.mapping import from_amqp091
from pumpd.amqp10.message import decode_message, encode_message
from pumpd.amqp10.values import Symbol, UByte
from pumpd.dataplane.properties import encode_properties
from pumpd.streams.amqp091_form import (
    FORMS_MAX,
    StoredForms,
    UnstorableMessage,
    container_form,
    container_head,
    stored_form,
    stores_container_form,
)

_ENTRY = b"\x0fx-stream-offsetl"


def _props(offset: int | None, **extra: Any) -> bytes:
    headers = dict(extra.pop("headers", {}))
    if offset is not None:
        headers["x-stream-offset"] = offset  # last, as the broker adds it
    return encode_properties({**({"headers": headers} if headers else {}), **extra})


@pytest.mark.parametrize("extra", [
    {},
    {"content_type": "text/plain", "content_encoding": "gzip", "delivery_mode": 2},
    {"headers": {"a": 1, "b": "x", "c": 2.5, "d": True}, "message_id": "m-1", "priority": 3},
    {"headers": {"big": "y" * 300}, "timestamp": 1700000000, "app_id": "app", "type": "t"},
])
@pytest.mark.parametrize("body", [b"", b"x" * 64, b"y" * 256, b"z" * 70000])
@pytest.mark.parametrize("container", [False, True])
def test_the_form_and_offset_are_the_full_conversions_remembered_or_not(
        extra: dict[str, Any], body: bytes, container: bool) -> None:
    form = container_form if container else stored_form
    forms = StoredForms(container)
    for offset in (0, 1, 2**40, 5, 2**63 - 1):  # the first is converted, the others remembered
        props = _props(offset, **extra)
        assert forms.of(b"ex", b"rk", props, body) == (
            offset, form(b"ex", b"rk", props, body))
    assert len(forms._prefixes) == 1


@pytest.mark.parametrize("container", [False, True])
def test_a_header_value_that_looks_like_an_offset_is_not_taken_for_one(container: bool) -> None:
    # a string header whose last bytes are an offset entry's: no x-stream-offset at all
    fake = (_ENTRY + (7).to_bytes(8, "big")).decode("latin-1")
    form = container_form if container else stored_form
    forms = StoredForms(container)
    for _ in range(2):
        props = _props(None, headers={"z": fake})
        assert forms.of(b"", b"q", props, b"b") == (None, form(b"", b"q", props, b"b"))
    assert forms._prefixes == {}


def test_an_offset_of_another_integer_width_or_elsewhere_is_read_without_the_memory() -> None:
    forms = StoredForms()
    elsewhere = encode_properties({"headers": {"x-stream-offset": 9, "after": "v"}})
    assert forms.of(b"", b"q", elsewhere, b"b") == (9, stored_form(b"", b"q", elsewhere, b"b"))
    assert forms._prefixes == {}


def test_the_exchange_and_routing_key_are_part_of_what_is_remembered() -> None:
    forms = StoredForms()
    props = _props(1)
    forms.of(b"a", b"bc", props, b"x")
    assert forms.of(b"ab", b"c", props, b"x") == (1, stored_form(b"ab", b"c", props, b"x"))
    assert forms.of(b"", b"abc", props, b"x") == (1, stored_form(b"", b"abc", props, b"x"))


def test_the_memory_is_bounded() -> None:
    forms = StoredForms()
    for i in range(FORMS_MAX + 10):
        forms.of(b"", f"q{i}".encode(), _props(i), b"x")
    assert len(forms._prefixes) <= FORMS_MAX


def test_an_unstorable_message_is_refused_remembered_or_not() -> None:
    forms = StoredForms()
    with pytest.raises(UnstorableMessage, match="cluster_id"):
        forms.of(b"", b"q", _props(1, cluster_id="c"), b"x")


@pytest.mark.parametrize("version,container", [
    ("3.10.8", False), ("3.12.14", False), ("3.13.0", True), ("3.13.7", True), ("4.0.5", True),
    ("4.1.0-rc.1", True), ("4.2.0+beta.3", True), ("10.0.0", True), ("", False),
    ("unknown", False), ("4", False), ("3.x.1", False),
])
def test_the_form_follows_the_version_the_broker_gives(version: str, container: bool) -> None:
    assert stores_container_form(version) is container


def test_the_container_form_is_the_mapping_without_the_offset_header() -> None:
    extra = {"headers": {"a": 1, "x-custom": "v"}, "app_id": "app", "type": "t",
             "delivery_mode": 2, "priority": 4, "expiration": "6000", "timestamp": 1700000000}
    got = container_form(b"ex", b"rk", _props(77, **extra), b"body")
    assert got == encode_message(from_amqp091(b"ex", b"rk", _props(None, **extra), b"body"))
    # what RabbitMQ 3.13 and later store for a 0-9-1 publish: the header section, app_id as
    # the group id, type and x- headers as annotations, other headers as application properties
    m = decode_message(got)
    assert m.header is not None and m.header.durable and m.header.priority == UByte(4)
    assert m.header.ttl == 6000
    assert m.properties is not None and m.properties.group_id == "app"
    assert m.message_annotations is not None
    assert m.message_annotations[Symbol("x-basic-type")] == "t"
    assert m.message_annotations[Symbol("x-custom")] == "v"
    assert Symbol("x-stream-offset") not in m.message_annotations
    assert m.application_properties == {"a": 1}
    assert m.body == [b"body"]


def test_an_offset_header_alone_leaves_no_headers_in_the_container_form() -> None:
    assert container_form(b"", b"q", _props(5), b"x") == container_form(
        b"", b"q", encode_properties({}), b"x")


def test_the_container_head_is_the_form_before_its_data_section() -> None:
    props = _props(None, headers={"k": "v"}, message_id="m")
    assert container_head(b"", b"q", props) + b"\x00\x53\x75\xa0\x03abc" == container_form(
        b"", b"q", props, b"abc")


def test_the_container_form_refuses_what_the_mapping_refuses_by_name() -> None:
    with pytest.raises(UnstorableMessage, match="x-amqp-to"):
        container_form(b"", b"q", _props(None, headers={"x-amqp-to": 5}), b"x")
