"""The AMQP 1.0 side of the engine's contract (``endpoint.py``): a source on a receiving link, a
destination on a sending link, both on the generic path (``message_path.py``)."""

from .endpoints import (
    Amqp10Destination,
    Amqp10Source,
    connect_destination,
    connect_source,
    open_destination,
)

__all__ = ["Amqp10Destination", "Amqp10Source", "connect_destination", "connect_source",
           "open_destination"]
