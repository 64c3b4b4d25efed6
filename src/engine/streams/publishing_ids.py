"""Where a stream destination's publishing ids come from, the numbers by which the broker drops
a message a named producer sent before.

RabbitMQ keeps, per stream and named producer (its *reference*), the highest publishing id it
stored, and confirms without storing any message whose id is not above it. pumpd names its
producer after the shovel's position and takes each message's id from the message itself, so
that a message sent again after a fault carries the id it had the first time:

- ``source-offset`` (a stream source): the message's offset in the source stream, plus 1. The
  1 because the broker answers 0 when asked about a producer it never saw: offset 0 must be
  told from nothing stored. Asked at each start, the broker's answer N is thus the offset to
  resume the source at (:meth:`PublishingIds.resume_offset`).
- ``header:NAME`` / ``message_id``: an integer the publisher of the source messages put in a
  header (an application property of an AMQP 1.0 message) or the message id, strictly
  increasing per source; a message without one, or not above the previous message's, is not
  forwarded (:class:`~pumpd.engine.endpoint.Unforwardable`, naming the property).
- ``none``: no producer name, no deduplication: ids number the messages of one connection
  (at-least-once, as every other destination).
"""

from __future__ import annotations

import struct
from typing import Any

from ...amqp10.codec import DecodeError
from ...amqp10.message import Message, complete
from ...amqp10.values import Symbol
from ...dataplane.api import Delivered
from ...dataplane.properties import (
    HEADERS_INDEX,
    MESSAGE_ID_INDEX,
    FrameError,
    split_properties,
    table_entries,
)
from ..endpoint import Unforwardable

__all__ = ["MODES", "PublishingIds", "parse_mode"]

SOURCE_OFFSET = "source-offset"
NONE = "none"
MESSAGE_ID = "message_id"
HEADER_PREFIX = "header:"
#: the values of the publishing-id clause ("header:NAME" names a header)
MODES = (SOURCE_OFFSET, NONE, MESSAGE_ID, f"{HEADER_PREFIX}NAME")
_OFFSET_HEADER = "x-stream-offset"
_MAX_ID = (1 << 64) - 1
# 0-9-1 header field types that hold an integer: format and size
_INTEGERS = {ord("b"): ">b", ord("B"): ">B", ord("s"): ">h", ord("u"): ">H", ord("I"): ">i",
             ord("i"): ">I", ord("l"): ">q", ord("L"): ">Q"}


def parse_mode(text: str) -> tuple[str, str]:
    """``(mode, header name)`` of a publishing-id clause value.

    :raises ValueError: naming the value and the ones allowed
    """
    if text in (SOURCE_OFFSET, NONE, MESSAGE_ID):
        return text, ""
    if text.startswith(HEADER_PREFIX) and len(text) > len(HEADER_PREFIX):
        return "header", text[len(HEADER_PREFIX):]
    raise ValueError(f"{text!r} is not a publishing id: give {', '.join(MODES)}")


class PublishingIds:
    """The publishing id of each message forwarded in one session (see the module docstring)."""

    def __init__(self, mode: str) -> None:
        self.mode, self.header = parse_mode(mode)
        self._last = 0 if self.mode == NONE else -1

    @property
    def deduplicates(self) -> bool:
        """Whether the producer is named: the broker drops what it stored before."""
        return self.mode != NONE

    def resume_offset(self, sequence: int) -> int | None:
        """The source offset to resume at, from the broker's last stored id (None: nothing
        stored, or ids that are not source offsets)."""
        if self.mode != SOURCE_OFFSET or sequence == 0:
            return None
        return sequence

    def next(self, message: Delivered | Message, offset: int | None = None) -> int:
        """The id of ``message``; ``offset``: its source offset when the caller read it already.

        :raises Unforwardable: it has none, or one not above the previous message's
        """
        if self.mode == NONE:
            self._last += 1
            return self._last
        if self.mode == SOURCE_OFFSET:
            if offset is None:
                offset = _integer(message, "header", _OFFSET_HEADER)
            if offset is None:
                raise Unforwardable(f"publishing id: the message has no {_OFFSET_HEADER} (is the "
                                    "source a stream?)")
            value, what = offset + 1, f"source offset {offset} + 1"
        else:
            found = _integer(message, self.mode, self.header)
            name = "message_id" if self.mode == MESSAGE_ID else f"header {self.header!r}"
            if found is None:
                raise Unforwardable(f"publishing id: the message has no integer {name}")
            value, what = found, f"{name} {found}"
        if not 0 <= value <= _MAX_ID:
            raise Unforwardable(f"publishing id: {what} is outside 0..2^64-1")
        if value <= self._last:
            raise Unforwardable(f"publishing id: {what} is not above the previous message's "
                                f"{self._last}: the ids must increase strictly")
        self._last = value
        return value


def _integer(message: Delivered | Message, kind: str, name: str) -> int | None:
    """An integer a message carries: a header (0-9-1) or an application property / message
    annotation (1.0) ``name``, or its message id (``kind`` "message_id")."""
    if isinstance(message, Delivered):
        try:
            props = split_properties(message.properties)
        except FrameError:
            return None
        if kind == MESSAGE_ID:
            raw = props[MESSAGE_ID_INDEX]
            return None if raw is None else _decimal(raw[1:])
        table = props[HEADERS_INDEX]
        return None if table is None else _header(table, name.encode())
    if kind == "header" and name == _OFFSET_HEADER:
        value: Any = (message.message_annotations or {}).get(Symbol(name))
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
    try:
        full = complete(message)
    except DecodeError:  # an undecodable bare message carries nothing usable
        return None
    if kind == MESSAGE_ID:
        value = full.properties.message_id if full.properties is not None else None
    else:
        value = (full.application_properties or {}).get(name)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return _decimal(value.encode())
    return None


def _decimal(raw: bytes) -> int | None:
    text = raw.decode("ascii", "replace")
    return int(text) if text.isdigit() and len(text) <= 20 else None


def _header(table: bytes, key: bytes) -> int | None:
    try:
        for k, _start, vpos, _end in table_entries(table):
            if k == key:
                fmt = _INTEGERS.get(table[vpos])
                if fmt is None:
                    return None
                return int(struct.unpack_from(fmt, table, vpos + 1)[0])
    except (FrameError, ValueError, struct.error):
        return None
    return None
