"""RabbitMQ's streams protocol: its codes by name (``codes.py``), its frames as bytes
(``wire.py``), and pumpd's asyncio client for publishing (``client.py``)."""

from .client import Broker, StreamMetadata, StreamsClient, connect
from .errors import PeerViolation, StreamsError

__all__ = ["Broker", "PeerViolation", "StreamMetadata", "StreamsClient", "StreamsError", "connect"]
