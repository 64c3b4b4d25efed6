"""TCP ports for private nodes: free ones picked below the ephemeral range, and a probe."""

from __future__ import annotations

import random
import socket
import threading

from .node_errors import LocalNodeError

__all__ = ["LOCALHOST", "broker_answers", "find_free_port", "port_is_free"]

LOCALHOST = "127.0.0.1"

# Ports find_free_port never returns: the usual RabbitMQ ports of a system node (AMQP, AMQPS,
# distribution, management, epmd) and the range rabbitmqctl binds for its own distribution
# listener (RABBITMQ_CTL_DIST_PORT_MIN..MAX, 35672..35682 by default).
_RESERVED_PORTS = frozenset({4369, 5671, 5672, 15672, 25672, *range(35672, 35683)})
# Picked below Linux's default ephemeral range (32768..60999), so that an outgoing connection's
# automatically bound local port cannot take a port between find_free_port and the node's bind.
_PORT_RANGE = (20000, 32767)
_ports_handed_out: set[int] = set()
_ports_lock = threading.Lock()


def port_is_free(port: int) -> bool:
    """Whether a listener could bind ``port`` on every interface (SO_REUSEADDR, like the node)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # With SO_REUSEADDR, TIME_WAIT leftovers (e.g. after kill()) do not count as "in use";
        # a LISTEN socket on the port, on any address, still does. RabbitMQ's listeners also
        # set SO_REUSEADDR, so this mirrors what the node's own bind will see.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def find_free_port() -> int:
    """Return a TCP port that is free now on every interface, below the ephemeral range.

    A port is never handed out twice by one Python process, so nodes created concurrently
    (e.g. from threads) never pick the same port. Another process can still take the port
    before the node binds it; :meth:`LocalNode.start` then picks new ports and tries again.
    """
    rng = random.SystemRandom()
    low, high = _PORT_RANGE
    for _ in range(1000):
        port = rng.randint(low, high)
        with _ports_lock:
            if port in _RESERVED_PORTS or port in _ports_handed_out:
                continue
            if port_is_free(port):
                _ports_handed_out.add(port)
                return port
    raise LocalNodeError(f"no free TCP port found in {low}..{high}")


def broker_answers(host: str = LOCALHOST, port: int = 5672, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``host:port`` within ``timeout`` seconds.

    A cheap "is a broker there?" probe; it does not speak AMQP.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
