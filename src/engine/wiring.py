"""Which implementation of the contract (``endpoint.py``) serves a broker address, and which path
pairs a source with a destination.

A side's URI says its protocol: a :class:`~pumpd.config.model.BrokerURI` is AMQP 0-9-1
(``amqp091/``), an :class:`~pumpd.config.model.Amqp10URI` AMQP 1.0 (``amqp10/``). A pair whose two sides offer byte
streams of the same wire goes on that wire's native path (``amqp091/relay_path.py``); any other
pair of message endpoints takes the generic path through Python objects
(``message_path.py``), converting between the wires when they differ.

``PUMPD_PATH=generic`` in the environment puts every pair on the generic path, two AMQP 0-9-1
sides included: the tests use it to run the generic path end to end against the brokers the
native path is tested on (``tests/integration/test_message_path.py``). It is read here, at each
pairing, and nowhere else; ``native`` (the default) keeps the native path wherever there is one.

A stream source (an AMQP 0-9-1 URI) is read over the streams protocol for its lag and its end
(``streams/source_lag.py``): :func:`stream_source_lag`, :func:`stream_source_end`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from ..config.model import Amqp10URI, BrokerURI, Protocol, ShovelConfig, reads_stream
from . import amqp10, streams
from .amqp091 import RelayPath, connect_destination, connect_source
from .endpoint import (
    ByteDestination,
    ByteSource,
    Destination,
    MessageDestination,
    MessageSource,
    Path,
    Source,
)
from .link_errors import quiet_pika_errors
from .message_forms import check_mapping
from .message_path import MessagePath

__all__ = ["PATH_VARIABLE", "open_destination", "open_source", "pair", "prepare_loop",
           "publishing_id"]

log = logging.getLogger("pumpd.wiring")

#: the environment variable that chooses the path (see the module docstring)
PATH_VARIABLE = "PUMPD_PATH"
_PATHS = ("native", "generic")


def prepare_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What every implementation needs of the event loop its pumps run on (AMQP 0-9-1: pika's
    stray callback errors after a failure are logged at DEBUG, not as tracebacks)."""
    quiet_pika_errors(loop)


def stream_source_lag(uri: BrokerURI, stream: str, port: int | None, *, shovel: str,
                      client_name: str) -> streams.StreamSourceLag:
    """Readings of a stream source's lag over the streams protocol, at ``port`` (None: the
    default for the URI's scheme)."""
    return streams.StreamSourceLag(uri, stream, port, shovel=shovel, client_name=client_name)


async def stream_source_end(uri: BrokerURI, stream: str, port: int | None, *,
                            client_name: str) -> int | None:
    """The last offset of a stream source (None: it holds nothing).

    :raises LinkError: naming the source side, when its streams port cannot be read
    """
    return await streams.source_last_offset(uri, stream, port, client_name=client_name)


async def open_source(uri: BrokerURI | Amqp10URI, client_name: str) -> Source:
    """Connect to a source broker, in the protocol its URI is of.

    :raises LinkError: naming the source side
    """
    if isinstance(uri, Amqp10URI):
        return await amqp10.connect_source(uri, client_name)
    return await connect_source(uri, client_name)


async def open_destination(uri: BrokerURI | Amqp10URI, client_name: str,
                           cfg: ShovelConfig, *, producer: str = "") -> Destination:
    """Connect to a destination broker, in the protocol its URI is of (a stream destination's
    URI is an AMQP one: the side's protocol says it). An AMQP 1.0 destination is attached to
    ``cfg``'s address at once: its settle mode follows the ack mode. A stream destination's
    publisher is declared at once, named ``producer`` when its publishing ids deduplicate.

    :raises LinkError: naming the destination side
    """
    if cfg.destination.protocol is Protocol.STREAM:
        assert isinstance(uri, BrokerURI)
        return await streams.open_destination(uri, client_name, cfg, reference=producer,
                                              publishing_id=publishing_id(cfg))
    if isinstance(uri, Amqp10URI):
        assert cfg.destination.address is not None  # the configuration requires it
        return await amqp10.open_destination(uri, client_name, cfg)
    return await connect_destination(uri, client_name)


def publishing_id(cfg: ShovelConfig) -> str:
    """A stream destination's publishing ids: as configured, else the source's offsets for a
    stream source and none for a queue."""
    if cfg.publishing_id:
        return cfg.publishing_id
    return "source-offset" if reads_stream(cfg.queue, cfg.consumer_arguments,
                                           cfg.source.declarations) else "none"


def _generic_asked() -> bool:
    """:raises ValueError: for a value of ``PUMPD_PATH`` other than native or generic"""
    asked = os.environ.get(PATH_VARIABLE, "native")
    if asked not in _PATHS:
        raise ValueError(f"{PATH_VARIABLE} must be native or generic, not {asked!r}")
    return asked == "generic"


def pair(source: Source, destination: Destination, **options: Any) -> Path:
    """The path between ``source`` and ``destination``; ``options`` are the relay's (ack_mode,
    window, limit, keep_last, hold_returns, the edits of ``forwarding.py``).

    :raises NotImplementedError: for a pair with no path (sides that are neither byte nor
        message endpoints), or two wires to convert between in a build without the mapping
    :raises ValueError: for a bad ``PUMPD_PATH``
    """
    generic = _generic_asked()
    if (not generic and isinstance(source, ByteSource)
            and isinstance(destination, ByteDestination)
            and source.wire == destination.wire == "amqp091"):
        return RelayPath(source, destination, **options)
    if isinstance(source, MessageSource) and isinstance(destination, MessageDestination):
        if source.wire != destination.wire:
            check_mapping()
        log.debug("the generic path from a %s (%s) to a %s (%s)", type(source).__name__,
                  source.wire, type(destination).__name__, destination.wire)
        return MessagePath(source, destination, **options)
    raise NotImplementedError(
        f"no path from a {type(source).__name__} to a {type(destination).__name__}")
