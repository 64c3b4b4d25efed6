"""How a shovel's clauses shape each re-published message: the relay's options.

publish_fields and publish_properties become fixed values the relay splices in; the dynamic-shovel
extras ``dest-add-forward-headers`` and ``dest-add-timestamp-header`` need a per-message header
rewrite, which runs in Python (a slower path, taken only by shovels that ask for it).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pika.data

from .frames import (
    ACK_MODE_NO_ACK,
    ACK_MODE_ON_CONFIRM,
    ACK_MODE_ON_PUBLISH,
    HEADERS_INDEX,
    encode_property_overrides,
    join_properties,
    split_properties,
)
from .model import AckMode, BrokerURI, ShovelConfig

ACK_MODES = {
    AckMode.NO_ACK: ACK_MODE_NO_ACK,
    AckMode.ON_PUBLISH: ACK_MODE_ON_PUBLISH,
    AckMode.ON_CONFIRM: ACK_MODE_ON_CONFIRM,
}


def _decode_headers(encoded: bytes | None) -> dict[str, Any]:
    if encoded is None:
        return {}
    table, _ = pika.data.decode_table(encoded, 0)
    return dict(table)


def _encode_headers(headers: dict[str, Any]) -> bytes:
    pieces: list[bytes] = []
    pika.data.encode_table(pieces, headers)
    return b"".join(pieces)


def header_rewriter(
    cfg: ShovelConfig, source: BrokerURI, destination: BrokerURI, queue: str
) -> Callable[[bytes], bytes] | None:
    """The per-message header rewrite the shovel asks for, or None.

    Mirrors the plugin: forward headers append a table describing this hop to the
    ``x-shovelled`` array (earlier hops are kept), and both options set
    ``x-shovelled-timestamp`` to the time of shovelling, in seconds.
    """
    if not (cfg.add_forward_headers or cfg.add_timestamp_header):
        return None
    hop = {
        "shovelled-by": f"pumpd@{socket.gethostname()}",
        "shovel-type": "pumpd",
        "shovel-name": cfg.name,
        "shovel-vhost": destination.vhost,
        "src-uri": source.redacted(),
        "src-queue": queue,
        "dest-uri": destination.redacted(),
    }
    if cfg.publish_exchange is not None:
        hop["dest-exchange"] = cfg.publish_exchange
    if cfg.publish_routing_key is not None:
        hop["dest-exchange-key"] = cfg.publish_routing_key

    def rewrite(raw: bytes) -> bytes:
        values = split_properties(raw)
        headers = _decode_headers(values[HEADERS_INDEX])
        if cfg.add_forward_headers:
            previous = headers.get("x-shovelled")
            headers["x-shovelled"] = (list(previous) if isinstance(previous, list) else []) + [hop]
        headers["x-shovelled-timestamp"] = int(time.time())
        values[HEADERS_INDEX] = _encode_headers(headers)
        return join_properties(values)

    return rewrite


def relay_options(
    cfg: ShovelConfig, source: BrokerURI, destination: BrokerURI, queue: str
) -> dict[str, Any]:
    """Keyword arguments for :class:`pumpd.fastpath.Relay` that follow from the configuration."""
    return {
        "ack_mode": ACK_MODES[cfg.ack_mode],
        "exchange": None if cfg.publish_exchange is None else cfg.publish_exchange.encode(),
        "routing_key": None if cfg.publish_routing_key is None else cfg.publish_routing_key.encode(),
        "property_overrides": encode_property_overrides(cfg.publish_properties),
        "rewrite_properties": header_rewriter(cfg, source, destination, queue),
        "mandatory": cfg.publish_mandatory,
    }
