"""How a shovel's clauses shape each re-published message: the relay's options.

publish_fields and publish_properties become fixed values the relay splices in. The
dynamic-shovel extras ``dest-add-forward-headers`` and ``dest-add-timestamp-header`` are spliced
into each message's headers table by the relay too (:func:`pumpd.dataplane.properties.edit_headers` is the
specification): this module only builds, once per session, the table describing this hop, the
way the Shovel plugin builds it (rabbit_amqp091_shovel / rabbit_shovel_parameters and
rabbit_shovel_util:update_headers in rabbitmq-server's deps/rabbitmq_shovel).
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import quote

from ..config.model import AckMode, Amqp10URI, BrokerURI, Declaration, ShovelConfig
from ..dataplane.frames import ACK_MODE_NO_ACK, ACK_MODE_ON_CONFIRM, ACK_MODE_ON_PUBLISH
from ..dataplane.properties import encode_hop, encode_property_overrides

ACK_MODES = {
    AckMode.NO_ACK: ACK_MODE_NO_ACK,
    AckMode.ON_PUBLISH: ACK_MODE_ON_PUBLISH,
    AckMode.ON_CONFIRM: ACK_MODE_ON_CONFIRM,
}


def uri_without_credentials(uri: BrokerURI | Amqp10URI) -> str:
    """The URI as amqp_uri:remove_credentials writes it for the forward headers: scheme, host,
    port and vhost (an AMQP 1.0 URI has none); no user, no password, no query. (pumpd keeps the
    parsed URI, not its text, so the port and the vhost are always spelled out.)"""
    host = uri.host or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{uri.port}" if uri.host is not None else ""
    if isinstance(uri, Amqp10URI):
        return f"{uri.scheme}://{host}{port}"
    return f"{uri.scheme}://{host}{port}/{quote(uri.vhost, safe='')}"


def _dynamic_source(decls: tuple[Declaration, ...], queue: str) -> list[tuple[str, str]] | None:
    """The plugin's source keys if the declarations are those config.py makes of a dynamic
    shovel's ``src-queue`` or ``src-exchange`` / ``src-exchange-key``; None otherwise."""
    if len(decls) == 1:
        (d,) = decls
        args = d.arguments
        if d.method == "queue.declare" and args.get("queue") == queue and (
            (d.if_missing and args.get("durable") is True) or args.get("passive") is True
        ):
            return [("src-queue", queue)]
    if len(decls) == 2:
        declare, bind = decls
        if (
            declare.method == "queue.declare"
            and dict(declare.arguments) == {"exclusive": True}
            and bind.method == "queue.bind"
            and bind.arguments.get("queue", "") == ""
        ):
            return [
                ("src-exchange", str(bind.arguments.get("exchange", ""))),
                ("src-exchange-key", str(bind.arguments.get("routing_key", ""))),
            ]
    return None


def _dynamic_dest(cfg: ShovelConfig) -> list[tuple[str, str]] | None:
    """The plugin's destination keys (those given of dest-exchange, dest-exchange-key,
    dest-queue) if the destination looks like config.py's reading of a dynamic shovel."""
    decls = cfg.destination.declarations
    if not decls:
        out = []
        if cfg.publish_exchange is not None:
            out.append(("dest-exchange", cfg.publish_exchange))
        if cfg.publish_routing_key is not None:
            out.append(("dest-exchange-key", cfg.publish_routing_key))
        return out
    if len(decls) == 1 and cfg.publish_exchange == "" and cfg.publish_routing_key is not None:
        (d,) = decls
        args = d.arguments
        if d.method == "queue.declare" and args.get("queue") == cfg.publish_routing_key and (
            (d.if_missing and args.get("durable") is True) or args.get("passive") is True
        ):
            return [("dest-queue", cfg.publish_routing_key)]
    return None


def hop_fields(
    cfg: ShovelConfig, source: BrokerURI | Amqp10URI, destination: BrokerURI | Amqp10URI,
    queue: str
) -> list[tuple[str, str]]:
    """This hop's forward-header table, key by key in the plugin's order.

    A dynamic shovel (``shovel-type`` ``dynamic``): shovelled-by, shovel-type, shovel-name,
    shovel-vhost, src-uri, dest-uri, then src-queue or src-exchange + src-exchange-key, then
    those of dest-exchange, dest-exchange-key, dest-queue it was defined with. A static one:
    shovelled-by, shovel-type, shovel-name, src-uri, dest-uri. Every value is a long string.

    What pumpd does not know, it derives (a :class:`ShovelConfig` keeps neither the form it was
    written in nor a vhost of definition): a shovel is dynamic when its declarations are exactly
    what config.py makes of the dynamic names; its vhost is its source URI's vhost (where the
    plugin would most often be defining it). ``shovelled-by`` is ``pumpd@HOST`` where the plugin
    writes its cluster name: the hop was made by pumpd, on that host.
    """
    src = _dynamic_source(cfg.source.declarations, queue)
    dest = _dynamic_dest(cfg)
    uris = [("src-uri", uri_without_credentials(source)),
            ("dest-uri", uri_without_credentials(destination))]
    by = ("shovelled-by", f"pumpd@{socket.gethostname()}")
    if src is None or dest is None or not isinstance(source, BrokerURI):
        return [by, ("shovel-type", "static"), ("shovel-name", cfg.name), *uris]
    return [by, ("shovel-type", "dynamic"), ("shovel-name", cfg.name),
            ("shovel-vhost", source.vhost), *uris, *src, *dest]


def relay_options(
    cfg: ShovelConfig, source: BrokerURI | Amqp10URI, destination: BrokerURI | Amqp10URI,
    queue: str
) -> dict[str, Any]:
    """Keyword arguments for :class:`pumpd.dataplane.implementation.Relay` that follow from the configuration."""
    return {
        "ack_mode": ACK_MODES[cfg.ack_mode],
        "exchange": None if cfg.publish_exchange is None else cfg.publish_exchange.encode(),
        "routing_key": None if cfg.publish_routing_key is None else cfg.publish_routing_key.encode(),
        "property_overrides": encode_property_overrides(cfg.publish_properties),
        "forward_hop": (encode_hop(hop_fields(cfg, source, destination, queue))
                        if cfg.add_forward_headers else None),
        "timestamp_header": cfg.add_timestamp_header,
        "mandatory": cfg.publish_mandatory,
    }
