"""pumpd's version, in a module of its own so that the layers can read it without importing pumpd."""

__version__ = "0.1.0"
