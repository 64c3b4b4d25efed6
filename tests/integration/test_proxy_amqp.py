"""An AMQP connection through pumpd.testing.TcpProxy to a private node, and the proxy's reset."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode


def test_an_amqp_connection_through_the_proxy(node_b: LocalNode, vhost_b: str) -> None:
    with TcpProxy("127.0.0.1", node_b.amqp_port) as proxy:
        uri = node_b.uri(vhost_b).replace(f":{node_b.amqp_port}/", f":{proxy.port}/")
        conn = pika.BlockingConnection(pika.URLParameters(uri))
        try:
            ch = conn.channel()
            ch.queue_declare("q")
            ch.confirm_delivery()
            ch.basic_publish("", "q", b"through the proxy")
            _method, _props, body = ch.basic_get("q", auto_ack=True)
            assert body == b"through the proxy"
            assert proxy.connections == 1 and proxy.bytes_up > 0 and proxy.bytes_down > 0
            assert proxy.reset_all() == 1
            with pytest.raises(pika.exceptions.AMQPConnectionError):
                conn.process_data_events(5)
                ch.basic_publish("", "q", b"after the reset")
        finally:
            if conn.is_open:
                conn.close()

