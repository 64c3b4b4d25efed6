"""pumpd: a message pump for RabbitMQ, the Shovel run outside the broker."""

__version__ = "0.1.0"

from .publisher import Publisher, PublishError

__all__ = ["PublishError", "Publisher", "__version__"]
