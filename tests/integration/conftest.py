"""The integration lane's fixtures: two private RabbitMQ nodes for the whole session, a fresh
vhost per test, fault proxies in front of them, a private ActiveMQ broker, and real daemons.

* ``nodes``: ``(node_a, node_b)``, two :class:`pumpd.testing.localnode.LocalNode` started in parallel
  once per session and killed (their data thrown away) at its end. ``node_a`` has the
  ``rabbitmq_management``, ``rabbitmq_shovel`` and ``rabbitmq_amqp1_0`` plugins
  (``node_a.management_request`` works); ``node_b`` has ``rabbitmq_amqp1_0`` only. Both speak
  AMQP 1.0 on their AMQP port. The system broker on 5672 is never used.
* ``node_a`` / ``node_b``: one of them, running: if an earlier test killed or stopped it, it is
  restarted (same ports and data) before the test runs.
* ``vhost_a`` / ``vhost_b``: the name (a ``str``) of a vhost created for this test only on that
  node, with full permissions for ``guest``; deleted afterwards. Connect with
  ``node_a.uri(vhost_a)``.
* ``amqp10_a`` / ``amqp10_b``: the AMQP 1.0 address (:class:`pumpd.testing.Amqp10Address`) of
  ``vhost_a`` / ``vhost_b``: the node's AMQP port, guest/guest, and the ``open`` hostname
  ``vhost:NAME`` by which RabbitMQ picks the vhost.
* ``proxy_a`` / ``proxy_b``: a fault proxy (:class:`pumpd.testing.TcpProxy`) in front of that node.
* ``activemq_session``: one private ActiveMQ broker (:class:`pumpd.testing.LocalActiveMQ`) for
  the whole session, started by the first test that asks for it, killed at the session's end.
* ``activemq``: that broker, running: if an earlier test killed or stopped it, it is restarted
  (same ports and store) before the test runs.
* ``activemq_queue``: the name of a queue for this test only (ActiveMQ has no vhosts).
* ``pumpd_daemon``: a factory of real ``pumpd`` daemons (:mod:`tests.support.daemon_helpers`),
  each killed with its workers when the test ends.
"""

from __future__ import annotations

import os
import re
import secrets
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pumpd.testing import Amqp10Address, LocalActiveMQ, TcpProxy
from pumpd.testing.localnode import LocalNode, LocalNodeError, find_free_port

from tests.support.daemon_helpers import Daemon

NODE_A_PLUGINS = ("rabbitmq_management", "rabbitmq_shovel", "rabbitmq_amqp1_0")
NODE_B_PLUGINS = ("rabbitmq_amqp1_0",)


@pytest.fixture(scope="session")
def nodes() -> Iterator[tuple[LocalNode, LocalNode]]:
    """Two private nodes, started in parallel; killed and removed at session end."""
    tag = f"{os.getpid()}-{secrets.token_hex(3)}"
    node_a = LocalNode(plugins=NODE_A_PLUGINS, name=f"pumpd-a-{tag}")
    node_b = LocalNode(plugins=NODE_B_PLUGINS, name=f"pumpd-b-{tag}")
    both = (node_a, node_b)
    with ThreadPoolExecutor(max_workers=2) as pool:
        errors = [f.exception() for f in [pool.submit(n.start) for n in both]]
    failed = [e for e in errors if e is not None]
    if failed:
        for n in both:
            n.close(graceful=False)
        raise failed[0]
    try:
        yield both
    finally:
        for n in both:
            # Graceful stops would only cost time (6.5 s with management): the data goes anyway.
            n.close(graceful=False)


@pytest.fixture
def node_a(nodes: tuple[LocalNode, LocalNode]) -> LocalNode:
    """The node with management and shovel plugins, restarted first if it is down."""
    return nodes[0].ensure_running(fresh_on_failure=True)


@pytest.fixture
def node_b(nodes: tuple[LocalNode, LocalNode]) -> LocalNode:
    """The node without management and shovel, restarted first if it is down."""
    return nodes[1].ensure_running(fresh_on_failure=True)


def _fresh_vhost(node: LocalNode, request: pytest.FixtureRequest) -> Iterator[str]:
    test = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")[:60]
    name = f"t-{test}-{uuid.uuid4().hex[:8]}"
    node.add_vhost(name)
    yield name
    try:
        # The test may have killed or stopped the node; the vhost is on disk all the same.
        node.ensure_running(fresh_on_failure=True)
        node.delete_vhost(name)
    except LocalNodeError as exc:
        warnings.warn(f"could not delete vhost {name!r} on {node.nodename}: {exc}", stacklevel=1)


@pytest.fixture
def vhost_a(node_a: LocalNode, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh vhost on ``node_a`` for this test only (guest has full permissions)."""
    yield from _fresh_vhost(node_a, request)


@pytest.fixture
def vhost_b(node_b: LocalNode, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh vhost on ``node_b`` for this test only (guest has full permissions)."""
    yield from _fresh_vhost(node_b, request)


@pytest.fixture
def amqp10_a(node_a: LocalNode, vhost_a: str) -> Amqp10Address:
    """The AMQP 1.0 address of ``vhost_a`` (guest/guest)."""
    return node_a.amqp10_address(vhost_a)


@pytest.fixture
def amqp10_b(node_b: LocalNode, vhost_b: str) -> Amqp10Address:
    """The AMQP 1.0 address of ``vhost_b`` (guest/guest)."""
    return node_b.amqp10_address(vhost_b)


@pytest.fixture(scope="session")
def activemq_session() -> Iterator[LocalActiveMQ]:
    """One ActiveMQ broker for the session, started when first asked for; killed and removed
    at the session's end."""
    broker = LocalActiveMQ(name=f"pumpd-amq-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        broker.start()
        yield broker
    finally:
        broker.close(graceful=False)


@pytest.fixture
def activemq(activemq_session: LocalActiveMQ) -> LocalActiveMQ:
    """The session's ActiveMQ broker, restarted first if it is down."""
    return activemq_session.ensure_running(fresh_on_failure=True)


@pytest.fixture
def activemq_queue(request: pytest.FixtureRequest) -> str:
    """A queue name for this test only."""
    test = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:60]
    return f"t-{test}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def proxy_a(node_a: LocalNode) -> Iterator[TcpProxy]:
    """A fault proxy in front of node A (``amqp_helpers.via`` makes a URI through it)."""
    with TcpProxy("127.0.0.1", node_a.amqp_port) as p:
        yield p


@pytest.fixture
def proxy_b(node_b: LocalNode) -> Iterator[TcpProxy]:
    """A fault proxy in front of node B."""
    with TcpProxy("127.0.0.1", node_b.amqp_port) as p:
        yield p


@pytest.fixture
def pumpd_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """A factory: ``pumpd_daemon(shovels, *args, start=True)`` -> a started :class:`Daemon`.
    Every daemon started is killed, with its workers, when the test ends."""
    started: list[Daemon] = []

    def factory(shovels: dict[str, Any], *args: str, start: bool = True,
                port: int | None = None) -> Daemon:
        d = Daemon(tmp_path, shovels, args, port or find_free_port(),
                   name=f"pumpd-{len(started)}")
        started.append(d)
        return d.start() if start else d

    yield factory
    for d in started:
        d.kill_everything()
