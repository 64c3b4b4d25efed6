"""An AMQP 1.0 message: its sections, and the raw bytes it came as.

The sections are those of the AMQP 1.0 messaging layer (§3.2): header, delivery annotations,
message annotations, properties, application properties, the body (data sections, amqp-sequence
sections, or one amqp-value) and footer. :attr:`Message.raw` keeps the encoded message as
received: a destination that changes nothing sends it as it came, byte for byte; one that adds
annotations re-encodes only the sections before the bare message (header, delivery and message
annotations) and sends the bare message's bytes as they came (:attr:`Message.bare`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .values import Symbol, ULong

__all__ = ["AmqpSequence", "AmqpValue", "Header", "Message", "Properties"]


@dataclass(slots=True)
class Header:
    """The header section; a field left at None is absent (its default applies)."""

    durable: bool | None = None
    priority: int | None = None  # ubyte
    ttl: int | None = None  # milliseconds (uint)
    first_acquirer: bool | None = None
    delivery_count: int | None = None  # uint


@dataclass(slots=True)
class Properties:
    """The properties section (immutable part of the bare message); None: absent."""

    message_id: Any = None  # ulong, uuid, binary or string
    user_id: bytes | None = None
    to: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    correlation_id: Any = None  # as message_id
    content_type: Symbol | None = None
    content_encoding: Symbol | None = None
    absolute_expiry_time: int | None = None  # timestamp, ms
    creation_time: int | None = None  # timestamp, ms
    group_id: str | None = None
    group_sequence: int | None = None  # sequence-no (uint)
    reply_to_group_id: str | None = None


@dataclass(frozen=True, slots=True)
class AmqpSequence:
    """One amqp-sequence body section: a list of values."""

    items: list[Any]


@dataclass(frozen=True, slots=True)
class AmqpValue:
    """The amqp-value body section: one value of any type."""

    value: Any


@dataclass(slots=True)
class Message:
    """See the module docstring. ``body`` is a list of ``bytes`` (data sections), of
    :class:`AmqpSequence`, or one :class:`AmqpValue`. Annotation maps are keyed by
    :class:`Symbol` (or :class:`ULong`)."""

    header: Header | None = None
    delivery_annotations: dict[Symbol | ULong, Any] | None = None
    message_annotations: dict[Symbol | ULong, Any] | None = None
    properties: Properties | None = None
    application_properties: dict[str, Any] | None = None
    body: list[Any] = field(default_factory=list)
    footer: dict[Symbol | ULong, Any] | None = None
    #: the encoded message as received (None: built here)
    raw: bytes | None = None
    #: where the bare message starts in ``raw`` (after header and annotations)
    bare_offset: int = 0

    @property
    def bare(self) -> bytes | None:
        """The bare message's bytes as received (properties to the end of the body, footer
        included when present: a footer is outside the bare message but follows it)."""
        return None if self.raw is None else self.raw[self.bare_offset:]
