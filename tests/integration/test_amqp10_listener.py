"""The private RabbitMQ nodes speak AMQP 1.0 (the ``rabbitmq_amqp1_0`` plugin) on their AMQP
port, beside AMQP 0-9-1: checked at the byte level, with a raw socket."""

from __future__ import annotations

import socket
import struct

import pytest
from pumpd.testing import Amqp10Address, LocalNode
from pumpd.testing.amqp10_endpoint import SASL_HEADER, protocol_header_answer

# A SASL frame's type byte (§2.3.2) and the sasl-mechanisms performative's descriptor code.
SASL_FRAME_TYPE = 0x01
SASL_MECHANISMS = b"\x00\x53\x40"


def _sasl_mechanisms_frame(port: int) -> bytes:
    """Send the SASL header; return the frame that follows the node's own header (its body
    is the sasl-mechanisms performative)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(SASL_HEADER)
        data = b""
        while len(data) < 8 + 4 or len(data) < 8 + struct.unpack(">I", data[8:12])[0]:
            chunk = sock.recv(4096)
            assert chunk, f"the node closed after {data!r}"
            data += chunk
            assert len(data) < 4096, f"no complete frame in {data!r}"
    assert data[:8] == SASL_HEADER
    size = struct.unpack(">I", data[8:12])[0]
    return data[8 : 8 + size]


@pytest.mark.parametrize("which", ["node_a", "node_b"])
def test_node_answers_the_amqp10_sasl_header_with_its_own(
    which: str, request: pytest.FixtureRequest
) -> None:
    node: LocalNode = request.getfixturevalue(which)

    frame = _sasl_mechanisms_frame(node.amqp_port)

    doff, frame_type = frame[4], frame[5]
    assert frame_type == SASL_FRAME_TYPE
    body = frame[4 * doff :]
    assert body.startswith(SASL_MECHANISMS), body
    assert b"PLAIN" in body


def test_the_same_port_still_speaks_amqp091(node_b: LocalNode) -> None:
    # The 0-9-1 header gets the 0-9-1 connection.start method frame, not an AMQP 1.0 header.
    answer = protocol_header_answer("127.0.0.1", node_b.amqp_port, b"AMQP\x00\x00\x09\x01")
    assert answer[:1] == b"\x01"  # a method frame
    assert answer != SASL_HEADER


def test_amqp10_address_names_the_vhost_in_the_open_hostname(
    node_a: LocalNode, vhost_a: str, amqp10_a: Amqp10Address
) -> None:
    assert amqp10_a == Amqp10Address("127.0.0.1", node_a.amqp_port, "guest", "guest",
                                     f"vhost:{vhost_a}")
    assert amqp10_a.url() == f"amqp://guest:guest@127.0.0.1:{node_a.amqp_port}"
