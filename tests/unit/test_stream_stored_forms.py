"""StoredForms: the stored form of a stream source's deliveries with a memory of the ones that
differ only by their offset. It must give exactly what the full conversion gives, and the offset
the headers carry, whatever the headers hold; pure data, no broker."""

from __future__ import annotations

from typing import Any

import pytest
from pumpd.dataplane.properties import encode_properties
from pumpd.streams.amqp091_form import FORMS_MAX, StoredForms, UnstorableMessage, stored_form

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
def test_the_form_and_offset_are_the_full_conversions_remembered_or_not(
        extra: dict[str, Any], body: bytes) -> None:
    forms = StoredForms()
    for offset in (0, 1, 2**40, 5, 2**63 - 1):  # the first is converted, the others remembered
        props = _props(offset, **extra)
        assert forms.of(b"ex", b"rk", props, body) == (
            offset, stored_form(b"ex", b"rk", props, body))
    assert len(forms._prefixes) == 1


def test_a_header_value_that_looks_like_an_offset_is_not_taken_for_one() -> None:
    # a string header whose last bytes are an offset entry's: no x-stream-offset at all
    fake = (_ENTRY + (7).to_bytes(8, "big")).decode("latin-1")
    forms = StoredForms()
    for _ in range(2):
        props = _props(None, headers={"z": fake})
        assert forms.of(b"", b"q", props, b"b") == (None, stored_form(b"", b"q", props, b"b"))
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
