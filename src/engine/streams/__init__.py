"""A RabbitMQ stream as the engine's destination (``endpoint.py``), over the streams protocol,
on the generic path (``message_path.py``): ``endpoints.py``, and where its publishing ids come
from, ``publishing_ids.py``; and a stream source's end and lag read over the streams protocol,
``source_lag.py``."""

from .endpoints import StreamDestination, open_destination
from .publishing_ids import PublishingIds, parse_mode
from .source_lag import StreamReading, StreamSourceLag, source_last_offset

__all__ = ["PublishingIds", "StreamDestination", "StreamReading", "StreamSourceLag",
           "open_destination", "parse_mode", "source_last_offset"]
