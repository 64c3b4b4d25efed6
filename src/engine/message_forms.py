"""The two forms a message takes on the generic path, and the AMQP 0-9-1 form of either.

A :class:`~pumpd.engine.endpoint.MessageSource` hands a message in the form of its wire: a
:class:`~pumpd.dataplane.api.Delivered` from AMQP 0-9-1, a :class:`~pumpd.amqp10.message.Message`
from AMQP 1.0. Whatever needs the 0-9-1 form of a 1.0 message (an AMQP 0-9-1 destination; the
undeliverable policy, which logs, parks and dead-letters 0-9-1 messages) gets it here, through
RabbitMQ's own mapping (:mod:`pumpd.amqp10.mapping`), which refuses what it cannot carry
faithfully rather than altering it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..amqp10.message import Message
from ..dataplane.api import Delivered

__all__ = ["AMQP091", "AMQP10", "Amqp091Form", "MappingUnavailable", "amqp091_form",
           "delivered_view", "wire_of"]

AMQP091 = "amqp091"
AMQP10 = "amqp10"
# a property list with no property set: the 0-9-1 form of a message shown by its raw bytes
_NO_PROPERTIES = b"\x00\x00"


class MappingUnavailable(NotImplementedError):
    """This build has no AMQP 1.0 ↔ 0-9-1 mapping (``pumpd.amqp10.mapping``)."""


class Amqp091Form(NamedTuple):
    """A message as AMQP 0-9-1 publishes it: its routing key (None: the message names none),
    its raw property list and its body."""

    routing_key: bytes | None
    properties: bytes
    body: bytes


def _mapping() -> Any:
    """The mapping module, or :class:`MappingUnavailable` naming it."""
    try:
        from ..amqp10 import mapping
    except ImportError as exc:
        raise MappingUnavailable(
            "converting between AMQP 1.0 and AMQP 0-9-1 messages needs the module "
            f"pumpd.amqp10.mapping, which this build does not have ({exc})") from None
    return mapping


def check_mapping() -> None:
    """:raises MappingUnavailable: when a pair of two wires could not convert a message"""
    _mapping()


def wire_of(message: Delivered | Message) -> str:
    return AMQP10 if isinstance(message, Message) else AMQP091


def amqp091_form(message: Delivered | Message) -> Amqp091Form:
    """The 0-9-1 form of ``message``: a Delivered's own fields, a 1.0 message's mapping.

    :raises ValueError: (the mapping's ``UnmappableMessage``) for a 1.0 message with no
        faithful 0-9-1 form, naming what
    :raises MappingUnavailable: for a 1.0 message, in a build without the mapping
    """
    if not isinstance(message, Message):
        return Amqp091Form(message.routing_key, message.properties, message.body)
    mapped = _mapping().to_amqp091(message)
    return Amqp091Form(mapped.routing_key, bytes(mapped.properties), bytes(mapped.body))


def delivered_view(tag: int, redelivered: bool, message: Delivered | Message,
                   reason: str) -> Delivered:
    """``message`` as a :class:`Delivered` with ``reason``, for the undeliverable policy and
    the stream position, which read 0-9-1 messages. A 1.0 message that has no 0-9-1 form (or a
    build without the mapping) is shown by its encoded bytes as the body, with no properties,
    and the reason says so: it is still parked or dead-lettered whole."""
    if not isinstance(message, Message):
        return message._replace(reason=reason)
    try:
        form = amqp091_form(message)
    except (ValueError, MappingUnavailable) as exc:
        shown = f"{reason}; shown as its AMQP 1.0 encoding ({exc})" if reason else reason
        return Delivered(tag, redelivered, b"", b"", _NO_PROPERTIES, message.raw or b"", shown)
    return Delivered(tag, redelivered, b"", form.routing_key or b"", form.properties, form.body,
                     reason)
