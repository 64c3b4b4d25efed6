"""AMQP 0-9-1 wire constants and the frames pumpd writes itself (acks, rejects, publishes,
connection.close). No I/O here. Properties and field tables are :mod:`.properties`' job.
"""

from __future__ import annotations

import struct

# The property and table codec is properties.py's. These names are re-exported because the
# native plane reads them from this module (``_fastpath.pyx``: its constant checks at import,
# and the rare header edit it leaves to Python).
from .properties import (
    FIELD_SIZES,
    HEADERS_INDEX,
    LONG,
    PROPERTY_KINDS,
    FrameError,
    UnparseableProperties,
    edit_properties,
    shortstr,
)

__all__ = ["FIELD_SIZES", "HEADERS_INDEX", "LONG", "PROPERTY_KINDS", "FrameError",
           "UnparseableProperties", "edit_properties", "shortstr"]

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_HEADER_SIZE = 7  # type(1) channel(2) size(4)
FRAME_OVERHEAD = 8  # header + end octet

CLASS_BASIC = 60
BASIC_PUBLISH = 40
BASIC_RETURN = 50
BASIC_DELIVER = 60
BASIC_ACK = 80
BASIC_REJECT = 90
BASIC_NACK = 120

ACK_MODE_NO_ACK = 0
ACK_MODE_ON_PUBLISH = 1
ACK_MODE_ON_CONFIRM = 2

FRAME_HEAD = struct.Struct(">BHI")  # frame type, channel, payload size
METHOD_ID = struct.Struct(">HH")  # class id, method id: the start of a method payload
U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")  # read by _fastpath.pyx


def frame(frame_type: int, channel: int, payload: bytes | bytearray | memoryview) -> bytes:
    return FRAME_HEAD.pack(frame_type, channel, len(payload)) + bytes(payload) + b"\xce"


# The reply code of connection.close for a frame that breaks the framing rules (RabbitMQ's too).
CONNECTION_CLOSE_FRAME_ERROR = 501


def connection_close_frame(reply_code: int, reply_text: str) -> bytes:
    """connection.close (channel 0) with ``reply_code`` and the text cut to a short string."""
    text = reply_text.encode("utf-8", "replace")[:255]
    payload = struct.pack(">HHH", 10, 50, reply_code) + shortstr(text) + struct.pack(">HH", 0, 0)
    return frame(FRAME_METHOD, 0, payload)


def basic_ack_frame(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    payload = struct.pack(">HHQB", CLASS_BASIC, BASIC_ACK, delivery_tag, 1 if multiple else 0)
    return frame(FRAME_METHOD, channel, payload)


def basic_reject_frame(channel: int, delivery_tag: int, requeue: bool) -> bytes:
    payload = struct.pack(">HHQB", CLASS_BASIC, BASIC_REJECT, delivery_tag, 1 if requeue else 0)
    return frame(FRAME_METHOD, channel, payload)


def basic_nack_frame(channel: int, delivery_tag: int, multiple: bool, requeue: bool) -> bytes:
    bits = (1 if multiple else 0) | (2 if requeue else 0)
    payload = struct.pack(">HHQB", CLASS_BASIC, BASIC_NACK, delivery_tag, bits)
    return frame(FRAME_METHOD, channel, payload)


def basic_publish_payload(exchange: bytes, routing_key: bytes, mandatory: bool) -> bytes:
    return (
        struct.pack(">HHH", CLASS_BASIC, BASIC_PUBLISH, 0)
        + shortstr(exchange)
        + shortstr(routing_key)
        + (b"\x01" if mandatory else b"\x00")
    )


def content_header_payload(body_size: int, raw_properties: bytes) -> bytes:
    """``raw_properties`` is the property-flags word(s) followed by the property values."""
    return struct.pack(">HHQ", CLASS_BASIC, 0, body_size) + raw_properties
