"""AMQP frames as pika writes them (the independent codec the relay tests check against), and
the one place that writes a property list pika cannot (raw bytes in a content header)."""

from __future__ import annotations

from typing import Any

import pika
import pika.frame
import pika.spec
from pumpd.dataplane.frames import FRAME_HEADER, content_header_payload, frame


def method(channel: int, m: Any) -> bytes:
    """One method frame: ``m`` is a ``pika.spec`` method, e.g. ``pika.spec.Basic.Ack(3)``."""
    return pika.frame.Method(channel, m).marshal()


def raw_properties(props: pika.BasicProperties) -> bytes:
    """The property list of a content header, as pika encodes it (flags and values)."""
    return pika.frame.Header(0, 0, props).marshal()[19:-1]


def deliver_frames(tag: int, body: bytes, props: pika.BasicProperties | bytes | None = None, *,
                   channel: int, exchange: str = "ex", routing_key: str = "rk",
                   redelivered: bool = False, consumer_tag: str = "ctag-1",
                   frame_max: int = 131072) -> list[bytes]:
    """The frames of one ``basic.deliver``: method, content header (``props`` encoded by pika,
    or a raw property list as it is), body split at ``frame_max``."""
    out = [method(channel, pika.spec.Basic.Deliver(
        consumer_tag=consumer_tag, delivery_tag=tag, redelivered=redelivered,
        exchange=exchange, routing_key=routing_key))]
    if isinstance(props, bytes):
        out.append(frame(FRAME_HEADER, channel, content_header_payload(len(body), props)))
    else:
        out.append(pika.frame.Header(channel, len(body), props or pika.BasicProperties()).marshal())
    step = frame_max - 8
    out += [pika.frame.Body(channel, body[i:i + step]).marshal() for i in range(0, len(body), step)]
    return out
