"""pumpd: a message pump for RabbitMQ, the Shovel run outside the broker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .publishing.publisher import Publisher, PublishError

__all__ = ["PublishError", "Publisher", "__version__"]


def __getattr__(name: str) -> Any:
    # The publisher is imported when first named: a process that imports only part of pumpd
    # (a Spark reader's, started for each streaming query) does not pay for pika's and the
    # publisher's imports.
    if name in ("Publisher", "PublishError"):
        from .publishing import publisher

        return getattr(publisher, name)
    raise AttributeError(f"module 'pumpd' has no attribute {name!r}")
