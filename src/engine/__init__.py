"""The engine: one shovel's connections and message flow (link, session, undeliverable, parking,
pump, runner).

:mod:`pumpd.engine.link` and :mod:`pumpd.engine.link_stream` are the only modules that touch
pika's internals. May import
:mod:`pumpd.config` and :mod:`pumpd.dataplane`. See docs/architecture.md.
"""

from .status import Counters, ShovelStatus, State, StatusSink

__all__ = ["Counters", "ShovelStatus", "State", "StatusSink"]
