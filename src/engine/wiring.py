"""Which implementation of the contract (``endpoint.py``) serves a broker address, and which path
pairs a source with a destination.

Every address is AMQP 0-9-1 today (``amqp://``, ``amqps://``). A pair whose two sides offer byte
streams of the same wire goes on that wire's native path; other pairs would take the generic
path through Python objects, which no pair needs yet.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..config.model import BrokerURI
from .amqp091 import RelayPath, connect_destination, connect_source
from .endpoint import ByteDestination, ByteSource, Destination, Path, Source
from .link_errors import quiet_pika_errors

__all__ = ["open_destination", "open_source", "pair", "prepare_loop"]


def prepare_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What every implementation needs of the event loop its pumps run on (AMQP 0-9-1: pika's
    stray callback errors after a failure are logged at DEBUG, not as tracebacks)."""
    quiet_pika_errors(loop)


async def open_source(uri: BrokerURI, client_name: str) -> Source:
    """Connect to a source broker.

    :raises LinkError: naming the source side
    """
    return await connect_source(uri, client_name)


async def open_destination(uri: BrokerURI, client_name: str) -> Destination:
    """Connect to a destination broker.

    :raises LinkError: naming the destination side
    """
    return await connect_destination(uri, client_name)


def pair(source: Source, destination: Destination, **options: Any) -> Path:
    """The path between ``source`` and ``destination``; ``options`` are the relay's (window,
    limit, the edits of ``forwarding.py``).

    :raises NotImplementedError: for a pair with no path yet (a new protocol's endpoints)
    """
    if (isinstance(source, ByteSource) and isinstance(destination, ByteDestination)
            and source.wire == destination.wire == "amqp091"):
        return RelayPath(source, destination, **options)
    raise NotImplementedError(
        f"no path from a {type(source).__name__} to a {type(destination).__name__}")
