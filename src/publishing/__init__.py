"""The confirming publisher :class:`pumpd.Publisher`: a library API, not part of the daemon.

A layer of its own above the engine because it reuses the engine's link and the data plane's
publish plane, and the PySpark data source builds on it. See docs/architecture.md.
"""

from .publisher import LinkError, MessageIds, Publisher, PublishError

__all__ = ["LinkError", "MessageIds", "PublishError", "Publisher"]
