"""Importers: RabbitMQ's own shovel definitions (Erlang config, definitions export) as pumpd JSON.

May import :mod:`pumpd.config`. See docs/architecture.md.
"""

from .import_errors import ConfigImportError

__all__ = ["ConfigImportError"]
