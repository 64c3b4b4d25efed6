"""AMQP 0-9-1, one implementation of the engine's contract (``engine/endpoint.py``): its
source and destination (``endpoints.py``, over :class:`~pumpd.engine.link.Link`) and the native
relay between two of them (``relay_path.py``)."""

from .endpoints import Amqp091Destination, Amqp091Source, connect_destination, connect_source
from .relay_path import RelayPath

__all__ = ["Amqp091Destination", "Amqp091Source", "RelayPath", "connect_destination",
           "connect_source"]
