"""The engine: one shovel's connections and message flow (link, session, pump, parking, runner).

:mod:`pumpd.engine.link` is the only module that touches pika's internals. May import
:mod:`pumpd.config` and :mod:`pumpd.dataplane`. See docs/architecture.md.
"""

from .status import Counters, ShovelStatus, State, StatusSink

__all__ = ["Counters", "ShovelStatus", "State", "StatusSink"]
