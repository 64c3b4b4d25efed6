"""The engine: one shovel's connections and message flow (link, session, undeliverable, parking,
pump, runner).

The pump and the session drive a source and a destination only through the contract of
:mod:`pumpd.engine.endpoint`; :mod:`pumpd.engine.amqp091` is its AMQP 0-9-1 implementation and
:mod:`pumpd.engine.wiring` chooses the implementation and the path between two sides.

:mod:`pumpd.engine.link` and :mod:`pumpd.engine.link_stream` are the only modules that touch
pika's internals. May import
:mod:`pumpd.config` and :mod:`pumpd.dataplane`. See docs/architecture.md.
"""

from .status import Counters, ShovelStatus, State, StatusSink

__all__ = ["Counters", "ShovelStatus", "State", "StatusSink"]
