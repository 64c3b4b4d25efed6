"""The parts of pumpd.testing.localnode that start no node: free ports, the probe that a broker
answers, and URIs."""

from __future__ import annotations

import socket

import pika
import pika.exceptions
from pumpd.testing.localnode import (
    LocalNode,
    broker_answers,
    find_free_port,
)


def test_find_free_port_gives_distinct_bindable_ports() -> None:
    ports = {find_free_port() for _ in range(20)}
    assert len(ports) == 20
    assert not ports & {4369, 5672, 15672, 25672}
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_broker_answers_only_when_something_listens() -> None:
    port = find_free_port()
    assert not broker_answers("127.0.0.1", port, timeout=0.5)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert broker_answers("127.0.0.1", port, timeout=0.5)


def test_uri_percent_encodes() -> None:
    node = LocalNode()
    try:
        assert node.uri() == f"amqp://guest:guest@127.0.0.1:{node.amqp_port}/%2F"
        uri = node.uri("a/b c", user="u@x", password="p:w/")
        assert uri == f"amqp://u%40x:p%3Aw%2F@127.0.0.1:{node.amqp_port}/a%2Fb%20c"
        params = pika.URLParameters(uri)
        assert params.virtual_host == "a/b c"
        assert params.credentials.username == "u@x"
        assert params.credentials.password == "p:w/"
    finally:
        node.close()
    assert not node.base_dir.exists()

