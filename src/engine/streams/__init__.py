"""A RabbitMQ stream as the engine's destination (``endpoint.py``), over the streams protocol,
on the generic path (``message_path.py``): ``endpoints.py``, and where its publishing ids come
from, ``publishing_ids.py``."""

from .endpoints import StreamDestination, open_destination
from .publishing_ids import PublishingIds, parse_mode

__all__ = ["PublishingIds", "StreamDestination", "open_destination", "parse_mode"]
