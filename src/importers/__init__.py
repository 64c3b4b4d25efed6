"""Importers: RabbitMQ's own shovel definitions (Erlang config, definitions export) as pumpd JSON.

May import :mod:`pumpd.config`. See docs/architecture.md.
"""

from .commands import main_import_definitions, main_import_erlang
from .errors import ConfigImportError

__all__ = ["ConfigImportError", "main_import_definitions", "main_import_erlang"]
