"""Test and benchmark infrastructure that ships with pumpd: nothing here is used by the daemon.

:class:`~pumpd.testing.localnode.LocalNode` starts a private RabbitMQ node (tests, bench, demos);
with the ``rabbitmq_amqp1_0`` plugin it speaks AMQP 1.0 too
(:meth:`~pumpd.testing.nodecontrol.NodeControl.amqp10_address`).

:class:`~pumpd.testing.activemq.LocalActiveMQ` starts a private ActiveMQ 5 broker (Debian's
``activemq`` package), looked into through STOMP (:mod:`pumpd.testing.stomp`).

:class:`~pumpd.testing.proxy.TcpProxy` is a loopback TCP proxy that injects faults (connection
resets, stalls, refused or reset accepts) and a fixed one-way latency, for the fault tests, the
soak (``bench/soak.py``) and the benchmarks that need a "remote" broker on one machine.
"""

from __future__ import annotations

from .activemq import LocalActiveMQ
from .amqp10_endpoint import Amqp10Address
from .localnode import LocalNode, find_free_port
from .proxy import MODES, ProxyMode, TcpProxy

__all__ = ["MODES", "Amqp10Address", "LocalActiveMQ", "LocalNode", "ProxyMode", "TcpProxy",
           "find_free_port"]
