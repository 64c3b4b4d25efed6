"""pumpd: a message pump for RabbitMQ, the Shovel run outside the broker."""

from .publishing.publisher import Publisher, PublishError
from .version import __version__

__all__ = ["PublishError", "Publisher", "__version__"]
