"""The data plane: AMQP frame encoding, confirm windows, the relay and publish planes.

The native implementations are ``pumpd._fastpath`` (src/_fastpath.pyx); the pure-Python
references live here, and :mod:`pumpd.dataplane.implementation` picks one. Imports only
:mod:`pumpd.config`. See docs/architecture.md.
"""
