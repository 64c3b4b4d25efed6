"""The ``pumpd`` command: every subcommand's parser and entry point.

May import every layer. See docs/architecture.md.
"""

from .dispatch import command_parsers, main

__all__ = ["command_parsers", "main"]
