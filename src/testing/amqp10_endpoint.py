"""Where a test reaches a private broker's AMQP 1.0 listener, and a probe that the listener
speaks AMQP 1.0.

An AMQP 1.0 connection starts with an 8-byte protocol header; the SASL layer's header is
``AMQP 3 1 0 0`` (the spec's §5.3.1). A listener that speaks AMQP 1.0 with SASL answers it with
the same 8 bytes, then sends its ``sasl-mechanisms`` frame. RabbitMQ's ``rabbitmq_amqp1_0``
plugin shares the AMQP 0-9-1 port and tells the protocols apart by that header.

:class:`Amqp10Address` carries what a client needs besides the TCP address: the user and
password for SASL PLAIN and the ``hostname`` of the ``open`` frame, which RabbitMQ 3.x reads as
``vhost:NAME`` to pick the virtual host (any other hostname means the default vhost).
"""

from __future__ import annotations

import socket
import urllib.parse
from dataclasses import dataclass

__all__ = ["AMQP_HEADER", "SASL_HEADER", "Amqp10Address", "protocol_header_answer"]

#: The protocol header that opens the SASL layer (protocol id 3, version 1.0.0).
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
#: The protocol header of AMQP 1.0 itself, without SASL (protocol id 0, version 1.0.0).
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


@dataclass(frozen=True)
class Amqp10Address:
    """A private broker's AMQP 1.0 listener and the identity to open a connection with."""

    host: str
    port: int
    #: SASL PLAIN's user and password; ``None``: SASL ANONYMOUS.
    user: str | None
    password: str | None
    #: The ``open`` frame's hostname: ``vhost:NAME`` for RabbitMQ; ``None`` lets the client
    #: send the host it connects to.
    hostname: str | None = None

    def url(self) -> str:
        """``amqp://user:password@host:port``, user and password percent-encoded; the
        ``open`` hostname is not part of it (see :attr:`hostname`)."""
        q = urllib.parse.quote
        credentials = ""
        if self.user is not None:
            credentials = q(self.user, safe="")
            if self.password is not None:
                credentials += ":" + q(self.password, safe="")
            credentials += "@"
        return f"amqp://{credentials}{self.host}:{self.port}"


def protocol_header_answer(host: str, port: int, header: bytes = SASL_HEADER,
                           timeout: float = 2.0) -> bytes:
    """Send an AMQP protocol ``header`` to ``host:port``; return the first 8 bytes that come
    back (fewer if the peer closes first, ``b""`` if it cannot be reached or says nothing
    within ``timeout`` seconds).

    An AMQP 1.0 listener answers :data:`SASL_HEADER` with the same bytes; an AMQP 0-9-1-only
    listener answers with its own ``AMQP 0 0 9 1`` header and closes.
    """
    if len(header) != 8:
        raise ValueError(f"an AMQP protocol header is 8 bytes, not {len(header)}: {header!r}")
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(header)
            while len(answer) < 8:
                chunk = sock.recv(8 - len(answer))
                if not chunk:
                    break
                answer += chunk
    except OSError:
        pass
    return answer
